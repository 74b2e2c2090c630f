"""Finetuning (`train.init_from`): a run starts from another run's weights and records it."""

import json
import shutil

import pytest
import torch

from corpus_gen.core.config import load_config
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import schemas
from tests.conftest import ROOT
from trainer.checkpoint import load_weights
from trainer.config import LoraOptions
from trainer.engine import train
from trainer.errors import TrainError
from trainer.lora import add_adapters
from trainer.model import GPT
from trainer.model.config import model_config_from_dict

TINY = ("train.max_steps=30", "train.ckpt_every=30", "train.lr=0.01", "train.warmup_steps=1")


def _weights(run):
    return load_weights(run / "checkpoints" / "step-000001" / "weights.pt")["state_dict"]


def _losses(run):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines if "loss" in json.loads(line)]


@pytest.fixture(scope="module")
def parent(train_corpus, tmp_path_factory):
    from tests.conftest import tiny_experiment_file
    from trainer.config import load_experiment

    directory = tmp_path_factory.mktemp("parent")
    run = directory / "run"
    train(load_experiment(tiny_experiment_file(directory), list(TINY)), run, train_corpus)
    return run


def test_a_finetuned_run_starts_from_the_parents_weights_and_records_it(
        parent, train_corpus, tiny_experiment, tmp_path):
    child = tmp_path / "child"
    # a vanishing learning rate: one step leaves the weights where they started
    train(tiny_experiment("train.max_steps=1", "train.ckpt_every=1", "train.lr=1e-12",
                          "train.warmup_steps=0", f"train.init_from={parent}"),
          child, train_corpus)
    started = _weights(child)
    trained = load_weights(parent / "checkpoints/step-000030/weights.pt")["state_dict"]
    assert started.keys() == trained.keys()
    assert all(torch.allclose(started[k], trained[k], atol=1e-6) for k in trained)
    meta = json.loads((child / "checkpoints/step-000001/meta.json").read_text())
    assert meta["parent"] == {"run": str(parent.resolve()), "checkpoint": "step-000030",
                              "step": 30}
    fresh = tmp_path / "fresh"
    train(tiny_experiment("train.max_steps=1", "train.ckpt_every=1", "train.lr=1e-12",
                          "train.warmup_steps=0"), fresh, train_corpus)
    # the same first batch: the parent's weights have learned it, the initial ones have not
    assert _losses(child)[0] < _losses(fresh)[0] - 1.0
    assert "parent" not in json.loads((fresh / "checkpoints/step-000001/meta.json").read_text())


