"""Physics of Language Models Part 1's content-free encodings: a `uniform` head averages the
values of a fixed window, a `pos_only` layer weighs keys by relative position alone through its own
table; both decode through the KV cache as they run in full, in every backend, and train and
generate."""

import math

import pytest
import torch
import torch.nn.functional as F

from tests.test_model import packed_batch
from trainer.eval.generation import generate
from trainer.model import GPT, ModelConfig
from trainer.model import attention as attention_module
from trainer.model.attention import build_mask
from trainer.model.kv_cache import KVCache
from trainer.model.positional import Uniform
from trainer.model.positional_options import RelativeOptions

ENCODINGS = ["pos_only", "uniform"]
VOCAB = 61


def build(pos: str, seed: int = 0, **overrides) -> GPT:
    """A tiny model; init_std 0.1 so the values and biases visibly move the logits."""
    torch.manual_seed(seed)
    config = {"n_layer": 2, "n_head": 4, "d_model": 64, "vocab_size": VOCAB, "ctx": 64,
              "pos": pos, "init_std": 0.1, **overrides}
    return GPT(ModelConfig(**config)).eval()


def attention_weights(model: GPT, monkeypatch, *inputs) -> list[torch.Tensor]:
    """Each layer's attention weights [B, H, Tq, Tk] in one math-backend forward pass, computed
    from what the backend receives exactly as it computes them."""
    assert model.config.attention == "math"
    recorded = []
    math_attention = attention_module.BACKENDS["math"]

    def recording(q, k, v, mask, dropout_p):
        scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(q.shape[-1]) + mask.tensor
        recorded.append(scores.softmax(dim=-1))
        return math_attention(q, k, v, mask, dropout_p)

    monkeypatch.setitem(attention_module.BACKENDS, "math", recording)
    with torch.no_grad():
        model(*inputs)
    monkeypatch.setitem(attention_module.BACKENDS, "math", math_attention)
    return recorded


