"""Linear probing (`trainer.eval.probe`) of a bios corpus (Part 3.1, the family's targets in
`corpus_gen.bios.probe_targets`): special positions, batched extraction of hidden states, probes
of planted models (a label planted at the probed token: accuracy 1.0; noise there: chance), a
model trained on the biographies beating the same model at init, the task end to end with its
refusals; and the task's contract with families (a toy family's probes and options)."""

import dataclasses
import json
import shutil
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from corpus_gen.bios.people import ATTRIBUTES, full_name
from corpus_gen.bios.pools import PACKAGED
from corpus_gen.bios.probe_targets import label, read_biographies, special_positions
from corpus_gen.core import probe_targets as probes
from corpus_gen.core import registry
from corpus_gen.core.config import CorpusConfig, load_config
from corpus_gen.core.errors import ConfigError, CorpusError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.manifest import FORMAT
from corpus_gen.core.registry import schemas
from corpus_gen.core.tokenizer import Tokenizer
from tests.conftest import ROOT, memorize, tiny_experiment_file
from trainer.config import load_experiment
from trainer.engine import train
from trainer.errors import TrainError
from trainer.eval.activations import extract_features
from trainer.eval.probe import (
    ProbeOptions,
    _accuracy,
    _score,
    _split,
    figure,
    options_schema,
    run,
)
from trainer.eval.registry import EvalContext
from trainer.eval.runner import evaluate
from trainer.model import GPT, ModelConfig

# Small value pools: every city, university, major and employer is shared by many people, so a
# probe meets each test label in training (month: 12 classes, the rest 4).
POOLS = {"first_name_male": 20, "first_name_female": 20, "middle_name": 20, "last_name": 40,
         "city": 4, "university": 4, "field": 4, "company": 4}
