"""The jobs `physlm submit` still has to submit, and their sbatch scripts, rendered from the
templates in slurm/ into `<root>/slurm/`.

- A corpus not yet generated: a prepare job (tokenizer, evaluation sets), then an array job whose
  task k generates the k-th contiguous range of its shards, then a manifest job (a plain
  `physlm gen`, which finds every part done and writes the manifest).
- Runs not yet at train.max_steps: one training array per generation (the runs, then the runs
  finetuning them, ...), task i the i-th run of a runs file, after the manifest jobs of its
  corpora and the previous generation's array; then an evaluation array over the same file whose
  task i starts when training task i is done (aftercorr).
What is done is decided from files (manifest, progress records, checkpoints, eval results), so
the jobs are only what is missing, which is what failed.
"""

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import slurm as templates
from corpus_gen.core.corpus_tokenizer import tokenizer_name
from corpus_gen.core.generate import corpus_fingerprint, shard_count, shard_name
from corpus_gen.core.io import atomic_write
from corpus_gen.core.manifest import recorded_entries
from corpus_gen.core.registry import get_family
from launch.experiment import corpus_finished
from launch.local import PACKAGE_ROOT
from launch.plan import CorpusJob, Plan, RunJob
from launch.slurm_config import SlurmConfig, megabytes
from launch.slurm_status import LOGS, RECORDS, job_name
from launch.status import evaluated, trained
from trainer.errors import TrainError


@dataclass
class Submission:
    """One sbatch job: its script, the jobs it waits for and, once submitted, its id."""

    kind: str  # gen-prepare | gen-array | gen-manifest | train | eval
    name: str  # the corpus; for train and eval the plan (`-gN`: its N-th finetuning generation)
    script: Path
    after: list["Submission"]
    dependency_type: str = "afterok"  # aftercorr: task i waits for task i of each job it names
    array: list[int] | None = None  # the array's task indices; None: not an array
    runs: list[str] = field(default_factory=list)  # train, eval: task array[j] trains runs[j]
    shards: list[str] = field(default_factory=list)  # gen-array: task array[j] makes shards[j]
    corpus: str | None = None  # gen jobs: the corpus's name (its directory's)
    job_id: str | None = None  # set when submitted (never on --dry-run)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"

    def dependency(self) -> str | None:
        """`afterok:ID:ID`; before submission the ids are placeholders, `<gen-manifest NAME>`."""
        if not self.after:
            return None
        return ":".join([self.dependency_type,
                         *(job.job_id or f"<{job.label}>" for job in self.after)])


@dataclass
class _Context:
    """What every script is rendered with."""

    plan: Plan
    slurm: SlurmConfig
    directory: Path  # <root>/slurm, absolute
    workdir: Path  # where physlm submit runs, where each job runs
    log: Callable[[str], None]


def write_job_scripts(plan: Plan, slurm: SlurmConfig, directory: Path,
                      log: Callable[[str], None]) -> list[Submission]:
    """Write the script of every job still to do into `directory` (`<root>/slurm`, absolute),
    each job to run where this is called; the jobs in an order where each comes after those it
    waits for."""
    return _jobs(_Context(plan, slurm, directory, Path.cwd(), log))


def _jobs(ctx: _Context) -> list[Submission]:
    """Every job still to do, in an order where each comes after those it waits for."""
    jobs: list[Submission] = []
    manifests: dict[str, Submission] = {}  # corpus name -> the job that finishes it
    for corpus in ctx.plan.corpora:  # a corpus comes after those whose tokenizer it reuses
        waits = [manifests[name] for name in corpus.after if name in manifests]
        made = _corpus_jobs(ctx, corpus, waits)
        if made:
            manifests[corpus.name] = made[-1]
        jobs += made
    return jobs + _run_jobs(ctx, manifests)


