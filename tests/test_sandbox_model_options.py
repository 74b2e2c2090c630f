"""The sandboxes' model options: frozen parameters keep their values and stay out of the
optimizer, attention-only and norm-free models have the parameters they should and train, SGD
with momentum follows its update rule, and bad values name their key."""

import re
from pathlib import Path

import pytest
import torch
from conftest import tiny_experiment_file

from corpus_gen.core.errors import ConfigError
from tests.test_model import decode_in_chunks, packed_batch
from trainer.checkpoint import checkpoint_weights
from trainer.config import TrainConfig, load_experiment
from trainer.engine import train
from trainer.errors import TrainError
from trainer.model import GPT, ModelConfig
from trainer.model.errors import ModelConfigError
from trainer.optim import check_same_optimizer, freeze, make_optimizer, optimizer_settings

VOCAB, D, LAYERS = 61, 64, 2


def build(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    config = {"n_layer": LAYERS, "n_head": 4, "d_model": D, "vocab_size": VOCAB, "ctx": 32,
              "init_std": 0.1, **overrides}
    return GPT(ModelConfig(**config))


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (4, 17), generator=generator)  # [B, T + 1]
    return ids[:, :-1], ids[:, 1:]


def loss_of(model: GPT, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(inputs)  # [B, T, V]
    return torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))


def train_steps(model: GPT, optimizer: torch.optim.Optimizer, seeds: list[int]) -> list[float]:
    """One step on the batch of each seed; the losses."""
    losses = []
    for seed in seeds:
        loss = loss_of(model, *batch(seed))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_frozen_parameters_keep_their_values_while_the_others_train():
    model = build(pos="learned", tie_embeddings=False)
    frozen = freeze(model, ["token_embeddings", "positions", "output_head", "blocks.0.attn.*"])
    assert frozen == ["tok_emb.weight", "positional.table.weight", "blocks.0.attn.qkv.weight",
                      "blocks.0.attn.proj.weight", "lm_head.weight"]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = make_optimizer(model, TrainConfig(lr=1e-2, weight_decay=0.1))
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    train_steps(model, optimizer, [0, 1, 2])
    for name, p in model.named_parameters():
        if name in frozen:  # not even weight decay moves them
            assert not p.requires_grad and id(p) not in in_optimizer and p.grad is None
            assert torch.equal(p, before[name]), name
        else:
            assert p.requires_grad and id(p) in in_optimizer
            assert not torch.equal(p, before[name]), name


def test_freezing_the_tied_table_freezes_the_head_and_the_head_alone_is_refused():
    model = build(tie_embeddings=True)
    with pytest.raises(TrainError, match=r"^train.freeze: output_head is the token embedding "
                                         r"table while model.tie_embeddings is true"):
        freeze(model, ["output_head"])
    with pytest.raises(TrainError, match=r"^train.freeze: 'lm_head\*' matches no parameter"):
        freeze(model, ["lm_head*"])  # tied, the head is listed as the token table
    assert freeze(model, ["token_embeddings"]) == ["tok_emb.weight"]
    assert not model.lm_head.weight.requires_grad


@pytest.mark.parametrize("names,culprit", [
    (["positions"], "'positions'"),  # rope has no positional parameters
    (["blocks.7.*"], r"'blocks.7.\*'"),
    (["token_embeddings", "Blocks.0.*"], r"'Blocks.0.\*'"),  # case matters
])
def test_a_freeze_name_that_matches_nothing_is_refused_naming_it(names, culprit):
    model = build(pos="rope")
    with pytest.raises(TrainError) as caught:
        freeze(model, names)
    message = str(caught.value)
    assert re.match(rf"^train.freeze: {culprit} matches no parameter of the model \(its "
                    r"parameters: tok_emb.weight, blocks.\*.norm1.weight, ", message)
    assert "\n" not in message and all(p.requires_grad for p in model.parameters())


def test_freezing_every_parameter_is_refused():
    with pytest.raises(TrainError, match=r"freezes every parameter; nothing would train$"):
        freeze(build(), ["*"])


