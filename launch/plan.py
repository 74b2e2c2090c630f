"""A plan: the corpora and runs that one experiment, suite or sweep stands for, each with its
directory, written as files that every executor (local processes, Slurm jobs) runs the same way.

`write_plan` leaves, under the plan's root:
- `plan.json`: the runs (name, directory, axis values, corpus, parent), what `physlm status` and
  `physlm report` read;
- `<run>/experiment.yaml`: the run's resolved experiment, an ordinary experiment file, so that a
  job is `physlm train <run>/experiment.yaml --run-dir <run> --corpus DIR`, then `physlm eval`;
- `<run>/sweep.json`: which plan the run belongs to and its axis values;
- `plan/corpus-<name>.yaml`: each corpus's resolved config, what `physlm gen` reads.
Runs whose corpus configs are equal share one corpus directory (`corpora/<label>-<hash>`, see
`launch.experiment.corpus_label`). A run directory trained with other settings than the plan's
is refused before any file is written, or moved aside (`settle_changed`); no name the plan
makes may be longer than a file name can be.
"""

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import yaml
from omegaconf import OmegaConf
from omegaconf._utils import get_omega_conf_dumper

from corpus_gen.core.config import CorpusConfig, config_dict
from corpus_gen.core.io import LOCK, atomic_write, lock_holder
from launch.experiment import corpus_dir
from launch.suite import finetune_from, is_suite, load_suite
from launch.sweep import NAME_MAX, is_sweep, load_sweep
from trainer.config import Experiment, load_experiment
from trainer.errors import TrainError
from trainer.model.config import upgrade_model_dict
from trainer.model.registry import encodings
from trainer.run_dir import read_run_config

PLAN = "plan.json"
RUN_RECORD = "sweep.json"
EXPERIMENT_FILE = "experiment.yaml"
PLAN_DIR = "plan"  # the corpora's resolved configs
SLURM_DIR = "slurm"  # physlm submit's scripts, job records and logs
PLAN_OWN = (PLAN, PLAN_DIR, SLURM_DIR)  # what a plan keeps under its root besides its runs


@dataclass
class CorpusJob:
    name: str  # the corpus directory's name: <corpus config name>-<fingerprint[:8]>
    config: CorpusConfig
    out: Path  # the corpus directory
    config_file: Path  # the resolved corpus config, what `physlm gen` reads
    after: list[str] = field(default_factory=list)  # corpora whose tokenizer this one reuses


@dataclass
class RunJob:
    name: str  # unique in the plan; also the run directory's name under the root
    experiment: Experiment
    run_dir: Path
    corpus: CorpusJob
    parent: str | None  # the run this one finetunes
    axes: dict[str, object]  # sweep axis -> value (JSON scalars)

    @property
    def experiment_file(self) -> Path:
        return self.run_dir / EXPERIMENT_FILE


@dataclass
class Plan:
    name: str
    kind: str  # experiment | suite | sweep
    root: Path  # plan.json's directory; a single experiment's root is its run directory
    source: str  # the file the plan came from
    axes: list[str]
    corpora: list[CorpusJob]
    runs: list[RunJob]
    slurm: dict = field(default_factory=dict)  # a sweep file's `slurm:` mapping, if any


def load_plan(path: Path, overrides: list[str], root: str | None = None) -> Plan:
    """The plan an experiment, suite or sweep file stands for, its runs under `root` (default
    runs/<name>); command-line overrides apply to every run."""
    if is_sweep(path):
        sweep = load_sweep(path, overrides)
        base = Path(root) if root else Path("runs") / sweep.name
        named = [(point.name, point.experiment, None, point.axes) for point in sweep.points]
        return _plan(sweep.name, "sweep", base, str(path), sweep.axes, named, sweep.slurm)
    if is_suite(path):
        suite = load_suite(path, overrides)
        base = Path(root) if root else Path("runs") / suite.name
        named = [(run.name, run.experiment, run.parent, {}) for run in suite.runs]
        return _plan(suite.name, "suite", base, str(path), [], named, {})
    experiment = load_experiment(path, overrides)
    base = Path(root) if root else Path("runs") / experiment.name
    return _plan(experiment.name, "experiment", base, str(path), [],
                 [(experiment.name, experiment, None, {})], {})