def _corpus_jobs(ctx: _Context, corpus: CorpusJob, waits: list[Submission]
                 ) -> list[Submission]:
    """prepare -> shard array -> manifest, less what is recorded done: a finished prepare, the
    array tasks whose shards all have progress records (read, not checksummed: the manifest
    job's plain `physlm gen` verifies and regenerates)."""
    if corpus_finished(corpus.config, corpus.out):
        ctx.log(f"slurm  | corpus {corpus.name}: generated already")
        return []
    fp = corpus_fingerprint(corpus.config)
    recorded = {name for name, entry in recorded_entries(corpus.out, lambda _: None).items()
                if entry.get("fingerprint") == fp}
    eval_sets = get_family(corpus.config.family).eval_sets(corpus.config)
    prepared = [tokenizer_name(corpus.config), *(f"eval/{name}.jsonl" for name in eval_sets)]
    ranges = shard_ranges(shard_count(corpus.config), ctx.slurm.gen_tasks)
    missing = [k for k, (start, stop) in enumerate(ranges)
               if any(shard_name(i) not in recorded for i in range(start, stop))]
    jobs: list[Submission] = []
    if not all(name in recorded for name in prepared):
        jobs.append(_gen_job(ctx, corpus, "gen-prepare", waits))
    if missing:
        jobs.append(_gen_job(ctx, corpus, "gen-array", jobs[-1:] or waits, ranges, missing))
    manifest = _gen_job(ctx, corpus, "gen-manifest", jobs[-1:] or waits)
    if missing:  # after the array however its tasks ended: it redoes what a failed task left
        manifest.dependency_type = "afterany"
    jobs.append(manifest)
    return jobs


