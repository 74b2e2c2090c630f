"""The parts of a `physlm gen` run, each timed again on its own after the run, for the generation
benchmarks: the shard stage (every training shard built again), each eval set, the tokenizer's
sample and its training. They do not add up to the whole run exactly: the run also writes the
manifest, the datasheet and progress records, and takes its tokenizer sample while SentencePiece
reads it."""

import resource
import time
from pathlib import Path

from corpus_gen.core.config import CorpusConfig
from corpus_gen.core.corpus_tokenizer import tokenizer_sample
from corpus_gen.core.registry import get_family
from corpus_gen.core.tokenizer import train_tokenizer
from corpus_gen.core.write import Job, build_eval_set, build_shard

SHARD_STAGE, SHARD_STAGE_CPU = "shard stage", "shard stage (CPU)"
SAMPLE, TRAINING = "tokenizer sample", "tokenizer training"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def time_parts(config: CorpusConfig, out: Path, manifest: dict) -> dict[str, float]:
    """Seconds of each part of the run that wrote `manifest` into `out`: SHARD_STAGE (and
    SHARD_STAGE_CPU, user + system), SAMPLE, TRAINING, and "eval <set>" per eval set. The
    corpus's own shards are deleted first, so that the shard stage writes into memory the
    kernel has just freed, as a long run does; the files written here are deleted too."""
    family = get_family(config.family)
    times: dict[str, float] = {}
    for shard in manifest["shards"]:
        (out / shard["name"]).unlink()
    jobs = [Job(config, str(out), "bench", s["name"] + ".bench", s["start"], s["stop"])
             for s in manifest["shards"]]
    cpu, began = cpu_seconds(), time.perf_counter()
    for job in jobs:
        build_shard(job)
    times[SHARD_STAGE], times[SHARD_STAGE_CPU] = time.perf_counter() - began, cpu_seconds() - cpu
    for job in jobs:
        (out / job.name).unlink()
    for name in family.eval_sets(config):
        job = Job(config, str(out), "bench", f"eval/{name}.bench", eval_set=name)
        began = time.perf_counter()
        build_eval_set(job)
        times[f"eval {name}"] = time.perf_counter() - began
        (out / job.name).unlink()
    layout = family.layout(config)
    began = time.perf_counter()
    sample = list(tokenizer_sample(config, family, layout))
    times[SAMPLE] = time.perf_counter() - began
    began = time.perf_counter()
    train_tokenizer(sample, config.tokenizer.vocab_size, config.tokenizer.model_type,
                    layout.user_symbols)
    times[TRAINING] = time.perf_counter() - began
    return times


def eval_seconds(times: dict[str, float]) -> float:
    return sum(v for k, v in times.items() if k.startswith("eval "))
