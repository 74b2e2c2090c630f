"""LoRA finetuning through peft: low-rank adapters on the GPT's linear layers, all else frozen.

peft's `inject_adapter_in_model` works on plain torch modules and its LoRA `Linear` wraps the
fused `qkv` projection like any other (one adapter for the three outputs), so no hand-written
adapter is needed. The adapted model trains and checkpoints as any run does (DeepSpeed saves the
adapters with the frozen base); `weights.pt` holds the merged plain weights (W + scale * B A),
which evaluation and a later finetuning load as an ordinary GPT.
"""

import torch
from torch import nn

from trainer.config import LoraOptions
from trainer.errors import TrainError

ADAPTER = "default"  # peft's name for the one adapter a model gets here


def add_adapters(model: nn.Module, options: LoraOptions) -> nn.Module:
    """Inject LoRA adapters into the linear layers named in `options.targets` (the last part of
    a module's name: qkv, proj, fc, lm_head) and freeze every other parameter."""
    linears = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
               if isinstance(module, nn.Linear)}
    unknown = sorted(set(options.targets) - linears)
    if unknown:
        raise TrainError(f"train.lora.targets: {unknown} name no linear layer of the model "
                         f"(its linear layers: {', '.join(sorted(linears))})")
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError:
        raise TrainError("train.lora.rank > 0 needs peft: pip install -e '.[lora]'") from None

    config = LoraConfig(r=options.rank, lora_alpha=options.alpha, lora_dropout=options.dropout,
                        target_modules=list(options.targets))
    model = inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    for name, parameter in model.named_parameters():
        parameter.requires_grad = "lora_" in name
    return model


def scalings(model: nn.Module) -> dict[str, float]:
    """Each adapted layer's name and its update scale (alpha / rank)."""
    return {name: module.scaling[ADAPTER] for name, module in model.named_modules()
            if hasattr(module, "lora_A") and ADAPTER in getattr(module, "scaling", {})}


def merged(state: dict[str, torch.Tensor], scale: dict[str, float]) -> dict[str, torch.Tensor]:
    """A LoRA model's state dict as the plain model's: each adapted layer's weight becomes
    W + scale * B @ A, and the adapters' own entries go."""
    out = {}
    for key, value in state.items():
        layer, _, rest = key.partition(".base_layer.")
        if rest:
            if rest == "weight":
                a = state[f"{layer}.lora_A.{ADAPTER}.weight"]
                b = state[f"{layer}.lora_B.{ADAPTER}.weight"]
                value = value + scale[layer] * (b.float() @ a.float()).to(value.dtype)
            out[f"{layer}.{rest}"] = value
        elif ".lora_" not in key:
            out[key] = value
    return out
