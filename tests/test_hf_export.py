"""`physlm export`: a run's checkpoint opens in HF transformers and computes what physlm computes
(logits on real documents, greedy QA answers), its corpus's tokenizer encodes every document with
physlm's ids, and what cannot be exported is one line, exit 2, with nothing written."""

import dataclasses
import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
import torch
import transformers
import yaml
from conftest import ROOT, memorize, tiny_experiment_file
from omegaconf import OmegaConf
from sentencepiece import sentencepiece_model_pb2 as sp_model
from test_fixed_vocabulary import SUMMING
from transformers import AutoModelForCausalLM, AutoTokenizer

from corpus_gen.bios.qa import answered
from corpus_gen.core import registry as families
from corpus_gen.core.config import corpus_config, load_config
from corpus_gen.core.corpus_tokenizer import load_tokenizer
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.manifest import read_manifest
from corpus_gen.core.records import batch_texts
from corpus_gen.core.shards import read_shard
from corpus_gen.core.tokenizer import Tokenizer, train_tokenizer
from launch.cli import main
from trainer.checkpoint import tag
from trainer.config import load_experiment
from trainer.engine import train
from trainer.eval.generation import generate
from trainer.eval.runner import load_model
from trainer.hf import export
from trainer.hf.export import RECORD, export_run
from trainer.hf.layouts import ExportRefused, layout_for
from trainer.hf.tokenizer import hf_tokenizer
from trainer.hf.weights import hf_state_dict
from trainer.model import GPT
from trainer.model.config import ModelConfig, model_schema
from trainer.model.positional_options import RopeOptions
from trainer.model.registry import BlockOption, block_options, register_block_option
from trainer.run_dir import CHECKPOINTS, CONFIG, META, WEIGHTS, point_latest

LAYOUTS = {"gpt2": {"pos": "learned", "norm": "layernorm", "mlp": "gelu"},
           "neox": {"pos": "rope", "norm": "layernorm", "mlp": "gelu",
                    "rope": RopeOptions(theta=500.0)},
           "llama": {"pos": "rope", "norm": "rmsnorm", "mlp": "swiglu",
                     "rope": RopeOptions(theta=500.0)}}
HF_CLASS = {"gpt2": "GPT2LMHeadModel", "neox": "GPTNeoXForCausalLM", "llama": "LlamaForCausalLM"}
WHAT_MAPS = ("export maps pos=learned+norm=layernorm+mlp=gelu -> GPT2LMHeadModel, "
             "pos=rope+norm=layernorm+mlp=gelu -> GPTNeoXForCausalLM and "
             "pos=rope+norm=rmsnorm+mlp=swiglu -> LlamaForCausalLM")
NORM_EPS = {"gpt2": "layer_norm_epsilon", "neox": "layer_norm_eps", "llama": "rms_norm_eps"}


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Small models: torch's second thread only spins on a busy machine."""


def model_config(corpus: Path, layout: str, **overrides) -> ModelConfig:
    vocab = read_manifest(corpus)["tokenizer"]["vocab_size"]
    shape = {"n_layer": 2, "n_head": 2, "d_model": 32, "ctx": 128, "vocab_size": vocab}
    return model_schema()(**shape | LAYOUTS[layout] | overrides)


def scrambled(config: ModelConfig, std: float = 0.1) -> GPT:
    """A model whose every weight, bias and norm scale is random (norm scales around 1): a
    mapping that drops or misplaces any of them changes the logits."""
    torch.manual_seed(0)
    model = GPT(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if "norm" in name else 0.0, std)
    return model.eval()


def write_run(directory: Path, model: GPT, corpus: Path, steps: tuple[int, ...] = (5,),
              **saved_config) -> Path:
    """A run directory as training leaves one, weights only: config.yaml naming the corpus and a
    checkpoint (meta.json, weights.pt) per step, `latest` at the last; `saved_config`: model
    keys saved other than the model's own."""
    directory.mkdir(parents=True)
    (directory / CONFIG).write_text(yaml.safe_dump({"name": "t", "corpus_dir": str(corpus)}))
    saved = dataclasses.asdict(model.config) | saved_config
    sha = read_manifest(corpus)["tokenizer"]["sha256"]
    for step in steps:
        path = directory / CHECKPOINTS / tag(step)
        path.mkdir(parents=True)
        torch.save({"model_config": saved, "state_dict": model.state_dict()}, path / WEIGHTS)
        (path / META).write_text(json.dumps({"step": step, "model_config": saved,
                                             "tokenizer_sha256": sha}))
    point_latest(directory / CHECKPOINTS, tag(steps[-1]))
    return directory