PEOPLE = 200
TRAINED_PEOPLE = 40  # the population the training test memorizes
BEFORE_NAME = 39  # biographies of the corpus whose first sentence dates the person before naming


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A bioS single corpus of PEOPLE people drawn from POOLS; a vocabulary large enough that
    most words are one token (~60 tokens a biography)."""
    root = tmp_path_factory.mktemp("probe")
    pools = root / "pools"
    pools.mkdir()
    for name, size in POOLS.items():
        lines = (PACKAGED / f"{name}.txt").read_text().splitlines()[:size]
        (pools / f"{name}.txt").write_text("\n".join(lines) + "\n")
    config = load_config(ROOT / "configs/corpus/bios_s_single.yaml",
                         [f"people={PEOPLE}", f"data_dir={pools}", "records_per_shard=100",
                          "tokenizer.vocab_size=2000", "tokenizer.sample_records=300"],
                         schemas())
    generate_corpus(config, root / "corpus", progress=False, log=lambda *_: None)
    return root / "corpus"


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return Tokenizer.load(corpus / "tokenizer.model")


@pytest.fixture(scope="module")
def docs(corpus):
    return read_biographies(corpus, 0)


def context_for(model: nn.Module, tokenizer: Tokenizer, corpus) -> EvalContext:
    return EvalContext(model, tokenizer, corpus, corpus, torch.device("cpu"))


def before(tokenizer: Tokenizer, text: str, value: str) -> list[int]:
    """The tokens of `text` up to the one just before `value` (bioS: a space before it)."""
    return tokenizer.encode(text[: text.index(value)].rstrip())


def test_the_corpus_is_what_the_probes_need(docs):
    assert len(docs) == PEOPLE and sorted(d["person"]["id"] for d in docs) == list(range(PEOPLE))
    assert {(d["kind"], d["copy"]) for d in docs} == {("bio", 0)}
    for attribute in ATTRIBUTES[1:]:
        assert len({label(d["person"], attribute) for d in docs}) == 4
    assert len({label(d["person"], "birth_date") for d in docs}) == 12


def test_special_positions_are_the_tokens_just_before_each_value(tokenizer, docs):
    skipped = 0
    for doc in docs:
        found, missing = special_positions(tokenizer, doc["text"], doc["ids"], doc["person"])
        for attribute, position in found.items():
            value = doc["person"][attribute]
            assert doc["ids"][: position + 1] == before(tokenizer, doc["text"], value)
            assert tokenizer.decode(doc["ids"][position + 1 :]).startswith(value)
        # only the first sentence (the birth date's, in bioS single) can state before the name
        assert missing in ({}, {"birth_date": "before_name"})
        if missing:
            assert doc["text"].index(doc["person"]["birth_date"]) < doc["text"].index(
                full_name(doc["person"]))
            skipped += 1
    assert skipped == BEFORE_NAME


def test_a_value_missing_before_the_name_inside_a_word_or_mistokenized_is_skipped(tokenizer,
                                                                                  docs):
    person = docs[0]["person"]
    text = (f"{person['birth_city']} is where {full_name(person)} was born, on "
            f"{person['birth_date']}. {person['major']}s was a club. {person['university']}.")
    ids = tokenizer.encode(text)
    found, missing = special_positions(tokenizer, text, ids, person)
    assert missing == {"birth_city": "before_name", "major": "not_found",
                       "employer": "not_found", "company_city": "not_found"}
    assert found == {"birth_date": len(before(tokenizer, text, person["birth_date"])) - 1,
                     "university": len(before(tokenizer, text, person["university"])) - 1}
    wrong = ids[:3] + [ids[3] + 1] + ids[4:]  # tokens that disagree with the text's prefix
    assert special_positions(tokenizer, text, wrong, person)[1]["birth_date"] == "tokenization"


def test_extraction_in_batches_reads_the_residual_stream_of_each_document_alone(tokenizer,
                                                                                 docs):
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, d_model=32, vocab_size=tokenizer.vocab_size))
    lists = [d["ids"] for d in docs[:7]] + [[5, 6]]  # of different lengths
    positions = [[3, 10, len(ids) - 1] for ids in lists[:7]] + [[]]
    positions[2] = [len(lists[2]) - 1, 0]  # any order, any number
    batched = extract_features(model, lists, positions, 3, [0, 1, 2])
    assert batched.shape == (20, 3, 32) and batched.dtype == np.float32
    alone = np.concatenate([extract_features(model, [ids], [ps], 1, [2, 0, 1])
                            for ids, ps in zip(lists, positions)])
    np.testing.assert_allclose(batched, alone[:, [1, 2, 0]], atol=1e-5)
    assert model.training and not model.blocks[0]._forward_pre_hooks  # mode back, hooks gone
    with torch.no_grad():
        ids = torch.tensor([lists[0]])
        logits = model(ids)[0, positions[0]]  # the last layer's stream, through norm and head
        np.testing.assert_allclose(model.lm_head(model.norm(torch.from_numpy(batched[:3, 2]))),
                                   logits, atol=1e-4)
        np.testing.assert_allclose(batched[:3, 0], model.tok_emb(ids)[0, positions[0]],
                                   atol=1e-6)  # rope adds nothing to the embeddings


class Planted(nn.Module):
    """What extraction uses of a GPT (config, blocks to hook, tok_emb for the device,
    positional.max_positions), with a residual stream planted by token prefix: at token t of a
    row it is `codes[ids[:t+1]]` where the prefix is planted, else zeros; identity blocks carry
    it to every layer. A probe that reads another token than the planted one sees zeros."""

    def __init__(self, codes: dict[tuple[int, ...], np.ndarray], n_layer: int = 2):
        super().__init__()
        d_model = len(next(iter(codes.values())))
        self.config = ModelConfig(n_layer=n_layer, n_head=1, d_model=d_model, vocab_size=1)
        self.blocks = nn.ModuleList(nn.Identity() for _ in range(n_layer))
        self.tok_emb = nn.Embedding(1, 1)
        self.positional = nn.Module()
        self.positional.max_positions = None
        self.codes = {key: torch.tensor(code, dtype=torch.float32) for key, code in codes.items()}

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = torch.zeros(*ids.shape, self.config.d_model)
        for b, row in enumerate(ids.tolist()):
            for t in range(len(row)):
                x[b, t] = self.codes.get(tuple(row[: t + 1]), x[b, t])
        for block in self.blocks:
            x = block(x)
        return x


def plant(tokenizer: Tokenizer, docs: list[dict], code) -> Planted:
    """`code(person)` at the name's last token of the name alone (Q) and at the token before
    each value of the biography (P), those found independently of `special_positions`."""
    codes = {}
    for doc in docs:
        person = doc["person"]
        codes[tuple(tokenizer.encode(full_name(person)))] = code(person)
        for attribute in ATTRIBUTES:
            codes[tuple(before(tokenizer, doc["text"], person[attribute]))] = code(person)
    return Planted(codes)


def test_a_label_planted_at_the_probed_tokens_is_read_exactly_and_noise_sits_at_chance(
        tokenizer, docs, corpus):
    classes = {a: sorted({label(d["person"], a) for d in docs}) for a in ATTRIBUTES}

    def one_hots(person: dict) -> np.ndarray:  # every attribute's label, one-hot, side by side
        return np.concatenate([np.eye(len(classes[a]))[classes[a].index(label(person, a))]
                               for a in ATTRIBUTES])

    planted = run(context_for(plant(tokenizer, docs, one_hots), tokenizer, corpus),
                  ProbeOptions(max_people=0, test_fraction=0.2))
    assert planted["people"] == {"train": 160, "test": 40}
    for kind in ("p", "q"):
        assert planted[kind]["layers"] == [0, 1, 2]
        assert planted[kind]["accuracy"] == {a: [1.0, 1.0, 1.0] for a in ATTRIBUTES}, kind
        assert all(0.05 < c < 0.6 for c in planted[kind]["chance"].values())
    assert planted["q"]["n_test"] == dict.fromkeys(ATTRIBUTES, 40)
    assert planted["p"]["n_test"] | {"birth_date": 40} == dict.fromkeys(ATTRIBUTES, 40)
    assert planted["p"]["n_train"]["birth_date"] + planted["p"]["n_test"]["birth_date"] == \
        PEOPLE - BEFORE_NAME
    assert (planted["p"]["skipped"], planted["q"]["skipped"]) == ({"before_name": BEFORE_NAME},
                                                                  {})
    assert planted["summary"]["p_mean"] == planted["summary"]["q_mean"] == 1.0

    rng = np.random.default_rng(0)
    noise = run(context_for(plant(tokenizer, docs, lambda _: rng.normal(size=32)), tokenizer,
                            corpus), ProbeOptions(max_people=0, test_fraction=0.2))
    for kind in ("p", "q"):
        accuracy = np.mean(list(noise[kind]["accuracy"].values()))
        chance = np.mean(list(noise[kind]["chance"].values()))
        assert accuracy < chance + 0.1, kind


def test_probes_on_a_model_that_saw_the_biographies_beat_probes_on_a_random_model(
        tokenizer, docs, corpus, one_thread):
    torch.manual_seed(0)
    config = ModelConfig(n_layer=2, n_head=2, d_model=32, vocab_size=tokenizer.vocab_size)
    trained, at_init = GPT(config), GPT(config)
    memorize(trained, [d["ids"] for d in docs[:TRAINED_PEOPLE]], tokenizer.eos_id, steps=120)
    options = ProbeOptions(max_people=TRAINED_PEOPLE, kinds=["p"], test_fraction=0.5)
    scores = {name: run(context_for(model, tokenizer, corpus), options)["summary"]["p_mean"]
              for name, model in (("trained", trained), ("at_init", at_init))}
    assert scores["trained"] > scores["at_init"] + 0.2, scores


@pytest.mark.parametrize("key, value, reason", [
    ("kinds", ["p", "z"], "must be p, q (bios corpus) or ancestor, boundary (cfg corpus)"),
    ("kinds", ["q", "q"], "names a kind twice"),
    ("layers", [0, -1], "must be >= 0 (0: the embeddings)"),
    ("layers", [1, 1], "names a layer twice"),
    ("max_people", 1, "must be 0 (all) or >= 2"),
    ("test_fraction", 1.0, "must be in (0, 1)"),
    ("C", 0.0, "must be > 0 and finite"),
])
def test_options_out_of_range_are_refused_naming_the_key(key, value, reason):
    with pytest.raises(ConfigError) as error:
        ProbeOptions(**{key: value}).validate()
    assert error.value.key == key and error.value.reason.startswith(reason)


def test_a_layer_past_the_last_block_is_refused_naming_it(tokenizer, docs, corpus):
    model = plant(tokenizer, docs[:2], lambda _: np.ones(3))
    with pytest.raises(ConfigError) as error:
        run(context_for(model, tokenizer, corpus), ProbeOptions(layers=[0, 3]))
    assert str(error.value) == ("eval.probe.layers=[0, 3]: layer 3 does not exist: the model "
                                "has layers 0-2 (0: the embeddings)")


def test_a_kind_of_the_other_family_is_refused_naming_it(tokenizer, docs, corpus):
    model = plant(tokenizer, docs[:2], lambda _: np.ones(3))
    with pytest.raises(ConfigError) as error:
        run(context_for(model, tokenizer, corpus), ProbeOptions(kinds=["q", "boundary"]))
    assert str(error.value) == ("eval.probe.kinds=['q', 'boundary']: boundary is no probe of a "
                                "bios corpus: it has p, q")


def test_a_corpus_without_biographies_is_refused_in_one_line(tokenizer, docs, corpus, tmp_path):
    model = plant(tokenizer, docs[:2], lambda _: np.ones(3))
    damaged = tmp_path / "damaged"
    shutil.copytree(corpus, damaged)
    (damaged / "train" / "shard-000001.tar").unlink()
    with pytest.raises(CorpusError, match=r"^\S*damaged/train/shard-000001.tar: shard missing; "
                                          r"run physlm verify \S*damaged$"):
        run(context_for(model, tokenizer, damaged), ProbeOptions())
    path = tmp_path / "igsm.yaml"
    path.write_text("family: igsm\n")
    config = load_config(path, ["problems=20", "max_op=3", "max_edge=4", "ood_ops=[5]",
                                "eval_problems=1", "tokenizer.vocab_size=400",
                                "tokenizer.sample_records=20"], schemas())
    generate_corpus(config, tmp_path / "igsm", progress=False, log=lambda *_: None)
    with pytest.raises(TrainError, match=r"igsm: a igsm corpus, whose family registers no probe "
                                         r"targets; the probe task reads bios or cfg corpora$"):
        run(context_for(model, tokenizer, tmp_path / "igsm"), ProbeOptions())


@pytest.fixture(scope="module")
def run_dir(corpus, tmp_path_factory):
    """A tiny run trained for two steps on the corpus."""
    directory = tmp_path_factory.mktemp("probe_run")
    experiment = load_experiment(tiny_experiment_file(directory),
                                 ["train.max_steps=2", "train.ckpt_every=2"])
    train(experiment, directory / "run", corpus)
    return directory / "run"


def test_the_task_runs_through_evaluate_and_writes_its_table_and_heat_map(run_dir, tmp_path):
    run_copy = tmp_path / "run"
    shutil.copytree(run_dir, run_copy)
    config = OmegaConf.load(run_copy / "config.yaml")
    assert config.eval.probe == OmegaConf.structured(ProbeOptions())  # the group is there
    config.eval.probe.max_people = 50
    OmegaConf.save(config, run_copy / "config.yaml")
    results = evaluate(run_copy, ["probe"])["probe"]
    written = json.loads((run_copy / "eval" / "probe.json").read_text())
    assert written == results and (written["step"], written["run"]) == (2, "run")
    assert written["people"] == {"train": 40, "test": 10}
    for kind in ("p", "q"):
        entry = written[kind]
        assert entry["layers"] == [0, 1, 2] and set(entry["accuracy"]) == set(ATTRIBUTES)
        assert all(0.0 <= v <= 1.0 for values in entry["accuracy"].values() for v in values)
        best = [max(entry["accuracy"][a]) for a in ATTRIBUTES]
        assert written["summary"][f"{kind}_mean"] == pytest.approx(np.mean(best))
    assert (run_copy / "eval" / "probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_physlm_eval_refuses_a_missing_layer_in_one_line_writing_nothing(run_dir, tmp_path,
                                                                         capsys):
    from launch.cli import main

    run_copy = tmp_path / "run"
    shutil.copytree(run_dir, run_copy)
    config = OmegaConf.load(run_copy / "config.yaml")
    config.eval.probe.layers = [1, 7]
    OmegaConf.save(config, run_copy / "config.yaml")
    assert main(["eval", str(run_copy), "--task", "probe"]) == 2
    assert capsys.readouterr().err == (
        "physlm eval: error: eval.probe.layers=[1, 7]: layer 7 does not exist: the model has "
        "layers 0-2 (0: the embeddings)\n")
    assert not (run_copy / "eval" / "probe.json").exists()
    assert not (run_copy / "eval" / "probe.png").exists()


@dataclass
class ToyOptions:
    max_numbers: int = 8

    def validate(self) -> None:
        if self.max_numbers < 2:
            raise ConfigError("max_numbers", self.max_numbers, "must be >= 2")


def toy_targets(request: probes.ProbeRequest) -> probes.ProbeTargets:
    """Numbers 0 .. max_numbers - 1, number i the document [1, i + 2] read at both tokens;
    columns: its low bit (every row) and its high bit (the second token's rows only)."""
    n = request.options.max_numbers
    reading = probes.Reading([[1, i + 2] for i in range(n)], [[0, 1]] * n)
    labels = {"low": [i % 2 for i in range(n) for _ in (0, 1)],
              "high": [(i // 2) % 2 if token else None for i in range(n) for token in (0, 1)]}
    kinds = {"bits": probes.KindTargets(labels, {"odd": 1})}
    return probes.ProbeTargets("numbers", "bit", kinds, reading, {"base": "two"})


TOY = probes.ProbeSpec({"bits": "the number's bits"}, toy_targets, ToyOptions)


@pytest.fixture
def toy_family(monkeypatch, tmp_path):
    """A family registered with probe targets and an option of its own, and a corpus of it (a
    manifest alone: its targets read nothing else)."""
    monkeypatch.setattr(registry, "_FAMILIES", dict(registry.families()))
    registry.register(registry.Family("toy", 1, CorpusConfig, None, None, None,
                                      probe_targets=TOY))
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"format": FORMAT, "family": "toy", "shards": [], "tokenizer": {}, "eval": []}))
    return tmp_path


def test_a_family_plugs_in_its_probes_and_its_options_without_the_task_knowing_it(toy_family):
    schema = options_schema()
    options = schema(max_numbers=12)
    assert [f.name for f in dataclasses.fields(schema)][:5] == [
        "max_people", "max_strings", "positions_per_string", "max_numbers", "kinds"]
    with pytest.raises(ConfigError) as error:
        schema(max_numbers=1).validate()
    assert error.value.key == "max_numbers"
    with pytest.raises(ConfigError) as error:
        schema(kinds=["z"]).validate()
    assert error.value.reason == ("must be p, q (bios corpus) or ancestor, boundary (cfg "
                                  "corpus) or bits (toy corpus)")
    # nothing planted at token 0 of each document; at token 1 its high bit and its low bit
    codes = {(1,): np.zeros(2)}
    codes |= {(1, i + 2): np.array([(i // 2) % 2, i % 2], dtype=float) for i in range(12)}
    results = run(EvalContext(Planted(codes), None, toy_family, toy_family, torch.device("cpu")),
                  options)
    assert list(results)[:3] == ["base", "numbers", "positions"]
    assert results["numbers"] == {"train": 10, "test": 2}
    assert results["positions"] == {"train": 20, "test": 4}
    entry = results["bits"]
    assert entry["n_train"] == {"low": 20, "high": 10} and entry["skipped"] == {"odd": 1}
    # the high bit is read at token 1 alone; the low bit at both tokens, and the two probe-test
    # numbers (one odd) look alike at token 0: one of those two rows is wrong
    assert entry["accuracy"] == {"high": [1.0, 1.0, 1.0], "low": [0.75, 0.75, 0.75]}
    assert entry["chance"] == {"low": 0.5, "high": 0.5} and entry["n_test"]["low"] == 4
    assert results["summary"]["bits_high"] == 1.0 and results["best_layer"]["bits_high"] == 0
    assert results["about"] == {"subjects": "numbers", "columns": "bit",
                                "titles": {"bits": "the number's bits"}, "facts": ["base"]}
    assert figure(results | {"step": 3}).texts[0].get_text() == (
        "Linear probes by layer and bit (two, step 3; 10 probe-train / 2 probe-test numbers, "
        "20 / 4 positions)")


def test_two_families_that_name_one_probe_option_are_refused(toy_family):
    registry.register(registry.Family("toy2", 1, CorpusConfig, None, None, None,
                                      probe_targets=TOY))
    with pytest.raises(ValueError, match=r"^eval.probe.max_numbers: an option of the toy "
                                         r"family and of the toy2 family$"):
        options_schema()


def test_chance_is_the_training_majoritys_share_of_the_test_rows():
    entry = {key: {} for key in ("accuracy", "chance", "n_train", "n_test")}
    features = np.random.default_rng(0).normal(size=(7, 1, 4))
    _score(entry, "c", features, {False: [0, 1, 2, 3], True: [4, 5, 6]},
           {False: [0, 0, 0, 1], True: [1, 1, 0]}, 1.0)
    assert entry["chance"]["c"] == pytest.approx(1 / 3)  # class 0's share of the test rows


def test_the_split_follows_its_seed():
    first, second = _split(50, 0.2, 0), _split(50, 0.2, 1)
    assert first.sum() == second.sum() == 10 and (first == _split(50, 0.2, 0)).all()
    assert not (first == second).all()


def test_the_probes_regularization_is_c():
    x = np.r_[np.zeros(30), np.ones(10)][:, None] + np.linspace(0, 0.1, 40)[:, None]
    y = [0] * 30 + [1] * 10
    x_test, y_test = np.ones((10, 1)), [1] * 10
    assert _accuracy(x, y, x_test, y_test, C=1.0) == 1.0
    assert _accuracy(x, y, x_test, y_test, C=1e-6) == 0.0  # weights ~0: the majority class