def values_and_output(model: GPT, layer: int, *inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's value vectors, computed by hand from its qkv weights and its input, and its
    attention output before the projection; both [B, T, H, Dh]."""
    attn = model.blocks[layer].attn
    seen = {}
    hooks = [attn.register_forward_pre_hook(lambda _, args: seen.update(x=args[0])),
             attn.proj.register_forward_pre_hook(lambda _, args: seen.update(y=args[0]))]
    with torch.no_grad():
        model(*inputs)
    for hook in hooks:
        hook.remove()
    d = model.config.d_model
    v = seen["x"] @ attn.qkv.weight[2 * d:].T + attn.qkv.bias[2 * d:]
    shape = (*v.shape[:2], model.config.n_head, model.config.head_dim)
    return v.view(shape), seen["y"].view(shape)


@pytest.mark.parametrize("backend", ["math", "sdpa"])
def test_uniform_head_output_is_the_mean_of_values_over_its_window(backend):
    model = build("uniform", attention=backend, bias=True)
    ids, positions, docs = packed_batch()
    v, y = values_and_output(model, 1, ids, positions, docs)  # the second layer: any input
    expected = torch.empty_like(y)
    for b in range(2):
        for t in range(20):
            for h in range(4):
                window = 2 ** (h + 1) - 1  # 1, 3, 7, 15
                keys = [j for j in range(t + 1) if t - j < window and docs[b, j] == docs[b, t]]
                expected[b, t, h] = v[b, keys, h].mean(dim=0)
    assert (y - expected).abs().max() < 1e-5
    # row 0's second document starts at token 6: there every head has only the token itself,
    # and two tokens in, the 3-, 7- and 15-token windows all hold the same three
    assert (y[0, 6] - v[0, 6]).abs().max() < 1e-5
    for h in (1, 2, 3):
        assert (y[0, 8, h] - v[0, 6:9, h].mean(dim=0)).abs().max() < 1e-5
    assert (y[0, 8, 0] - v[0, 8, 0]).abs().max() < 1e-5


def test_uniform_has_no_parameters_and_ignores_queries_and_keys():
    model = build("uniform")
    assert list(model.positional.parameters()) == []
    ids, positions, docs = packed_batch()
    with torch.no_grad():
        before = model(ids, positions, docs)
        for block in model.blocks:  # new queries and keys; the values stay
            block.attn.qkv.weight[:128].normal_(std=1.0)
        assert (model(ids, positions, docs) - before).abs().max() < 1e-6
        model.blocks[0].attn.qkv.weight[128:].normal_(std=0.1)  # new values do count
        assert (model(ids, positions, docs) - before).abs().max() > 1e-2


def test_uniform_windows_double_and_clamp_for_many_heads():
    assert Uniform(ModelConfig(n_head=4, d_model=64)).windows == [1, 3, 7, 15]
    many = Uniform(ModelConfig(n_head=100, d_model=100))
    assert many.windows[61:] == [2 ** 62 - 1] * 39  # no int64 overflow from head 63 on
    bias = many.bias(torch.tensor([[10 ** 15]]), torch.tensor([[0]]))  # [1, 100, 1, 1]
    inside = (bias[0, :, 0, 0] == 0).tolist()
    assert inside == [h >= 50 for h in range(1, 101)]  # 2^49 - 1 < 10^15 + 1 <= 2^50 - 1


@pytest.mark.parametrize("pos,content_free", [("pos_only", True), ("relative", False)])
def test_pos_only_attention_weights_ignore_token_content(pos, content_free, monkeypatch):
    model = build(pos, attention="math")
    ids, positions, docs = packed_batch()
    changed = ids.clone()
    changed[:, :10] = (ids[:, :10] + 1) % VOCAB  # the content of every earlier token
    before = attention_weights(model, monkeypatch, ids, positions, docs)
    after = attention_weights(model, monkeypatch, changed, positions, docs)
    assert len(before) == len(after) == 2
    assert all(torch.equal(a, b) for a, b in zip(before, after)) == content_free
    # the later tokens of those documents still see the change, through the values alone
    with torch.no_grad():
        shift = model(changed, positions, docs) - model(ids, positions, docs)
    assert shift[0, 10:15].abs().max() > 1e-2 and shift[1, 10:12].abs().max() > 1e-2
    if content_free:  # a function of relative position: the same for any document, any row
        # row 0's document at 6..14 and row 1's at 0..11, from position 5 back to position 0
        assert torch.equal(before[1][0, :, 11, 6:12], before[1][1, :, 5, 0:6])


def test_pos_only_keeps_one_table_per_layer_out_of_decay_and_the_embedding_count():
    model = build("pos_only", n_layer=3, pos_only=RelativeOptions(buckets=16, max_distance=64))
    tables = model.positional.tables
    assert [tuple(t.weight.shape) for t in tables] == [(16, 4)] * 3
    assert model.num_parameters(non_embedding=False) - model.num_parameters() == 3 * 16 * 4
    _, keep = model.configure_optimizer_groups(0.1)
    assert {id(t.weight) for t in tables} <= {id(p) for p in keep["params"]}


def test_pos_only_layers_learn_their_own_tables():
    model = build("pos_only", init_std=0.02).train()
    tables = model.positional.tables
    with torch.no_grad():
        tables[1].weight.copy_(tables[0].weight)  # start alike: only training can part them
    batch = torch.randint(0, VOCAB, (4, 33), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    for step in range(10):
        loss = F.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        grads = [t.weight.grad for t in tables]
        assert all(g.abs().sum() > 0 for g in grads)  # the loss reaches every layer's table
        if step == 0:
            assert (grads[0] - grads[1]).abs().max() > 1e-2 * grads[0].abs().max()
        optimizer.step()
    assert (tables[0].weight - tables[1].weight).abs().max() > 0.05


def test_pos_only_mask_holds_one_bucket_map_and_builds_a_layer_at_a_time():
    model = build("pos_only", pos_only=RelativeOptions(buckets=8, max_distance=16))
    ids, positions, docs = packed_batch()
    mask = build_mask("sdpa", model.positional, positions, positions, docs, docs, torch.float32)
    assert mask.tensor.shape == (2, 1, 20, 20)  # causal and document part, shared by layers
    buckets = mask.layer_bias.buckets
    assert buckets.shape == (2, 20, 20) and buckets.dtype == torch.int32
    # distances 8..0 from token 14: 0-3 exact, 4-15 in four log-spaced buckets
    assert buckets[0, 14, 6:15].tolist() == [6, 5, 5, 4, 4, 3, 2, 1, 0]
    for layer, table in enumerate(model.positional.tables):
        got = mask.for_layer(layer)
        assert got.layer_bias is None and got.tensor.shape == (2, 4, 20, 20)
        assert got.tensor[0, 2, 14, 11] == table.weight[3, 2]  # distance 3: bucket 3, head 2
        assert got.tensor[0, 2, 14, 5] == float("-inf")  # the previous document
    assert not torch.equal(mask.for_layer(0).tensor, mask.for_layer(1).tensor)


@pytest.mark.parametrize("pos", ENCODINGS)
def test_kv_cache_and_both_backends_match_the_full_math_forward(pos):
    reference = build(pos, attention="math")
    ids, positions, docs = packed_batch()
    with torch.no_grad():
        full = reference(ids, positions, docs)
        for backend in ("math", "sdpa"):
            model = build(pos, attention=backend)
            assert (model(ids, positions, docs) - full).abs().max() < 1e-5
            c = model.config
            cache = KVCache(c.n_layer, 2, c.n_head, 20, c.head_dim, torch.float32, "cpu")
            chunks = [model(ids[:, a:b], positions[:, a:b], docs[:, a:b], cache)
                      for a, b in zip([0, 5, 6, 7, 13], [5, 6, 7, 13, 20])]
            assert (torch.cat(chunks, dim=1) - full).abs().max() < 1e-4
            with torch.autocast("cpu", dtype=torch.bfloat16):
                low = model(ids, positions, docs)
            assert low.dtype == torch.float32
            assert (low - full).abs().max() < 0.03 * full.abs().max()


@pytest.mark.parametrize("pos", ENCODINGS)
def test_tiny_model_learns_a_sequence_and_generates_it(pos):
    model = build(pos, init_std=0.02, tie_embeddings=False).train()
    sequence = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(3))[:24]
    prompt, rest = sequence[:3].tolist(), sequence[3:].tolist()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        loss = F.cross_entropy(model(sequence[None, :-1])[0], sequence[1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(math.log(VOCAB), abs=0.1)
    assert losses[-1] < 0.05
    assert generate(model, [prompt], 21) == [rest]  # greedy recites what it learned
    assert generate(model, [prompt], 21, use_cache=False) == [rest]

    def sample(seed: int, **kwargs) -> list[list[int]]:
        generator = torch.Generator().manual_seed(seed)
        return generate(model, [prompt, sequence[:7].tolist()], 12, temperature=2.0,
                        generator=generator, **kwargs)

    drawn = sample(0)
    assert [len(row) for row in drawn] == [12, 12]
    assert all(0 <= t < VOCAB for row in drawn for t in row)
    assert drawn == sample(0) == sample(0, use_cache=False) != sample(1)
    assert sample(0, top_k=1) == [rest[:12], rest[4:16]]
