"""The attention backends against the math reference, FlexAttention's document block mask above
all, and which backend runs a pass (`pick_backend`). Flex runs forward only on CPU (PyTorch has
its backward on CUDA alone): gradients are compared in the `cuda` tests."""

import pytest
import torch

from trainer.model import GPT, ModelConfig, encodings
from trainer.model import attention as attention_module
from trainer.model.attention import HAVE_FLASH, pick_backend
from trainer.model.errors import ModelConfigError

VOCAB = 53
FLEX_ENCODINGS = sorted(p for p, e in encodings().items() if e.flash_compatible)
DENSE_ONLY = sorted(p for p, e in encodings().items() if not e.flash_compatible)
# documents crossing flex's 128-token blocks, a row of one document, and a block's worth of
# one-token documents
ROWS = ((100, 60, 100), (260,), (128, *[1] * 64, 68))


def build(pos: str, attention: str, **overrides) -> GPT:
    """A tiny model with 260 positions and head_dim 16 (compiled flex needs 16 or more);
    init_std 0.1 so positions and biases move the logits."""
    torch.manual_seed(0)
    config = {"n_layer": 2, "n_head": 4, "d_model": 64, "vocab_size": VOCAB, "ctx": 260,
              "pos": pos, "attention": attention, "init_std": 0.1, **overrides}
    return GPT(ModelConfig(**config)).eval()


def twin(model: GPT, attention: str) -> GPT:
    """The same weights run by another backend."""
    other = build(model.config.pos, attention)
    other.load_state_dict(model.state_dict())
    return other


def packed_batch(mode: str, device: str = "cpu") -> tuple:
    """ids [3, 260] with positions and doc ids as `mode` gives them: "packed" (positions
    restart per document), "docs-only" (doc ids, positions 0..T-1 shared by the batch) or
    "one-doc" (neither)."""
    ids = torch.randint(0, VOCAB, (len(ROWS), 260), generator=torch.Generator().manual_seed(1))
    positions = torch.stack([torch.cat([torch.arange(n) for n in row]) for row in ROWS])
    docs = torch.stack([torch.cat([torch.full((n,), i) for i, n in enumerate(row)])
                        for row in ROWS])
    positions, docs = {"packed": (positions, docs), "docs-only": (None, docs),
                       "one-doc": (None, None)}[mode]
    return tuple(None if t is None else t.to(device) for t in (ids, positions, docs))


@pytest.fixture
def ran(monkeypatch) -> list[str]:
    """The backend of every attention call, in order."""
    calls = []
    for name, backend in list(attention_module.BACKENDS.items()):
        def recording(q, k, v, mask, dropout_p, backend=backend):
            calls.append(mask.backend)
            return backend(q, k, v, mask, dropout_p)
        monkeypatch.setitem(attention_module.BACKENDS, name, recording)
    return calls


@pytest.mark.parametrize("mode", ["packed", "docs-only", "one-doc"])
@pytest.mark.parametrize("pos", FLEX_ENCODINGS)
def test_flex_matches_math_on_cpu(pos, mode, ran):
    reference = build(pos, "math")
    flex = twin(reference, "flex")
    inputs = packed_batch(mode)
    with torch.no_grad():
        want = reference(*inputs)
        del ran[:]
        got = flex(*inputs)
    assert ran == ["flex", "flex"]
    assert want.abs().max() > 1.0  # logits that positions and documents can visibly move
    assert (got - want).abs().max() < 1e-5


@pytest.mark.parametrize("pos", DENSE_ONLY)
def test_flex_is_refused_for_encodings_with_bias_tables_or_windows(pos):
    with pytest.raises(ModelConfigError,
                       match=rf"^attention='flex': flex cannot run pos='{pos}'; use sdpa or auto"):
        ModelConfig(vocab_size=VOCAB, pos=pos, attention="flex").validate()


def test_flex_is_refused_with_attention_dropout():
    with pytest.raises(ModelConfigError,
                       match=r"^attention='flex': flex has no attention dropout \(dropout=0.1\)"):
        ModelConfig(vocab_size=VOCAB, attention="flex", dropout=0.1).validate()


