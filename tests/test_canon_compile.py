"""Canon under train.compile: torch.compile runs each site's masked sum (the graph the compiler
fuses) where eager training runs CanonConv; both give the same logits and gradients, packed
documents included."""

import shutil

import pytest

from tests.test_compile import assert_compiled_equals_eager
from tests.test_model import packed_batch
from trainer.model import ModelConfig

# inductor writes C++ for CPU graphs and builds it with the machine's compiler
pytestmark = pytest.mark.skipif(
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
