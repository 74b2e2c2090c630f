"""Canon layers (`model.canon`): each site's convolution is the explicit sum over shifted inputs,
sits where Part 4.1 places it, never reads a later token, another packed document or the
sequence's start, decodes through the KV cache as it runs in full, trains, and leaves models
without it (and their checkpoints) as they were; bad keys are refused naming them."""

import json
from dataclasses import asdict

import pytest
import torch
import torch.nn.functional as F

from launch.cli import main
from tests.conftest import ROOT
from tests.test_model import decode_in_chunks, packed_batch
from trainer import checkpoint
from trainer.checkpoint import checkpoint_weights, load_weights
from trainer.engine import train
from trainer.errors import TrainError
from trainer.model import GPT, ModelConfig
from trainer.model.canon import Canon, CanonConv, _masked_sum, canon_inputs, canon_sites
from trainer.model.config import model_config_from_dict
from trainer.model.errors import ModelConfigError
from trainer.model.positional_options import RopeOptions

VOCAB = 61
LEGACY_CHECKPOINT = ROOT / "tests/golden/legacy_run/checkpoints/step-000004"


def build(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    config = {"n_layer": 2, "n_head": 4, "d_model": 64, "vocab_size": VOCAB, "ctx": 64,
              "init_std": 0.1, **overrides}
    return GPT(ModelConfig(**config)).eval()


def explicit(x, weight, doc, residual, activation):
    """y_t = [x_t] + act(sum_j w[K-1-j] x_(t-j)) over the earlier tokens of t's document, one
    token and one tap at a time."""
    batch, length, width = x.shape
    kernel = weight.shape[-1]
    y = torch.zeros_like(x)
    for b in range(batch):
        for t in range(length):
            total = torch.zeros(width)
            for j in range(kernel):
                if t - j >= 0 and doc[b, t - j] == doc[b, t]:
                    total += weight[:, 0, kernel - 1 - j] * x[b, t - j]
            y[b, t] = (F.silu(total) if activation else total) + (x[b, t] if residual else 0)
    return y


@pytest.mark.parametrize("activation", [False, True], ids=["linear", "silu"])
@pytest.mark.parametrize("residual", [True, False], ids=["residual", "no-residual"])
@pytest.mark.parametrize("kernel", [2, 3, 4])
def test_each_site_is_the_sum_over_shifted_inputs_within_each_document(kernel, residual,
                                                                       activation):
    config = ModelConfig(d_model=8, n_head=2, mlp="swiglu", d_ff=8, canon="ABCD",
                         canon_kernel=kernel, canon_residual=residual,
                         canon_activation=activation)
    assert canon_sites(config) == {"A": 8, "B": 24, "C": 8, "D": 16}
    docs = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2], [0, 0, 0, 0, 0, 0, 0, 1, 1]])
    torch.manual_seed(0)
    for site, width in canon_sites(config).items():
        canon = Canon(width, config, site.lower())
        x = torch.randn(2, 9, width)
        # in as many parts as the model passes: q, k and v (B); SwiGLU's gate and up (D)
        parts = list(x.split([width // 3] * 3 if site == "B" else [width // 2] * 2
                             if site == "D" else [width], dim=-1))
        for doc in (docs, None):  # None: one document per row
            truth = explicit(x, canon.weight.detach(), torch.zeros_like(docs)
                             if doc is None else docs, residual, activation)
            got = torch.cat(canon(parts, canon_inputs(kernel, 2, doc, None), 0), dim=-1)
            assert (got - truth).abs().max() < 1e-5, (site, doc is None)


def test_one_row_of_doc_ids_is_shared_by_the_whole_batch():
    docs = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2]])  # [1, T] for a batch of 3
    canon = Canon(8, ModelConfig(d_model=8, n_head=2, canon="A", canon_kernel=3), "a")
    torch.manual_seed(0)
    x = torch.randn(3, 9, 8)
    shared = canon([x], canon_inputs(3, 3, docs, None), 0)[0]
    assert torch.equal(shared, canon([x], canon_inputs(3, 3, docs.expand(3, -1), None), 0)[0])
    truth = explicit(x, canon.weight.detach(), docs.expand(3, -1), True, False)
    assert (shared - truth).abs().max() < 1e-5


