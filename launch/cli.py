"""`physlm` entry point: one subcommand per verb, errors as one line and a non-zero exit."""

import argparse
import sys
from pathlib import Path

from corpus_gen.core.config import load_config
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import schemas
from corpus_gen.core.verify import verify_corpus
from trainer.errors import TrainError

USER_ERRORS = (CorpusError, TrainError)  # reported as one line, exit code 2


def _gen(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.overrides, schemas())
    out = Path(args.out) if args.out else Path("corpora") / Path(args.config).stem
    progress = False if args.no_progress else None
    generate_corpus(config, out, workers=args.workers, progress=progress)
    return 0


def _verify(args: argparse.Namespace) -> int:
    problems = verify_corpus(Path(args.corpus))
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        return 1
    print(f"{args.corpus}: every checksum verifies")
    return 0


def _train(args: argparse.Namespace) -> int:
    from launch.experiment import corpus_dir, run_dir_for
    from trainer.config import load_experiment
    from trainer.engine import train

    experiment = load_experiment(args.experiment, args.overrides)
    corpus = Path(args.corpus) if args.corpus else corpus_dir(experiment)
    metrics = train(experiment, run_dir_for(experiment, args.run_dir), corpus)
    print(f"train  | done: loss {metrics.get('loss', float('nan')):.4f}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from trainer.eval.runner import evaluate

    results = evaluate(Path(args.run_dir), args.task,
                       corpus_dir=Path(args.corpus) if args.corpus else None)
    for name, result in results.items():
        print(_summary_table(name, result))
    return 0


def _run(args: argparse.Namespace) -> int:
    from launch.experiment import ensure_corpus, run_dir_for
    from trainer.config import load_experiment
    from trainer.engine import train
    from trainer.eval.runner import evaluate

    experiment = load_experiment(args.experiment, args.overrides)
    corpus = ensure_corpus(experiment, args.workers)
    run_dir = run_dir_for(experiment, args.run_dir)
    print(f"train  | {run_dir}")
    metrics = train(experiment, run_dir, corpus)
    print(f"train  | done: loss {metrics.get('loss', float('nan')):.4f}")
    print(f"eval   | {', '.join(experiment.eval.tasks)}")
    results = evaluate(run_dir, experiment.eval.tasks, experiment.eval, corpus)
    for name, result in results.items():
        print(_summary_table(name, result))
    return 0


def _summary_table(name: str, result: dict) -> str:
    """A task's headline numbers: for each split (if any) its overall metrics."""
    lines = [f"\n{name} (step {result.get('step')})", "| split | metric | value |", "|---|---|---|"]
    for split, values in result.items():
        if isinstance(values, dict):
            for metric, value in values.items():
                if isinstance(value, float):
                    lines.append(f"| {split} | {metric} | {value:.3f} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="physlm", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)

    gen = verbs.add_parser("gen", help="generate a corpus: shards, eval sets, tokenizer, manifest")
    gen.add_argument("config", help="corpus YAML, e.g. configs/corpus/bios_s_single.yaml")
    gen.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. people=20000")
    gen.add_argument("--out", help="output directory (default: corpora/<config name>)")
    gen.add_argument("--workers", type=int, default=1, help="parallel generator processes")
    gen.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    gen.set_defaults(run=_gen)

    verify = verbs.add_parser("verify", help="re-check every checksum of a generated corpus")
    verify.add_argument("corpus", help="corpus directory (holding manifest.json)")
    verify.set_defaults(run=_verify)

    for verb, helptext, function in (
            ("train", "train the experiment's model on its (already generated) corpus", _train),
            ("run", "gen (cached) -> train -> eval for one experiment, locally", _run)):
        sub = verbs.add_parser(verb, help=helptext)
        sub.add_argument("experiment", help="experiment YAML (configs/experiment/*.yaml)")
        sub.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model.n_layer=8")
        sub.add_argument("--run-dir", help="run directory (default: runs/<experiment name>)")
        if verb == "train":
            sub.add_argument("--corpus", help="corpus directory (default: the experiment's "
                             "cached corpus under corpora/)")
        else:
            sub.add_argument("--workers", type=int, default=1, help="corpus generator processes")
        sub.set_defaults(run=function)

    evaluate = verbs.add_parser("eval", help="evaluate a run's latest checkpoint")
    evaluate.add_argument("run_dir", help="run directory")
    evaluate.add_argument("--task", action="append", required=True,
                          help="evaluation task (repeatable), e.g. qa")
    evaluate.add_argument("--corpus", help="corpus directory (default: the run's)")
    evaluate.set_defaults(run=_eval)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Overrides may come after options (`gen cfg.yaml --out d people=5`): collect the leftovers.
    args, extra = parser.parse_known_args(argv)
    if extra and (not hasattr(args, "overrides") or any(e.startswith("-") for e in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides += extra
    try:
        return args.run(args)
    except USER_ERRORS as exc:
        print(f"physlm {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"physlm {args.verb}: interrupted; finished files are kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
