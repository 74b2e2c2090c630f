"""Mechanism probes (trainer/eval/mechanisms.py): the attention maps are the ones the model runs,
a hand-built two-layer induction head scores 1.0 on the previous-token and induction scores and
on the three memories, a random model scores what uniform attention and chance give."""

import pytest
import torch

from trainer.eval import mechanisms
from trainer.model import GPT, ModelConfig

V, T = 12, 16


def induction_gpt(vocab: int, length: int) -> GPT:
    """A 2-layer attention-only GPT (one head a layer, no norms, learned positions) whose weights
    are set by hand. The stream has four blocks of one-hot slots: the token, the position, the
    previous token (written by layer 1) and the prediction (written by layer 2).

    Layer 1: position t's query meets position t-1's key (a previous-token head) and copies
    that token into the previous-token slots. Layer 2: token a's query meets the keys whose
    previous token is a (an induction head) and copies the token there into the prediction
    slots, which the head reads out (position 0, whose previous token layer 1 cannot tell, is
    keyed out)."""
    token, position = 0, vocab
    previous, prediction = vocab + length, 2 * vocab + length
    width = 3 * vocab + length
    model = GPT(ModelConfig(n_layer=2, n_head=1, d_model=width, vocab_size=vocab, ctx=length,
                            pos="learned", mlp="none", norm="none", bias=False,
                            tie_embeddings=False))
    sharp = 40.0 * width ** 0.5  # a score margin of 40 after the 1/sqrt(Dh) scaling
    tokens, positions = torch.arange(vocab), torch.arange(length)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.tok_emb.weight[tokens, token + tokens] = 1.0
        model.positional.table.weight[positions, position + positions] = 1.0
        first, second = (block.attn for block in model.blocks)
        q, k, v = first.qkv.weight.view(3, width, width)  # [out, in] each
        q[positions, position + positions] = sharp  # query of t: head coordinate t
        k[positions[:-1] + 1, position + positions[:-1]] = 1.0  # key of t-1: coordinate t
        v[tokens, token + tokens] = 1.0
        first.proj.weight[previous + tokens, tokens] = 1.0
        q, k, v = second.qkv.weight.view(3, width, width)
        q[tokens, token + tokens] = sharp
        k[tokens, previous + tokens] = 1.0
        # position 0 has no previous token (layer 1 copied its own there): every query's
        # constant coordinate V cancels a match with it
        q[vocab, token + tokens] = sharp
        k[vocab, position] = -1.0
        v[tokens, token + tokens] = 1.0
        second.proj.weight[prediction + tokens, tokens] = 1.0
        model.lm_head.weight[tokens, prediction + tokens] = 20.0
    return model.eval()


def random_gpt(**options) -> GPT:
    torch.manual_seed(0)
    config = {"n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": V, "ctx": T, **options}
    return GPT(ModelConfig(**config)).eval()