def documents(corpus: Path, count: int, length: int) -> torch.Tensor:
    """The first `count` training documents of the corpus [count, length]: cut to `length`
    tokens, the shorter ones filled up with EOS."""
    manifest = read_manifest(corpus)
    eos = manifest["tokenizer"]["eos_id"]
    samples = read_shard(corpus / manifest["shards"][0]["name"])
    rows = [next(samples)["ids"].tolist()[:length] for _ in range(count)]
    return torch.tensor([row + [eos] * (length - len(row)) for row in rows])


def load_hf(directory: Path):
    model, info = AutoModelForCausalLM.from_pretrained(directory, output_loading_info=True)
    assert (info["missing_keys"], info["unexpected_keys"], info["mismatched_keys"]) == (
        set(), set(), set())
    return model.eval()


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("layout", ["gpt2", "neox", "llama"])
def test_exported_model_computes_physlm_logits_on_real_documents(train_corpus, tmp_path, layout,
                                                                 tied, bias):
    model = scrambled(model_config(train_corpus, layout, tie_embeddings=tied, bias=bias))
    out = tmp_path / "hf"
    record = export_run(write_run(tmp_path / "run", model, train_corpus), out)
    assert record["step"] == 5 and record["hf_class"] == HF_CLASS[layout]
    assert record["transformers_version"] == transformers.__version__  # >= 5: rope_parameters
    assert json.loads((out / RECORD).read_text()) == record
    hf = load_hf(out)
    assert type(hf).__name__ == HF_CLASS[layout] and hf.dtype == torch.float32
    assert getattr(hf.config, NORM_EPS[layout]) == 1e-5  # physlm's (HF's Llama default: 1e-6)
    assert (hf.get_output_embeddings().weight is hf.get_input_embeddings().weight) == tied
    ids = documents(train_corpus, 6, 128)
    with torch.no_grad():
        ours, theirs = model(ids), hf(ids).logits  # each [6, 128, V]
    assert ours.std() > 0.3  # far from uniform: a misplaced tensor moves them by ~0.1
    assert (ours - theirs).abs().max() <= 1e-5


def test_a_run_trained_with_flash_attn_exports_where_flash_attn_is_not_installed(train_corpus,
                                                                                  tmp_path):
    model = scrambled(model_config(train_corpus, "llama"))
    run = write_run(tmp_path / "run", model, train_corpus, attention="flash_attn")
    record = export_run(run, tmp_path / "hf")
    assert record["model_config"]["attention"] == "flash_attn"
    ids = documents(train_corpus, 2, 64)
    with torch.no_grad():
        assert (model(ids) - load_hf(tmp_path / "hf")(ids).logits).abs().max() <= 1e-5


@pytest.mark.parametrize("layout", ["neox", "llama"])
def test_rotary_logits_differ_only_by_how_hf_rounds_the_frequencies(train_corpus, tmp_path,
                                                                     layout):
    """With weights 3x larger, attention is sharp enough to turn the last-bit differences of
    HF's frequencies 1 / theta^(2i / head_dim) from physlm's theta^(-i / half) into 4e-5 (NeoX)
    to 1e-4 (Llama) on the logits; given physlm's frequencies, HF's class computes physlm's
    logits bit for bit."""
    model = scrambled(model_config(train_corpus, layout, bias=True), std=0.3)
    export_run(write_run(tmp_path / "run", model, train_corpus), tmp_path / "hf")
    hf = load_hf(tmp_path / "hf")
    ids = documents(train_corpus, 6, 128)
    with torch.no_grad():
        ours = model(ids)  # [6, 128, V]
        rounded = (ours - hf(ids).logits).abs().max()
        half = model.config.head_dim // 2
        hf.base_model.rotary_emb.inv_freq.copy_(
            500.0 ** (-torch.arange(half, dtype=torch.float32) / half))
        exact = (ours - hf(ids).logits).abs().max()
    assert ours.std() > 1.5
    assert 0 < rounded <= 2e-4 and exact == 0


