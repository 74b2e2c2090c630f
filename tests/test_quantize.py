"""`physlm eval --quantize`: symmetric round-to-nearest weights, int8 per output channel and int4
per group, what is rounded and what stays float, and quantized results beside the float ones."""

import json

import pytest
import torch
from conftest import tiny_experiment_file
from torch import nn

from launch.cli import main
from launch.report import read_run
from trainer.config import load_experiment
from trainer.engine import train
from trainer.errors import TrainError
from trainer.model import GPT, ModelConfig
from trainer.quantize import (
    Quantization,
    fake_quantize,
    quantization,
    quantize_model,
    quantized_weights,
    suffix,
)


def _weight(rows: int, columns: int, seed: int = 0) -> torch.Tensor:
    """Rows of very different magnitudes, so that a shared scale would show."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.logspace(-3, 1, rows)[:, None]
    return torch.randn(rows, columns, generator=generator) * scales


def _groups(weight: torch.Tensor, size: int) -> list[torch.Tensor]:
    """Each row's consecutive groups of `size` columns (the last one shorter), as [rows, n]."""
    return list(weight.split(size, dim=1))


def test_int8_has_one_scale_per_output_channel_and_rounds_to_nearest():
    weight = _weight(16, 50)
    rounded = fake_quantize(weight, 127, None)
    scale = weight.abs().amax(dim=1, keepdim=True) / 127  # max|row| / 127
    assert (weight - rounded).abs().le(scale / 2 * (1 + 1e-5)).all()
    grid = rounded / scale
    assert torch.allclose(grid, grid.round(), atol=1e-4)  # scale x an integer
    assert grid.round().abs().amax(dim=1).eq(127).all()  # each row's largest weight at 127
    # a row's scale is its own: the smallest rows keep their relative precision
    relative = (weight - rounded).abs().amax(dim=1) / weight.abs().amax(dim=1)
    assert relative.max() <= 0.5 / 127 * (1 + 1e-5)


def test_int4_has_one_scale_per_group_of_a_row_the_last_one_shorter():
    weight = _weight(8, 50)
    rounded = fake_quantize(weight, 7, 16)  # groups of 16, 16, 16 and 2 columns
    for original, result in zip(_groups(weight, 16), _groups(rounded, 16)):
        scale = original.abs().amax(dim=1, keepdim=True) / 7
        assert (original - result).abs().le(scale / 2 * (1 + 1e-5)).all()
        grid = result / scale
        assert torch.allclose(grid, grid.round(), atol=1e-5)
        assert grid.round().abs().max() <= 7 and grid.round().abs().amax(dim=1).eq(7).all()
    # rounding to 15 levels per group moves weights far more than 255 levels per row do
    int8 = fake_quantize(weight, 127, None)
    assert (weight - rounded).abs().sum() > 5 * (weight - int8).abs().sum()


@pytest.mark.parametrize("levels, group_size", [(127, None), (7, 64), (7, 16), (7, 3)])
def test_quantizing_twice_changes_nothing(levels, group_size):
    for seed in range(20):
        once = fake_quantize(_weight(12, 70, seed), levels, group_size)
        assert torch.equal(fake_quantize(once, levels, group_size), once)


def test_an_all_zero_row_stays_zero():
    weight = _weight(3, 8)
    weight[1] = 0
    assert fake_quantize(weight, 7, 4)[1].eq(0).all()


def _model(**options) -> GPT:
    torch.manual_seed(0)
    config = {"n_layer": 2, "n_head": 2, "d_model": 64, "vocab_size": 97, "ctx": 32,
              "bias": True, **options}
    return GPT(ModelConfig(**config)).eval()


def test_linears_and_embedding_tables_are_quantized_biases_norms_and_canon_stay_float():
    model = _model(pos="learned", tie_embeddings=False, canon="ABCD")
    names = set(quantized_weights(model))
    linears = {f"{name}.weight" for name, module in model.named_modules()
               if isinstance(module, nn.Linear)}
    assert names == linears | {"tok_emb.weight", "positional.table.weight"}
    before = {name: p.clone() for name, p in model.named_parameters()}
    quantize_model(model, Quantization(8, None))
    for name, parameter in model.named_parameters():
        moved = not torch.equal(parameter, before[name])
        assert moved == (name in names), name  # biases, norms, canon taps untouched
    assert any("canon" in name for name in before) and any("bias" in name for name in before)


def test_a_tied_head_is_the_token_table_quantized_once():
    model = _model()
    assert "lm_head.weight" not in quantized_weights(model)  # the same tensor as tok_emb.weight
    quantize_model(model, Quantization(4, 64))
    assert model.lm_head.weight is model.tok_emb.weight
    grid = model.tok_emb.weight / (model.tok_emb.weight.abs().amax(dim=1, keepdim=True) / 7)
    assert torch.allclose(grid, grid.round(), atol=1e-4)  # one group per 64-wide row


