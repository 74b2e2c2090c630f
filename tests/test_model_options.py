"""Model options as plug-ins: a toy encoding with its own option and a toy block option, registered
here and nowhere else, are configured as `model.<name>` groups, build, and decode through the KV
cache as they run in full; a block option left at its default changes nothing. Saved configs of
earlier versions upgrade, and checkpoint compatibility compares what shapes the weights."""

import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from corpus_gen.core.config import COMMAND_LINE, build_config, parse_overrides
from corpus_gen.core.errors import ConfigError
from tests.test_model import decode_in_chunks, packed_batch
from trainer.model import GPT, ModelConfig, block_options, encodings
from trainer.model.config import (
    model_config_from_dict,
    model_difference,
    model_schema,
    upgrade_model_dict,
)
from trainer.model.errors import ModelConfigError, require
from trainer.model.gpt import BlockHook
from trainer.model.positional import Positional
from trainer.model.registry import BlockOption, Encoding, register_block_option, register_encoding

VOCAB = 61
LEGACY_RUN = Path(__file__).parent / "golden" / "legacy_run"
LEGACY_CHECKPOINT = LEGACY_RUN / "checkpoints" / "step-000004"


@dataclass
class ToyBiasOptions:
    slope: float = 0.5

    def validate(self, config: ModelConfig) -> None:
        require(self.slope >= 0, "slope", self.slope, "must be >= 0")


class ToyBias(Positional):
    """One slope for every head: bias = -slope * distance."""

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.slope = config.toy_bias.slope

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        return -self.slope * (q_pos[:, None, :, None] - k_pos[:, None, None, :]).float()


@dataclass
class ToyConvOptions:
    taps: int = 0  # earlier tokens each token mixes in; 0: off

    def validate(self, config: ModelConfig) -> None:
        require(self.taps >= 0, "taps", self.taps, "must be >= 0 (0: off)")


class ToyConv(BlockHook):
    """A causal depthwise convolution within each document, before attention and before the
    MLP: y_t = x_t + sum_j w_j * x_(t-j). While decoding, the last inputs wait in the cache."""

    def __init__(self, config: ModelConfig, taps: int):
        super().__init__()
        self.attn_weight = torch.nn.Parameter(0.3 * torch.randn(taps, config.d_model))
        self.mlp_weight = torch.nn.Parameter(0.3 * torch.randn(taps, config.d_model))

    def before_attention(self, x, pos, doc, cache, layer):
        return self.mix(x, self.attn_weight, doc, cache, (layer, "toy_conv.attn"))

    def before_mlp(self, x, pos, doc, cache, layer):
        return self.mix(x, self.mlp_weight, doc, cache, (layer, "toy_conv.mlp"))

    @staticmethod
    def mix(x, weight, doc, cache, key):
        batch, length, width = x.shape
        taps = weight.shape[0]
        doc = torch.zeros(1, length, dtype=torch.long) if doc is None else doc
        earlier = x.new_zeros(batch, taps, width)
        earlier_doc = torch.full((batch, taps), -1)  # before the first token: no document
        if cache is not None:
            earlier = cache.state.get(key, earlier)
            start = cache.length - length  # the new tokens' first index in the cache
            seen = cache.doc[:, max(0, start - taps):start]
            earlier_doc[:, taps - seen.shape[1]:] = seen
            cache.state[key] = torch.cat((earlier, x), 1)[:, -taps:]
        xs = torch.cat((earlier, x), 1)  # [B, taps + T, C]
        docs = torch.cat((earlier_doc, doc.expand(batch, -1)), 1)
        y = x
        for j in range(1, taps + 1):
            same = docs[:, taps - j:taps - j + length] == doc  # [B, T]
            y = y + weight[j - 1] * xs[:, taps - j:taps - j + length] * same[..., None]
        return y


def toy_conv(config: ModelConfig, layer: int) -> ToyConv | None:
    taps = config.toy_conv.taps
    return ToyConv(config, taps) if taps else None


@pytest.fixture
def toy_options():
    """The toy encoding and block option registered as a plug-in module registers them, for
    one test: the registries are the process's, and other tests count their entries."""
    register_encoding(Encoding("toy_bias", f"{__name__}:ToyBias", ToyBiasOptions,
                               flash_compatible=False))
    register_block_option(BlockOption("toy_conv", f"{__name__}:toy_conv", ToyConvOptions))
    yield
    del encodings()["toy_bias"], block_options()["toy_conv"]


