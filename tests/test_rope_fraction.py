"""Partial rotary (`model.rope.fraction`): the first fraction of each head's channels rotate,
paired within them, and the rest carry no position; 1.0 is the rotary of before; a NeoX-layout
model exports with rotary_pct = fraction and computes physlm's logits in transformers, while the
Llama layout and any Canon layer are refused naming the key."""

import pytest
import torch
from test_hf_export import documents, load_hf, model_config, scrambled, write_run

from trainer.hf.export import export_run
from trainer.hf.layouts import ExportRefused, layout_for
from trainer.model import ModelConfig
from trainer.model.positional import Rotary
from trainer.model.positional_options import RopeOptions


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Small models: torch's second thread only spins on a busy machine."""


def rotary(fraction: float) -> Rotary:
    return Rotary(ModelConfig(d_model=64, n_head=4, rope=RopeOptions(theta=100.0,
                                                                     fraction=fraction)))


def test_a_quarter_rotates_the_first_quarter_of_each_head_in_neox_pairs():
    q, k = torch.randn(2, 1, 4, 3, 16).unbind(0)  # [B, H, T, Dh]
    pos = torch.tensor([[0, 5, 9]])
    rq, rk = rotary(0.25).rotate(q, k, pos, pos)
    assert torch.equal(rq[..., 4:], q[..., 4:]) and torch.equal(rk[..., 4:], k[..., 4:])
    # channel i of the 4 rotated pairs with i + 2, at frequency 100^(-i / 2)
    for i in range(2):
        angle = pos[0].float() * 100.0 ** (-i / 2)
        cos, sin = angle.cos(), angle.sin()
        assert torch.allclose(rq[..., i], q[..., i] * cos - q[..., i + 2] * sin, atol=1e-6)
        assert torch.allclose(rq[..., i + 2], q[..., i] * sin + q[..., i + 2] * cos, atol=1e-6)
    assert torch.allclose(rq[:, :, 0], q[:, :, 0])  # position 0: no turn


def test_a_fraction_of_one_is_the_full_rotary():
    q, k = torch.randn(2, 2, 4, 5, 16).unbind(0)
    pos = torch.arange(5)[None]
    full = Rotary(ModelConfig(d_model=64, n_head=4, rope=RopeOptions(theta=100.0)))
    assert all(torch.equal(a, b) for a, b in zip(rotary(1.0).rotate(q, k, pos, pos),
                                                  full.rotate(q, k, pos, pos)))


def test_the_rotated_channels_set_how_many_fractions_are_valid():
    ModelConfig(d_model=64, n_head=4, rope=RopeOptions(fraction=0.125)).validate()  # 2 of 16
    ModelConfig(d_model=96, n_head=2, rope=RopeOptions(fraction=0.25)).validate()  # 12 of 48
    # a fraction not used unless pos is rope
    ModelConfig(pos="none", rope=RopeOptions(fraction=2.0)).validate()


def test_a_neox_model_with_a_quarter_rotary_exports_as_rotary_pct(train_corpus, tmp_path):
    model = scrambled(model_config(train_corpus, "neox", d_model=64, bias=True,
                                   rope=RopeOptions(theta=500.0, fraction=0.25)), std=0.3)
    export_run(write_run(tmp_path / "run", model, train_corpus), tmp_path / "hf")
    hf = load_hf(tmp_path / "hf")
    assert hf.config.rope_parameters["partial_rotary_factor"] == 0.25
    ids = documents(train_corpus, 6, 128)
    with torch.no_grad():
        ours = model(ids)
        rounded = (ours - hf(ids).logits).abs().max()
        # given physlm's frequencies over the 8 rotated channels, bit for bit
        hf.base_model.rotary_emb.inv_freq.copy_(500.0 ** (-torch.arange(4.0) / 4))
        exact = (ours - hf(ids).logits).abs().max()
    assert ours.std() > 1.5
    assert rounded <= 2e-4 and exact == 0


@pytest.mark.parametrize("layout, overrides, fault", [
    ("llama", {"rope": RopeOptions(fraction=0.5)},
     "model.rope.fraction=0.5 (LlamaForCausalLM maps rope with theta alone)"),
    ("neox", {"canon": "AC"}, "model.canon='AC' (Canon layers: no HF class has them)"),
    ("llama", {"canon": "D"}, "model.canon='D' (Canon layers: no HF class has them)"),
])
def test_what_no_hf_class_computes_is_refused_naming_the_key(train_corpus, layout, overrides,
                                                              fault):
    with pytest.raises(ExportRefused) as caught:
        layout_for(model_config(train_corpus, layout, **overrides))
    assert str(caught.value).startswith(f"{fault}: not exportable to HF transformers; ")
    assert "\n" not in str(caught.value)