@pytest.mark.parametrize("x_dtype, w_dtype, tolerance", [
    (torch.float32, torch.float64, 1e-6),  # the compiled loops in float64, as x * w would be
    (torch.bfloat16, torch.bfloat16, 2e-2),  # CPU bfloat16: the masked sum, in bfloat16
])
def test_other_dtypes_are_the_explicit_sum_in_the_dtype_x_times_w_has(x_dtype, w_dtype,
                                                                      tolerance):
    docs = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2], [0, 1, 1, 1, 1, 1, 1, 2, 2]])
    canon = Canon(8, ModelConfig(d_model=8, n_head=2, canon="A", canon_kernel=4), "a")
    canon = canon.to(w_dtype)
    torch.manual_seed(0)
    x = torch.randn(2, 9, 8).to(x_dtype)
    y = canon([x], canon_inputs(4, 2, docs, None), 0)[0]
    assert y.dtype == torch.promote_types(x_dtype, w_dtype)
    truth = explicit(x.double(), canon.weight.detach().double(), docs, True, False)
    assert (y.double() - truth).abs().max() < tolerance * truth.abs().max()


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "one-doc"])
@pytest.mark.parametrize("kernel", [2, 4])
def test_the_hand_written_backward_is_the_gradient_of_the_forward(kernel, packed):
    docs = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2], [0, 1, 1, 1, 1, 1, 1, 2, 2]])
    inputs = canon_inputs(kernel, 2, docs if packed else None, None)
    torch.manual_seed(0)
    x = torch.randn(2, 9, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, kernel, dtype=torch.float64, requires_grad=True)
    for extra in (0.0, 1.0):
        assert torch.autograd.gradcheck(
            lambda x, w, extra=extra: CanonConv.apply(w, inputs.reach(x), extra, x), (x, w))


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "one-doc"])
def test_each_token_reaches_back_over_its_own_row_and_document_only(packed):
    """Rows [0 0 | 1 1 1] and [0 0 0 0 0], kernel 3, as one sequence of 10 tokens: a row's or
    document's first token reads no earlier one, the next one token back, the rest K-1 = 2."""
    docs = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 0, 0]])
    reach = canon_inputs(3, 2, docs if packed else None, None).reach(torch.zeros(2, 5, 1))
    assert reach.tolist() == ([0, 1, 0, 1, 2] if packed else [0, 1, 2, 2, 2]) + [0, 1, 2, 2, 2]


@pytest.mark.parametrize("kernel", [2, 3, 4])
def test_the_forward_over_several_chunks_is_the_masked_sum(kernel):
    """Past the first 256-token chunk too, at chunk starts and at documents starting inside a
    chunk, for a site of two parts: 2 rows of 300 tokens, 3 chunks, documents of 37 tokens."""
    docs = torch.arange(600).reshape(2, 300) // 37
    inputs = canon_inputs(kernel, 2, docs, None)
    torch.manual_seed(0)
    xs = [torch.randn(2, 300, width, dtype=torch.float64) for width in (2, 3)]
    w = torch.randn(5, kernel, dtype=torch.float64)
    got = CanonConv.apply(w, inputs.reach(xs[0]), 1.0, *xs)
    for i, (x, w_i, y) in enumerate(zip(xs, w.split([2, 3]), got)):
        assert (y - _masked_sum(x, w_i, inputs, (0, str(i)), 1.0)).abs().max() < 1e-12


@pytest.mark.parametrize("kernel, widths", [(4, [16]), (3, [5, 11])])
def test_the_gradients_have_the_same_bits_for_any_thread_count(kernel, widths):
    """The tokens run in fixed chunks that torch's threads take one at a time; the taps' gradient
    sums the chunks in order. 3 rows of 1,000 tokens: 12 chunks, on one thread or two."""
    from trainer.model.canon_cpu import _openmp_parallel

    assert _openmp_parallel() is not None  # else both counts would run one loop, proving nothing
    docs = torch.arange(3000).reshape(3, 1000) // 70
    inputs = canon_inputs(kernel, 3, docs, None)
    torch.manual_seed(0)
    xs = [torch.randn(3, 1000, width) for width in widths]
    w, dzs = torch.randn(sum(widths), kernel), [torch.randn_like(x) for x in xs]
    grads = []
    threads = torch.get_num_threads()
    for count in (1, 2):
        torch.set_num_threads(count)
        xcs, wc = [x.clone().requires_grad_() for x in xs], w.clone().requires_grad_()
        torch.autograd.backward(CanonConv.apply(wc, inputs.reach(xcs[0]), 1.0, *xcs), dzs)
        grads.append([xc.grad for xc in xcs] + [wc.grad])
    torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(*grads))
    dws = []
    for x, w_i, dz, dx in zip(xs, w.split(widths), dzs, grads[0]):  # and they are gradients
        xr, wr = x.clone().requires_grad_(), w_i.clone().requires_grad_()
        (_masked_sum(xr, wr, inputs, (0, "a"), 1.0) * dz).sum().backward()  # plain autograd
        assert (dx - xr.grad).abs().max() < 1e-4
        dws.append(wr.grad)
    dw = torch.cat(dws)
    assert (grads[0][-1] - dw).abs().max() < 1e-5 * dw.abs().max()