def test_int8_logits_stay_close_to_float_and_int4_moves_them_more():
    tokens = torch.randint(0, 97, (4, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        exact = _model()(tokens)
        moved = {}
        for scheme in (Quantization(8, None), Quantization(4, 64)):
            model = _model()
            quantize_model(model, scheme)
            logits = model(tokens)
            moved[scheme.bits] = ((logits - exact).norm() / exact.norm()).item()
            quantize_model(model, scheme)  # a second time: the same weights, the same logits
            assert torch.equal(model(tokens), logits)
    # measured: 0.009 and 0.16 relative (L2 over all logits)
    assert moved[8] < 0.02
    assert moved[4] > 5 * moved[8]


def test_the_flags_give_the_scheme_and_its_suffix():
    assert quantization(None, None) is None and suffix(None) == ""
    int8 = quantization("int8", None)
    assert int8.levels == 127 and suffix(int8) == "@int8"
    assert int8.record() == {"bits": 8, "scheme": "per-channel"}
    int4 = quantization("int4", None)
    assert int4.levels == 7 and suffix(int4) == "@int4g64"
    assert int4.record() == {"bits": 4, "scheme": "per-group", "group_size": 64}
    assert suffix(quantization("int4", 32)) == "@int4g32"


@pytest.mark.parametrize("name, group_size, message", [
    ("int3", None, "--quantize int3: unknown scheme; choose int8 or int4"),
    ("int4", 0, "--group-size 0: must be >= 1"),
    ("int8", 32, "--group-size 32: applies to --quantize int4 only"),
    (None, 32, "--group-size 32: applies to --quantize int4 only"),
])
def test_bad_flags_are_refused_naming_the_flag(name, group_size, message):
    with pytest.raises(TrainError, match=message.replace("-", r"\-")):
        quantization(name, group_size)


@pytest.mark.parametrize("flags, flag", [
    (["--quantize", "int3"], "--quantize int3"),
    (["--quantize", "int4", "--group-size", "0"], "--group-size 0"),
    (["--quantize", "int4", "--group-size", "-4"], "--group-size -4"),
    (["--group-size", "16"], "--group-size 16"),
])
def test_bad_flags_exit_2_in_one_line_before_the_run_is_read(flags, flag, tmp_path, capsys):
    assert main(["eval", str(tmp_path / "no-run"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"physlm eval: error: {flag}:") and err.count("\n") == 1


def test_a_quantized_evaluation_writes_suffixed_files_beside_the_float_ones(train_corpus,
                                                                            tmp_path, capsys):
    experiment = load_experiment(tiny_experiment_file(tmp_path),
                                 ["train.max_steps=4", "train.ckpt_every=4",
                                  "eval.qa.max_people=5"])
    run = tmp_path / "run"
    train(experiment, run, train_corpus)
    assert main(["eval", str(run), "--task", "qa"]) == 0
    eval_dir = run / "eval"
    float_files = {path.name: path.read_bytes() for path in eval_dir.iterdir()}
    assert set(float_files) == {"qa.json", "qa.png"}

    assert main(["eval", str(run), "--task", "qa", "--quantize", "int8"]) == 0
    assert main(["eval", str(run), "--task", "qa", "--quantize", "int4", "--group-size", "16"]
                ) == 0
    assert "qa@int8 (step 4)" in capsys.readouterr().out
    assert {path.name for path in eval_dir.iterdir()} == {
        "qa.json", "qa.png", "qa@int8.json", "qa@int8.png", "qa@int4g16.json", "qa@int4g16.png"}
    assert {name: (eval_dir / name).read_bytes() for name in float_files} == float_files
    int8 = json.loads((eval_dir / "qa@int8.json").read_text())
    int4 = json.loads((eval_dir / "qa@int4g16.json").read_text())
    assert int8["quantize"] == {"bits": 8, "scheme": "per-channel"} and int8["step"] == 4
    assert int4["quantize"] == {"bits": 4, "scheme": "per-group", "group_size": 16}
    assert "quantize" not in json.loads(float_files["qa.json"])
    for result in (int8, int4):
        assert result["test"]["n"] == 30 and 0 <= result["test"]["exact"] <= 1

    # the report names each as a task of its own; the scheme is no metric
    metrics = read_run(run, "run").metrics
    assert {"qa/test/exact", "qa@int8/test/exact", "qa@int4g16/test/exact"} <= set(metrics)
    assert not any("quantize" in metric for metric in metrics)


def test_int4_rounds_ties_to_even():
    weight = torch.tensor([[7.0, 0.5, 1.5, 2.5, -0.5, -2.5, 3.2, 0.0]])  # scale 7 / 7 = 1
    assert fake_quantize(weight, 7, None).tolist() == [[7.0, 0.0, 2.0, 2.0, -0.0, -2.0, 3.0,
                                                        0.0]]


def test_int8_has_one_scale_for_a_whole_row_past_64_columns():
    weight = torch.full((1, 128), 0.3)
    weight[0, 0] = 127.0  # the row's scale is 1: every 0.3 rounds to 0, past column 64 too
    quantized = fake_quantize(weight, 127, None)
    assert quantized[0, 0] == 127.0 and quantized[0, 1:].eq(0).all()
