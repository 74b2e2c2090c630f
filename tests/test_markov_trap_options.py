"""`model.head_bias`, the option the Markov unigram-trap sandbox needs: a bias on the output
head's logits, zero at init, out of weight decay, absent by default; with the head's weight at
zero the model predicts softmax(bias) everywhere (the unigram solution); export refuses it."""

from dataclasses import asdict

import pytest
import torch

from trainer.hf.layouts import ExportRefused, layout_for
from trainer.model import GPT, ModelConfig
from trainer.model.config import model_config_from_dict, model_difference
from trainer.optim import freeze

# the trap experiment's shape: one layer, one head, 8 wide, 3 tokens (<eos>, "0", "1")
SHAPE = {"n_layer": 1, "n_head": 1, "d_model": 8, "vocab_size": 3, "ctx": 64, "pos": "learned"}


def build(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(ModelConfig(**{**SHAPE, **overrides}))


def test_off_by_default_and_no_bias_parameter():
    model = build()
    assert ModelConfig().head_bias is False
    assert model.lm_head.bias is None
    assert not any(name.startswith("lm_head.bias") for name, _ in model.named_parameters())


@pytest.mark.parametrize("tied", [True, False])
def test_head_bias_adds_vocab_size_zero_parameters_out_of_weight_decay(tied: bool):
    plain = build(tie_embeddings=tied)
    model = build(tie_embeddings=tied, head_bias=True)
    assert model.lm_head.bias.shape == (3,)
    assert torch.equal(model.lm_head.bias.detach(), torch.zeros(3))
    count = sum(p.numel() for p in model.parameters())
    assert count - sum(p.numel() for p in plain.parameters()) == 3
    assert (model.lm_head.weight is model.tok_emb.weight) == tied
    groups = model.configure_optimizer_groups(weight_decay=1e-3)
    kept = [group for group in groups if group["weight_decay"] == 0.0][0]["params"]
    assert any(p is model.lm_head.bias for p in kept)


def test_zero_head_weight_and_a_bias_predict_the_bias_law_everywhere():
    """The unigram solution of the trap: logits = bias whatever the input."""
    model = build(tie_embeddings=False, head_bias=True)
    pi = torch.tensor([1e-9, 0.8 / 1.3, 0.5 / 1.3])  # p 0.5, q 0.8: pi = (0.615, 0.385)
    with torch.no_grad():
        model.lm_head.weight.zero_()
        model.lm_head.bias.copy_(pi.log())
    ids = torch.tensor([[1, 2, 2, 1, 1, 2, 1, 2]])
    probs = model(ids).softmax(-1)[0]  # [T, 3]
    assert torch.allclose(probs, pi.expand_as(probs), atol=1e-6)


def test_the_bias_trains_and_freezes_with_the_output_head():
    model = build(tie_embeddings=False, head_bias=True)
    logits = model(torch.tensor([[1, 2, 1, 1, 2]]))
    logits[..., 1].sum().backward()
    assert model.lm_head.bias.grad is not None
    assert model.lm_head.bias.grad[1].item() == pytest.approx(5.0)
    frozen = freeze(build(tie_embeddings=False, head_bias=True), ["output_head"])
    assert frozen == ["lm_head.weight", "lm_head.bias"]


def test_saved_configs_without_the_key_read_as_off_and_a_change_is_a_difference():
    old = asdict(ModelConfig(**SHAPE))
    del old["head_bias"]
    assert model_config_from_dict(old).head_bias is False
    new = {**old, "head_bias": True}
    assert model_difference(old, new) == ("head_bias", False, True)


def test_export_refuses_a_head_bias():
    config = ModelConfig(**{**SHAPE, "head_bias": True})
    with pytest.raises(ExportRefused, match="model.head_bias"):
        layout_for(config)
