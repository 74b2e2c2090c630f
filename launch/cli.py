"""`physlm` entry point: one subcommand per verb, errors as one line and a non-zero exit.

Only argparse and the two tiny error modules load at start-up, so `physlm --help` and usage
errors answer at once; each verb imports its machinery (omegaconf, numpy, torch) when it runs.
"""

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from corpus_gen.core.errors import CorpusError
from trainer.errors import Preempted, TrainError

USER_ERRORS = (CorpusError, TrainError)  # reported as one line, exit code 2

VERBS = {  # one line each: the top-level help lists them; each verb's --help opens with its own
    "gen": "generate a corpus from a corpus config: shards, eval sets, tokenizer, manifest",
    "verify": "re-check every checksum of a generated corpus",
    "train": "train an experiment's model on its (already generated) corpus",
    "eval": "evaluate a run's latest checkpoint on the tasks in its config (or --task)",
    "run": "all of it for one experiment (or each run of a suite), locally: gen (cached) -> "
           "train -> eval",
    "sweep": "expand a sweep file over its axes and run every run locally, N at a time",
    "submit": "submit an experiment, suite or sweep to Slurm: gen array -> train -> eval jobs",
    "status": "each run's state: pending, running, done, failed (and why), step and loss",
    "report": "compare runs, or a sweep's runs by axis: tables, paper numbers, plots",
    "export": "write a run's checkpoint as a HF transformers model directory, with its tokenizer",
}

DESCRIPTION = f"""\
physlm generates the synthetic corpora of "Physics of Language Models" (biographies bioS, bioR
and bioD, iGSM, CFG, Part 4.1's Depo, Brevo and Mano, and the mechanism sandboxes), trains GPT
models on them with DeepSpeed, evaluates what they learned, and runs sweeps locally or on Slurm.

verbs:
{chr(10).join(f"  {verb:<8}{text}" for verb, text in VERBS.items())}

Run `physlm VERB --help` for a verb's arguments."""

EPILOG = """\
examples:
  physlm run configs/experiment/quickstart.yaml        # a first experiment, end to end on CPU
  physlm gen configs/corpus/bios_s_single.yaml people=2000 --workers 2
  physlm train configs/experiment/quickstart.yaml model.n_layer=2 --run-dir runs/small
  physlm eval runs/quickstart --task qa                # default: the tasks in its config
  physlm report runs/quickstart runs/small --out report   # compare runs, papers beside
  physlm sweep pos_encodings_bios --dry-run            # list a sweep's runs
  physlm submit igsm_depth_width --dry-run slurm.partition=gpu   # write the sbatch scripts
  physlm status runs/igsm_depth_width                  # pending / running / done / failed
  physlm export runs/p31_bios_s_single_mix --out hf/p31   # for AutoModelForCausalLM"""


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line, like every other physlm error (argparse's usage block above
    the message buries it); subcommand parsers inherit this class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _workers(text: str) -> int:
    """argparse type for --workers: a whole number of processes, at least one."""
    try:
        value = int(text)
    except ValueError:
        value = 0  # refused below, with the same message
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text}")
    return value


def _config_file(group: str, name_or_path: str) -> Path:
    """A config file the user names by path, or a shipped config by name (`quickstart`)."""
    import configs
    from corpus_gen.core.errors import CorpusError

    path = configs.find(group, name_or_path)
    if path is None:
        raise CorpusError(f"{name_or_path}: no such file, and no shipped {group} config of that "
                          f"name (known: {', '.join(configs.names(group))})")
    return path


def _gen(args: argparse.Namespace) -> int:
    from corpus_gen.core.config import load_config
    from corpus_gen.core.generate import generate_corpus, parse_part
    from corpus_gen.core.registry import schemas

    config = load_config(_config_file("corpus", args.config), args.overrides, schemas())
    out = Path(args.out) if args.out else Path("corpora") / Path(args.config).stem
    progress = False if args.no_progress else None
    part = parse_part(args.part) if args.part else None
    generate_corpus(config, out, workers=args.workers, progress=progress, part=part)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from corpus_gen.core.verify import verify_corpus

    problems = verify_corpus(Path(args.corpus))
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        return 1
    print(f"{args.corpus}: every checksum verifies")
    return 0


