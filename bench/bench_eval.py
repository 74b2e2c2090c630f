"""Evaluation speed of the `qa` and `reversal` tasks: batched with the KV cache, unbatched, and
batched without the cache, on the same questions, in one process run.

    python bench/bench_eval.py --rounds 3

The corpus: `physlm gen bios_s_multi5_permute people=4000 inverse=true
tokenizer.vocab_size=2048` (into a temporary directory, or --corpus-dir), whose held-out split
holds 12,000 forward QA rows (`qa_test`, 6 per person) and 10,000 inverse rows (`inverse_test`,
5 per person); the first --questions of each are timed. The model: the quickstart's
(configs/model/gpt_tiny.yaml: 4 layers x d_model 128 x 4 heads, rope, rmsnorm, gelu; vocab from
the corpus's tokenizer, ctx from configs/train/cpu_quick.yaml), randomly initialised with
--seed, fp32 on the CPU. Speed does not depend on the weights: every answer is generated to the
length of its expected answer (greedy, no EOS), so trained weights run the same operations.

What is timed is the tasks' own code: `trainer.eval.qa.score_split` (the `qa` task, and the
forward half of `reversal`) and `trainer.eval.reversal.score_inverse` (the inverse half of
`reversal`), tokenization and scoring included. Settings:
- `batched + cache`: the default path (`batch_size` from --batch-sizes), on all --questions;
- `unbatched + cache`: batch_size=1, on the first --subset questions;
- `batched, no cache`: `generate(use_cache=False)`, recomputing the whole prompt for every
  generated token (the `generate` that trainer.eval.qa calls is swapped for the run of that row,
  here only), batch_size the first of --batch-sizes, on the subset;
- the batched default path again on the subset, for the side-by-side check.
Unbatched and uncached runs over 10,000 questions would take many minutes on 2 cores; their
10,000-question seconds are extrapolated from the subset's rate (marked). Every setting's
generations on the subset (per question: the prompt and the generated tokens that are scored,
those of the expected answer's length) and scores are compared with the unbatched ones; the
full-set generations and scores of the batch sizes are compared with each other.

Each round runs every setting once, the order reversed every other round; a call's CPU pressure
(/proc/pressure/cpu, as the other benchmarks read it) is the share of it during which some task
waited for a core, and a call is quiet under --quiet. Medians are over a setting's quiet rounds
when it has any, else over all (marked). Ratios to unbatched are ratios of those medians. The
table also gives questions per CPU second of this process (user + system), which moves less
than wall time when other jobs share the cores; --threads 1 keeps it meaningful there (two
torch threads wait for each other at every op while another job holds a core). After the
rounds, the batched path's CPU time is split once into tokenizing, the prompt pass and decoding,
beside how much of the padded prompts and answer budgets is real tokens.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from cpu_pressure import cpu_stall_us, print_run_footer

ROOT = Path(__file__).resolve().parent.parent
Generated = list[tuple[tuple[int, ...], tuple[int, ...]]]  # (prompt, generated tokens) per call


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus-dir", type=Path, default=None,
                   help="a bios corpus generated with inverse=true (default: generate one into "
                        "a temporary directory)")
    p.add_argument("--people", type=int, default=4000, help="people of the generated corpus")
    p.add_argument("--questions", type=int, default=10000, help="questions per task")
    p.add_argument("--subset", type=int, default=500,
                   help="questions per task of the unbatched and uncached rows")
    p.add_argument("--batch-sizes", default="64,256", help="comma list; the first is also the "
                   "no-cache row's")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--slow-rounds", type=int, default=0,
                   help="rounds of the subset rows (default: --rounds)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--quiet", type=float, default=0.2,
                   help="a call is quiet when some task waited for a CPU less than this share "
                        "of it")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def generate(out: Path, corpus: str, overrides: list[str]) -> Path:
    """The shipped corpus config `corpus` with `overrides`, generated into `out` by one worker."""
    from corpus_gen.core.config import load_config
    from corpus_gen.core.generate import generate_corpus
    from corpus_gen.core.registry import schemas

    config = load_config(ROOT / f"configs/corpus/{corpus}.yaml", overrides, schemas())
    generate_corpus(config, out, workers=1, progress=False, log=lambda *_: None)
    return out


def make_corpus(out: Path, people: int) -> Path:
    # the quickstart's tokenizer size; 4000 people: 2000 held out, 12,000 qa and 10,000 inverse
    return generate(out, "bios_s_multi5_permute",
                    [f"people={people}", "inverse=true", "tokenizer.vocab_size=2048"])


def quickstart_model(corpus_dir: Path, seed: int):
    from omegaconf import OmegaConf

    from corpus_gen.core.manifest import read_manifest
    from trainer.model import GPT, ModelConfig

    shape = OmegaConf.to_container(OmegaConf.load(ROOT / "configs/model/gpt_tiny.yaml"))
    ctx = OmegaConf.load(ROOT / "configs/train/cpu_quick.yaml").ctx
    vocab = read_manifest(corpus_dir)["tokenizer"]["vocab_size"]
    torch.manual_seed(seed)
    return GPT(ModelConfig(**shape, vocab_size=vocab, ctx=ctx)).eval()


@contextlib.contextmanager
def generation(use_cache: bool, log: Generated) -> Iterator[None]:
    """While open, the `generate` the qa task calls (reversal's inverse half calls qa's
    `answers`) runs with `use_cache` and logs each question's prompt and generated tokens."""
    import trainer.eval.qa as qa

    real = qa.generate

    def logged(model, prompts, max_new_tokens, **options):
        out = real(model, prompts, max_new_tokens, use_cache=use_cache, **options)
        log.extend(zip(map(tuple, prompts), map(tuple, out)))
        return out

    qa.generate = logged
    try:
        yield
    finally:
        qa.generate = real


