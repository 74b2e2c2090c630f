"""GPT variants: every encoding and block kind trains; the attention backends, document masks and
the KV cache agree with the full computation to float tolerance; counts and config errors."""

import math
from dataclasses import replace
from operator import attrgetter

import pytest
import torch

from trainer.model import GPT, ModelConfig, encodings
from trainer.model.attention import HAVE_FLASH, build_mask
from trainer.model.errors import ModelConfigError
from trainer.model.kv_cache import KVCache
from trainer.model.positional import ALiBi, RelativeBias, Rotary, alibi_slopes
from trainer.model.positional_options import RelativeOptions, RopeOptions

ENCODINGS = sorted(encodings())
VOCAB = 61


def build(pos: str = "rope", seed: int = 0, **overrides) -> GPT:
    """A tiny model; init_std 0.1 so positions and biases visibly move the logits."""
    torch.manual_seed(seed)
    config = {"n_layer": 2, "n_head": 4, "d_model": 64, "vocab_size": VOCAB, "ctx": 64,
              "pos": pos, "init_std": 0.1, **overrides}
    return GPT(ModelConfig(**config)).eval()


def twin(model: GPT, **overrides) -> GPT:
    """The same weights under another config (e.g. another attention backend)."""
    other = GPT(replace(model.config, **overrides)).eval()
    other.load_state_dict(model.state_dict())
    return other


def new_cache(model: GPT, batch: int, max_len: int) -> KVCache:
    c = model.config
    return KVCache(c.n_layer, batch, c.n_head, max_len, c.head_dim, torch.float32, "cpu")


def packed_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two rows of 20 tokens packing documents of lengths (6, 9, 5) and (12, 8): ids, positions
    restarting at each document, and the document index within the row."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (2, 20), generator=generator)
    positions, docs = [], []
    for lengths in ((6, 9, 5), (12, 8)):
        positions.append(torch.cat([torch.arange(n) for n in lengths]))
        docs.append(torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)]))
    return ids, torch.stack(positions), torch.stack(docs)


def decode_in_chunks(model: GPT, ids, positions, docs, bounds) -> torch.Tensor:
    """Logits of `ids` fed through a KV cache in the chunks [bounds[i], bounds[i+1])."""
    cache = new_cache(model, ids.shape[0], ids.shape[1])
    chunks = []
    for a, b in zip(bounds, bounds[1:]):
        chunks.append(model(ids[:, a:b], None if positions is None else positions[:, a:b],
                            None if docs is None else docs[:, a:b], cache))
    assert cache.length == ids.shape[1]
    return torch.cat(chunks, dim=1)


@pytest.mark.parametrize("norm,mlp", [("layernorm", "gelu"), ("rmsnorm", "swiglu")])
@pytest.mark.parametrize("pos", ENCODINGS)
def test_every_encoding_and_block_kind_learns_a_fixed_batch(pos, norm, mlp):
    model = build(pos, norm=norm, mlp=mlp, bias=True, init_std=0.02).train()
    batch = torch.randint(0, VOCAB, (4, 33), generator=torch.Generator().manual_seed(0))
    inputs, targets = batch[:, :-1], batch[:, 1:]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(12):
        logits = model(inputs)
        assert logits.shape == (4, 32, VOCAB) and logits.dtype == torch.float32
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(math.log(VOCAB), abs=0.1)  # small init: near uniform
    assert losses[-1] < losses[0] - 0.7


@pytest.mark.parametrize("cached", [False, True], ids=["full", "cached"])
@pytest.mark.parametrize("packed", [False, True], ids=["one-doc", "packed"])
@pytest.mark.parametrize("pos", ENCODINGS)
def test_math_and_sdpa_backends_agree(pos, packed, cached):
    reference = build(pos, attention="math")
    sdpa = twin(reference, attention="sdpa")
    ids, positions, docs = packed_batch()
    if not packed:
        positions = docs = None

    def logits(model):
        if cached:
            return decode_in_chunks(model, ids, positions, docs, [0, 7, 8, 9, 13, 20])
        return model(ids, positions, docs)

    assert (logits(reference) - logits(sdpa)).abs().max() < 1e-4