def test_attention_only_and_norm_free_models_have_the_expected_parameters():
    attention, mlp, norm, table = 4 * D * D, 8 * D * D, D, VOCAB * D  # bias off, tied head
    counts = {("layernorm", "gelu"): LAYERS * (attention + mlp + 2 * norm) + norm + table,
              ("layernorm", "none"): LAYERS * (attention + norm) + norm + table,
              ("none", "gelu"): LAYERS * (attention + mlp) + table,
              ("none", "none"): LAYERS * attention + table}
    for (norm_kind, mlp_kind), count in counts.items():
        model = build(norm=norm_kind, mlp=mlp_kind)
        assert model.num_parameters(non_embedding=False) == count, (norm_kind, mlp_kind)
        if mlp_kind == "none":
            assert all(b.mlp is None and b.norm2 is None for b in model.blocks)
            assert model.config.ffn_dim == 0


@pytest.mark.parametrize("norm,mlp", [("layernorm", "none"), ("none", "gelu"),
                                      ("none", "none"), ("rmsnorm", "none")])
def test_attention_only_and_norm_free_models_learn_a_fixed_batch(norm, mlp):
    model = build(norm=norm, mlp=mlp, init_std=0.02)
    optimizer = make_optimizer(model, TrainConfig(lr=1e-2, weight_decay=0.0))
    losses = train_steps(model, optimizer, [1] * 30)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("norm,mlp", [("none", "none"), ("layernorm", "none")])
def test_attention_only_models_decode_through_the_kv_cache_as_they_run_in_full(norm, mlp):
    model = build(norm=norm, mlp=mlp).eval()
    ids, positions, docs = packed_batch()
    with torch.no_grad():
        full = model(ids, positions, docs)
        chunked = decode_in_chunks(model, ids, positions, docs, [0, 7, 8, 20])
    torch.testing.assert_close(chunked, full, atol=1e-5, rtol=1e-5)


def test_sgd_with_momentum_follows_its_update_rule_with_decay_on_matrices_only():
    lr, momentum, decay = 0.05, 0.9, 0.1
    model, reference = build(), build()
    optimizer = make_optimizer(model, TrainConfig(optimizer="sgd", lr=lr, momentum=momentum,
                                                  weight_decay=decay))
    assert isinstance(optimizer, torch.optim.SGD)
    train_steps(model, optimizer, [0, 1, 2, 3])
    # by hand: g += decay * p for matrices; v = momentum * v + g (v = g at first); p -= lr * v
    velocity = {}
    for step in range(4):
        reference.zero_grad()
        loss_of(reference, *batch(step)).backward()
        with torch.no_grad():
            for name, p in reference.named_parameters():
                g = p.grad + (decay * p if p.dim() >= 2 else 0)
                velocity[name] = g if step == 0 else momentum * velocity[name] + g
                p -= lr * velocity[name]
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5, msg=name)


def test_sgd_without_decay_is_torchs_sgd_over_all_parameters():
    model, reference = build(), build()
    train_steps(model, make_optimizer(model, TrainConfig(optimizer="sgd", lr=0.1, momentum=0.5,
                                                         weight_decay=0.0)), [0, 1, 2])
    train_steps(reference, torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.5),
                [0, 1, 2])
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


def test_adamw_stays_the_default_with_the_configs_betas():
    cfg = TrainConfig()
    assert (cfg.optimizer, cfg.momentum, cfg.freeze) == ("adamw", 0.0, [])
    optimizer = make_optimizer(build(), cfg)
    assert type(optimizer) is torch.optim.AdamW
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.95)


def test_a_resume_under_other_optimizer_settings_is_refused():
    old_checkpoint = {"step": 4}  # saved before the settings were recorded: AdamW, none frozen
    check_same_optimizer(old_checkpoint, TrainConfig(), "ckpt")
    with pytest.raises(TrainError, match=r"^ckpt: trained with train.optimizer='adamw', but the "
                                         r"config says 'sgd'"):
        check_same_optimizer(old_checkpoint, TrainConfig(optimizer="sgd"), "ckpt")
    saved = {"optimizer": optimizer_settings(TrainConfig(freeze=["positions"]))}
    check_same_optimizer(saved, TrainConfig(freeze=["positions"]), "ckpt")
    with pytest.raises(TrainError, match=r"train.freeze=\['positions'\], but the config says "
                                         r"\[\]"):
        check_same_optimizer(saved, TrainConfig(), "ckpt")


