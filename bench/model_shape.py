"""The model shape options of the CPU benchmarks, and the HF Llama config of a shape: shared so
that physlm and its HF peer are built alike in every benchmark."""

import argparse


def add_shape_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)


def hf_llama_config(*, vocab: int, d_model: int, ffn_dim: int, layers: int, heads: int, ctx: int,
                    rope_theta: float, **options):
    """transformers.LlamaConfig of physlm's Llama layout (rope, rmsnorm 1e-5, swiglu, no
    biases, untied head), attention through SDPA; `options` adds or overrides fields."""
    import transformers

    return transformers.LlamaConfig(**{
        "vocab_size": vocab, "hidden_size": d_model, "intermediate_size": ffn_dim,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": heads,
        "max_position_embeddings": ctx, "rms_norm_eps": 1e-5, "attention_bias": False,
        "mlp_bias": False, "tie_word_embeddings": False, "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "attn_implementation": "sdpa", **options})