def _plan(name: str, kind: str, root: Path, source: str, axes: list[str],
          named: list[tuple[str, Experiment, str | None, dict]], slurm: dict) -> Plan:
    corpora: dict[Path, CorpusJob] = {}
    runs: dict[str, RunJob] = {}
    dirs: dict[int, Path] = {}  # id(corpus config) -> its directory: a sweep's points share one
    for run_name, experiment, parent, values in named:
        run_dir = root if kind == "experiment" else root / run_name
        # replaced, not changed in place: a sweep's points share the groups they leave alone
        wandb = experiment.train.wandb
        experiment.train = replace(experiment.train, wandb=replace(
            wandb, group=wandb.group or name,
            tags=[*wandb.tags, *(f"{axis}={value}" for axis, value in values.items())]))
        after = []
        if parent is not None:  # finetuning: the parent's weights and tokenizer
            finetune_from(experiment, runs[parent].run_dir, corpus_dir(runs[parent].experiment))
            after = [runs[parent].corpus.name]
        if id(experiment.corpus) not in dirs:  # refuses an experiment without a corpus
            dirs[id(experiment.corpus)] = corpus_dir(experiment).resolve()
        out = dirs[id(experiment.corpus)]
        if out not in corpora:
            corpora[out] = CorpusJob(out.name, experiment.corpus, out,
                                     root / PLAN_DIR / f"corpus-{out.name}.yaml", after)
        runs[run_name] = RunJob(run_name, experiment, run_dir, corpora[out], parent, values)
        for path in (run_dir, out, corpora[out].config_file):
            _refuse_long_name(path)
    return Plan(name, kind, root, source, axes, list(corpora.values()), list(runs.values()),
                slurm)


def _refuse_long_name(path: Path) -> None:
    """The filesystem refuses a longer name only when the plan is written: say so now."""
    if len(os.fsencode(path.name)) > NAME_MAX:
        raise TrainError(f"{path}: a name of {len(os.fsencode(path.name))} bytes; a file or "
                         f"directory name holds at most {NAME_MAX}: shorten it")


def experiment_yaml(experiment: Experiment) -> str:
    """The run's resolved experiment as an experiment file: every group a whole mapping, so
    loading it gives this experiment again, whatever the shipped configs become. The text
    OmegaConf.to_yaml writes, from plain data by its own YAML dumper: building a DictConfig
    first took ~50 ms a run."""
    plain = json.loads(json.dumps({  # the configs' values are JSON's; tuples become lists
        "name": experiment.name,
        "corpus": config_dict(experiment.corpus),
        "model": asdict(experiment.model),
        "train": asdict(experiment.train),
        "eval": asdict(experiment.eval),
    }))
    return yaml.dump(plain, Dumper=get_omega_conf_dumper(), default_flow_style=False,
                     allow_unicode=True, sort_keys=False)


# what a run's config.yaml holds that does not change what it trained or measured: names,
# where things are, how it was tracked and started, and what training derives (vocab, ctx)
_NOT_RESULTS = ("name", "corpus_dir", "train.wandb", "train.resume", "model.vocab_size",
                "model.ctx")


def settle_changed(plan: Plan, redo: bool, log: Callable[[str], None] = print,
                   dry_run: bool = False) -> None:
    """Refuse the plan while a run directory holds a run trained (even in part) with settings
    the plan now changes: it would be kept as done, or resumed, and its results reported under
    settings it never had. With `redo`, move each such run aside (`move_aside`) instead; on a
    `dry_run`, only say so."""
    for run in plan.runs:
        change = config_change(run)
        if change is None:
            continue
        if not redo:
            raise TrainError(f"run {run.name}: {run.run_dir} was trained with other settings "
                             f"({change}); pass --redo-changed to move it aside and train it "
                             "again, or restore the setting")
        if dry_run:
            log(f"run    | {run.name}: trained with other settings ({change}); would be moved "
                f"to {run.run_dir.parent}/replaced-<time>/ and trained again (a dry run moves "
                "nothing)")
            continue
        # a run directory that is the plan's root keeps the plan's own files
        keep = PLAN_OWN if run.run_dir == plan.root else ()
        try:
            aside = move_aside(run.run_dir, keep)
        except OSError as exc:
            raise TrainError(f"run {run.name}: cannot move {run.run_dir} aside: "
                             f"{exc.strerror or exc}") from None
        log(f"run    | {run.name}: trained with other settings ({change}); moved to {aside}, "
            "trained again")


def config_change(run: RunJob) -> str | None:
    """The first setting the run's directory was trained with (its `config.yaml`) that its
    experiment in the plan now changes, as `key: then -> now`; None if none (or nothing was
    trained there yet). The saved model group is read in today's layout (an encoding's options
    were flat keys once), and the options of an encoding neither side uses are not compared; a
    key only one side has (an option added since) counts as unchanged."""
    try:
        trained = read_run_config(run.run_dir)
    except TrainError:  # none yet, or damaged: training rewrites it
        return None
    experiment = run.experiment
    now = json.loads(json.dumps({"corpus": config_dict(experiment.corpus),
                                 "model": asdict(experiment.model),
                                 "train": asdict(experiment.train),
                                 "eval": asdict(experiment.eval)}))
    ignored = _NOT_RESULTS
    if isinstance(trained.get("model"), dict):
        trained["model"] = upgrade_model_dict(trained["model"])
        in_use = (trained["model"].get("pos"), now["model"]["pos"])
        ignored += tuple(f"model.{name}" for name in encodings() if name not in in_use)
    return _first_difference(trained, now, "", ignored)