@pytest.mark.parametrize("layout", ["gpt2", "neox", "llama"])
def test_greedy_generation_through_transformers_answers_as_physlm(train_corpus, tmp_path, layout):
    tokenizer = load_tokenizer(train_corpus, read_manifest(train_corpus))
    rows = [json.loads(line) for line in
            (train_corpus / "eval/qa_train.jsonl").read_text().splitlines()][:24]  # 4 people
    prompts = [tokenizer.encode(row["prompt"]) for row in rows]
    answers = [tokenizer.encode(answered(row["prompt"], row["answer"]))[len(prompt):]
               for row, prompt in zip(rows, prompts)]
    torch.manual_seed(0)
    model = GPT(model_config(train_corpus, layout, d_model=64))
    memorize(model, [p + a for p, a in zip(prompts, answers)], tokenizer.eos_id, steps=80,
             lr=0.005)
    model.eval()
    ours = generate(model, prompts, max_new_tokens=16, eos_id=tokenizer.eos_id)
    assert sum(o == a for o, a in zip(ours, answers)) >= 12  # it learned most answers (21-22)

    out = tmp_path / "hf"
    export_run(write_run(tmp_path / "run", model, train_corpus), out)
    hf, hf_tok = load_hf(out), AutoTokenizer.from_pretrained(out, padding_side="left")
    batch = hf_tok([row["prompt"] for row in rows], return_tensors="pt", padding=True)
    generated = hf.generate(**batch, max_new_tokens=16)  # greedy, to EOS: generation_config
    theirs = [row[: row.index(tokenizer.eos_id)] if tokenizer.eos_id in row else row
              for row in generated[:, batch["input_ids"].shape[1]:].tolist()]
    assert theirs == ours


def assert_encodes_every_document(tokenizer_dir: Path, corpus: Path) -> int:
    """AutoTokenizer of `tokenizer_dir` gives every training document of `corpus` the ids its
    shards hold, and every string of its evaluation sets physlm's ids; the number of texts."""
    manifest = read_manifest(corpus)
    ours, theirs = load_tokenizer(corpus, manifest), AutoTokenizer.from_pretrained(tokenizer_dir)
    samples = [s for shard in manifest["shards"] for s in read_shard(corpus / shard["name"])]
    texts = [s["json"]["text"] for s in samples]
    assert theirs(texts)["input_ids"] == [s["ids"].tolist() for s in samples]
    strings = []
    for entry in manifest["eval"]:
        for line in (corpus / entry["name"]).read_text().splitlines():
            row = json.loads(line)
            strings += [value for value in row.values() if isinstance(value, str)]
            if {"prompt", "answer"} <= set(row):  # a QA row: the answered prompt too
                strings.append(answered(row["prompt"], row["answer"]))
    assert theirs(strings)["input_ids"] == [ours.encode(text) for text in strings]
    return len(texts) + len(strings)


def test_the_exported_tokenizer_encodes_every_document_of_a_bpe_corpus(train_corpus, tmp_path):
    model = scrambled(model_config(train_corpus, "llama"))
    export_run(write_run(tmp_path / "run", model, train_corpus), tmp_path / "hf")
    assert assert_encodes_every_document(tmp_path / "hf", train_corpus) > 1000
    theirs = AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = "What is the birth city of Ünï?\nAnswer: x"  # bytes outside the vocabulary, too
    assert theirs.decode(theirs(text)["input_ids"]) == text
    assert theirs.eos_token_id == 2 and theirs(text)["input_ids"][0] != 1  # no BOS added


def test_the_exported_tokenizer_encodes_every_document_of_a_unigram_corpus(tmp_path):
    config = load_config(ROOT / "configs/corpus/bios_s_single.yaml",
                         ["people=20", "mode=mix", "tokenizer.model_type=unigram",
                          "tokenizer.vocab_size=500", "tokenizer.sample_records=100"],
                         families.schemas())
    corpus = tmp_path / "corpus"
    generate_corpus(config, corpus, progress=False, log=lambda *_: None)
    tokenizer = load_tokenizer(corpus, read_manifest(corpus))
    proto = sp_model.ModelProto()
    proto.ParseFromString(tokenizer.model_bytes)
    assert proto.trainer_spec.model_type == sp_model.TrainerSpec.UNIGRAM
    hf_tokenizer(tokenizer).save_pretrained(tmp_path / "hf")
    assert assert_encodes_every_document(tmp_path / "hf", corpus) > 200


