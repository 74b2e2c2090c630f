"""bioS generation speed, physlm vs the official generator, side by side in one process run.

    python bench/bench_bios_gen.py --people 100000 --official /tmp/physlm4

Per variant (`single`, `multi5_permute`), alternating the contestants in each round:
- physlm end to end: `generate_corpus` with one worker (people, text, tokenization, shard
  writing with checksums, eval sets, tokenizer training, manifest), and its shard stage alone;
- physlm text only: the family's documents without tokenizing or writing;
- official text only: facebookresearch/PhysicsLM4's bioS text (people sampled, then its own
  template and permutation functions; see official_bios_peer.py), for as many biographies.
Also the tar writing stage alone: webdataset's TarWriter vs physlm's ShardWriter, same samples.
Rates are documents per second on one core; the table reports medians over rounds.
"""

import argparse
import io
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import webdataset as wds
from official_bios_peer import run_official_bios

from corpus_gen.core.config import load_config
from corpus_gen.core.generate import Task, _build_shard, generate_corpus
from corpus_gen.core.records import BATCH
from corpus_gen.core.registry import get_family, schemas
from corpus_gen.core.shards import ShardWriter, npy_bytes
from corpus_gen.core.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parent.parent


def _config(variant: str, people: int):
    return load_config(ROOT / "configs/corpus/bios_s_single.yaml",
                       [f"variant={variant}", f"people={people}", "records_per_shard=50000"],
                       schemas())


def _ours_end_to_end(config, scratch: Path) -> tuple[float, float, int]:
    """(whole gen seconds, shard-stage seconds, documents)."""
    out = scratch / "gen"
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    manifest = generate_corpus(config, out, workers=1, progress=False, log=lambda *_: None)
    whole = time.perf_counter() - began
    shard_tasks = [Task(config, str(out), "bench", s["name"] + ".bench", s["start"], s["stop"])
                   for s in manifest["shards"]]
    began = time.perf_counter()
    for task in shard_tasks:
        _build_shard(task)
    return whole, time.perf_counter() - began, manifest["records"]


def _ours_text_only(config) -> tuple[float, int]:
    family = get_family("bios")
    total = family.layout(config).records
    began = time.perf_counter()
    count = sum(1 for _ in family.records(config, 0, total))
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

    rows = []
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        for variant in ("single", "multi5_permute"):
            config = _config(variant, args.people)
            rates: dict[str, list[float]] = {}
            for _ in range(args.rounds):
                whole, shards, docs = _ours_end_to_end(config, scratch)
                rates.setdefault("physlm end to end (gen command)", []).append(docs / whole)
                rates.setdefault("physlm shards: text + tokenize + write", []).append(
                    docs / shards)
                seconds, count = _ours_text_only(config)
                rates.setdefault("physlm text only", []).append(count / seconds)
                if args.official:
                    peer = run_official_bios(args.official, docs, permute="permute" in variant)
                    rates.setdefault("official text only", []).append(
                        peer["bios"] / peer["seconds"])
            for name, values in rates.items():
                rows.append((variant, name, statistics.median(values), len(values)))
        theirs, ours = zip(*(_writers(scratch) for _ in range(args.rounds)))

    print(f"bioS generation, {args.people:,} people, one core, median of {args.rounds} rounds\n")
    print("| variant | what | documents/s |")
    print("|---|---|---:|")
    for variant, name, rate, _ in rows:
        print(f"| {variant} | {name} | {rate:,.0f} |")
    official = {v: r for v, n, r, _ in rows if n == "official text only"}
    if official:
        print("\n| variant | physlm end to end / official text only "
              "| physlm shard stage / official | physlm text / official text |")
        print("|---|---:|---:|---:|")
        for variant in official:
            mine = {n: r for v, n, r, _ in rows if v == variant}
            print(f"| {variant} | {mine['physlm end to end (gen command)'] / official[variant]:.2f}"
                  f" | {mine['physlm shards: text + tokenize + write'] / official[variant]:.2f}"
                  f" | {mine['physlm text only'] / official[variant]:.2f} |")
    print(f"\ntar writing, 50,000 samples: webdataset TarWriter {statistics.median(theirs):.2f} s,"
          f" physlm ShardWriter {statistics.median(ours):.2f} s "
          f"({statistics.median(theirs) / statistics.median(ours):.1f}x)")


if __name__ == "__main__":
    main()