# (requested, flash_compatible, device, dtype, head_dim, cached, packed, dropout, grad) -> backend
CUDA_PACKED = dict(device="cuda", dtype=torch.float32, head_dim=64, cached=False, packed=True,
                   dropout=0.0, grad=True)
CHOICES = [
    ("auto", True, CUDA_PACKED, "flex"),
    ("auto", True, {**CUDA_PACKED, "dtype": torch.bfloat16}, "flex"),  # no flash installed
    ("auto", True, {**CUDA_PACKED, "packed": False}, "sdpa"),  # is_causal: the fused fast path
    ("auto", False, CUDA_PACKED, "sdpa"),  # relative, pos_only, uniform: the dense mask
    ("auto", True, {**CUDA_PACKED, "dropout": 0.1}, "sdpa"),
    ("auto", True, {**CUDA_PACKED, "cached": True}, "sdpa"),  # decoding
    ("auto", True, {**CUDA_PACKED, "device": "cpu"}, "sdpa"),  # CPU: unchanged
    ("auto", True, {**CUDA_PACKED, "device": "cpu", "grad": False}, "sdpa"),
    ("flex", True, CUDA_PACKED, "flex"),
    ("flex", True, {**CUDA_PACKED, "packed": False}, "flex"),
    ("flex", True, {**CUDA_PACKED, "cached": True}, "sdpa"),
    ("flex", True, {**CUDA_PACKED, "device": "cpu", "grad": False}, "flex"),
    ("flex", True, {**CUDA_PACKED, "device": "cpu"}, "sdpa"),  # no backward on CPU
    # inductor's CUDA flex takes head_dim >= 16; other widths are padded in the kernel
    ("auto", True, {**CUDA_PACKED, "head_dim": 8}, "sdpa"),
    ("auto", True, {**CUDA_PACKED, "head_dim": 15}, "sdpa"),
    ("auto", True, {**CUDA_PACKED, "head_dim": 16}, "flex"),
    ("auto", True, {**CUDA_PACKED, "head_dim": 24}, "flex"),
    ("flex", True, {**CUDA_PACKED, "head_dim": 8}, "sdpa"),
    ("flex", True, {**CUDA_PACKED, "head_dim": 8, "device": "cpu", "grad": False}, "flex"),
    ("flash_attn", True, {**CUDA_PACKED, "dtype": torch.bfloat16}, "sdpa"),  # not installed
    ("sdpa", True, CUDA_PACKED, "sdpa"),
    ("math", True, {**CUDA_PACKED, "cached": True}, "math"),
]


@pytest.mark.parametrize("requested,flash_compatible,run,expected", CHOICES)
@pytest.mark.filterwarnings("ignore:attention='flex' runs sdpa")
def test_pick_backend_without_flash_installed(monkeypatch, requested, flash_compatible, run,
                                              expected):
    monkeypatch.setattr(attention_module, "HAVE_FLASH", False)
    assert pick_backend(requested, flash_compatible, **run) == expected


@pytest.mark.parametrize("run,reason", [
    ({**CUDA_PACKED, "device": "cpu"}, "PyTorch has no flex backward pass on CPU"),
    ({**CUDA_PACKED, "head_dim": 8}, "inductor's CUDA flex needs head_dim >= 16, not 8"),
])
def test_requested_flex_that_falls_back_warns_once(monkeypatch, run, reason):
    monkeypatch.setattr(attention_module, "HAVE_FLASH", False)
    attention_module._warn_flex_fallback.cache_clear()
    with pytest.warns(UserWarning) as caught:
        for _ in range(3):
            assert pick_backend("flex", True, **run) == "sdpa"
    assert [str(w.message) for w in caught] == [f"attention='flex' runs sdpa instead here: "
                                                f"{reason}"]