def test_the_exported_tokenizer_encodes_every_document_of_a_fixed_vocabulary(tmp_path,
                                                                              monkeypatch):
    monkeypatch.setattr(families, "_FAMILIES", dict(families.families()))
    families.register(SUMMING)
    given = OmegaConf.from_dotlist(["family=summing", "records_per_shard=20"])
    corpus = tmp_path / "corpus"
    generate_corpus(corpus_config([(given, "test")], families.schemas()), corpus,
                    progress=False, log=lambda *_: None)
    hf_tokenizer(load_tokenizer(corpus, read_manifest(corpus))).save_pretrained(tmp_path / "hf")
    assert assert_encodes_every_document(tmp_path / "hf", corpus) == 55  # 50 documents, 5 rows
    theirs = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert theirs("Q 4 + 5 =")["input_ids"] == [1, 7, 13, 8, 14]
    assert theirs.decode([1, 7, 13, 8, 14]) == "Q 4 + 5 ="
    assert theirs.eos_token_id == 0


CFG = ("cfg3f", ["samples=60"], "\u25811", 300)  # terminals: reserved pieces with their "▁"
IGSM = ("igsm_med_pq", ["problems=40", "retry_rate=0.3"], "[BACK]", 600)


# no unigram model of a CFG corpus: SentencePiece trains none when every word is reserved
@pytest.mark.parametrize("corpus, overrides, symbol, vocab, kind", [
    (*CFG, "bpe"), (*IGSM, "bpe"), (*IGSM, "unigram")], ids=["cfg-bpe", "igsm-bpe",
                                                             "igsm-unigram"])
def test_reserved_pieces_of_each_family_encode_as_sentencepiece_does(corpus, overrides, symbol,
                                                                     vocab, kind):
    config = load_config(ROOT / f"configs/corpus/{corpus}.yaml", overrides, families.schemas())
    family = families.get_family(config.family)
    layout = family.layout(config)
    texts = [t for batch in family.document_batches(config, 0, layout.records)
             for t in batch_texts(batch)]
    assert any(symbol.lstrip("\u2581") in text for text in texts)
    texts += ["\nstarts with a newline", " a space first", "two  spaces \n", ""]
    tokenizer = Tokenizer(train_tokenizer(texts, vocab, kind, layout.user_symbols))
    theirs = hf_tokenizer(tokenizer)
    assert theirs(texts)["input_ids"] == [tokenizer.encode(text) for text in texts]


@pytest.fixture(scope="module")
def trained_run(train_corpus, tmp_path_factory) -> Path:
    """A run trained by the engine (llama layout, untied head): checkpoints at steps 2 and 4."""
    tmp = tmp_path_factory.mktemp("trained")
    experiment = load_experiment(tiny_experiment_file(tmp), [
        "model.pos=rope", "model.norm=rmsnorm", "model.mlp=swiglu",
        "model.tie_embeddings=false", "train.max_steps=4", "train.ckpt_every=2"])
    train(experiment, tmp / "run", train_corpus)
    return tmp / "run"


