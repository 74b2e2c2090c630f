"""Canon under train.compile: torch.compile runs each site's masked sum (the graph the compiler
fuses) where eager training runs CanonConv; both give the same logits and gradients, packed
documents included."""

import shutil

import pytest
import torch

from tests.test_model import packed_batch
from trainer.determinism import deterministic_kernels
from trainer.model import GPT, ModelConfig

# inductor writes C++ for CPU graphs and builds it with the machine's compiler
pytestmark = pytest.mark.skipif(
    not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")),
    reason="torch.compile on CPU needs a C++ compiler (g++, c++ or clang++), none on PATH")


@pytest.mark.slow  # a cold compilation of forward and backward: a minute or more on 2 cores
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "one-doc"])
def test_a_compiled_canon_model_gives_eagers_logits_and_gradients(packed):
    torch.manual_seed(0)
    config = ModelConfig(n_layer=2, n_head=4, d_model=64, vocab_size=61, ctx=64, init_std=0.1,
                         canon="ABCD", pos="rope", mlp="swiglu")
    eager = GPT(config).train()
    compiled = GPT(config).train()
    compiled.load_state_dict(eager.state_dict())
    compiled.compile()
    ids, positions, docs = packed_batch()
    inputs = (ids, positions, docs) if packed else (ids,)
    want = eager(*inputs)
    with deterministic_kernels(True):  # as the engine runs a compiled model on CPU
        got = compiled(*inputs)
        assert (got - want).abs().max() < 1e-5
        want.square().mean().backward()
        got.square().mean().backward()
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
        assert (q.grad - p.grad).abs().max() < 1e-5, name
    assert all(p.grad.abs().max() > 0 for name, p in eager.named_parameters() if "canon" in name)
