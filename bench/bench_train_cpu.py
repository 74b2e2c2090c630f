"""CPU training throughput, physlm's GPT vs HF transformers at identical shapes, in one process run.

    python bench/bench_train_cpu.py

Two pairs, each at the same batch, vocab and depth/width (defaults: micro_batch 8 x ctx 256,
vocab 8192, 4 layers x d_model 256 x 4 heads):
- llama: physlm pos=rope, norm=rmsnorm, mlp=swiglu, bias=False, tie_embeddings=False
  vs transformers.LlamaForCausalLM (intermediate_size = physlm's ffn_dim, rms eps 1e-5,
  no attention/MLP bias, same rope_theta, untied head);
- gpt2: physlm pos=learned, norm=layernorm, mlp=gelu, bias=True, tie_embeddings=True
  vs transformers.GPT2LMHeadModel (n_positions = ctx, activation_function="gelu": exact GELU
  like physlm's, not GPT-2's default tanh gelu_new; tied head).
Dropout 0 everywhere; parameter counts are asserted equal.

Every contestant runs the same full step: forward, cross-entropy on the fp32 logits (computed
outside the model, the same way for all), backward, torch AdamW (fused=False) step, in fp32 with
torch's default thread count. physlm runs with no doc mask and default positions (plain causal:
its SDPA is_causal fast path); HF runs with attn_implementation="sdpa" and use_cache=False. An
extra row per pair runs physlm as the trainer does by default (doc_mask: doc ids and per-document
restarting position ids [B, T], packed documents of random length around --doc-len), and the
`compiled` rows run physlm under torch.compile as `train.compile: true` does (the model compiled
in place, stepping in the trainer's CPU deterministic-kernels mode; the loss and optimizer stay
eager, as in the trainer). Compilation happens in the untimed warmup steps. The step itself is
bench/train_step.py's, shared with cpu_profile.py and the GPU proof.

Each contestant first takes --warmup steps; then, in each of --rounds rounds, every contestant
times --steps steps, one by one, in an order that rotates from round to round. The table gives
the median tokens/s over the quiet timed steps and the ratio physlm / HF of those medians
within each pair. The machine is shared: another process taking one of its 2 cores slows a
2-thread step 3-7x for as long as it runs. So contestants take turns step by step (one step per
round by default), each step's CPU pressure is read from /proc/pressure/cpu (the share of the
step during which some task waited for a core), and only quiet steps (share < --quiet) enter
the headline medians; after --rounds, rounds go on (up to --max-rounds) until every contestant
has --min-quiet quiet steps. The all-steps median is printed too.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from cpu_pressure import cpu_stall_us, print_run_footer
from model_shape import add_shape_args, hf_llama_config
from torch import Tensor, nn
from train_step import phased_step

from trainer.determinism import deterministic_kernels


@dataclass
class Contestant:
    pair: str
    name: str
    model: nn.Module
    forward: Callable[[], Tensor]  # logits [B, T, V] for the shared batch
    compiled: bool  # under torch.compile, as train.compile: true runs it
    optimizer: torch.optim.Optimizer
    rates: list[float]  # tokens/s of each timed step
    stalls: list[float]  # share of each timed step in which some task waited for a CPU


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--ctx", type=int, default=256)
    add_shape_args(p)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--rounds", type=int, default=40, help="rounds at least")
    p.add_argument("--min-quiet", type=int, default=15,
                   help="after --rounds, go on until every contestant has this many quiet steps")
    p.add_argument("--max-rounds", type=int, default=100, help="rounds at most")
    p.add_argument("--quiet", type=float, default=0.2,
                   help="a step is quiet when some task waited for a CPU less than this share "
                        "of it (Linux CPU pressure, /proc/pressure/cpu)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per contestant")
    p.add_argument("--steps", type=int, default=1, help="timed steps per contestant per round")
    p.add_argument("--doc-len", type=int, default=64,
                   help="mean document length for the doc-mask row")
    p.add_argument("--pairs", default="llama,gpt2", help="comma list of llama, gpt2")
    p.add_argument("--no-doc-mask-row", action="store_true", help="skip the doc-mask rows")
    p.add_argument("--no-compile-rows", action="store_true",
                   help="skip the rows of physlm under torch.compile (train.compile: true)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def physlm_config(args: argparse.Namespace, pair: str):
    from trainer.model import ModelConfig
    from trainer.model.positional_options import RopeOptions

    common = dict(n_layer=args.layers, n_head=args.heads, d_model=args.d_model,
                  vocab_size=args.vocab, ctx=args.ctx, dropout=0.0, attention="auto",
                  rope=RopeOptions(theta=args.rope_theta))
    if pair == "llama":
        return ModelConfig(pos="rope", norm="rmsnorm", mlp="swiglu", bias=False,
                           tie_embeddings=False, **common)
    return ModelConfig(pos="learned", norm="layernorm", mlp="gelu", bias=True,
                       tie_embeddings=True, **common)


def hf_model(args: argparse.Namespace, pair: str, ffn_dim: int) -> nn.Module:
    import transformers

    if pair == "llama":
        config = hf_llama_config(vocab=args.vocab, d_model=args.d_model, ffn_dim=ffn_dim,
                                 layers=args.layers, heads=args.heads, ctx=args.ctx,
                                 rope_theta=args.rope_theta, attention_dropout=0.0,
                                 use_cache=False)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(
            vocab_size=args.vocab, n_positions=args.ctx, n_embd=args.d_model,
            n_layer=args.layers, n_head=args.heads, n_inner=ffn_dim, activation_function="gelu",
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
            tie_word_embeddings=True, use_cache=False, bos_token_id=None, eos_token_id=None,
            attn_implementation="sdpa")
        model = transformers.GPT2LMHeadModel(config)
    assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
    return model


def packed_docs(batch: int, length: int, mean: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """(doc_ids, position_ids), each [B, T]: documents of length uniform in [mean/2, 3 mean/2],
    packed back to back; positions restart at 0 in each document."""
    docs = torch.empty(batch, length, dtype=torch.long)
    pos = torch.empty(batch, length, dtype=torch.long)
    low, high = max(1, mean // 2), max(2, 3 * mean // 2 + 1)
    for row in range(batch):
        start, doc = 0, 0
        while start < length:
            n = int(torch.randint(low, high, (1,), generator=gen))
            end = min(length, start + n)
            docs[row, start:end] = doc
            pos[row, start:end] = torch.arange(end - start)
            start, doc = end, doc + 1
    return docs, pos


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() yields tied ones once


def physlm_rows(args: argparse.Namespace, docs: Tensor,
                pos: Tensor) -> list[tuple[str, bool, dict]]:
    """physlm's contestants: (name, compiled, extra forward inputs)."""
    masked = {"position_ids": pos, "doc_ids": docs}
    rows = [("physlm", False, {})]
    if not args.no_doc_mask_row:
        rows.append(("physlm + doc mask", False, masked))
    if not args.no_compile_rows:
        rows.append(("physlm compiled", True, {}))
        if not args.no_doc_mask_row:
            rows.append(("physlm compiled + doc mask", True, masked))
    return rows


