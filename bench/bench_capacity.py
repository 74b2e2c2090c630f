"""Speed of the `capacity` task (Part 3.3's bits of knowledge): every person's document read once,
teacher-forced, in batches without gradients. The goal: 100,000 people in under a minute on one
CPU thread for the quickstart's model.

    python bench/bench_capacity.py --rounds 3

The corpus (--family biod): `physlm gen configs/corpus/biod.yaml people=--people
name_pools=--name-pools` (bioS's pools by default, 400 x 400 x 1000: the shipped 40^3 names
cannot hold 100,000 people; C = L = 1: the dictionary term is read off the same pass); or
(--family bios) `configs/corpus/bios_s_single.yaml people=--people capacity=true` with the
quickstart's tokenizer size (2,048), whose biographies are about 7x bioD's documents; generated
into a temporary directory, or --corpus-dir. The model: the quickstart's
(configs/model/gpt_tiny.yaml: 4 layers x d_model 128, rope; vocab from the corpus),
randomly initialised with --seed, fp32 on the CPU: the task runs the same operations whatever
the weights. Timed per round: `trainer.eval.capacity.run` whole (reading and verifying the eval
set, the forward passes, the bits), and apart its two parts, `load_documents` (bioS: with the
tokenization of the texts) and the pass `document_logprobs`; medians over --rounds, with each
call's CPU time and CPU pressure (the share of it during which some task waited for a core,
/proc/pressure/cpu).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch
from bench_eval import generate, quickstart_model, timed
from cpu_pressure import print_run_footer


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--family", choices=("biod", "bios"), default="biod")
    p.add_argument("--corpus-dir", type=Path, default=None,
                   help="a biod or bioS corpus (default: generate one into a temporary "
                   "directory)")
    p.add_argument("--people", type=int, default=100_000)
    p.add_argument("--name-pools", default="400,400,1000", help="tokens per name pool")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from corpus_gen.core.corpus_tokenizer import load_tokenizer
    from corpus_gen.core.manifest import read_manifest
    from trainer.eval import capacity
    from trainer.eval.capacity_data import load_documents, read_population
    from trainer.eval.registry import EvalContext

    scratch = None
    corpus_dir = args.corpus_dir
    if corpus_dir is None:
        scratch = tempfile.TemporaryDirectory(prefix="bench_capacity_", dir="/tmp")
        corpus_dir = Path(scratch.name) / "corpus"
        if args.family == "biod":
            generate(corpus_dir, "biod", [f"people={args.people}",
                                          f"name_pools=[{args.name_pools}]"])
        else:
            generate(corpus_dir, "bios_s_single", [f"people={args.people}", "capacity=true",
                                                   "tokenizer.vocab_size=2048"])
    model = quickstart_model(corpus_dir, args.seed)
    context = EvalContext(model, load_tokenizer(corpus_dir, read_manifest(corpus_dir)),
                          corpus_dir, corpus_dir, torch.device("cpu"))
    options = capacity.CapacityOptions(batch_size=args.batch_size)
    population = read_population(corpus_dir)
    people = load_documents(context, population, 0)
    count = len(people.lengths)
    tokens = int(people.lengths.sum())
    print(f"{count:,} people ({args.family}), {tokens:,} tokens (documents of "
          f"{people.lengths.min()}-{people.lengths.max()}), vocab {model.config.vocab_size}, "
          f"gpt_tiny ({model.num_parameters():,} non-embedding parameters), batch "
          f"{args.batch_size}, "
          f"{torch.get_num_threads()} thread(s)")
    parts = {
        "capacity.run (whole task)": lambda: capacity.run(context, options),
        "load_documents (read + verify)": lambda: load_documents(context, population, 0),
        "document_logprobs (forward)": lambda: capacity.document_logprobs(
            context, people.tokens, people.lengths, args.batch_size,
            *capacity.chunk_candidates(population, people)),
    }
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in parts}
    for _ in range(args.rounds):
        for name, call in parts.items():
            seconds, pressure, cpu, _ = timed(call)
            times[name].append((seconds, cpu, pressure))
    print("\n| part | seconds (median) | CPU seconds | CPU pressure | people/s | "
          "seconds per 100K people |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rounds in times.items():
        seconds = statistics.median(r[0] for r in rounds)
        cpu = statistics.median(r[1] for r in rounds)
        pressure = statistics.median(r[2] for r in rounds)
        print(f"| {name} | {seconds:.2f} | {cpu:.2f} | {pressure:.0%} | {count / seconds:,.0f} "
              f"| {seconds * 100_000 / count:.1f} |")
    print()
    print_run_footer(max(args.threads, 1))
    if scratch is not None:
        scratch.cleanup()


if __name__ == "__main__":
    main()