@pytest.mark.parametrize("kernel", [2, 3, 4])
def test_a_sites_parts_of_unequal_widths_get_their_own_slices_of_the_gradient(kernel):
    """One call over three parts (widths 2, 3 and 1: each its own channel offset in the weight)
    and 600 tokens (three chunks, their parts of the weight's gradient added by whichever thread
    ends last): every gradient is plain autograd's through the masked sum, part by part."""
    docs = torch.arange(600).reshape(2, 300) // 37
    inputs = canon_inputs(kernel, 2, docs, None)
    torch.manual_seed(0)
    xs = [torch.randn(2, 300, width, dtype=torch.float64) for width in (2, 3, 1)]
    w = torch.randn(6, 1, kernel, dtype=torch.float64)  # the module's own layout
    dzs = [torch.randn_like(x) for x in xs]
    xc, wc = [x.clone().requires_grad_() for x in xs], w.clone().requires_grad_()
    torch.autograd.backward(CanonConv.apply(wc, inputs.reach(xc[0]), 1.0, *xc), dzs)
    xr, wr = [x.clone().requires_grad_() for x in xs], w.clone().requires_grad_()
    outs = [_masked_sum(x, part, inputs, (0, f"b.{i}"), 1.0)
            for i, (x, part) in enumerate(zip(xr, wr[:, 0].split([2, 3, 1])))]
    torch.autograd.backward(outs, dzs)
    assert wc.grad.shape == (6, 1, kernel)
    assert (wc.grad - wr.grad).abs().max() < 1e-10
    for got, truth in zip(xc, xr):
        assert (got.grad - truth.grad).abs().max() < 1e-12


def test_no_output_changes_by_a_bit_when_another_row_or_document_does():
    docs = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2], [0, 0, 0, 0, 0, 0, 0, 1, 1]])
    torch.manual_seed(0)
    x, w = torch.randn(2, 9, 5), torch.randn(5, 4)
    changed = x.clone()
    changed[0, :3] += 1  # row 0's first document
    changed[0, 5:] -= 1  # its last: row 1 runs after it in CanonConv's one sequence
    inputs = canon_inputs(4, 2, docs, None)
    y, y_changed = (CanonConv.apply(w, inputs.reach(v), 1.0, v)[0] for v in (x, changed))
    assert torch.equal(y[0, 3:5], y_changed[0, 3:5]) and torch.equal(y[1], y_changed[1])
    assert (y[0, :3] != y_changed[0, :3]).all()  # the changed document itself does change