def build(args: argparse.Namespace, ids: Tensor, docs: Tensor, pos: Tensor) -> list[Contestant]:
    from trainer.model import GPT

    def adamw(model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=False)

    out = []
    for pair in args.pairs.split(","):
        config = physlm_config(args, pair)
        torch.manual_seed(args.seed)
        theirs = hf_model(args, pair, config.ffn_dim).train()
        for name, compiled, inputs in physlm_rows(args, docs, pos):
            torch.manual_seed(args.seed)
            ours = GPT(config).train()
            if compiled:
                ours.compile()  # as the trainer does with train.compile: true
            out.append(Contestant(pair, name, ours, lambda m=ours, kw=inputs: m(ids, **kw),
                                  compiled, adamw(ours), [], []))
        mine, hfs = n_params(out[-1].model), n_params(theirs)
        print(f"{pair}: physlm params {mine:,}  HF params {hfs:,}  (ffn_dim {config.ffn_dim})")
        assert mine == hfs, f"{pair}: parameter counts differ: physlm {mine} vs HF {hfs}"
        hf_name = type(theirs).__name__
        out.append(Contestant(pair, f"HF {hf_name}", theirs,
                              lambda m=theirs: m(input_ids=ids, use_cache=False).logits,
                              False, adamw(theirs), [], []))
    return out