def build(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    config = {"n_layer": 2, "n_head": 4, "d_model": 64, "vocab_size": VOCAB, "ctx": 64,
              "init_std": 0.1, **overrides}
    return GPT(model_schema()(**config)).eval()


def model_config(text: str, overrides: tuple[str, ...] = ()) -> ModelConfig:
    """The model group of an experiment file `exp.yaml` holding `text`, with command-line
    overrides (without the `model.` prefix), read as an experiment reads it."""
    return build_config(model_schema(), [(OmegaConf.create(text), "exp.yaml"),
                                         (parse_overrides(list(overrides)), COMMAND_LINE)],
                        "model.")


def test_groups_of_encodings_and_block_options_are_read_from_yaml_and_overrides(toy_options):
    config = model_config("pos: rope\nrope: {theta: 500}\n", ("toy_conv.taps=2",))
    assert (config.pos, config.rope.theta, config.relative.buckets) == ("rope", 500.0, 32)
    assert config.toy_conv.taps == 2 and config.toy_bias.slope == 0.5
    config = model_config("pos: relative\n", ("pos=toy_bias", "toy_bias.slope=2"))
    assert (config.pos, config.toy_bias.slope) == ("toy_bias", 2.0)
    with pytest.raises(ConfigError) as caught:
        model_config("rope: {thetta: 1}\n")
    assert (caught.value.key, caught.value.source) == ("model.rope.thetta", "exp.yaml")
    assert "unknown key; known: fraction, theta" in caught.value.reason
    with pytest.raises(ConfigError, match=r"^command line: model.toy_bias.slope=-1.0: must be"):
        model_config("pos: toy_bias\n", ("toy_bias.slope=-1",))
    model_config("pos: rope\n", ("toy_bias.slope=-1",))  # an encoding not in use is not checked
    with pytest.raises(ConfigError, match=r"^command line: model.toy_conv.taps=-1: must be >= 0"):
        model_config("pos: rope\n", ("toy_conv.taps=-1",))  # block options always are


def test_a_block_option_at_its_default_leaves_the_model_as_it_was(toy_options):
    ids, positions, docs = packed_batch()
    with_option = build()
    assert with_option.config.toy_conv.taps == 0
    del block_options()["toy_conv"]
    without = build()
    register_block_option(BlockOption("toy_conv", f"{__name__}:toy_conv", ToyConvOptions))
    assert with_option.state_dict().keys() == without.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(with_option.state_dict().values(),
                                                  without.state_dict().values()))
    assert torch.equal(with_option(ids, positions, docs), without(ids, positions, docs))


@pytest.mark.parametrize("packed", [False, True], ids=["one-doc", "packed"])
@pytest.mark.parametrize("pos", ["rope", "toy_bias"])
def test_toy_options_decode_through_the_kv_cache_as_they_run_in_full(toy_options, pos, packed):
    model = build(pos=pos, toy_conv=ToyConvOptions(taps=2))
    assert [tuple(p.shape) for n, p in model.named_parameters() if "hooks" in n] == [(2, 64)] * 4
    off = build(pos=pos)
    ids, positions, docs = packed_batch()
    if not packed:
        positions = docs = None
    full = model(ids, positions, docs)
    assert (full - off(ids, positions, docs)).abs().max() > 1e-2  # the hooks ran
    cached = decode_in_chunks(model, ids, positions, docs, [0, 5, 6, 7, 10, *range(11, 21)])
    assert (cached - full).abs().max() < 1e-4
    if packed:  # the convolution stays inside each document
        alone = model(ids[:1, 6:15])
        assert (full[:1, 6:15] - alone).abs().max() < 1e-5


def test_the_toy_encoding_biases_attention_by_its_own_slope(toy_options):
    steep, flat = build(pos="toy_bias", toy_bias=ToyBiasOptions(slope=4.0)), build(pos="toy_bias")
    bias = steep.positional.bias(torch.tensor([[5]]), torch.tensor([[2, 5]]))
    assert bias.tolist() == [[[[-12.0, 0.0]]]]
    ids = packed_batch()[0]
    assert (steep(ids) - flat(ids)).abs().max() > 1e-3
    with pytest.raises(ModelConfigError, match=r"^attention='flash_attn': flash_attn cannot run"):
        ModelConfig(pos="toy_bias", attention="flash_attn").validate()