def shard_ranges(shards: int, tasks: int) -> list[tuple[int, int]]:
    """`shards` split into at most `tasks` contiguous (start, stop) ranges of near-equal size."""
    tasks = min(tasks, shards)
    return [(k * shards // tasks, (k + 1) * shards // tasks) for k in range(tasks)]


_GEN_PURPOSE = {
    "gen-prepare": "Prepares the corpus: trains its tokenizer (or copies the one it reuses) and\n"
                   "# writes its evaluation sets. Its shard array runs after it.",
    "gen-manifest": "Finishes the corpus after its shard array: a plain `physlm gen` finds every "
                    "part\n# written, regenerates whatever a failed task left missing, and "
                    "writes manifest.json.",
}


def _gen_job(ctx: _Context, corpus: CorpusJob, kind: str, after: list[Submission],
             ranges: list[tuple[int, int]] | None = None,
             tasks: list[int] | None = None) -> Submission:
    slurm = ctx.slurm
    own = ["--nodes=1", "--ntasks=1", f"--cpus-per-task={slurm.gen_cpus}",
           *([f"--mem={slurm.gen_mem}"] if slurm.gen_mem else []), f"--time={slurm.gen_time}"]
    values = dict(_common(ctx), corpus=corpus.name, workers=str(slurm.gen_cpus),
                  config_file=_quoted(corpus.config_file), out=_quoted(corpus.out),
                  sbatch=_sbatch_lines(ctx, kind, corpus.name, own, tasks))
    if kind == "gen-array":
        text = templates.render("gen_array.sh", **values,
                                ranges=" ".join(f"{start}-{stop}" for start, stop in ranges))
        shards = [f"{ranges[k][0]}-{ranges[k][1]}" for k in tasks]
    else:
        part = "--part prepare " if kind == "gen-prepare" else ""
        text = templates.render("gen.sh", **values, kind=kind, purpose=_GEN_PURPOSE[kind],
                                part=part)
        shards = []
    return Submission(kind, corpus.name, _write(ctx, kind, corpus.name, text), after,
                      array=tasks, shards=shards, corpus=corpus.name)


def _run_jobs(ctx: _Context, manifests: dict[str, Submission]) -> list[Submission]:
    """A training array per generation of the runs to train (a run finetuning another run to
    train is one generation after it: an array cannot wait for some of its own tasks), each
    with its evaluation array; one more evaluation array for runs trained but not evaluated."""
    plan = ctx.plan
    todo, unevaluated = [], []
    for run in plan.runs:
        train = run.experiment.train
        if not trained(run.run_dir, train.max_steps, train.exposures):
            todo.append(run)
        elif not evaluated(run.run_dir, train.max_steps, list(run.experiment.eval.tasks),
                           train.exposures):
            ctx.log(f"slurm  | run {run.name}: trained already")
            unevaluated.append(run)
        else:
            ctx.log(f"slurm  | run {run.name}: done already")
    generation: dict[str, int] = {}
    for run in todo:  # a parent comes before its children; one not trained now counts as -1
        generation[run.name] = generation.get(run.parent, -1) + 1
    jobs: list[Submission] = []
    parents: list[Submission] = []  # the previous generation's training array
    for g in range(max(generation.values(), default=-1) + 1):
        runs = [run for run in todo if generation[run.name] == g]
        corpora = {run.corpus.name: manifests[run.corpus.name] for run in runs
                   if run.corpus.name in manifests}
        name = plan.name if g == 0 else f"{plan.name}-g{g}"
        runs_file = _runs_file(ctx, "train", name, runs)
        train = _train_job(ctx, name, runs, runs_file, [*corpora.values(), *parents])
        jobs += [train, *_eval_jobs(ctx, name, runs, runs_file, train)]
        parents = [train]
    if unevaluated:
        name = f"{plan.name}-trained"
        jobs += _eval_jobs(ctx, name, unevaluated, _runs_file(ctx, "eval", name, unevaluated),
                           None)
    return jobs


def _train_job(ctx: _Context, name: str, runs: list[RunJob], runs_file: Path,
               after: list[Submission]) -> Submission:
    for run in runs:
        if run.experiment.train.resume not in ("auto", "reschedule"):
            raise TrainError(f"run {run.name}: train.resume={run.experiment.train.resume}, but "
                             "a requeued job must continue its checkpoint: physlm submit needs "
                             "train.resume=auto or reschedule (delete the run directory to "
                             "start it over)")
    slurm = ctx.slurm
    processes = max(slurm.gpus_per_node, 1)
    tasks = 1 if slurm.launcher == "torchrun" else processes
    own = [f"--nodes={slurm.nodes}", f"--ntasks-per-node={tasks}", *_gpus(slurm.gpus_per_node),
           *([f"--cpus-per-task={slurm.cpus_per_task}"] if slurm.cpus_per_task else []),
           *([f"--mem={slurm.mem}"] if slurm.mem else []), f"--time={slurm.time}", "--requeue",
           "--open-mode=append"]
    if slurm.signal_seconds:
        own.append(f"--signal=B:USR1@{slurm.signal_seconds}")
    indices = list(range(len(runs)))
    text = templates.render(
        "train.sh", **_common(ctx), title=_title(runs), runs_file=_quoted(runs_file),
        nodes=str(slurm.nodes), launcher=slurm.launcher, launch=_launch(slurm),
        sbatch=_sbatch_lines(ctx, "train", name, own, indices))
    return Submission("train", name, _write(ctx, "train", name, text), after, array=indices,
                      runs=[run.name for run in runs])


def _launch(slurm: SlurmConfig) -> str:
    """The command line that starts one training process per GPU (per node: `nodes` of them)."""
    processes = max(slurm.gpus_per_node, 1)
    if slurm.launcher == "srun":
        # a rank that fails alone ends the others, which would wait for it forever
        return f"srun --ntasks-per-node={processes} --kill-on-bad-exit=1 {slurm.python}"
    return " \\\n    ".join([
        f"srun --ntasks-per-node=1 {slurm.python} -m torch.distributed.run",  # torchrun
        f'--nnodes="$SLURM_NNODES" --nproc_per_node={processes}',
        '--rdzv_id="$SLURM_JOB_ID" --rdzv_backend=c10d --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT"',
    ])


def _eval_jobs(ctx: _Context, name: str, runs: list[RunJob], runs_file: Path,
               train: Submission | None) -> list[Submission]:
    """The evaluation array of the runs with eval.tasks, task i the run on line i of
    `runs_file`; after `train` (the training array of that file), each task after the
    training task of the same index."""
    indices = [i for i, run in enumerate(runs) if run.experiment.eval.tasks]
    if not indices:
        return []
    slurm = ctx.slurm
    # one GPU, the CPUs of one training process and its memory
    processes = max(slurm.gpus_per_node, 1) if slurm.launcher == "torchrun" else 1
    cpus = [f"--cpus-per-task={max(slurm.cpus_per_task // processes, 1)}"] \
        if slurm.cpus_per_task else []
    mem = _eval_mem(slurm)
    own = ["--nodes=1", "--ntasks=1", *_gpus(min(slurm.gpus_per_node, 1)), *cpus,
           *([f"--mem={mem}"] if mem else []), f"--time={slurm.eval_time}"]
    text = templates.render(
        "eval.sh", **_common(ctx), title=_title([runs[i] for i in indices]),
        runs_file=_quoted(runs_file), sbatch=_sbatch_lines(ctx, "eval", name, own, indices))
    return [Submission("eval", name, _write(ctx, "eval", name, text), [train] if train else [],
                       dependency_type="aftercorr", array=indices,
                       runs=[runs[i].name for i in indices])]


def _eval_mem(slurm: SlurmConfig) -> str | None:
    """An eval job's --mem: eval_mem, else its GPU's share of a training node's mem (0, all of
    the node's memory, stays the cluster's default)."""
    if slurm.eval_mem or not slurm.mem or megabytes(slurm.mem) == 0:
        return slurm.eval_mem
    return f"{max(megabytes(slurm.mem) // max(slurm.gpus_per_node, 1), 1)}M"


def _gpus(count: int) -> list[str]:
    return [f"--gpus-per-node={count}"] if count else []


def _title(runs: list[RunJob]) -> str:
    names = ", ".join(run.name for run in runs[:3])
    return f"{len(runs)} run(s): {names}" + (", ..." if len(runs) > 3 else "")


def _runs_file(ctx: _Context, kind: str, name: str, runs: list[RunJob]) -> Path:
    """The file a train or eval script reads its task's run from: line i is task i's run
    directory and corpus directory, separated by a tab."""
    path = ctx.directory / f"{kind}-{name}.tsv"
    atomic_write(path, "".join(f"{run.run_dir.resolve()}\t{run.corpus.out}\n"
                               for run in runs).encode())
    return path


def _common(ctx: _Context) -> dict[str, str]:
    """The placeholders every template has."""
    return {"plan": ctx.plan.name, "workdir": _quoted(ctx.workdir),
            "records": _quoted(ctx.directory / RECORDS),
            "pythonpath": _pythonpath(),
            "setup": "\n".join(ctx.slurm.setup), "python": ctx.slurm.python}


def _pythonpath() -> str:
    """Where physlm runs from a source checkout (its pyproject.toml beside the packages), the
    jobs import that same checkout; an installed physlm is the setup lines' business."""
    if not (Path(PACKAGE_ROOT) / "pyproject.toml").is_file():
        return "# physlm comes from the environment the setup lines activate"
    return ("# the physlm checkout that submitted this job, installed on the nodes or not\n"
            f"export PYTHONPATH={shlex.quote(PACKAGE_ROOT)}${{PYTHONPATH:+:$PYTHONPATH}}")


def _sbatch_lines(ctx: _Context, kind: str, name: str, own: list[str],
                  array: list[int] | None) -> str:
    """The script's #SBATCH block: name and log, the cluster keys, the job's own resources,
    the array, then the config's extra lines."""
    slurm = ctx.slurm
    log = "%x-%A_%a.out" if array is not None else "%x-%j.out"
    options = [f"--job-name={job_name(kind, name)}", f"--output={ctx.directory / LOGS / log}"]
    cluster = {"partition": slurm.partition, "account": slurm.account, "qos": slurm.qos,
               "constraint": slurm.constraint}
    if kind.startswith("gen-") and slurm.cpu_partition:  # CPU work, on CPU nodes
        cluster.update(partition=slurm.cpu_partition, constraint=None)
    options += [f"--{key}={value}" for key, value in cluster.items() if value]
    options += own
    if array is not None:
        options.append(f"--array={array_spec(array, slurm.max_concurrent)}")
    lines = [f"#SBATCH {option}" for option in options]
    lines += [line if line.startswith("#SBATCH") else f"#SBATCH {line}" for line in slurm.extra]
    return "\n".join(lines)


def array_spec(indices: list[int], cap: int) -> str:
    """sbatch's --array value: runs of consecutive indices as ranges, `0-3,7,9-10%4`."""
    parts, start = [], 0
    for i in range(1, len(indices) + 1):
        if i == len(indices) or indices[i] != indices[i - 1] + 1:
            first, last = indices[start], indices[i - 1]
            parts.append(f"{first}-{last}" if last > first else str(first))
            start = i
    return ",".join(parts) + (f"%{cap}" if cap else "")


def _write(ctx: _Context, kind: str, name: str, text: str) -> Path:
    path = ctx.directory / f"{kind}-{name}.sh"
    atomic_write(path, text.encode())
    path.chmod(0o755)
    return path


def _quoted(path: Path) -> str:
    return shlex.quote(str(path.resolve()))