def quiet_rates(c: Contestant, limit: float) -> list[float]:
    return [rate for rate, stall in zip(c.rates, c.stalls) if stall < limit]


def step(c: Contestant, targets: Tensor) -> tuple[float, float, float]:
    """One training step of `c`; seconds of forward with the loss, backward, optimizer. A
    compiled contestant steps in trainer.determinism's deterministic-kernels mode, as
    `train.compile: true` trains on CPU (it changes inductor's embedding backward)."""
    with deterministic_kernels(c.compiled):
        return phased_step(c.forward, targets, c.optimizer)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import transformers

    gen = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, args.vocab, (args.micro_batch, args.ctx + 1), generator=gen)
    ids, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    docs, pos = packed_docs(args.micro_batch, args.ctx, args.doc_len, gen)
    contestants = build(args, ids, docs, pos)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"threads {torch.get_num_threads()}, batch {args.micro_batch} x {args.ctx}, "
          f"vocab {args.vocab}, {args.layers} layers x d_model {args.d_model} x "
          f"{args.heads} heads, fp32, AdamW fused=False")

    for c in contestants:
        for _ in range(args.warmup):
            step(c, targets)
    per_step = args.micro_batch * args.ctx
    r = 0
    while r < args.rounds or (r < args.max_rounds and min(
            len(quiet_rates(c, args.quiet)) for c in contestants) < args.min_quiet):
        shift = r % len(contestants)
        for c in contestants[shift:] + contestants[:shift]:
            for _ in range(args.steps):
                stalled, began = cpu_stall_us(), time.perf_counter()
                step(c, targets)
                seconds = time.perf_counter() - began
                c.rates.append(per_step / seconds)
                c.stalls.append(0.0 if stalled is None else
                                (cpu_stall_us() - stalled) / 1e6 / seconds)
        r += 1
        print(f"round {r} (tokens/s, median step, CPU stall share): " + ", ".join(
            f"{c.pair}/{c.name} {statistics.median(c.rates[-args.steps:]):,.0f} "
            f"{statistics.median(c.stalls[-args.steps:]):.2f}" for c in contestants), flush=True)

    def median(rates: list[float]) -> float:
        return statistics.median(rates) if rates else float("nan")

    def middle_half(rates: list[float]) -> str:
        if len(rates) < 2:
            return "-"
        low, _, high = statistics.quantiles(rates, n=4)
        return f"{low:,.0f}-{high:,.0f}"

    print()
    print(f"{r} rounds. Quiet steps: CPU stall share < {args.quiet} (no other task waiting for a "
          "core); the ratios compare quiet medians.")
    print()
    print("| pair | contestant | tokens/s, median of quiet steps | middle half (quiet) "
          "| quiet steps | tokens/s, median of all steps | physlm / HF | params |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for pair in dict.fromkeys(c.pair for c in contestants):
        rows = [c for c in contestants if c.pair == pair]
        hf = median(quiet_rates(next(c for c in rows if c.name.startswith("HF")), args.quiet))
        for c in rows:
            quiet = quiet_rates(c, args.quiet)
            rate = median(quiet)
            ratio = "1.00 (peer)" if c.name.startswith("HF") else f"{rate / hf:.2f}"
            print(f"| {pair} | {c.name} | {rate:,.0f} | {middle_half(quiet)} "
                  f"| {len(quiet)}/{len(c.rates)} | {median(c.rates):,.0f} | {ratio} "
                  f"| {n_params(c.model):,} |")
    if min(len(quiet_rates(c, args.quiet)) for c in contestants) < args.min_quiet:
        print(f"WARNING: fewer than {args.min_quiet} quiet steps for some contestant; "
              "the machine was busy throughout")
    print()
    print_run_footer(torch.get_num_threads())


if __name__ == "__main__":
    main()