def _train(args: argparse.Namespace) -> int:
    from launch.experiment import corpus_dir, run_dir_for
    from launch.suite import is_suite
    from trainer.config import load_experiment
    from trainer.engine import train

    path = _config_file("experiment", args.experiment)
    if is_suite(path):
        raise TrainError(f"{path}: a suite of several runs; run it with physlm run")
    experiment = load_experiment(path, args.overrides)
    corpus = Path(args.corpus) if args.corpus else corpus_dir(experiment)
    metrics = train(experiment, run_dir_for(experiment, args.run_dir), corpus)
    print("train  | nothing to train: the run is already at train.max_steps"
          if "loss" not in metrics else f"train  | done: loss {metrics['loss']:.4f}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from trainer.eval.runner import evaluate
    from trainer.quantize import quantization

    quantize = quantization(args.quantize, args.group_size)  # checked before the run is read
    # no --task: None, which evaluate() reads as the run's own eval.tasks
    results = evaluate(Path(args.run_dir), args.task,
                       corpus_dir=Path(args.corpus) if args.corpus else None, quantize=quantize)
    for name, result in results.items():
        print(_summary_table(name, result))
    return 0


def _run(args: argparse.Namespace) -> int:
    from launch.experiment import run_dir_for, run_experiment
    from launch.suite import is_suite
    from trainer.config import load_experiment

    path = _config_file("experiment", args.experiment)
    if is_suite(path):  # several runs: planned and run as a sweep's are
        from launch.plan import load_plan

        return _launch(load_plan(path, args.overrides, args.run_dir), args)
    for option, given in (("--dry-run", args.dry_run), ("--redo-changed", args.redo_changed),
                          ("--jobs", args.jobs != 1)):
        if given:
            raise TrainError(f"{option} is for a suite; for one experiment, physlm sweep "
                             f"{args.experiment} {option} does it")
    experiment = load_experiment(path, args.overrides)
    _, results = run_experiment(experiment, run_dir_for(experiment, args.run_dir), args.workers)
    for name, result in results.items():
        print(_summary_table(name, result))
    return 0


def _report(args: argparse.Namespace) -> int:
    from launch.plan import PLAN
    from launch.report import report

    root = Path(args.runs[0])
    if len(args.runs) == 1 and not root.is_dir() and _plan_file(args.runs[0]) is not None:
        from launch.plan import load_plan

        root = load_plan(_plan_file(args.runs[0]), []).root  # a sweep file: its runs/<name>
    if len(args.runs) == 1 and (root / PLAN).is_file():  # a sweep's, suite's or experiment's
        from launch.sweep_report import sweep_report

        out = Path(args.out) if args.out else root / "report"
        print(sweep_report(root, out))
        written = ", ".join(p.name for p in sorted(out.iterdir()))
        print(f"\nreport | {out}: {written}")
        return 0
    out = Path(args.out or "report")
    print(report([Path(run) for run in args.runs], out))
    print(f"\nreport | {out}: report.md, metrics.csv, loss.png, plots/")
    return 0


def _plan_file(name_or_path: str) -> Path | None:
    """A sweep or experiment file (suites are experiments) by path, or a shipped one's name."""
    import configs

    return next((path for group in ("sweep", "experiment")
                 if (path := configs.find(group, name_or_path)) is not None), None)


def _plan(args: argparse.Namespace, overrides: list[str]):
    from launch.plan import load_plan

    path = _plan_file(args.config)
    if path is None:  # the error lists the shipped configs of the verb's kind
        path = _config_file("sweep" if args.verb == "sweep" else "experiment", args.config)
    return load_plan(path, overrides, args.run_dir)


def _sweep(args: argparse.Namespace) -> int:
    from launch.slurm import load_slurm_config

    plan = _plan(args, args.overrides)
    load_slurm_config(plan, None, [])  # a typo in the sweep's slurm: is found now, not later
    return _launch(plan, args)


def _launch(plan, args: argparse.Namespace) -> int:
    """Run a plan (a sweep's, a suite's) on this machine, `--jobs` runs at a time, then print
    its status and report; 1 unless every run is done. `--dry-run` lists it instead."""
    from launch.local import execute
    from launch.status import status_table, statuses

    if args.dry_run:
        from launch.plan import settle_changed

        settle_changed(plan, args.redo_changed, dry_run=True)  # a changed run: refused, or said
        print(_plan_listing(plan))
        return 0
    execute(plan, jobs=args.jobs, workers=args.workers, redo_changed=args.redo_changed)
    rows = statuses(plan.root)
    print("\n" + status_table(rows))
    finished = sum(row.state == "done" for row in rows)
    if finished and plan.kind != "experiment":  # an experiment's root is its run directory
        from launch.sweep_report import sweep_report

        print(f"\nreport | {plan.root / 'report'}")
        print(sweep_report(plan.root, plan.root / "report"))
    return 0 if finished == len(rows) else 1


def _plan_listing(plan) -> str:
    """What a dry run prints: each run with its axis values and directories, each corpus once."""
    shared = {c.name: sum(r.corpus is c for r in plan.runs) for c in plan.corpora}
    lines = [f"{plan.kind} {plan.name}: {_count(len(plan.runs), 'run')} in {plan.root}, "
             f"{_count(len(plan.corpora), 'corpus', 'corpora')}"]
    for run in plan.runs:
        axes = ", ".join(f"{k}={v}" for k, v in run.axes.items())
        lines.append(f"  {run.name}  [{axes}]" if axes else f"  {run.name}")
        lines.append(f"      run {run.run_dir}  corpus {run.corpus.out.name}"
                     + (f"  finetunes {run.parent}" if run.parent else ""))
    for corpus in plan.corpora:
        lines.append(f"corpus {corpus.out} (shared by {_count(shared[corpus.name], 'run')})")
    return "\n".join(lines)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _submit(args: argparse.Namespace) -> int:
    from launch.slurm import load_slurm_config, submit

    slurm = [o for o in args.overrides if o.startswith("slurm.")]
    plan = _plan(args, [o for o in args.overrides if not o.startswith("slurm.")])
    config = load_slurm_config(plan, args.slurm, [o.removeprefix("slurm.") for o in slurm])
    submit(plan, config, dry_run=args.dry_run, redo_changed=args.redo_changed)
    return 0


def _status(args: argparse.Namespace) -> int:
    from launch.plan import load_plan
    from launch.status import FAILED, status_table, statuses

    path = Path(args.path)
    if not path.is_dir():  # a sweep or experiment file, or a shipped one's name: its plan now
        found = _plan_file(args.path)
        if found is None:
            raise TrainError(f"{args.path}: no such directory or file, and no shipped sweep or "
                             "experiment of that name")
        path = load_plan(found, [], args.run_dir)
    rows = statuses(path)
    print(status_table(rows))
    return 1 if any(row.state in FAILED for row in rows) else 0


def _export(args: argparse.Namespace) -> int:
    from trainer.hf.export import export_run

    record = export_run(Path(args.run_dir), Path(args.out), args.checkpoint,
                        Path(args.corpus) if args.corpus else None)
    print(f"export | step {record['step']} of {args.run_dir} -> {args.out} "
          f"({record['hf_class']})")
    return 0


def _summary_table(name: str, result: dict) -> str:
    """A task's headline numbers, as `physlm report` picks them: each rate outside the
    breakdowns, by its split (or set) and its path below it (`plain/accuracy`); a task whose
    results have no splits (`depo/accuracy`) shows them under `all`."""
    from launch.report import BOOKKEEPING, flatten, format_metric, is_headline, with_no_data

    lines = [f"\n{name} (step {result.get('step')})", "| split | metric | value |", "|---|---|---|"]
    metrics = with_no_data(flatten({k: v for k, v in result.items() if k not in BOOKKEEPING},
                                   name))
    for metric, value in metrics.items():
        _, *path = metric.split("/")
        split, rest = (path[0], path[1:]) if len(path) > 1 else ("all", path)
        if is_headline(metric, value):
            lines.append(f"| {split} | {'/'.join(rest)} | {format_metric(metrics, metric, '')} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="physlm", usage="physlm [-h] VERB ...", description=DESCRIPTION,
                     epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    # DESCRIPTION lists the verbs, so argparse's own listing is suppressed (prog: the verbs'
    # programs derive from the usage line otherwise)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB", prog="physlm",
                                  help=argparse.SUPPRESS)

    def verb_parser(verb: str) -> argparse.ArgumentParser:
        return verbs.add_parser(verb, help=VERBS[verb], description=VERBS[verb])

    gen = verb_parser("gen")
    gen.add_argument("config", help="corpus YAML, e.g. configs/corpus/bios_s_single.yaml")
    gen.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. people=20000")
    gen.add_argument("--out", help="output directory (default: corpora/<config name>)")
    gen.add_argument("--workers", type=_workers, default=1,
                     help="parallel generator processes (>= 1; default 1)")
    gen.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    gen.add_argument("--part", metavar="PART",
                     help="generate one part, as a Slurm job array does: `prepare` (tokenizer, "
                          "evaluation sets), then `shards:START-STOP` (training shards START to "
                          "STOP-1, in parallel); a plain gen then writes the manifest")
    gen.set_defaults(run=_gen)

    verify = verb_parser("verify")
    verify.add_argument("corpus", help="corpus directory (holding manifest.json)")
    verify.set_defaults(run=_verify)

    for verb, function in (("train", _train), ("run", _run)):
        sub = verb_parser(verb)
        sub.add_argument("experiment", help=("experiment or suite" if verb == "run" else
                                              "experiment") + " YAML (configs/experiment/*.yaml)")
        sub.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model.n_layer=8")
        sub.add_argument("--run-dir", help="run directory (default: runs/<experiment name>)"
                         + ("; a suite's: the root of its runs (default: runs/<suite name>)"
                            if verb == "run" else ""))
        if verb == "train":
            sub.add_argument("--corpus", help="corpus directory (default: the experiment's "
                             "cached corpus under corpora/)")
        else:
            _launch_options(sub, verb)
        sub.set_defaults(run=function)

    evaluate = verb_parser("eval")
    evaluate.add_argument("run_dir", help="run directory")
    evaluate.add_argument("--task", action="append",
                          help="evaluation task, repeatable, e.g. qa or igsm (default: the "
                               "tasks in the run's config, eval.tasks)")
    evaluate.add_argument("--corpus", help="corpus directory (default: the run's)")
    evaluate.add_argument("--quantize", metavar="SCHEME",
                          help="evaluate the weights rounded to int8 (one scale per output "
                               "channel) or int4 (one per --group-size weights of a row): every "
                               "Linear and embedding table, biases, norms and Canon taps kept "
                               "float; results go to eval/<task>@int8.json, <task>@int4g64.json")
    evaluate.add_argument("--group-size", type=int, metavar="N",
                          help="int4: consecutive weights of a row per scale (default 64; a row "
                               "it does not divide ends in a shorter group)")
    evaluate.set_defaults(run=_eval)

    report = verb_parser("report")
    report.add_argument("runs", nargs="+", metavar="RUN",
                        help="run directories, or one sweep's root (runs/<sweep>) or file")
    report.add_argument("--out", metavar="DIR",
                        help="where the report goes (default: report/ in the current folder; "
                             "a sweep's: <root>/report); a previous report there is replaced, "
                             "any other directory refused")
    report.set_defaults(run=_report)

    for verb, function in (("sweep", _sweep), ("submit", _submit)):
        sub = verb_parser(verb)
        sub.add_argument("config", metavar="SWEEP" if verb == "sweep" else "EXPERIMENT",
                         help="sweep YAML (configs/sweep/*.yaml)" if verb == "sweep" else
                         "experiment, suite or sweep YAML, or a shipped one's name")
        sub.add_argument("overrides", nargs="*", help="dotted overrides for every run, e.g. "
                         "train.max_steps=100" + ("; slurm.KEY=VALUE for the Slurm settings"
                                                  if verb == "submit" else ""))
        sub.add_argument("--run-dir", help="the plan's root (default: runs/<name>)")
        if verb == "submit":
            sub.add_argument("--slurm", metavar="FILE",
                             help="Slurm settings: a YAML file or a shipped configs/slurm name")
        _launch_options(sub, verb)
        sub.set_defaults(run=function)

    status = verb_parser("status")
    status.add_argument("path", metavar="SWEEP_OR_RUN",
                        help="a plan's root (runs/<name>), a run directory, or a sweep or "
                             "experiment file (or a shipped one's name)")
    status.add_argument("--run-dir", help="with a file: the plan's root (default: runs/<name>)")
    status.set_defaults(run=_status)

    export = verb_parser("export")
    export.add_argument("run_dir", metavar="RUN", help="run directory")
    export.add_argument("--checkpoint", type=int, metavar="STEP",
                        help="the checkpoint of this step (default: the latest)")
    export.add_argument("--out", metavar="DIR", required=True,
                        help="the model directory to write; an earlier export there is "
                             "replaced, any other non-empty directory refused")
    export.add_argument("--corpus", help="corpus directory, for its tokenizer (default: the "
                                         "run's)")
    export.set_defaults(run=_export)
    return parser


def _launch_options(sub: argparse.ArgumentParser, verb: str) -> None:
    """The options of the verbs that launch a plan: run (a suite's), sweep and submit."""
    suite = "a suite: " if verb == "run" else ""
    if verb != "submit":
        sub.add_argument("--jobs", type=_workers, default=1,
                         help=f"{suite}runs at a time (>= 1; default 1)")
        sub.add_argument("--workers", type=_workers, default=1,
                         help="corpus generator processes (>= 1; default 1)")
    sub.add_argument("--dry-run", action="store_true",
                     help="write the sbatch scripts and print the sbatch lines, submit nothing"
                     if verb == "submit" else f"{suite}list the runs and corpora, run nothing")
    sub.add_argument("--redo-changed", action="store_true",
                     help=f"{suite}move aside (to replaced-<time>/) and train again each run "
                     "directory trained with other settings than the plan's now, instead of "
                     "refusing")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    # Overrides may come after options (`gen cfg.yaml --out d people=5`): collect the leftovers.
    args, extra = parser.parse_known_args(argv)
    if extra and (not hasattr(args, "overrides") or any(e.startswith("-") for e in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides += extra
    return args


def _refuse_undecodable(argv: list[str]) -> None:
    """Refuse an argument that is not UTF-8 text (bytes a shell passed through, kept by Python
    as surrogates): a run writes its paths into YAML and JSON files, which cannot hold them."""
    for arg in argv:
        try:
            arg.encode()
        except UnicodeEncodeError:
            raise TrainError(f"{os.fsencode(arg)!r}: not UTF-8 text; physlm writes paths and "
                             "values into YAML and JSON files: use a UTF-8 name") from None


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parse(argv)
    except SystemExit as exc:  # --help (0) or a usage error argparse has printed (2)
        return exc.code
    try:
        _refuse_undecodable(sys.argv[1:] if argv is None else argv)
        return args.run(args)
    except USER_ERRORS as exc:
        print(f"physlm {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"physlm {args.verb}: interrupted; finished files are kept", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `physlm ... | head`: the reader has gone, nothing to report
        sys.stdout = open(os.devnull, "w")
        return 0
    except OSError as exc:  # the filesystem said no (a directory where a file goes, EIO, ...)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"physlm {args.verb}: error: {where}{exc.strerror or exc}; files written before "
              "are kept", file=sys.stderr)
        return 2
    except Preempted as exc:  # a run stopped on request (preemption) is not a failure
        from trainer.preempt import stopped_exit_code

        print(f"physlm {args.verb}: {exc}", file=sys.stderr)
        return stopped_exit_code()  # 75; 0 under torchrun, the stop recorded in the run dir


if __name__ == "__main__":
    sys.exit(main())
