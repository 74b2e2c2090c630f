"""Generation speed with the KV cache vs without, per positional encoding, in one process run.

    python bench/bench_generation.py --rounds 3

physlm's `trainer.eval.generation.generate`, greedy, --new-tokens new tokens after a prompt of
--prompt random tokens, --batch rows, for each --pos (default rope, learned, alibi, relative,
none) on a randomly initialised GPT (defaults: 4 layers x d_model 256 x 4 heads, vocab 8192,
ctx = prompt + new tokens, otherwise ModelConfig's defaults), fp32, default thread count.
Each round times use_cache=True and use_cache=False back to back (order alternating between
rounds); the table gives median tokens/s (batch x new tokens / seconds) each way, their ratio
(target >= 10) and whether the generated tokens are identical both ways in every round.

The machine is shared, and another process taking one of its 2 cores slows 2-thread torch 3-7x
while it runs. Each timed call reads the CPU pressure (/proc/pressure/cpu: the share of the call
during which some task waited for a core); a round is quiet when both of its calls stayed under
--quiet. Medians are over the quiet rounds when there are any, else over all rounds (marked).

Reference rows (skip with --no-hf): physlm with the Llama layout (rope, rmsnorm, swiglu, no
bias, untied head) and transformers.LlamaForCausalLM carrying the very same weights, both with
a cache; HF's `generate` is greedy with min_new_tokens = max_new_tokens and no EOS, and its
tokens are compared with physlm's.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from cpu_pressure import cpu_stall_us, print_run_footer
from model_shape import add_shape_args, hf_llama_config
from torch import nn


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pos", default="rope,learned,alibi,relative,none",
                   help="comma list of positional encodings")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt", type=int, default=32, help="prompt length, tokens")
    p.add_argument("--new-tokens", type=int, default=128)
    add_shape_args(p)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-hf", action="store_true", help="skip the HF Llama reference rows")
    p.add_argument("--quiet", type=float, default=0.2,
                   help="a call is quiet when some task waited for a CPU less than this share "
                        "of it")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def physlm_model(args: argparse.Namespace, **options) -> nn.Module:
    from trainer.model import GPT, ModelConfig

    torch.manual_seed(args.seed)
    config = ModelConfig(n_layer=args.layers, n_head=args.heads, d_model=args.d_model,
                         vocab_size=args.vocab, ctx=args.prompt + args.new_tokens, **options)
    return GPT(config).eval()


def hf_llama_copy(ours: nn.Module) -> nn.Module:
    """transformers.LlamaForCausalLM with the weights of a physlm GPT in the Llama layout."""
    import transformers

    c = ours.config
    config = hf_llama_config(vocab=c.vocab_size, d_model=c.d_model, ffn_dim=c.ffn_dim,
                             layers=c.n_layer, heads=c.n_head, ctx=c.ctx,
                             rope_theta=c.rope.theta, bos_token_id=None, eos_token_id=None,
                             pad_token_id=0)
    theirs = transformers.LlamaForCausalLM(config).eval()
    assert theirs.config._attn_implementation == "sdpa", theirs.config._attn_implementation
    state = {"model.embed_tokens.weight": ours.tok_emb.weight, "model.norm.weight":
             ours.norm.weight, "lm_head.weight": ours.lm_head.weight}
    for i, block in enumerate(ours.blocks):
        at = f"model.layers.{i}."
        q, k, v = block.attn.qkv.weight.chunk(3, dim=0)
        gate, up = block.mlp.fc.weight.chunk(2, dim=0)
        state |= {at + "self_attn.q_proj.weight": q, at + "self_attn.k_proj.weight": k,
                  at + "self_attn.v_proj.weight": v,
                  at + "self_attn.o_proj.weight": block.attn.proj.weight,
                  at + "mlp.gate_proj.weight": gate, at + "mlp.up_proj.weight": up,
                  at + "mlp.down_proj.weight": block.mlp.proj.weight,
                  at + "input_layernorm.weight": block.norm1.weight,
                  at + "post_attention_layernorm.weight": block.norm2.weight}
    missing, unexpected = theirs.load_state_dict({k: v.detach().clone() for k, v in
                                                  state.items()}, strict=False)
    assert not unexpected and not [m for m in missing if "rotary" not in m], (missing, unexpected)
    return theirs


def timed(fn) -> tuple[float, float, list[list[int]]]:
    """(seconds, CPU stall share, fn's result)."""
    stalled, began = cpu_stall_us(), time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - began
    share = 0.0 if stalled is None else (cpu_stall_us() - stalled) / 1e6 / seconds
    return seconds, share, out


def pick_rounds(a: list[float], b: list[float], stalls: list[float],
                quiet: float) -> tuple[list[float], list[float], str]:
    """The rates of the quiet rounds when there are any, else all; and a label saying which."""
    keep = [i for i, stall in enumerate(stalls) if stall < quiet]
    if not keep:
        return a, b, f"0/{len(stalls)} (all used)"
    return [a[i] for i in keep], [b[i] for i in keep], f"{len(keep)}/{len(stalls)}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from trainer.eval.generation import generate

    gen = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(1, args.vocab, (args.batch, args.prompt), generator=gen).tolist()
    n_new = args.batch * args.new_tokens
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, batch {args.batch}, "
          f"prompt {args.prompt}, {args.new_tokens} new tokens (greedy), vocab {args.vocab}, "
          f"{args.layers} layers x d_model {args.d_model} x {args.heads} heads, fp32")

    rows = []  # (name, cached rates, uncached rates or None, identical: str, quiet rounds: str)
    for pos in args.pos.split(","):
        model = physlm_model(args, pos=pos)
        generate(model, prompts, 4, use_cache=True)  # warm-up
        generate(model, prompts, 4, use_cache=False)
        cached, uncached, stalls, same = [], [], [], True
        for r in range(args.rounds):
            ways = (True, False) if r % 2 == 0 else (False, True)
            outs, shares = {}, []
            for use_cache in ways:
                seconds, share, outs[use_cache] = timed(
                    lambda m=model, u=use_cache: generate(m, prompts, args.new_tokens, use_cache=u))
                (cached if use_cache else uncached).append(n_new / seconds)
                shares.append(share)
            stalls.append(max(shares))
            same &= outs[True] == outs[False]
            print(f"  {pos} round {r + 1}: cache {cached[-1]:,.0f} tok/s, "
                  f"no cache {uncached[-1]:,.0f} tok/s, CPU stall share {stalls[-1]:.2f}",
                  flush=True)
        cached, uncached, quiet = pick_rounds(cached, uncached, stalls, args.quiet)
        rows.append((f"physlm pos={pos}", cached, uncached, "yes" if same else "NO", quiet))
        print(f"{pos}: cache {statistics.median(cached):,.0f} tok/s, no cache "
              f"{statistics.median(uncached):,.0f} tok/s, identical: {same}, quiet rounds "
              f"{quiet}", flush=True)

    if not args.no_hf:
        ours = physlm_model(args, pos="rope", norm="rmsnorm", mlp="swiglu", bias=False,
                            tie_embeddings=False)
        theirs = hf_llama_copy(ours)
        ids = torch.tensor(prompts)

        def hf_generate(new: int) -> list[list[int]]:
            with torch.inference_mode():
                out = theirs.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=new, min_new_tokens=new, use_cache=True,
                                      eos_token_id=None, pad_token_id=0)
            return out[:, args.prompt:].tolist()

        generate(ours, prompts, 4)
        hf_generate(4)
        mine, hf, stalls = [], [], []
        matches = 0
        for r in range(args.rounds):
            order = ("physlm", "hf") if r % 2 == 0 else ("hf", "physlm")
            outs, shares = {}, []
            for who in order:
                if who == "physlm":
                    seconds, share, outs[who] = timed(
                        lambda: generate(ours, prompts, args.new_tokens))
                    mine.append(n_new / seconds)
                else:
                    seconds, share, outs[who] = timed(lambda: hf_generate(args.new_tokens))
                    hf.append(n_new / seconds)
                shares.append(share)
            stalls.append(max(shares))
            matches = sum(a == b for x, y in zip(outs["physlm"], outs["hf"]) for a, b in zip(x, y))
            print(f"  Llama layout round {r + 1}: physlm {mine[-1]:,.0f} tok/s, HF {hf[-1]:,.0f} "
                  f"tok/s, CPU stall share {stalls[-1]:.2f}", flush=True)
        mine, hf, quiet = pick_rounds(mine, hf, stalls, args.quiet)
        label = f"{matches}/{n_new} tokens same as physlm"
        rows.append(("physlm Llama layout (rope, rmsnorm, swiglu)", mine, None, "-", quiet))
        rows.append(("HF LlamaForCausalLM.generate, same weights", hf, None, label, quiet))

    print()
    print("| model | tokens/s with cache | tokens/s without cache | cache / no cache "
          "| identical both ways | quiet rounds |")
    print("|---|---:|---:|---:|---|---:|")
    for name, cached, uncached, same, quiet in rows:
        c = statistics.median(cached)
        u = f"{statistics.median(uncached):,.0f}" if uncached else "-"
        ratio = f"{c / statistics.median(uncached):.1f}" if uncached else "-"
        print(f"| {name} | {c:,.0f} | {u} | {ratio} | {same} | {quiet} |")
    print()
    print_run_footer(torch.get_num_threads())


if __name__ == "__main__":
    main()