def test_a_parent_of_another_shape_tokenizer_or_no_run_is_refused(
        parent, train_corpus, tiny_experiment, tmp_path):
    with pytest.raises(TrainError, match=r"the parent has model.n_layer=2, this experiment 3"):
        train(tiny_experiment("model.n_layer=3", f"train.init_from={parent}"),
              tmp_path / "a", train_corpus)
    other = tmp_path / "other"
    shutil.copytree(parent / "checkpoints" / "step-000030", other)
    meta = json.loads((other / "meta.json").read_text())
    meta["tokenizer_sha256"] = "0" * 64
    (other / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(TrainError, match=r"was trained with another tokenizer \(000000000000\)"):
        train(tiny_experiment(f"train.init_from={other}"), tmp_path / "b", train_corpus)
    with pytest.raises(TrainError, match="neither a run directory with a checkpoint"):
        train(tiny_experiment(f"train.init_from={tmp_path / 'nothing'}"), tmp_path / "c",
              train_corpus)
    assert not (tmp_path / "a" / "checkpoints").exists()  # nothing written half


def test_a_corpus_reusing_the_parents_tokenizer_can_be_finetuned_on(
        parent, train_corpus, tiny_experiment, tmp_path):
    """Pretrain on one corpus, finetune on another (here bioS single in mix mode) that takes
    the first corpus's tokenizer instead of training its own."""
    config = load_config(ROOT / "configs/corpus/bios_s_single.yaml",
                         ["people=40", "mode=mix", "records_per_shard=50",
                          f"tokenizer.reuse={train_corpus}"], schemas())
    corpus = tmp_path / "qa_corpus"
    manifest = generate_corpus(config, corpus, progress=False, log=lambda *_: None)
    assert (corpus / "tokenizer.model").read_bytes() == \
        (train_corpus / "tokenizer.model").read_bytes()
    assert manifest["records"] == 40 + 20  # biographies + QA documents of the qa_train half
    train(tiny_experiment("train.max_steps=2", "train.ckpt_every=2",
                          f"train.init_from={parent}"), tmp_path / "child", corpus)
    meta = json.loads((tmp_path / "child/checkpoints/step-000002/meta.json").read_text())
    assert meta["parent"]["run"] == str(parent.resolve())


def test_a_reused_tokenizer_must_exist_and_hold_the_familys_symbols(train_corpus, tmp_path):
    bios = ROOT / "configs/corpus/bios_s_single.yaml"
    config = load_config(bios, ["people=20", f"tokenizer.reuse={tmp_path / 'none'}"], schemas())
    with pytest.raises(CorpusError, match=r"tokenizer.reuse=.*none: no tokenizer at"):
        generate_corpus(config, tmp_path / "a", progress=False, log=lambda *_: None)
    igsm = load_config(ROOT / "configs/corpus/igsm_med_pq.yaml",
                       ["problems=20", f"tokenizer.reuse={train_corpus}"], schemas())
    with pytest.raises(CorpusError, match=r"lacks the reserved symbols \['\[BACK\]'\]"):
        generate_corpus(igsm, tmp_path / "b", progress=False, log=lambda *_: None)
    assert not (tmp_path / "b" / "manifest.json").exists()


def _module_state(step_dir):
    """The model state DeepSpeed saved (LoRA: the frozen base with its adapters)."""
    return torch.load(step_dir / "mp_rank_00_model_states.pt", map_location="cpu",
                      weights_only=False)["module"]


def test_lora_trains_only_the_adapters_and_its_merged_weights_give_the_same_logits(
        parent, train_corpus, tiny_experiment, tmp_path):
    child = tmp_path / "lora"
    train(tiny_experiment("train.max_steps=3", "train.ckpt_every=3", "train.lr=0.01",
                          "train.warmup_steps=0", "train.lora.rank=4",
                          f"train.init_from={parent}"), child, train_corpus)
    step = child / "checkpoints" / "step-000003"
    adapted = _module_state(step)
    base = load_weights(parent / "checkpoints/step-000030/weights.pt")["state_dict"]
    frozen = {k.replace(".base_layer.", "."): v for k, v in adapted.items() if "lora_" not in k}
    assert frozen.keys() == base.keys()
    assert all(torch.equal(frozen[k].float(), base[k]) for k in base)  # the base never moved
    lora_b = [v for k, v in adapted.items() if "lora_B" in k]
    # 2 layers x (qkv, attn.proj, fc, mlp.proj): "proj" names both projections
    assert len(lora_b) == 2 * 4 and all(v.abs().sum() > 0 for v in lora_b)
    assert json.loads((step / "meta.json").read_text())["lora"]["rank"] == 4
    # weights.pt is the merged plain model: its logits are the adapted model's
    saved = load_weights(step / "weights.pt")
    config = model_config_from_dict(saved["model_config"])
    plain = GPT(config).eval()
    plain.load_state_dict(saved["state_dict"])
    lora_model = add_adapters(GPT(config), LoraOptions(rank=4)).eval()
    lora_model.load_state_dict(adapted)
    ids = torch.randint(0, config.vocab_size, (2, 16))
    pos = torch.arange(16).expand(2, 16)
    doc = torch.zeros(2, 16, dtype=torch.long)
    with torch.no_grad():
        want, got = lora_model(ids, pos, doc), plain(ids, pos, doc)
    assert torch.allclose(want, got, atol=1e-5) and not torch.allclose(
        want, GPT(config).eval()(ids, pos, doc), atol=1e-3)


def test_a_lora_target_that_names_no_layer_is_refused(parent, train_corpus, tiny_experiment,
                                                      tmp_path):
    with pytest.raises(TrainError, match=r"train.lora.targets: \['qproj'\] name no linear "
                                         r"layer of the model \(its linear layers: fc, lm_head"):
        train(tiny_experiment("train.lora.rank=4", "train.lora.targets=[qkv,qproj]"),
              tmp_path / "run", train_corpus)


def test_a_lora_run_resumes_with_its_adapters_and_refuses_to_resume_without(
        parent, train_corpus, tiny_experiment, tmp_path):
    run = tmp_path / "lora"
    options = ("train.ckpt_every=2", "train.lora.rank=2", f"train.init_from={parent}")
    train(tiny_experiment("train.max_steps=2", *options), run, train_corpus)
    train(tiny_experiment("train.max_steps=4", "train.resume=reschedule", *options), run,
          train_corpus)
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
            if "loss" in json.loads(line)] == [1, 2, 3, 4]
    assert torch.equal(_module_state(run / "checkpoints/step-000004")["tok_emb.weight"],
                       _module_state(run / "checkpoints/step-000002")["tok_emb.weight"])
    with pytest.raises(TrainError, match=r"checkpoint has train.lora=\{'rank': 2"):
        train(tiny_experiment("train.max_steps=6", "train.ckpt_every=2",
                              f"train.init_from={parent}"), run, train_corpus)


def test_a_parent_with_a_damaged_meta_is_one_line_naming_the_file(parent, train_corpus,
                                                                   tmp_path, capsys):
    from launch.cli import main
    from tests.conftest import tiny_experiment_file

    damaged = tmp_path / "parent"
    shutil.copytree(parent, damaged)
    meta = damaged / "checkpoints/step-000030/meta.json"
    meta.write_text('{"step": 30')
    child = tmp_path / "child"
    code = main(["train", str(tiny_experiment_file(tmp_path)), "--corpus", str(train_corpus),
                 "--run-dir", str(child), f"train.init_from={damaged}", "train.max_steps=1",
                 "train.warmup_steps=0"])
    assert code == 2 and capsys.readouterr().err.strip() == (
        f"physlm train: error: train.init_from={damaged}: {meta}: not JSON (Expecting "
        "',' delimiter: line 1 column 12 (char 11))")
    assert not (child / "checkpoints").exists()