def test_physlm_export_writes_a_trained_run_and_replaces_its_earlier_export(
        trained_run, train_corpus, tmp_path, capsys):
    out = tmp_path / "hf"
    assert main(["export", str(trained_run), "--out", str(out)]) == 0
    assert capsys.readouterr().out == (f"export | step 4 of {trained_run} -> {out} "
                                       "(LlamaForCausalLM)\n")
    model, _ = load_model(trained_run, torch.device("cpu"))
    ids = documents(train_corpus, 4, 64)
    with torch.no_grad():
        assert (model(ids) - load_hf(out)(ids).logits).abs().max() <= 1e-5
    assert main(["export", str(trained_run), "--checkpoint", "2", "--out", str(out)]) == 0
    assert json.loads((out / RECORD).read_text())["step"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no staging directory left


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_the_export_directory_takes_its_mode_from_the_umask_as_mkdir_does(train_corpus, tmp_path,
                                                                          umask):
    run = write_run(tmp_path / "run", scrambled(model_config(train_corpus, "gpt2")),
                    train_corpus)
    before = os.umask(umask)
    try:
        export_run(run, tmp_path / "hf")
        (tmp_path / "mkdir").mkdir()
    finally:
        os.umask(before)
    assert _mode(tmp_path / "hf") == _mode(tmp_path / "mkdir") == 0o777 & ~umask
    files = sorted((tmp_path / "hf").iterdir())
    assert "model.safetensors" in [p.name for p in files] and len(files) >= 6
    assert {p.name: _mode(p) for p in files} == {p.name: 0o666 & ~umask for p in files}


def _files(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _refused(args: list[str], capsys) -> str:
    assert main(["export", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    return captured.err.removeprefix("physlm export: error: ").rstrip("\n")


@pytest.fixture
def earlier_export(train_corpus, tmp_path) -> tuple[Path, Path]:
    """A run (gpt2 layout, checkpoints at steps 3 and 5) and an export of it."""
    run = write_run(tmp_path / "run", scrambled(model_config(train_corpus, "gpt2")),
                    train_corpus, steps=(3, 5))
    export_run(run, tmp_path / "hf")
    return run, tmp_path / "hf"


def test_refusals_are_one_line_and_leave_the_directory_untouched(earlier_export, train_corpus,
                                                                 tmp_path, capsys, monkeypatch):
    run, out = earlier_export
    before = _files(out)
    assert _refused([str(run), "--checkpoint", "4", "--out", str(out)], capsys) == (
        f"--checkpoint 4: {run} has no checkpoint of that step (its checkpoints: 3, 5)")
    alibi = write_run(tmp_path / "alibi", scrambled(model_config(train_corpus, "gpt2",
                                                                 pos="alibi")), train_corpus)
    assert _refused([str(alibi), "--out", str(out)], capsys) == (
        f"model.pos='alibi': not exportable to HF transformers; {WHAT_MAPS}")
    empty = tmp_path / "empty"
    (empty / CHECKPOINTS).mkdir(parents=True)
    assert _refused([str(empty), "--out", str(out)], capsys) == (
        f"{empty}: no checkpoint to export (no checkpoints/latest)")
    other = tmp_path / "other"  # the run's corpus, but for its tokenizer
    shutil.copytree(train_corpus, other)
    manifest = read_manifest(other)
    manifest["tokenizer"]["sha256"] = "0" * 64
    (other / "manifest.json").write_text(json.dumps(manifest))
    assert _refused([str(run), "--corpus", str(other), "--out", str(out)], capsys) == (
        f"--corpus {other}: its tokenizer differs from the one {run} was trained with; pass "
        "the run's corpus with --corpus")
    gone = tmp_path / "gone"
    assert _refused([str(run), "--corpus", str(gone), "--out", str(out)], capsys) == (
        f"--corpus {gone}: no such corpus directory")
    (run / CONFIG).write_text(yaml.safe_dump({"name": "t", "corpus_dir": str(gone)}))
    assert _refused([str(run), "--out", str(out)], capsys) == (
        f"{gone} ({run}'s corpus_dir): no such corpus directory; pass the run's corpus with "
        "--corpus")
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert _refused([str(run), "--out", str(out)], capsys) == (
        "physlm export needs HF transformers, tokenizers and safetensors (transformers is not "
        "installed): pip install -e '.[hf]'")
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alibi", "empty", "hf", "other",
                                                          "run"]


def test_a_tokenizer_that_does_not_convert_is_refused_before_any_directory_is_made(
        train_corpus, tmp_path, capsys, monkeypatch):
    run = write_run(tmp_path / "run", scrambled(model_config(train_corpus, "llama")),
                    train_corpus)
    proto = sp_model.ModelProto()
    proto.ParseFromString(load_tokenizer(train_corpus, read_manifest(train_corpus)).model_bytes)
    proto.normalizer_spec.remove_extra_whitespaces = True
    monkeypatch.setattr(export, "load_tokenizer",
                        lambda *_: Tokenizer(proto.SerializeToString()))
    out = tmp_path / "new" / "hf"
    assert _refused([str(run), "--out", str(out)], capsys) == (
        "the corpus's tokenizer.model has normalizer_spec.remove_extra_whitespaces=True: export "
        "reproduces SentencePiece models trained with False, as physlm trains them")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_failed_move_into_place_brings_the_earlier_export_back(earlier_export, tmp_path,
                                                                  monkeypatch):
    run, out = earlier_export
    before = _files(out)
    rename = Path.rename

    def failing(self: Path, target: Path) -> Path:
        """The staged export's move onto `out` fails, as on a full or failing disk."""
        if Path(target) == out and not self.name.endswith("-replaced"):
            raise OSError(5, "Input/output error", str(self))
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing)
    with pytest.raises(OSError, match="Input/output error"):
        export_run(run, out, step=3)
    assert _files(out) == before and json.loads((out / RECORD).read_text())["step"] == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run"]


def test_a_directory_that_is_no_export_is_refused_and_left_as_it_was(earlier_export, tmp_path,
                                                                     capsys):
    run, _ = earlier_export
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert _refused([str(run), "--out", str(out)], capsys) == (
        f"--out {out}: holds files that are not a physlm export (no valid {RECORD}); choose "
        "another directory or empty it")
    assert _files(out) == {"notes.txt": b"keep me"}
    (tmp_path / "file").write_text("x")
    assert _refused([str(run), "--out", str(tmp_path / "file")], capsys) == (
        f"--out {tmp_path / 'file'}: exists and is not a directory; choose another")


def test_weights_that_do_not_fit_their_config_are_one_line(train_corpus, tmp_path, capsys):
    run = write_run(tmp_path / "run", scrambled(model_config(train_corpus, "neox")), train_corpus)
    weights = run / CHECKPOINTS / tag(5) / WEIGHTS
    saved = torch.load(weights)
    del saved["state_dict"]["blocks.1.mlp.fc.weight"]
    torch.save(saved, weights)
    assert _refused([str(run), "--out", str(tmp_path / "hf")], capsys) == (
        f"{weights}: does not fit its model_config: Missing key(s) in state_dict: "
        '"blocks.1.mlp.fc.weight".')
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("overrides, fault", [
    ({"norm": "rmsnorm"}, "model.norm='rmsnorm' with model.pos='learned'"),
    ({"mlp": "swiglu"}, "model.mlp='swiglu' with model.pos='learned'"),
    # one key away from both rope layouts: both keys are at fault
    ({"pos": "rope", "norm": "rmsnorm"},  # gpt_tiny
     "model.norm='rmsnorm' and model.mlp='gelu' with model.pos='rope'"),
    ({"pos": "rope", "mlp": "swiglu"},
     "model.norm='layernorm' and model.mlp='swiglu' with model.pos='rope'"),
    ({"pos": "relative"}, "model.pos='relative'"),
    ({"pos": "pos_only"}, "model.pos='pos_only'"),
    ({"pos": "uniform"}, "model.pos='uniform'"),
    ({"pos": "none"}, "model.pos='none'"),
])
def test_a_model_without_an_hf_counterpart_names_the_fields_at_fault(train_corpus, overrides,
                                                                      fault):
    with pytest.raises(ExportRefused) as caught:
        layout_for(model_config(train_corpus, "gpt2", **overrides))
    assert str(caught.value) == f"{fault}: not exportable to HF transformers; {WHAT_MAPS}"


def test_physlm_default_model_and_gpt_rot_map_to_neox():
    gpt_rot = yaml.safe_load((ROOT / "configs/model/gpt2_small_rope.yaml").read_text())
    for config in (ModelConfig(vocab_size=600), model_schema()(vocab_size=600, **gpt_rot)):
        assert layout_for(config).hf_class == "GPTNeoXForCausalLM"


@dataclasses.dataclass
class ToyOptions:
    taps: int = 0  # 0: off

    def validate(self, config: ModelConfig) -> None:
        pass


def test_a_block_option_switched_on_is_refused(train_corpus):
    register_block_option(BlockOption("toy", "builtins:print", ToyOptions))
    try:
        assert layout_for(model_config(train_corpus, "llama")).hf_class == "LlamaForCausalLM"
        with pytest.raises(ExportRefused, match=r"^model.toy \(a block option, on\): not expo"):
            layout_for(model_config(train_corpus, "llama", toy=ToyOptions(taps=2)))
    finally:
        del block_options()["toy"]


def test_reserved_pieces_match_longest_first():
    texts = [f"a {i} b \u2581x1 \u2581x12 q{i}" for i in range(200)]
    tokenizer = Tokenizer(train_tokenizer(texts, 300, "bpe", ["\u2581x1", "\u2581x12"]))
    text = "c \u2581x12 d"  # "x12" after the word mark: the longer reserved piece
    assert tokenizer.processor.id_to_piece(tokenizer.encode(text)).count("\u2581x12") == 1
    assert hf_tokenizer(tokenizer)(text)["input_ids"] == tokenizer.encode(text)


def test_an_untied_neox_head_is_saved_as_embed_out():
    config = ModelConfig(n_layer=1, n_head=2, d_model=32, vocab_size=50, ctx=16,
                         tie_embeddings=False)  # the default pos, norm and mlp: NeoX's layout
    layout = layout_for(config)
    state = GPT(config).state_dict()
    mapped = hf_state_dict(config, layout, state)
    assert layout.name == "gpt_neox" and "lm_head.weight" not in mapped
    assert torch.equal(mapped["embed_out.weight"], state["lm_head.weight"])