@pytest.mark.parametrize("batch, length", [(1, 1), (1, 2), (3, 1), (2, 3), (1, 4)])
def test_sequences_shorter_than_the_kernel_are_the_explicit_sum(batch, length):
    torch.manual_seed(0)
    x = torch.randn(batch, length, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    inputs = canon_inputs(4, batch, None, None)
    (got,) = CanonConv.apply(w, inputs.reach(x), 0.0, x)
    truth = explicit(x.detach(), w.detach()[:, None], torch.zeros(batch, length), False, False)
    assert (got - truth).abs().max() < 1e-6  # explicit sums in float32
    assert torch.autograd.gradcheck(
        lambda x, w: CanonConv.apply(w, inputs.reach(x), 1.0, x), (x, w))


def test_the_convolution_starts_as_pytorchs_conv1d_and_gpt_init_leaves_it():
    model = build(canon="ABCD")
    weights = {n: p for n, p in model.named_parameters() if "canon" in n}
    assert sorted(weights) == sorted(f"blocks.{i}.{site}.weight" for i in range(2) for site in
                                     ("canon_a", "attn.canon_b", "canon_c", "mlp.canon_d"))
    for weight in weights.values():  # kaiming_uniform(a=sqrt(5)): U(-1/sqrt(K), 1/sqrt(K))
        assert weight.abs().max() <= 0.5 and weight.std() > 0.2
    assert all(m.bias is None for m in model.modules() if isinstance(m, Canon))


@pytest.mark.parametrize("mlp, d_ff", [("gelu", 4 * 64), ("swiglu", 2 * 192)])
@pytest.mark.parametrize("kernel", [2, 4])
def test_each_site_adds_its_width_times_kernel_parameters_per_layer(mlp, d_ff, kernel):
    off = build(mlp=mlp).num_parameters()
    widths = {"A": 64, "B": 3 * 64, "C": 64, "D": d_ff}
    for site, width in widths.items():
        model = build(mlp=mlp, canon=site, canon_kernel=kernel)
        assert model.num_parameters() - off == 2 * width * kernel, site
    assert build(mlp=mlp, canon="ABCD", canon_kernel=kernel).num_parameters() - off == (
        2 * kernel * sum(widths.values()))


@pytest.mark.parametrize("site, scaled", [("A", "norm1.weight"), ("B", "attn.qkv.weight"),
                                          ("C", "norm2.weight"), ("D", "mlp.fc.weight")])
@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_each_site_convolves_what_part_41_names(site, scaled, mlp):
    """A convolution that only scales the current token, channel c by 1 + c_c (every other tap
    0), is the model without Canon with its site's input scaled channel by channel: the normed
    input before attention (A), q, k and v (B), the normed input before the MLP (C), the MLP's
    pre-activation (D, gate and up in that order). A distinct scale per channel: parts taken
    in the wrong order or at the wrong offset would scale the wrong channels."""
    model = build(canon=site, mlp=mlp, norm="rmsnorm")
    plain = build(mlp=mlp, norm="rmsnorm")
    plain.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        for layer, shift in enumerate((0.5, -0.3)):
            canon = next(m for m in model.blocks[layer].modules() if isinstance(m, Canon))
            c = torch.linspace(-0.4, 0.4, canon.weight.shape[0]) + shift  # [C]
            canon.weight.zero_()
            canon.weight[:, 0, -1] = c
            param = plain.get_parameter(f"blocks.{layer}.{scaled}")  # [C] or [C, d]: by channel
            param.mul_((1 + c).view(-1, *[1] * (param.dim() - 1)))
    ids, positions, docs = packed_batch()
    assert (model(ids, positions, docs) - plain(ids, positions, docs)).abs().max() < 1e-5


@pytest.mark.parametrize("pos", ["none", "rope"])
def test_no_token_reads_a_later_token_or_another_packed_document(pos):
    model = build(canon="ABCD", pos=pos)
    ids, positions, docs = packed_batch()
    full = model(ids, positions, docs)
    changed = ids.clone()
    changed[:, 12:] = (changed[:, 12:] + 1) % VOCAB
    assert (model(changed, positions, docs)[:, :12] - full[:, :12]).abs().max() == 0
    assert (model(changed, positions, docs)[:, 12:] - full[:, 12:]).abs().max() > 1e-3
    # row 0 packs documents [0, 6), [6, 15), [15, 20); row 1 [0, 12), [12, 20)
    for row, start, end in ((0, 0, 6), (0, 6, 15), (0, 15, 20), (1, 12, 20)):
        alone = model(ids[row:row + 1, start:end])
        assert (full[row:row + 1, start:end] - alone).abs().max() < 1e-5


CACHED = {"nope": {"pos": "none"},
          "rope-quarter": {"pos": "rope", "rope": RopeOptions(fraction=0.25)},
          "swiglu-silu-k3": {"pos": "rope", "mlp": "swiglu", "canon_kernel": 3,
                             "canon_activation": True},
          "no-residual-k2": {"pos": "rope", "canon_kernel": 2, "canon_residual": False}}


@pytest.mark.parametrize("packed", [False, True], ids=["one-doc", "packed"])
@pytest.mark.parametrize("shape", list(CACHED))
def test_decoding_through_the_kv_cache_equals_the_full_forward(shape, packed):
    model = build(canon="ABCD", **CACHED[shape])
    ids, positions, docs = packed_batch()
    if not packed:
        positions = docs = None
    full = model(ids, positions, docs)
    for bounds in ([0, *range(1, 21)], [0, 5, 6, 7, 10, *range(11, 21)]):  # steps; prefills
        cached = decode_in_chunks(model, ids, positions, docs, bounds)
        assert (cached - full).abs().max() < 1e-4


def test_a_model_without_canon_keeps_its_keys_and_a_legacy_checkpoint_loads():
    off = build()
    assert not [name for name in off.state_dict() if "canon" in name]
    assert not any(isinstance(m, Canon) for m in off.modules())
    config, state = checkpoint_weights(LEGACY_CHECKPOINT)  # strict load into today's GPT
    assert config.canon == "" and "canon" not in load_weights(
        LEGACY_CHECKPOINT / "weights.pt")["model_config"]


@pytest.mark.parametrize("overrides, key", [
    ({"canon": "ABE"}, "canon"), ({"canon": "AA"}, "canon"), ({"canon": "abcd"}, "canon"),
    ({"canon_kernel": 1}, "canon_kernel"), ({"canon_kernel": 5}, "canon_kernel"),
    ({"rope": RopeOptions(fraction=0.0)}, "rope.fraction"),
    ({"rope": RopeOptions(fraction=1.5)}, "rope.fraction"),
    ({"rope": RopeOptions(fraction=0.1)}, "rope.fraction"),  # 1.6 of 16 channels
    ({"rope": RopeOptions(fraction=0.1875)}, "rope.fraction"),  # 3: odd
])
def test_bad_canon_and_rope_keys_are_refused_naming_them(overrides, key):
    with pytest.raises(ModelConfigError) as caught:
        ModelConfig(d_model=64, n_head=4, **overrides).validate()
    assert caught.value.key == key
    assert f"{key}=" in str(caught.value) and "\n" not in str(caught.value)


def test_physlm_train_refuses_a_bad_canon_letter_in_one_line(capsys):
    assert main(["train", str(ROOT / "configs/experiment/quickstart.yaml"),
                 "model.canon=ABX"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.canon='ABX': must be distinct letters" in err


def test_resuming_across_canon_is_refused_naming_it():
    without, with_canon = asdict(ModelConfig()), asdict(ModelConfig(canon="AC"))
    meta = {"tokenizer_sha256": "t", "model_config": without}
    assert checkpoint.incompatibility(meta, with_canon, "t") == ("model.canon", "", "AC")
    meta["model_config"] = with_canon
    assert checkpoint.incompatibility(meta, without, "t") == ("model.canon", "AC", "")
    # Canon's options matter only where a site is on; a config saved before them fits
    legacy = {k: v for k, v in without.items() if not k.startswith("canon")}
    meta["model_config"] = legacy
    assert checkpoint.incompatibility(meta, without | {"canon_kernel": 2}, "t") is None
    meta["model_config"] = with_canon
    assert checkpoint.incompatibility(meta, with_canon | {"canon_kernel": 2}, "t") == (
        "model.canon_kernel", 4, 2)


def _losses(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if "loss" in row]


TRAIN = ("train.lr=0.01", "train.warmup_steps=1", "train.log_every=1")


def test_a_canon_run_trains_and_init_from_a_run_without_canon_keeps_its_weights(
        train_corpus, tiny_experiment, tmp_path):
    canon_run = tmp_path / "canon"
    train(tiny_experiment("model.canon=ABCD", "model.pos=none", "train.max_steps=25",
                          "train.ckpt_every=25", *TRAIN), canon_run, train_corpus)
    losses = _losses(canon_run)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5
    assert any("canon_b" in name for name in load_weights(
        canon_run / "checkpoints/step-000025/weights.pt")["state_dict"])

    parent = tmp_path / "parent"
    train(tiny_experiment("train.max_steps=3", "train.ckpt_every=3", *TRAIN), parent,
          train_corpus)
    child = tmp_path / "child"
    # a vanishing learning rate: one step leaves the weights where they started
    train(tiny_experiment("model.canon=AC", "train.max_steps=1", "train.ckpt_every=1",
                          "train.lr=1e-12", "train.warmup_steps=0",
                          f"train.init_from={parent}"), child, train_corpus)
    trained = load_weights(parent / "checkpoints/step-000003/weights.pt")["state_dict"]
    started = load_weights(child / "checkpoints/step-000001/weights.pt")["state_dict"]
    fresh = {name: tensor for name, tensor in started.items() if name not in trained}
    assert sorted(fresh) == [f"blocks.{i}.canon_{s}.weight" for i in range(2) for s in "ac"]
    assert all(torch.allclose(started[name], trained[name], atol=1e-6) for name in trained)
    torch.manual_seed(0)  # the run's seed: its own initialization, which the parent lacks
    initial = GPT(model_config_from_dict(load_weights(
        child / "checkpoints/step-000001/weights.pt")["model_config"])).state_dict()
    assert all(torch.allclose(fresh[name], initial[name], atol=1e-6) for name in fresh)

    with pytest.raises(TrainError, match=r"the parent has model.canon='ABCD', this experiment ''"):
        train(tiny_experiment("model.pos=none", f"train.init_from={canon_run}"),
              tmp_path / "reverse", train_corpus)
    with pytest.raises(TrainError, match=r"the parent has model.n_layer=2, this experiment 3"):
        train(tiny_experiment("model.canon=AC", "model.n_layer=3",
                              f"train.init_from={parent}"), tmp_path / "other", train_corpus)