def test_a_legacy_dict_upgrades_into_the_encodings_groups():
    legacy = {"n_layer": 2, "pos": "rope", "rope_theta": 500.0, "relative_buckets": 8,
              "relative_max_distance": 32, "dropout": 0.1}
    upgraded = upgrade_model_dict(legacy)
    assert upgraded["rope"] == {"theta": 500.0, "fraction": 1.0}
    assert upgraded["relative"] == upgraded["pos_only"] == {"buckets": 8, "max_distance": 32}
    assert not {"rope_theta", "relative_buckets", "relative_max_distance"} & set(upgraded)
    assert (upgraded["n_layer"], upgraded["d_model"], upgraded["dropout"]) == (2, 256, 0.1)
    assert upgrade_model_dict(upgraded) == upgraded
    assert model_config_from_dict(legacy).rope.theta == 500.0


def test_the_legacy_run_reads_as_a_relative_model_and_its_weights_load():
    meta = json.loads((LEGACY_CHECKPOINT / "meta.json").read_text())["model_config"]
    run_config = yaml.safe_load((LEGACY_RUN / "config.yaml").read_text())["model"]
    for saved in (meta, run_config):
        config = model_config_from_dict(saved)
        assert (config.pos, config.relative.buckets, config.relative.max_distance) == (
            "relative", 8, 32)
        assert (config.n_layer, config.d_model, config.vocab_size) == (1, 16, 400)
    weights = torch.load(LEGACY_CHECKPOINT / "weights.pt", weights_only=True)
    model = GPT(model_config_from_dict(weights["model_config"]))
    model.load_state_dict(weights["state_dict"])  # strict: every tensor, no more
    assert model.positional.table.weight.shape == (8, 2)
    assert model_difference(meta, asdict(config)) is None


def test_model_difference_compares_what_shapes_the_weights(toy_options):
    legacy = {"n_layer": 1, "pos": "rope", "rope_theta": 500.0, "dropout": 0.0}
    current = asdict(model_config_from_dict(legacy))
    assert model_difference(legacy, current) is None
    for key, value in (("dropout", 0.2), ("attention", "math"), ("init_std", 0.5)):
        assert model_difference(legacy, {**current, key: value}) is None
    assert model_difference(legacy, {**current, "n_layer": 2}) == ("n_layer", 1, 2)
    assert model_difference(legacy, {**current, "rope": {"theta": 10000.0}}) == (
        "rope.theta", 500.0, 10000.0)
    # under alibi rope's options shape nothing; relative's do under relative
    alibi = {**legacy, "pos": "alibi"}
    assert model_difference(alibi, {**current, "pos": "alibi", "rope": {"theta": 1.0}}) is None
    relative = {**current, "pos": "relative"}
    assert model_difference(relative, {**relative, "relative": {"buckets": 16,
                                                                "max_distance": 128}}) == (
        "relative.buckets", 32, 16)
    # saved before the block option existed: fits it at its default (off), not switched on
    assert "toy_conv" in current and "toy_conv" not in legacy
    assert model_difference(legacy, {**current, "toy_conv": {"taps": 0}}) is None
    assert model_difference(legacy, {**current, "toy_conv": {"taps": 2}}) == (
        "toy_conv.taps", 0, 2)


def test_a_saved_dict_naming_an_unknown_option_is_refused():
    with pytest.raises(ModelConfigError, match=r"^rope.thetta=1: unknown model key"):
        model_config_from_dict({"rope": {"thetta": 1}})
    with pytest.raises(ModelConfigError, match=r"^canon.on=True: unknown model key"):
        model_config_from_dict({"canon": {"on": True}})
    with pytest.raises(ModelConfigError, match=r"^relative.buckets=1: must be >= 2"):
        model_config_from_dict({"pos": "relative", "relative_buckets": 1})


def test_the_model_config_and_its_registries_import_no_torch():
    code = ("import sys\n"
            "from omegaconf import OmegaConf\n"
            "from corpus_gen.core.config import build_config\n"
            "from trainer.model.config import model_config_from_dict, model_schema\n"
            "config = build_config(model_schema(), [(OmegaConf.create({'rope': {'theta': 5}}),"
            " 'x')], 'model.')\n"
            "assert config.rope.theta == 5 and model_config_from_dict({}).pos == 'rope'\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).parent.parent)
    assert result.stdout == "[]\n"

