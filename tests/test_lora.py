"""LoRA adapters as added for finetuning: the scale is alpha / rank, fresh adapters leave the
model's function unchanged (B starts at zero), and the dropout reaches every adapter."""

import torch
from torch import nn

from trainer.config import LoraOptions
from trainer.lora import add_adapters, scalings
from trainer.model import GPT, ModelConfig


def _gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(ModelConfig(n_layer=2, n_head=2, d_model=32, vocab_size=50, ctx=16)).eval()


def test_the_scale_is_alpha_over_rank():
    for rank, alpha, scale in [(4, 16.0, 4.0), (8, 4.0, 0.5)]:
        scales = scalings(add_adapters(_gpt(), LoraOptions(rank=rank, alpha=alpha)))
        assert len(scales) == 2 * 4 and set(scales.values()) == {scale}  # 4 linears a block


def test_fresh_adapters_leave_the_models_function_unchanged():
    ids = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = _gpt()(ids)
        adapted = add_adapters(_gpt(), LoraOptions(rank=4))
        assert all(p.eq(0).all() for name, p in adapted.named_parameters() if "lora_B" in name)
        assert torch.equal(adapted(ids), want)


def test_the_dropout_reaches_every_adapter():
    model = add_adapters(_gpt(), LoraOptions(rank=2, dropout=0.25))
    drops = [m.lora_dropout["default"] for m in model.modules() if hasattr(m, "lora_dropout")]
    assert len(drops) == 8 and all(isinstance(d, nn.Dropout) and d.p == 0.25 for d in drops)
