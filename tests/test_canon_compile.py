"""Canon under train.compile: torch.compile runs each site's masked sum (the graph the compiler
fuses) where eager training runs CanonConv; both give the same logits and gradients, packed
documents included."""

import shutil

import pytest
import torch

from tests.test_compile import assert_compiled_equals_eager
from tests.test_model import packed_batch
from trainer.model import GPT, ModelConfig


@pytest.mark.parametrize("kernel,mlp", [(2, "gelu"), (3, "swiglu")])
def test_canons_traced_graph_is_one_graph_with_eagers_logits_and_gradients(kernel, mlp):
    # aot_eager traces what inductor would compile (dynamo, then autograd's joint graph) and runs
    # it uncompiled: seconds, where inductor's build takes a minute (the slow test below).
    # fullgraph: a graph break, such as tracing into CanonConv's compiled loops, is an error
    config = ModelConfig(n_layer=2, n_head=4, d_model=64, vocab_size=61, ctx=64, init_std=0.1,
                         canon="ABCD", canon_kernel=kernel, pos="rope", mlp=mlp)
    ids, positions, docs = packed_batch()
    torch.manual_seed(0)
    eager, traced = GPT(config).train(), GPT(config).train()
    traced.load_state_dict(eager.state_dict())
    want = eager(ids, positions, docs)
    got = torch.compile(traced, backend="aot_eager", fullgraph=True)(ids, positions, docs)
    assert (got - want).abs().max() < 1e-5
    want.square().mean().backward()
    got.square().mean().backward()
    for (name, p), q in zip(eager.named_parameters(), traced.parameters()):
        assert (q.grad - p.grad).abs().max() < 1e-6, name
        assert "canon" not in name or p.grad.abs().max() > 1e-4, name


# inductor writes C++ for CPU graphs and builds it with the machine's compiler
@pytest.mark.skipif(
    not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")),
    reason="torch.compile on CPU needs a C++ compiler (g++, c++ or clang++), none on PATH")
@pytest.mark.slow  # a cold compilation of forward and backward: a minute or more on 2 cores
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "one-doc"])
def test_a_compiled_canon_model_gives_eagers_logits_and_gradients(packed):
    config = ModelConfig(n_layer=2, n_head=4, d_model=64, vocab_size=61, ctx=64, init_std=0.1,
                         canon="ABCD", pos="rope", mlp="swiglu")
    ids, positions, docs = packed_batch()
    eager, _ = assert_compiled_equals_eager(config, (ids, positions, docs) if packed else (ids,))
    assert all(p.grad.abs().max() > 0 for name, p in eager.named_parameters() if "canon" in name)
