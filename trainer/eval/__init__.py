"""Evaluation: batched generation with a KV cache, and one module per evaluation task."""