def scored(tokenizer, rows: list[dict]) -> list[tuple[tuple[int, ...], int]]:
    """Per row, its prompt's tokens and how many answer tokens the tasks score (as `answers`
    counts them). Per row, not per prompt: an inverse question of level 1 (a birth date) can
    be asked of two people, whose names differ in length."""
    from corpus_gen.bios.qa import answered

    out = []
    for row in rows:
        prompt = tokenizer.encode(row["prompt"])
        full = tokenizer.encode(answered(row["prompt"], row["answer"]))
        out.append((tuple(prompt), len(full) - len(prompt)))
    return out


def generation_order(lengths: list[tuple[tuple[int, ...], int]]) -> list[int]:
    """The order `answers` generates rows in: by answer length, then prompt length (stable)."""
    return sorted(range(len(lengths)), key=lambda i: (lengths[i][1], len(lengths[i][0])))


def timed(fn: Callable[[], object]) -> tuple[float, float, float, object]:
    """(seconds, CPU stall share, CPU seconds of this process, fn's result)."""
    stalled, cpu, began = cpu_stall_us(), time.process_time(), time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - began
    cpu = time.process_time() - cpu
    share = 0.0 if stalled is None else (cpu_stall_us() - stalled) / 1e6 / seconds
    return seconds, share, cpu, out


def breakdown(context, rows: list[dict], batch: int) -> dict[str, float]:
    """Where the batched path's time goes, over `rows` in the batches `answers` makes (in
    `generation_order`): CPU
    seconds tokenizing (prompt and answer, as `answers` does), of the prompt pass (`generate`
    of one token) and of whole generation (CPU seconds: comparable across calls on a shared
    machine, with one thread); and the share of real tokens in the padded prompts and in the
    batch's answer budget (every row generates to the batch's longest answer)."""
    from corpus_gen.bios.qa import answered
    from trainer.eval.generation import generate

    tokenizer, model = context.tokenizer, context.model
    began = time.process_time()
    prompts = [tokenizer.encode(r["prompt"]) for r in rows]
    want = [len(tokenizer.encode(answered(r["prompt"], r["answer"]))) - len(p)
            for r, p in zip(rows, prompts)]
    tokenize = time.process_time() - began
    order = generation_order([(tuple(p), w) for p, w in zip(prompts, want)])
    batches = [([prompts[i] for i in order[start : start + batch]],
                [want[i] for i in order[start : start + batch]])
               for start in range(0, len(rows), batch)]
    prompt_pass = sum(timed(lambda p=p: generate(model, p, 1))[2] for p, _ in batches)
    whole = sum(timed(lambda p=p, w=w: generate(model, p, max(w)))[2] for p, w in batches)
    real = sum(len(q) for p, _ in batches for q in p)
    padded = sum(len(p) * max(map(len, p)) for p, _ in batches)
    answer = sum(sum(w) for _, w in batches)
    budget = sum(len(w) * max(w) for _, w in batches)
    return {"tokenize": tokenize, "prompt_pass": prompt_pass, "generate": whole,
            "prompt_real": real / padded, "answer_real": answer / budget,
            "prompt_tokens": real / len(rows), "answer_tokens": answer / len(rows)}


