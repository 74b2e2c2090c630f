"""What verifying shard checksums costs the trainer, per GB and per training step.

    python bench/bench_shard_verify.py [--gb 1.0] [--rounds 5] [--steps 40]

The trainer hashes each shard (sha256) once per process before it first reads it, and stops if
the digest differs from the manifest's. This measures, in one process run:
- sha256 throughput over a file of --gb GB of random bytes (page cache warm, as right after
  `gen`, and as the trainer's first read of a shard it has not mapped yet), median of --rounds;
- the quickstart experiment (configs/experiment/quickstart.yaml): its corpus's shard bytes, the
  time to verify all of them, and the median time of one of its training steps (fp32, CPU,
  --steps steps after the first 5), so that the verification reads as a share of training.
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.io import sha256_file
from corpus_gen.core.manifest import read_manifest
from trainer.config import load_experiment
from trainer.engine import train
from trainer.run_dir import read_metrics

ROOT = Path(__file__).resolve().parent.parent


def hash_seconds(path: Path, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        sha256_file(path)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        blob = tmp / "blob"
        with open(blob, "wb") as f:
            for _ in range(int(args.gb * 1024)):
                f.write(os.urandom(1 << 20))
        gb = blob.stat().st_size / 1e9
        per_gb = hash_seconds(blob, args.rounds) / gb
        blob.unlink()

        experiment = load_experiment(ROOT / "configs/experiment/quickstart.yaml",
                                     [f"train.max_steps={args.steps + 5}", "train.log_every=1",
                                      f"train.ckpt_every={args.steps + 5}",
                                      "train.wandb.mode=disabled"])
        corpus = tmp / "corpus"
        generate_corpus(experiment.corpus, corpus, progress=False, log=lambda *_: None)
        shards = [corpus / entry["name"] for entry in read_manifest(corpus)["shards"]]
        shard_bytes = sum(p.stat().st_size for p in shards)
        verify = statistics.median(
            sum(hash_seconds(p, 1) for p in shards) for _ in range(args.rounds))
        train(experiment, tmp / "run", corpus)
        cfg = experiment.train
        tokens_per_step = cfg.micro_batch * cfg.ctx * cfg.grad_accum
        step = statistics.median(tokens_per_step / m["tokens_per_s"]
                                 for m in read_metrics(tmp / "run")[5:])

    print(f"sha256, warm page cache: {per_gb:.3f} s/GB ({1 / per_gb:.2f} GB/s), "
          f"median of {args.rounds} over {gb:.2f} GB")
    print(f"quickstart corpus: {len(shards)} shards, {shard_bytes / 1e6:.1f} MB; verifying all: "
          f"{verify * 1e3:.1f} ms")
    print(f"quickstart training step (fp32, CPU, {cfg.micro_batch} x {cfg.ctx} tokens): "
          f"{step * 1e3:.1f} ms median of {args.steps}")
    steps = load_experiment(ROOT / "configs/experiment/quickstart.yaml", []).train.max_steps
    print(f"verification / one training step: {verify / step:.3f}; over the quickstart's "
          f"{steps} steps: {verify / (step * steps):.5%} of training time")


if __name__ == "__main__":
    main()