@pytest.mark.parametrize("backend", ["math", "sdpa"])
@pytest.mark.parametrize("pos", ENCODINGS)
def test_packed_document_sees_only_itself(pos, backend):
    model = build(pos, attention=backend)
    ids, positions, docs = packed_batch()
    alone = model(ids[:1, 6:15])  # the first row's second document, on its own
    packed = model(ids, positions, docs)[:1, 6:15]
    assert (packed - alone).abs().max() < 1e-5
    leaking = model(ids, positions)[:1, 6:15]  # same positions, no document mask
    assert (leaking - alone).abs().max() > 1e-2


@pytest.mark.parametrize("packed", [False, True], ids=["one-doc", "packed"])
@pytest.mark.parametrize("pos", ENCODINGS)
def test_kv_cache_decoding_matches_the_full_sequence(pos, packed):
    model = build(pos)
    ids, positions, docs = packed_batch()
    if not packed:
        positions = docs = None
    full = model(ids, positions, docs)
    cached = decode_in_chunks(model, ids, positions, docs, [0, 5, 6, 7, 10, *range(11, 21)])
    assert (cached - full).abs().max() < 1e-4


def test_kv_cache_refuses_to_overflow():
    model = build()
    cache = new_cache(model, 1, 8)
    model(torch.zeros(1, 6, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="holds 8 tokens, 9 needed"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=cache)


def test_learned_positions_past_the_context_raise():
    model = build("learned", ctx=16)
    model(torch.zeros(1, 16, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 16\].*ctx=16"):
        model(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("pos", ENCODINGS)
def test_bf16_autocast_gives_fp32_logits_close_to_fp32(pos):
    model = build(pos)
    ids, positions, docs = packed_batch()
    exact = model(ids, positions, docs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(ids, positions, docs)
        cached = decode_in_chunks(model, ids, positions, docs, [0, 12, 13, 20])
    assert low.dtype == cached.dtype == torch.float32
    assert (low - exact).abs().max() < 0.03 * exact.abs().max()  # bf16: ~1% here
    assert (cached - exact).abs().max() < 0.03 * exact.abs().max()


def test_sdpa_takes_the_causal_fast_path_only_without_mask_or_bias():
    ids, positions, docs = packed_batch()

    def tensor(pos, doc=None):
        positional = encodings()[pos].load()(ModelConfig(n_head=4, d_model=64, pos=pos))
        return build_mask("sdpa", positional, positions, positions, doc, doc, torch.float32).tensor

    assert tensor("rope") is None and tensor("learned") is None and tensor("none") is None
    assert tensor("rope", docs).dtype == torch.bool  # documents: a boolean mask
    assert tensor("alibi").dtype == tensor("relative").dtype == torch.float32  # bias: additive
    assert tensor("alibi", docs)[0, 0, 6, 5] == float("-inf")  # first token of document 1


def test_parameter_counts_follow_the_architecture():
    d, layers = 64, 2
    model = build("rope", bias=False)
    per_layer = 4 * d * d + 8 * d * d + 2 * d  # attention, gelu MLP, two LayerNorm weights
    body = layers * per_layer + d  # + final norm
    assert model.num_parameters(non_embedding=False) == body + VOCAB * d
    assert model.num_parameters() == body + VOCAB * d  # the tied table is the lm head
    untied = build("rope", bias=False, tie_embeddings=False)
    assert (untied.num_parameters(non_embedding=False)
            - model.num_parameters(non_embedding=False)) == VOCAB * d
    assert untied.num_parameters() == model.num_parameters()  # the input lookup is no matmul
    learned = build("learned", bias=False)
    assert learned.num_parameters(non_embedding=False) - learned.num_parameters() == 64 * d
    relative = build("relative", bias=False)
    assert relative.num_parameters(non_embedding=False) - relative.num_parameters() == 32 * 4
    swiglu = build("rope", bias=False, mlp="swiglu", norm="rmsnorm")
    assert swiglu.config.ffn_dim == 192  # nearest multiple of 64 to 8/3 * 64
    assert swiglu.num_parameters() == layers * (4 * d * d + 3 * d * 192 + 2 * d) + d + VOCAB * d


def test_default_mlp_width():
    assert ModelConfig(d_model=256).ffn_dim == 1024
    assert ModelConfig(d_model=256, mlp="swiglu").ffn_dim == 704  # 682.7 -> 704
    assert ModelConfig(d_model=768, mlp="swiglu").ffn_dim == 2048
    assert ModelConfig(d_model=256, mlp="swiglu", d_ff=500).ffn_dim == 500


def test_flops_per_token_is_6n_plus_attention():
    model = build("rope", bias=False)
    n = 2 * (12 * 64 * 64 + 2 * 64) + 64 + VOCAB * 64
    assert model.num_parameters() == n == 102528
    assert model.flops_per_token() == 6 * n + 12 * 2 * 64 * 64 == 713472


@pytest.mark.parametrize("pos", ["learned", "relative"])
def test_optimizer_groups_decay_only_matrices(pos):
    model = build(pos, bias=True)
    names = {id(p): name for name, p in model.named_parameters()}
    decay, keep = model.configure_optimizer_groups(0.1)
    assert decay["weight_decay"] == 0.1 and keep["weight_decay"] == 0.0
    decayed = sorted(names[id(p)] for p in decay["params"])
    kept = {names[id(p)] for p in keep["params"]}
    assert decayed == sorted(["tok_emb.weight"] + [
        f"blocks.{i}.{m}.weight" for i in range(2)
        for m in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")])
    assert "positional.table.weight" in kept and "norm.bias" in kept
    assert len(decayed) + len(kept) == len(names)


def test_init_scales_residual_projections_by_depth():
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=VOCAB))  # 4 layers, d_model 256, init_std 0.02
    assert model.blocks[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.02)
    for proj in (model.blocks[3].attn.proj, model.blocks[3].mlp.proj):
        assert proj.weight.std().item() == pytest.approx(0.02 / math.sqrt(8), rel=0.02)


def test_alibi_slopes_are_the_standard_geometric_sequence():
    assert alibi_slopes(8) == [2.0 ** -k for k in range(1, 9)]
    assert alibi_slopes(12) == pytest.approx(
        [2.0 ** -k for k in range(1, 9)] + [2.0 ** -(k + 0.5) for k in range(4)])
    bias = ALiBi(ModelConfig(n_head=8)).bias(torch.tensor([[5]]), torch.tensor([[2, 5]]))
    assert bias.shape == (1, 8, 1, 2)
    assert bias[0, :2, 0].tolist() == [[-1.5, 0.0], [-0.75, 0.0]]


def test_relative_buckets_are_exact_near_and_logarithmic_far():
    relative = RelativeBias(ModelConfig(pos="relative",
                                        relative=RelativeOptions(buckets=32, max_distance=128)))
    buckets = relative.bucket(torch.arange(300)).tolist()
    assert buckets[:16] == list(range(16))
    assert buckets == sorted(buckets) and set(buckets) == set(range(32))
    assert set(buckets[128:]) == {31}  # max_distance and beyond share the last
    # the other 16 buckets split 16..128 log-evenly: each doubling of distance (a third of the
    # way from 16 to 128 = 16 * 2^3) moves 16/3 buckets on
    assert (buckets[32], buckets[64]) == (16 + 5, 16 + 10)


def test_rope_scores_depend_only_on_relative_position():
    rope = Rotary(ModelConfig(d_model=64, n_head=4))
    q, k = torch.randn(2, 1, 4, 1, 16).unbind(0)

    def score(q_pos, k_pos):
        rq, rk = rope.rotate(q, k, torch.tensor([[q_pos]]), torch.tensor([[k_pos]]))
        return (rq * rk).sum(-1)

    assert torch.allclose(score(7, 3), score(107, 103), atol=1e-4)
    assert not torch.allclose(score(7, 3), score(7, 4), atol=1e-2)
    rq, _ = rope.rotate(q, k, torch.tensor([[50]]), torch.tensor([[0]]))
    assert torch.allclose(rq.norm(dim=-1), q.norm(dim=-1), atol=1e-5)


@pytest.mark.parametrize("overrides,field", [
    ({"pos": "sinusoidal"}, "pos"),
    ({"norm": "batchnorm"}, "norm"),
    ({"mlp": "relu"}, "mlp"),
    ({"attention": "xformers"}, "attention"),
    ({"d_model": 66}, "d_model"),  # not divisible by 4 heads
    ({"d_model": 12}, "d_model"),  # rope on an odd head dim (3)
    ({"n_layer": 0}, "n_layer"),
    ({"dropout": 1.0}, "dropout"),
    ({"pos": "relative", "relative": RelativeOptions(max_distance=16)}, "relative.max_distance"),
    ({"attention": "flash_attn", "pos": "relative"}, "attention"),
])
def test_config_errors_name_the_field(overrides, field):
    config = ModelConfig(vocab_size=VOCAB, **overrides)
    with pytest.raises(ValueError, match=rf"^{field}={attrgetter(field)(config)!r}: "):
        config.validate()
    with pytest.raises(ValueError, match=rf"^{field}="):
        GPT(config)


@pytest.mark.parametrize("pos,overrides,message", [
    ("rope", {"rope": RopeOptions(theta=0.0)}, "rope.theta=0.0: must be > 0 and finite"),
    ("rope", {"d_model": 12}, "d_model=12: rope needs an even head dim; d_model / n_head = 3"),
    ("relative", {"relative": RelativeOptions(buckets=1)}, "relative.buckets=1: must be >= 2"),
    ("relative", {"relative": RelativeOptions(max_distance=16)},
     "relative.max_distance=16: must exceed buckets // 2 = 16"),
])
def test_each_encoding_checks_its_own_options(pos, overrides, message):
    config = ModelConfig(vocab_size=VOCAB, pos=pos, **overrides)
    with pytest.raises(ModelConfigError) as caught:
        config.validate()
    assert str(caught.value) == message
    assert caught.value.key == message.split("=")[0]
    # another encoding's options are not checked (pos_only has buckets of its own)
    for other in sorted(set(encodings()) - {pos}):
        ModelConfig(vocab_size=VOCAB, pos=other, **overrides).validate()


def test_model_refuses_an_unset_vocabulary():
    ModelConfig().validate()  # 0 is the "set from the corpus" default
    with pytest.raises(ValueError, match=r"^vocab_size=0: must be >= 1"):
        GPT(ModelConfig())


@pytest.mark.skipif(HAVE_FLASH, reason="flash_attn is installed")
def test_flash_attn_without_flash_installed_fails_at_construction():
    with pytest.raises(ValueError, match=r"^attention='flash_attn': flash_attn is not importable"):
        GPT(ModelConfig(vocab_size=VOCAB, attention="flash_attn"))


@pytest.mark.cuda
@pytest.mark.skipif(not (torch.cuda.is_available() and HAVE_FLASH),
                    reason="flash_attn needs CUDA and the flash-attn package")
@pytest.mark.parametrize("packed", [False, True], ids=["one-doc", "packed"])
@pytest.mark.parametrize("pos", [p for p in ENCODINGS if encodings()[p].flash_compatible])
def test_flash_attn_matches_sdpa_in_bf16(pos, packed):
    flash = build(pos, attention="flash_attn").cuda().bfloat16()
    sdpa = twin(flash, attention="sdpa").cuda().bfloat16()
    ids, positions, docs = (t.cuda() for t in packed_batch())
    if not packed:
        positions = docs = None
    got, want = flash(ids, positions, docs), sdpa(ids, positions, docs)
    assert (got - want).abs().max() < 0.05 * want.abs().max()