def head_share(config) -> float:
    """The lm head's share of the matmul work per position (weights only, no attention)."""
    layer = 4 * config.d_model ** 2 + 2 * config.d_model * config.ffn_dim
    head = config.d_model * config.vocab_size
    return head / (config.n_layer * layer + head)


def median_seconds(seconds: list[float], stalls: list[float], quiet: float) -> tuple[float, str]:
    """The median over the quiet calls when there are any, else over all; which it was."""
    keep = [s for s, stall in zip(seconds, stalls) if stall < quiet]
    if not keep:
        return statistics.median(seconds), f"0/{len(seconds)} (all used)"
    return statistics.median(keep), f"{len(keep)}/{len(seconds)}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from corpus_gen.core.tokenizer import Tokenizer
    from trainer.eval.qa import read_rows, score_split
    from trainer.eval.registry import EvalContext
    from trainer.eval.reversal import score_inverse

    scratch = None
    corpus_dir = args.corpus_dir
    if corpus_dir is None:
        scratch = tempfile.TemporaryDirectory(prefix="bench_eval_", dir="/tmp")
        began = time.perf_counter()
        corpus_dir = make_corpus(Path(scratch.name) / "corpus", args.people)
        print(f"corpus: {args.people} people generated in {time.perf_counter() - began:.1f} s "
              f"into {corpus_dir}")
    model = quickstart_model(corpus_dir, args.seed)
    context = EvalContext(model, Tokenizer.load(corpus_dir / "tokenizer.model"), corpus_dir,
                          corpus_dir, torch.device("cpu"))
    tasks = {}  # task -> (scorer, rows)
    for task, name, scorer in (("qa", "qa_test", score_split),
                               ("reversal inverse", "inverse_test", score_inverse)):
        rows = read_rows(corpus_dir, name, 0, "bench_eval needs a bios corpus with inverse=true")
        if len(rows) < args.questions:
            raise SystemExit(f"{corpus_dir}: eval/{name}.jsonl has {len(rows)} rows, "
                             f"--questions {args.questions} asked; generate more people")
        tasks[task] = (scorer, rows[: args.questions])
    lengths = {task: scored(context.tokenizer, rows) for task, (_, rows) in tasks.items()}

    sizes = [int(b) for b in args.batch_sizes.split(",")]
    n_sub = min(args.subset, args.questions)
    # (label, batch size, use_cache, subset only)
    settings = [(f"batched + cache, batch {b}", b, True, False) for b in sizes]
    settings += [(f"batched + cache, batch {sizes[0]}", sizes[0], True, True),
                 ("unbatched + cache, batch 1", 1, True, True),
                 (f"batched, no cache, batch {sizes[0]}", sizes[0], False, True)]
    slow_rounds = args.slow_rounds or args.rounds
    c = model.config
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, model {c.n_layer} "
          f"layers x d_model {c.d_model} x {c.n_head} heads, pos={c.pos}, norm={c.norm}, "
          f"mlp={c.mlp}, vocab {c.vocab_size}, {model.num_parameters(False):,} parameters, "
          f"fp32; {args.questions} questions per task, subset {n_sub}", flush=True)

    for scorer, rows in tasks.values():
        for _, batch, use_cache, _ in settings:  # warm-up: the first calls allocate and load
            with generation(use_cache, []):
                scorer(context, rows[:8], batch)

    results = {}  # (task, setting index) -> seconds, stalls, scores, generations per round
    for r in range(max(args.rounds, slow_rounds)):
        order = list(enumerate(settings))
        if r % 2:
            order.reverse()
        for task, (scorer, rows) in tasks.items():
            for i, (label, batch, use_cache, subset) in order:
                if r >= (slow_rounds if subset else args.rounds):
                    continue
                part = rows[:n_sub] if subset else rows
                log: Generated = []
                with generation(use_cache, log):
                    seconds, share, cpu, scores = timed(
                        lambda f=scorer, p=part, b=batch: f(context, p, b))
                entry = results.setdefault((task, i), {"s": [], "stall": [], "cpu": [],
                                                       "scores": [], "gen": []})
                entry["s"].append(seconds)
                entry["stall"].append(share)
                entry["cpu"].append(cpu)
                entry["scores"].append(scores)
                # rope has no position limit, so `answers` generates every row, in its order
                rows_in = generation_order(lengths[task][: len(part)])
                assert [q for q, _ in log] == [lengths[task][i][0] for i in rows_in]
                # the tokens scored, back in row order: a batch generates to its longest answer,
                # a row alone to its own, so what follows a row's answer is never read
                gen: list = [None] * len(part)
                for (q, out), i in zip(log, rows_in):
                    gen[i] = (q, out[: lengths[task][i][1]])
                entry["gen"].append(gen)
                print(f"  round {r + 1} {task}, {label}{' (subset)' if subset else ''}: "
                      f"{len(part)} questions in {seconds:.2f} s ({len(part) / seconds:,.0f}/s), "
                      f"CPU {cpu:.2f} s, CPU stall share {share:.2f}", flush=True)

    unbatched_index = len(sizes) + 1
    print()
    print("| task | setting | questions timed | seconds | questions/s | 10,000 questions, s "
          "| ratio to unbatched | questions per CPU second | same generations and scores as "
          "unbatched | quiet rounds |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for task, (_, rows) in tasks.items():
        base = results[(task, unbatched_index)]
        base_s, _ = median_seconds(base["s"], base["stall"], args.quiet)
        base_rate = n_sub / base_s
        sub_gen = base["gen"][0]
        full = [results[(task, i)] for i, s in enumerate(settings) if not s[3]]
        for i, (label, _, _, subset) in enumerate(settings):
            entry = results[(task, i)]
            n = n_sub if subset else len(rows)
            seconds, quiet = median_seconds(entry["s"], entry["stall"], args.quiet)
            rate = n / seconds
            per_cpu = n / statistics.median(entry["cpu"])
            extrapolated = "*" if n < 10000 else ""
            if subset:  # every round, the same generations and scores as the unbatched
                same = all(g == sub_gen for g in entry["gen"]) and all(
                    s == base["scores"][0] for s in entry["scores"])
                check = "yes" if same else "NO"
            else:  # every batch size and round alike, and the subset's questions as unbatched
                same = all(g == full[0]["gen"][0] for e in full for g in e["gen"]) and all(
                    s == full[0]["scores"][0] for e in full for s in e["scores"]) and (
                    full[0]["gen"][0][:n_sub] == sub_gen)
                check = "yes (and every batch size alike)" if same else "NO"
            print(f"| {task} | {label} | {n:,} | {seconds:.2f} | {rate:,.0f} | "
                  f"{10000 / rate:,.1f}{extrapolated} | {rate / base_rate:.1f} | {per_cpu:,.0f} "
                  f"| {check} | {quiet} |")
    print()
    print("* extrapolated from the subset's rate")
    for task, (_, rows) in tasks.items():
        full_scores = results[(task, 0)]["scores"][0]
        shown = {k: v for k, v in full_scores.items() if not k.startswith("per_")}
        print(f"{task} scores on {len(rows):,} questions (random weights, so ~0): {shown}")
    print()
    print(f"Where the batched path's time goes (batch {sizes[0]}, all questions, CPU seconds, "
          f"parts timed once after the rounds; the lm head, which generate computes at the last "
          f"position only, is {head_share(c):.0%} of the matmul work per position):")
    print("| task | whole task (median above), CPU s | tokenizing | prompt pass | decoding "
          "| rest (scoring, second tokenizing) | real tokens in padded prompts "
          "| real tokens in answer budget | prompt / answer tokens per question |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for task, (_, rows) in tasks.items():
        parts = breakdown(context, rows, sizes[0])
        whole = statistics.median(results[(task, 0)]["cpu"])
        decode = parts["generate"] - parts["prompt_pass"]
        rest = whole - parts["tokenize"] - parts["generate"]
        print(f"| {task} | {whole:.2f} | {parts['tokenize']:.2f} | {parts['prompt_pass']:.2f} | "
              f"{decode:.2f} | {rest:.2f} | {parts['prompt_real']:.0%} | "
              f"{parts['answer_real']:.0%} | {parts['prompt_tokens']:.1f} / "
              f"{parts['answer_tokens']:.1f} |", flush=True)
    print()
    print_run_footer(torch.get_num_threads())
    if scratch is not None:
        scratch.cleanup()


if __name__ == "__main__":
    main()