def _first_difference(then: dict, now: dict, prefix: str, ignored: tuple[str, ...]
                      ) -> str | None:
    for key, value in now.items():
        path = f"{prefix}{key}"
        if key not in then or path in ignored:
            continue
        if isinstance(value, dict) and isinstance(then[key], dict):
            found = _first_difference(then[key], value, f"{path}.", ignored)
            if found:
                return found
        elif then[key] != value:
            return f"{path}: {json.dumps(then[key])} -> {json.dumps(value)}"
    return None


def move_aside(run_dir: Path, keep: tuple[str, ...] = ()) -> Path:
    """Move a run directory to `replaced-<time>/<its name>` beside it, kept whole but for the
    names in `keep`, which stay; the new place. Refused while a `physlm train` or `eval` holds
    the directory's lock: moving it would leave that process writing in the moved copy."""
    holder = lock_holder(run_dir / LOCK)
    if holder is not None:
        raise TrainError(f"{run_dir}: {holder} works in it, so it cannot be moved aside now; "
                         "wait for it to finish, or stop it, and launch again")
    aside = run_dir.parent / f"replaced-{time.strftime('%Y%m%d-%H%M%S')}" / run_dir.name
    if not keep:  # the directory (or its link) whole
        aside.parent.mkdir(parents=True, exist_ok=True)
        run_dir.rename(aside)
        return aside
    aside.mkdir(parents=True)
    for entry in run_dir.iterdir():
        if entry.name not in keep:
            entry.rename(aside / entry.name)
    return aside


def write_plan(plan: Plan) -> None:
    """The plan's files (see the module's docstring); written again on every launch, so a plan
    edited and relaunched runs what the files now say."""
    for corpus in plan.corpora:
        corpus.config_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(corpus.config_file, OmegaConf.to_yaml(config_dict(corpus.config)).encode())
    for run in plan.runs:
        run.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(run.experiment_file, experiment_yaml(run.experiment).encode())
        record = {"plan": plan.name, "kind": plan.kind, "run": run.name, "axes": run.axes,
                  "root": str(plan.root.resolve())}
        atomic_write(run.run_dir / RUN_RECORD, (json.dumps(record, indent=1) + "\n").encode())
    atomic_write(plan.root / PLAN, (json.dumps(plan_record(plan), indent=1) + "\n").encode())


def plan_record(plan: Plan) -> dict:
    """plan.json: run directories relative to the root, corpus directories absolute."""
    return {
        "name": plan.name, "kind": plan.kind, "source": plan.source, "axes": plan.axes,
        "runs": [{"name": run.name, "dir": _relative(run.run_dir, plan.root),
                  "axes": run.axes, "corpus_dir": str(run.corpus_dir), "parent": run.parent,
                  "max_steps": run.max_steps, "tasks": run.tasks, "exposures": run.exposures}
                 for run in planned_runs(plan)],
    }


def _relative(path: Path, root: Path) -> str:
    return "." if path == root else str(path.relative_to(root))


@dataclass
class PlannedRun:
    """A run as plan.json records it, for readers that need no configs (status, report)."""

    name: str
    run_dir: Path
    axes: dict
    corpus_dir: Path
    parent: str | None
    max_steps: int
    tasks: list[str]
    exposures: int | None = None  # train.exposures: the last step is the checkpoints' to say


def read_plan(root: Path) -> tuple[dict, list[PlannedRun]]:
    """plan.json under `root`: the record and its runs, directories resolved against root."""
    path = root / PLAN
    if not path.is_file():
        raise TrainError(f"{root}: no {PLAN} here; a plan's root is written by physlm sweep, "
                         "physlm run or physlm submit")
    try:
        record = json.loads(path.read_text())
        runs = [PlannedRun(r["name"], root / r["dir"], dict(r["axes"]), Path(r["corpus_dir"]),
                           r["parent"], int(r["max_steps"]), list(r["tasks"]),
                           r.get("exposures"))
                for r in record["runs"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise TrainError(f"{path}: not a readable plan ({type(exc).__name__}: {exc})") from None
    return record, runs


def planned_runs(plan: Plan) -> list[PlannedRun]:
    """The plan's runs as plan.json records them."""
    return [PlannedRun(run.name, run.run_dir, run.axes, run.corpus.out, run.parent,
                       run.experiment.train.max_steps, list(run.experiment.eval.tasks),
                       run.experiment.train.exposures)
            for run in plan.runs]


def find_root(path: Path) -> Path:
    """The plan root a directory stands for: itself, holding plan.json, or the root of the
    plan it is a run of."""
    if (path / PLAN).is_file():
        return path
    record = path / RUN_RECORD
    if record.is_file():
        try:
            return Path(json.loads(record.read_text())["root"])
        except (ValueError, KeyError, TypeError) as exc:
            raise TrainError(f"{record}: not a readable run record ({type(exc).__name__}: "
                             f"{exc})") from None
    if path.is_dir():
        raise TrainError(f"{path}: neither a plan's root (no {PLAN}) nor a run of one")
    raise TrainError(f"{path}: no such directory")