def repeated_sequences(batch: int, seed: int = 0) -> torch.Tensor:
    """[B, T]: a random first half repeated, so every token of the second half occurred
    before and what followed it recurs."""
    rng = torch.Generator().manual_seed(seed)
    half = torch.stack([torch.randperm(V, generator=rng)[: T // 2] for _ in range(batch)])
    return torch.cat([half, half], dim=1)


@pytest.mark.parametrize("options", [{"pos": "rope"}, {"pos": "alibi", "attention": "sdpa"},
                                     {"pos": "learned", "norm": "rmsnorm", "mlp": "none"}])
def test_the_maps_are_the_attention_the_model_runs(options):
    """Each layer's output projection of maps @ values is the attention module's output."""
    model = random_gpt(**options)
    tokens = repeated_sequences(3)
    seen = []
    hooks = [block.attn.register_forward_hook(lambda m, args, out: seen.append((m, args, out)))
             for block in model.blocks]
    _, maps = mechanisms.attention_maps(model, tokens)
    for hook in hooks:
        hook.remove()
    assert maps.shape == (2, 3, 2, T, T)
    assert torch.allclose(maps.sum(-1), torch.ones(2, 3, 2, T))
    assert (maps.triu(diagonal=1) == 0).all()  # causal
    for layer, (attn, args, out) in enumerate(seen[:2]):
        values = attn.qkv(args[0]).chunk(3, dim=-1)[2].view(3, T, 2, -1).transpose(1, 2)
        mixed = (maps[layer] @ values).transpose(1, 2).reshape(3, T, -1)
        assert torch.allclose(attn.proj(mixed), out, atol=1e-5)


def test_induction_keys_are_the_positions_after_earlier_occurrences():
    tokens = torch.tensor([[3, 5, 3, 7, 3, 5]])
    keys = mechanisms.induction_keys(tokens)[0]
    assert {t: keys[t].nonzero().flatten().tolist() for t in range(6)} == {
        0: [], 1: [], 2: [1], 3: [], 4: [1, 3], 5: [2]}
    only = mechanisms.induction_keys(tokens, torch.tensor([[0, 0, 0, 0, 1, 0]], dtype=bool))
    assert only[0].nonzero().tolist() == [[4, 1], [4, 3]]
    previous = mechanisms.previous_keys(tokens)[0]
    assert previous.nonzero().tolist() == [[t, t - 1] for t in range(1, 6)]
    # uniform attention: query t spreads 1 / (t + 1) on each key
    assert mechanisms.uniform_weight(keys[None]) == (pytest.approx(1 / 3 + 2 / 5 + 1 / 6), 3)


def test_a_hand_built_induction_head_scores_one():
    model = induction_gpt(V, T)
    tokens = repeated_sequences(8)
    logits, maps = mechanisms.attention_maps(model, tokens)
    previous, n = mechanisms.attention_to(maps, mechanisms.previous_keys(tokens))
    assert n == 8 * (T - 1) and previous[0, 0] / n == pytest.approx(1.0, abs=1e-6)
    second_half = torch.zeros_like(tokens, dtype=torch.bool)
    second_half[:, T // 2 :] = True
    induction, n = mechanisms.attention_to(maps, mechanisms.induction_keys(tokens, second_half))
    assert n == 8 * T // 2 and induction[1, 0] / n == pytest.approx(1.0, abs=1e-6)
    # it predicts every token of the second half but the first (whose predecessor is new)
    right = logits[:, T // 2 : -1].argmax(-1) == tokens[:, T // 2 + 1 :]
    assert right.all()
    assert mechanisms.memory_probes(model, list(range(V)), [1, 4, 7], T) == {
        "output": 1.0, "induction_key": 1.0, "previous_token": 1.0}


def test_a_random_model_scores_at_chance():
    """Init weights (std 0.02) attend about uniformly: the scores are uniform attention's, and
    the memories recall about 1 in V (the previous-token one, 1 in T)."""
    model = random_gpt(pos="learned", mlp="none")
    tokens = repeated_sequences(64)
    _, maps = mechanisms.attention_maps(model, tokens)
    for keys in (mechanisms.previous_keys(tokens), mechanisms.induction_keys(tokens)):
        weight, n = mechanisms.attention_to(maps, keys)
        uniform, queries = mechanisms.uniform_weight(keys)
        assert queries == n and torch.allclose(weight / n, torch.tensor(uniform / n), atol=0.01)
    probes = mechanisms.memory_probes(model, list(range(V)), list(range(V)), T)
    assert all(value <= 3 / V for value in probes.values()), probes


def test_memories_a_model_cannot_hold_are_none():
    one_layer = random_gpt(n_layer=1, pos="learned")
    assert mechanisms.memory_probes(one_layer, [0, 1], [2], T)["output"] is None
    assert mechanisms.memory_probes(one_layer, [0, 1], [2], T)["induction_key"] is None
    assert mechanisms.memory_probes(random_gpt(pos="rope"), [0], [1], T)["previous_token"] is None
