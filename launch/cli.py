"""`physlm` entry point: one subcommand per verb, errors as one line and a non-zero exit."""

import argparse
import sys
from pathlib import Path

from corpus_gen.core.config import load_config
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import schemas
from corpus_gen.core.verify import verify_corpus


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
    except CorpusError as exc:
        print(f"physlm {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"physlm {args.verb}: interrupted; finished files are kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
