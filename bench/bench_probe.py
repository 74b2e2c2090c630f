"""Cost of the `probe` task's feature extraction, per 10,000 people: batched without gradients
(the task's path) against one document at a time, on the same rows, in one process run.

    python bench/bench_probe.py --rounds 3

The corpus: bench_eval's (`physlm gen bios_s_multi5_permute people=--people inverse=true
tokenizer.vocab_size=2048`: its inverse sets leave the biographies as they are), into a
temporary directory, or --corpus-dir; the model: the quickstart's (gpt_tiny: 4 layers x
d_model 128), randomly initialised, fp32 on the CPU (extraction runs the same operations
whatever the weights). Timed, for the first --people biographies: reading them from the shards
(`read_biographies`), finding the P-probes' special positions, and `extract_features` of every
layer (0-4) for P (the six positions of each biography) and Q (the name alone), at --batch-size
and at batch 1; the features of both must be equal. Rates are scaled to 10,000 people. The fits
themselves (scikit-learn) depend on the label counts, not the model, and are reported once.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch
from bench_eval import make_corpus, quickstart_model, timed
from cpu_pressure import print_run_footer

ROOT = Path(__file__).resolve().parent.parent


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus-dir", type=Path, default=None)
    p.add_argument("--people", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from corpus_gen.bios.probe_targets import p_targets, q_targets, read_biographies
    from corpus_gen.core.tokenizer import Tokenizer
    from trainer.eval.activations import extract_features
    from trainer.eval.probe import ProbeOptions, probe_request, run
    from trainer.eval.registry import EvalContext

    scratch = None
    corpus_dir = args.corpus_dir
    if corpus_dir is None:
        scratch = tempfile.TemporaryDirectory(prefix="bench_probe_", dir="/tmp")
        corpus_dir = make_corpus(Path(scratch.name) / "corpus", args.people)
    model = quickstart_model(corpus_dir, args.seed)
    context = EvalContext(model, Tokenizer.load(corpus_dir / "tokenizer.model"), corpus_dir,
                          corpus_dir, torch.device("cpu"))
    layers = list(range(model.config.n_layer + 1))
    scale = 10000 / args.people
    times: dict[str, list[float]] = {}
    for r in range(args.rounds):
        seconds, _, _, docs = timed(lambda: read_biographies(corpus_dir, args.people))
        times.setdefault("read biographies", []).append(seconds)
        for kind, kind_targets in (("p", p_targets), ("q", q_targets)):
            request = probe_request(context, ProbeOptions(max_people=args.people), [kind])
            seconds, _, _, found = timed(lambda t=kind_targets, q=request, d=docs: t(q, d))
            tokens, positions = found.reading.documents, found.reading.positions
            times.setdefault(f"{kind.upper()}: find positions", []).append(seconds)
            batches = (args.batch_size, 1) if r % 2 == 0 else (1, args.batch_size)
            features = {}
            for batch in batches:
                seconds, _, _, features[batch] = timed(
                    lambda b=batch, t=tokens, p=positions: extract_features(model, t, p, b,
                                                                             layers))
                times.setdefault(f"{kind.upper()}: extract, batch {batch}", []).append(seconds)
            assert np.allclose(features[1], features[args.batch_size], atol=1e-5), kind
        print(f"  round {r + 1}: {len(docs)} people, {sum(map(len, positions))} Q rows",
              flush=True)
    print(f"\n{args.people} people, {len(layers)} layers, torch threads "
          f"{torch.get_num_threads()}; medians of {args.rounds} rounds")
    print("| part | seconds | per 10,000 people, s | batched / batch 1 |")
    print("|---|---:|---:|---:|")
    for part, values in times.items():
        median = statistics.median(values)
        ratio = ""
        if part.endswith(f"batch {args.batch_size}"):
            single = statistics.median(times[part.replace(f"batch {args.batch_size}", "batch 1")])
            ratio = f"{single / median:.1f}x faster"
        print(f"| {part} | {median:.2f} | {median * scale:.1f} | {ratio} |")
    seconds, _, _, result = timed(lambda: run(context, ProbeOptions(max_people=args.people)))
    print(f"\nthe whole probe task at {args.people} people (both kinds, {len(layers)} layers x 6 "
          f"attributes of fits): {seconds:.1f} s; P rows probed "
          f"{sum(result['p']['n_train'].values()) + sum(result['p']['n_test'].values())}")
    print_run_footer(torch.get_num_threads())


if __name__ == "__main__":
    main()