@pytest.mark.parametrize("override,key,value,reason", [
    ("train.optimizer=adam", "train.optimizer", "adam", "must be adamw or sgd"),
    ("train.momentum=1", "train.momentum", 1.0, "must be in [0, 1)"),
    ("train.momentum=0.9", "train.momentum", 0.9,
     "must be 0 with optimizer=adamw (momentum is SGD's; AdamW's is beta1)"),
    ("train.freeze=['']", "train.freeze", [""],
     "must list group names or parameter name patterns"),
    ("train.freeze=positions", "train.freeze", "positions", "must be a list, e.g. [a, b]"),
    ("model.norm=batchnorm", "model.norm", "batchnorm",
     "must be one of ('layernorm', 'rmsnorm', 'none')"),
    ("model.mlp=relu", "model.mlp", "relu", "must be one of ('gelu', 'swiglu', 'none')"),
])
def test_bad_values_name_their_key_in_one_line(tmp_path, override, key, value, reason):
    with pytest.raises(ConfigError) as caught:
        load_experiment(experiment_file(tmp_path), [override])
    error = caught.value
    assert (error.key, error.value, error.reason) == (key, value, reason)
    assert "\n" not in str(error)


def test_freezing_is_refused_beside_lora(tmp_path):
    with pytest.raises(ConfigError, match=r"train.freeze=\['positions'\]: cannot run with "
                                          r"lora.rank > 0"):
        load_experiment(experiment_file(tmp_path),
                        ["train.freeze=[positions]", "train.lora.rank=4"])


def test_canon_sites_of_the_mlp_are_refused_in_attention_only_blocks():
    with pytest.raises(ModelConfigError) as caught:
        ModelConfig(mlp="none", canon="ACD").validate()
    assert (caught.value.key, caught.value.value) == ("canon", "ACD")
    assert "site(s) CD sit in the MLP" in caught.value.reason
    ModelConfig(mlp="none", canon="AB").validate()  # attention's sites stay


def test_the_options_load_from_an_experiment_file(tmp_path):
    experiment = load_experiment(experiment_file(tmp_path), [
        "model.mlp=none", "model.norm=none", "train.optimizer=sgd", "train.momentum=0.9",
        "train.freeze=[token_embeddings,'blocks.*.attn.qkv.*']"])
    assert (experiment.model.mlp, experiment.model.norm) == ("none", "none")
    assert (experiment.train.optimizer, experiment.train.momentum) == ("sgd", 0.9)
    assert experiment.train.freeze == ["token_embeddings", "blocks.*.attn.qkv.*"]


def experiment_file(directory: Path) -> Path:
    """A one-layer experiment without a corpus group."""
    path = directory / "exp.yaml"
    path.write_text("name: t\nmodel:\n  n_layer: 1\ntrain:\n  max_steps: 10\n  warmup_steps: 0\n")
    return path


def test_a_run_trains_an_attention_only_norm_free_model_by_sgd_around_frozen_embeddings(
        train_corpus, tmp_path):
    overrides = ["model.mlp=none", "model.norm=none", "train.optimizer=sgd", "train.momentum=0.9",
                 "train.lr=0.05", "train.weight_decay=0", "train.freeze=[token_embeddings]",
                 "train.max_steps=4", "train.ckpt_every=4", "train.warmup_steps=0"]
    experiment = load_experiment(tiny_experiment_file(tmp_path), overrides)
    train(experiment, tmp_path / "run", train_corpus)
    config, weights = checkpoint_weights(tmp_path / "run" / "checkpoints" / "step-000004")
    assert (config.mlp, config.norm) == ("none", "none")
    torch.manual_seed(experiment.train.seed)  # the run's initial weights
    initial = GPT(config).state_dict()
    assert set(weights) == set(initial)
    for name, value in weights.items():
        assert torch.equal(value, initial[name]) == (name in ("tok_emb.weight", "lm_head.weight"))
    # going on from its checkpoint under AdamW would load SGD's state into AdamW: refused
    adamw = [o for o in overrides if "optimizer" not in o and "momentum" not in o]
    longer = load_experiment(tiny_experiment_file(tmp_path), [*adamw, "train.max_steps=6"])
    with pytest.raises(TrainError, match="optimizer"):
        train(longer, tmp_path / "run", train_corpus)


def test_a_run_refuses_a_freeze_pattern_that_matches_nothing(train_corpus, tmp_path):
    experiment = load_experiment(tiny_experiment_file(tmp_path),
                                 ["train.freeze=['blocks.5.*']", "train.max_steps=2"])
    with pytest.raises(TrainError, match=r"^train.freeze: 'blocks.5.\*' matches no parameter"):
        train(experiment, tmp_path / "run", train_corpus)