@pytest.mark.parametrize("requested,run,expected", [
    ("auto", {**CUDA_PACKED, "dtype": torch.bfloat16}, "flash_attn"),
    ("auto", CUDA_PACKED, "flex"),  # flash takes fp16/bf16 only
    ("auto", {**CUDA_PACKED, "dtype": torch.bfloat16, "device": "cpu"}, "sdpa"),
    ("flex", {**CUDA_PACKED, "dtype": torch.bfloat16}, "flex"),
    ("flash_attn", {**CUDA_PACKED, "dtype": torch.bfloat16, "packed": False}, "flash_attn"),
])
def test_pick_backend_with_flash_installed(monkeypatch, requested, run, expected):
    monkeypatch.setattr(attention_module, "HAVE_FLASH", True)
    assert pick_backend(requested, True, **run) == expected


def test_gpt_runs_flex_on_cpu_only_without_gradients(ran):
    model = build("rope", "flex")
    ids, positions, docs = packed_batch("packed")
    attention_module._warn_flex_fallback.cache_clear()
    with pytest.warns(UserWarning, match="no flex backward pass on CPU"):
        model(ids, positions, docs)
    with torch.no_grad():
        model(ids, positions, docs)
    assert ran == ["sdpa", "sdpa", "flex", "flex"]


def test_auto_on_cpu_runs_sdpa_for_packed_documents(ran):
    with torch.no_grad():
        build("rope", "auto")(*packed_batch("packed"))
    assert ran == ["sdpa", "sdpa"]


CUDA_CASES = [("flex", pos, dtype) for pos in FLEX_ENCODINGS for dtype in ("fp32", "bf16")]
CUDA_CASES += [("sdpa", pos, dtype) for pos in sorted(encodings()) for dtype in ("fp32", "bf16")]
CUDA_CASES += [("flash_attn", pos, "bf16") for pos in FLEX_ENCODINGS]  # flash: fp16/bf16 only


def logits_and_grads(model: GPT, inputs: tuple, bf16: bool) -> list[torch.Tensor]:
    """Logits of a packed batch and the gradient of a fixed projection of them for every
    parameter, in fp32."""
    model.zero_grad()
    with torch.autocast("cuda", torch.bfloat16, enabled=bf16):
        logits = model(*inputs)
    weights = torch.randn(logits.shape, generator=torch.Generator("cuda").manual_seed(2),
                          device="cuda")
    (logits * weights).sum().backward()
    return [logits.detach()] + [p.grad.float() for p in model.parameters()]


def largest_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """The largest max-abs difference of a tensor pair, relative to that tensor's largest
    magnitude."""
    return max(float((g - w).abs().max() / w.abs().max()) for g, w in zip(got, want))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("backend,pos,dtype", CUDA_CASES)
def test_backend_matches_math_on_cuda(backend, pos, dtype, ran):
    if backend == "flash_attn" and not HAVE_FLASH:
        pytest.skip("flash_attn is not installed")
    bf16 = dtype == "bf16"
    reference = build(pos, "math").cuda().train()
    model = twin(reference, backend).cuda().train()
    inputs = packed_batch("packed", "cuda")
    want = logits_and_grads(reference, inputs, bf16=False)  # the fp32 reference
    del ran[:]
    got = logits_and_grads(model, inputs, bf16)
    assert ran == [backend, backend]
    if bf16:  # within twice what math itself loses to bf16, plus a hair
        rounding = largest_error(logits_and_grads(reference, inputs, bf16=True), want)
        assert largest_error(got, want) <= 2 * rounding + 1e-3
    else:
        assert largest_error(got, want) < 1e-4


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["packed", "one-doc"])
def test_compiled_block_mask_on_cuda_equals_eager(mode):
    _, positions, docs = packed_batch(mode, "cuda")
    positions = torch.arange(260, device="cuda")[None] if positions is None else positions
    mask = attention_module.build_mask("flex", build("rope", "flex").positional, positions,
                                       positions, docs, docs, torch.float32).block_mask
    eager = attention_module._block_mask(docs, 260, positions.device)
    assert torch.equal(mask.to_dense(), eager.to_dense())
