"""bioS generation speed, physlm vs the official generator, side by side in one process run.

    python bench/bench_bios_gen.py --people 100000 --official /tmp/physlm4

Per variant (`single`, `multi5_permute`), alternating the contestants in each round:
- physlm end to end: `generate_corpus` with one worker (people, text, tokenization, shard
  writing with checksums, eval sets, tokenizer training, manifest), then each of its parts
  alone (gen_parts.py): the shard stage (the issue's "generation including tokenization and
  shard writing"), the eval sets, the tokenizer sample and its training;
- physlm text only: the family's documents (text and ground truth) without tokenizing or
  writing;
- official text only: facebookresearch/PhysicsLM4's bioS text (people sampled, then its own
  template and permutation functions; see official_bios_peer.py), for as many biographies.
Also the tar writing stage alone: webdataset's TarWriter vs physlm's ShardWriter, same samples.
Rates are documents per second on one core; the table reports medians over rounds.

The shard stage is timed after the corpus's own shards are deleted, so that it writes into page
cache the kernel has just freed, as a generator that runs for hours does. Timed right after the
gen command instead, with its 358 MB of shards still cached, the same code measured 70K/s here
instead of 105-112K/s: the cost of this VM finding fresh memory, not of the generator. The rate
is given both per wall second and per CPU second (user + system) of the process.
"""

import argparse
import io
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import webdataset as wds
from cpu_pressure import print_run_footer
from gen_parts import SAMPLE, SHARD_STAGE, SHARD_STAGE_CPU, TRAINING, eval_seconds, time_parts
from official_bios_peer import run_official_bios

from corpus_gen.core.config import load_config
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.records import BATCH, batch_texts
from corpus_gen.core.registry import get_family, schemas
from corpus_gen.core.shards import ShardWriter, npy_bytes
from corpus_gen.core.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
WHOLE = "physlm end to end (gen command)"
SHARDS = "physlm shard stage: text + tokenize + write (wall)"
PER_CPU = "physlm shard stage (per CPU second)"


def _config(variant: str, people: int):
    return load_config(ROOT / "configs/corpus/bios_s_single.yaml",
                       [f"variant={variant}", f"people={people}", "records_per_shard=50000"],
                       schemas())


def _ours_end_to_end(config, scratch: Path) -> dict[str, float]:
    """Seconds of the whole gen command ("whole") and of its parts, and the documents written."""
    out = scratch / "gen"
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    manifest = generate_corpus(config, out, workers=1, progress=False, log=lambda *_: None)
    times = {"whole": time.perf_counter() - began, "docs": manifest["records"]}
    times.update(time_parts(config, out, manifest))
    times["eval"] = eval_seconds(times)
    return times


def _ours_text_only(config) -> tuple[float, int]:
    """Seconds to produce every document's text and ground truth (as the shard stage gets
    them from the family: batches, metadata as JSON text), and the documents."""
    family = get_family("bios")
    total = family.layout(config).records
    began = time.perf_counter()
    count = sum(len(batch_texts(batch)) for batch in family.document_batches(config, 0, total))
    return time.perf_counter() - began, count


def _writers(out: Path, samples: int = 50000) -> tuple[float, float]:
    """Seconds to write the same samples with webdataset's TarWriter and with ShardWriter."""
    config = _config("single", samples)
    tokenizer = Tokenizer.load(out / "gen" / "tokenizer.model")
    items = []
    for position, record in enumerate(get_family("bios").records(config, 0, samples)):
        ids = tokenizer.encode_bytes(record.text)
        n = tokenizer.count(ids)
        items.append((f"{position:010d}", {"json": record.text.encode(),
                                           "ids.npy": npy_bytes(ids, tokenizer.dtype, n),
                                           "mask.npy": npy_bytes(b"\x01" * n, "|u1", n)}))
    began = time.perf_counter()
    theirs = wds.TarWriter(io.BytesIO(), encoder=False, mtime=0)
    for key, members in items:
        theirs.write({"__key__": key, **members})
    theirs_seconds = time.perf_counter() - began
    began = time.perf_counter()
    ours = ShardWriter(io.BytesIO())
    for start in range(0, len(items), BATCH):  # batches, as the generator writes them
        batch = items[start : start + BATCH]
        ours.write_batch([key for key, _ in batch],
                         {ext: [m[ext] for _, m in batch] for ext in batch[0][1]})
    return theirs_seconds, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=100000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--official", help="checkout of facebookresearch/PhysicsLM4 (optional)")
    args = parser.parse_args()

    rows, seconds_of = [], {}
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        for variant in ("single", "multi5_permute"):
            config = _config(variant, args.people)
            rates: dict[str, list[float]] = {}
            parts: dict[str, list[float]] = {}
            for _ in range(args.rounds):
                times = _ours_end_to_end(config, scratch)
                docs = times["docs"]
                rates.setdefault(WHOLE, []).append(docs / times["whole"])
                rates.setdefault(SHARDS, []).append(docs / times[SHARD_STAGE])
                rates.setdefault(PER_CPU, []).append(docs / times[SHARD_STAGE_CPU])
                for part in ("whole", SHARD_STAGE, "eval", SAMPLE, TRAINING):
                    parts.setdefault(part, []).append(times[part])
                seconds, count = _ours_text_only(config)
                rates.setdefault("physlm text only", []).append(count / seconds)
                if args.official:
                    peer = run_official_bios(args.official, docs, permute="permute" in variant)
                    rates.setdefault("official text only", []).append(
                        peer["bios"] / peer["seconds"])
            for name, values in rates.items():
                rows.append((variant, name, statistics.median(values), len(values)))
            seconds_of[variant] = {part: statistics.median(v) for part, v in parts.items()}
        theirs, ours = zip(*(_writers(scratch) for _ in range(args.rounds)))

    print(f"bioS generation, {args.people:,} people, one core, median of {args.rounds} rounds\n")
    print("| variant | what | documents/s |")
    print("|---|---|---:|")
    for variant, name, rate, _ in rows:
        print(f"| {variant} | {name} | {rate:,.0f} |")
    official = {v: r for v, n, r, _ in rows if n == "official text only"}
    if official:
        print("\n| variant | shard stage / official (wall) | shard stage / official (CPU) "
              "| whole command / official | physlm text / official text |")
        print("|---|---:|---:|---:|---:|")
        for variant in official:
            mine = {n: r / official[variant] for v, n, r, _ in rows if v == variant}
            print(f"| {variant} | {mine[SHARDS]:.2f} | {mine[PER_CPU]:.2f} | {mine[WHOLE]:.2f}"
                  f" | {mine['physlm text only']:.2f} |")
    print("\nThe whole command's parts, seconds (median; each part timed again on its own):\n")
    print("| variant | whole command | shard stage | eval sets | tokenizer sample "
          "| tokenizer training |")
    print("|---|---:|---:|---:|---:|---:|")
    for variant, t in seconds_of.items():
        print(f"| {variant} | {t['whole']:.2f} | {t[SHARD_STAGE]:.2f} | {t['eval']:.2f} "
              f"| {t[SAMPLE]:.2f} | {t[TRAINING]:.2f} |")
    print(f"\ntar writing, 50,000 samples: webdataset TarWriter {statistics.median(theirs):.2f} s,"
          f" physlm ShardWriter {statistics.median(ours):.2f} s "
          f"({statistics.median(theirs) / statistics.median(ours):.1f}x)")
    print_run_footer(threads=1)


if __name__ == "__main__":
    main()
