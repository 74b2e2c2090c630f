"""The capacity evaluation task (Part 3.3's bits of knowledge) with planted models on tiny
bioD-like corpora: a model that knows everything scores N log2(N0/N) name bits, every value bit
and the dictionaries' bits up to the sampling spread; a uniform one scores nothing; one that
knows half the people scores their share exactly; damaged or foreign corpora are named."""

import json
import math
import random

import numpy as np
import pytest
import torch

import trainer.eval.capacity as capacity
from corpus_gen.core.manifest import MANIFEST
from corpus_gen.core.vocabulary import EOS, Vocabulary
from tests.conftest import record_corpus_file, record_eval_set
from tests.planted_answers import assert_registered_with_its_shipped_config
from tests.planted_lm import PlantedLM
from trainer.errors import TrainError
from trainer.eval.capacity_data import Dictionaries
from trainer.eval.registry import EvalContext

FIRST, LAST = 6, 5  # name pools: N0 = 30 names of two tokens
N, K, C, D, T = 12, 3, 2, 4, 6


def _log2_binomial(n: int, k: int) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


class Setting:
    """A bioD-like population: names `f<i> l<j>`, then per attribute (in a per-person order)
    its token `attr<k>` and C chunks of L alphabet tokens `t<x>` from the attribute's dictionary
    of D chunks; the corpus directory holds biod.json and eval/biod_people.jsonl as physlm gen
    records them."""

    def __init__(self, root, chunk_len: int, seed: int = 0):
        rng = random.Random(seed)
        self.chunk_len = chunk_len
        self.vocab = Vocabulary([EOS, *(f"f{i}" for i in range(FIRST)),
                                 *(f"l{j}" for j in range(LAST)),
                                 *(f"attr{k}" for k in range(K)),
                                 *(f"t{x}" for x in range(T))], "test")
        alphabet = [self.vocab.token_id(f"t{x}") for x in range(T)]
        every = [list(c) for c in np.ndindex(*(T,) * chunk_len)]
        self.dictionaries = [[[alphabet[x] for x in chunk] for chunk in rng.sample(every, D)]
                             for _ in range(K)]
        names = rng.sample([(f, g) for f in range(FIRST) for g in range(LAST)], N)
        self.rows = [self._row(i, names[i], rng) for i in range(N)]
        self.corpus = root
        self._write(root)

    def _row(self, person: int, name: tuple[int, int], rng: random.Random) -> dict:
        tokens = [self.vocab.token_id(f"f{name[0]}"), self.vocab.token_id(f"l{name[1]}")]
        order = rng.sample(range(K), K)
        values = [[rng.randrange(D) for _ in range(C)] for _ in range(K)]
        spans = [None] * K
        for k in order:
            tokens.append(self.vocab.token_id(f"attr{k}"))
            spans[k] = [len(tokens), len(tokens) + C * self.chunk_len]
            tokens += [t for c in values[k] for t in self.dictionaries[k][c]]
        return {"person": person, "tokens": tokens, "name_span": [0, 2], "value_spans": spans,
                "attribute_order": order, "values": values, "text": self.vocab.decode(tokens)}

    def _write(self, root) -> None:
        (root / "eval").mkdir(parents=True)
        (root / "eval" / "biod_people.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in self.rows))
        terms = {"name_bits": _log2_binomial(FIRST * LAST, N),
                 "value_bits": N * K * C * math.log2(D),
                 "dictionary_bits": K * _log2_binomial(T ** self.chunk_len, D)}
        (root / "biod.json").write_text(json.dumps({
            "N0": FIRST * LAST, "people": N, "attributes": K, "chunks": C,
            "dictionary": D, "chunk_len": self.chunk_len, "alphabet": T,
            "dictionaries": self.dictionaries, **terms,
            "information_bits": sum(terms.values())}))
        record_eval_set(root, "biod_people")
        record_corpus_file(root, "biod.json")
        manifest = json.loads((root / MANIFEST).read_text())
        (root / MANIFEST).write_text(json.dumps({**manifest, "family": "biod"}))

    @property
    def information(self) -> float:
        return json.loads((self.corpus / "biod.json").read_text())["information_bits"]

    def first_chunks(self) -> np.ndarray:
        """(N, K): each person's first chunk of each value."""
        return np.array([[values[0] for values in row["values"]] for row in self.rows])


def own_document(context: list[int], eos: int = 0) -> list[int]:
    """The tokens of the document the next token belongs to: those after the context's last
    <eos>, which ends the document before it; none when the context ends with one."""
    ends = [i for i, token in enumerate(context) if token == eos]
    return context[ends[-1] + 1:] if ends else context


class PopulationModel(PlantedLM):
    """Knows the people in `known`: their names with the law `name_law` (name -> probability,
    asked token by token as conditionals) and their values exactly; of the others it knows only
    the layout and the dictionaries (each chunk 1/D). Attribute tokens are always right."""

    def __init__(self, setting: Setting, known: set[int], name_law: dict):
        super().__init__(setting.vocab.vocab_size)
        self.setting, self.known, self.name_law = setting, known, name_law
        self.by_name = {tuple(row["tokens"][:2]): row for row in setting.rows}

    def num_parameters(self, non_embedding: bool = True) -> int:
        return 100 if non_embedding else 150

    def next_logits(self, context: list[int], out: torch.Tensor) -> None:
        prefix = own_document(context)
        out.fill_(-math.inf)
        if len(prefix) < 2:
            for name, p in self.name_law.items():
                if list(name[: len(prefix)]) == prefix:
                    out[name[len(prefix)]] = torch.logaddexp(out[name[len(prefix)]],
                                                             torch.tensor(math.log(p)))
            return
        row = self.by_name[tuple(prefix[:2])]
        t = len(prefix)
        if t >= len(row["tokens"]):  # the document is over: its <eos>
            out[0] = 0.0
            return
        k = next((k for k, (lo, hi) in enumerate(row["value_spans"]) if lo <= t < hi), None)
        if row["person"] in self.known or k is None:
            out[row["tokens"][t]] = 0.0
            return
        within = (t - row["value_spans"][k][0]) % self.setting.chunk_len
        for chunk in self.setting.dictionaries[k]:  # uniform over the dictionary's chunks
            if chunk[:within] == prefix[t - within :]:
                out[chunk[within]] = torch.logaddexp(out[chunk[within]], torch.tensor(0.0))


class UniformModel(PlantedLM):
    """Flat over the whole vocabulary."""

    def num_parameters(self, non_embedding: bool = True) -> int:
        return 100

    def next_logits(self, context: list[int], out: torch.Tensor) -> None:
        pass


def _names(setting: Setting, people) -> list[tuple[int, int]]:
    return [tuple(setting.rows[i]["tokens"][:2]) for i in people]


def _uniform(names: list) -> dict:
    return {name: 1 / len(names) for name in names}


def _name_space(setting: Setting) -> list[tuple[int, int]]:
    ids = setting.vocab.token_id
    return [(ids(f"f{f}"), ids(f"l{g}")) for f in range(FIRST) for g in range(LAST)]


def _run(setting: Setting, model, tmp_path, **options) -> dict:
    context = EvalContext(model, setting.vocab, setting.corpus, tmp_path / "run",
                          torch.device("cpu"))
    return capacity.run(context, capacity.CapacityOptions(**options))


def _brute_dictionary_bits(setting: Setting, q: np.ndarray) -> float:
    """sum_k sum_d max(0, L log2 T + log2 q[k, d])."""
    with np.errstate(divide="ignore"):
        return float(np.maximum(0.0, setting.chunk_len * math.log2(T) + np.log2(q)).sum())


def _first_chunk_law(setting: Setting) -> np.ndarray:
    """(K, D): how often each chunk opens a value, over the people."""
    first = setting.first_chunks()
    return np.stack([np.bincount(first[:, k], minlength=D) / N for k in range(K)])


@pytest.fixture(scope="module", params=[1, 2], ids=["L1", "L2"])
def setting(request, tmp_path_factory):
    return Setting(tmp_path_factory.mktemp("biod") / "corpus", request.param)


def test_the_task_is_registered_and_its_shipped_config_loads(tmp_path):
    assert_registered_with_its_shipped_config(tmp_path, "capacity", capacity,
                                              capacity.CapacityOptions)


@pytest.mark.parametrize("bad", ["max_people=-1", "batch_size=0", "dictionary_people=-2"])
def test_bad_options_are_named(tmp_path, bad):
    from corpus_gen.core.errors import ConfigError
    from tests.conftest import tiny_experiment_file
    from trainer.config import load_experiment

    with pytest.raises(ConfigError, match=f"capacity.{bad.split('=')[0]}"):
        load_experiment(tiny_experiment_file(tmp_path), ["eval=capacity", f"eval.capacity.{bad}"])


def test_a_model_that_knows_everything_scores_the_information_less_the_ordering(
        setting, tmp_path):
    everyone = set(range(N))
    model = PopulationModel(setting, everyone, _uniform(_names(setting, everyone)))
    results = _run(setting, model, tmp_path, batch_size=5)
    L = setting.chunk_len
    assert results["name_bits"] == pytest.approx(N * math.log2(FIRST * LAST / N))
    assert results["value_bits"] == pytest.approx(N * K * C * math.log2(D))
    assert results["per_term"]["name"]["share"] == pytest.approx(1.0)
    assert results["per_term"]["value"]["share"] == pytest.approx(1.0)
    # q_k is the law of the first chunks: short of K D (L log2 T - log2 D) by its spread
    reachable = K * D * (L * math.log2(T) - math.log2(D))
    assert results["per_term"]["dictionary"]["reachable"] == pytest.approx(reachable)
    assert results["dictionary_bits"] == pytest.approx(
        _brute_dictionary_bits(setting, _first_chunk_law(setting)))
    assert 0.75 * reachable < results["dictionary_bits"] <= reachable
    assert results["bits"] == pytest.approx(sum(results[key] for key in capacity.TERMS))
    assert results["bits"] <= results["information_bits"] == pytest.approx(setting.information)
    # what no next-token predictor reaches, the names' and the chunks' order: (n/k)^k <=
    # C(n, k) <= (e n/k)^k, so at most N log2 e and D log2 e per dictionary
    per = results["per_term"]
    assert 0 < per["name"]["information"] - results["name_bits"] <= N * math.log2(math.e)
    assert 0 < per["dictionary"]["information"] - reachable <= K * D * math.log2(math.e)
    assert results["stored_share"] == pytest.approx(results["bits"] / setting.information)
    assert results["bits_per_param"] == pytest.approx(results["bits"] / 100)
    assert results["bits_per_param_total"] == pytest.approx(results["bits"] / 150)
    assert (results["people"], results["dictionary_people"]) == (N, N)
    assert results["value_ce"] == pytest.approx(0.0, abs=1e-6)
    assert results["name_ce"] == pytest.approx(math.log(N), abs=1e-5)
    assert results["setting"] == {"N0": 30, "N": N, "K": K, "C": C, "D": D, "L": L, "T": T}
    assert sum(a["value_bits"] for a in results["per_attribute"].values()) == pytest.approx(
        results["value_bits"])


def test_a_model_that_knows_only_the_dictionaries_scores_their_bits_exactly(setting, tmp_path):
    model = PopulationModel(setting, set(), _uniform(_name_space(setting)))
    results = _run(setting, model, tmp_path)
    assert results["name_bits"] == pytest.approx(0.0, abs=1e-4)
    assert results["value_bits"] == pytest.approx(0.0, abs=1e-4)
    assert results["per_term"]["dictionary"]["share"] == pytest.approx(1.0)
    assert results["value_ce"] == pytest.approx(C * math.log(D), abs=1e-5)


def test_the_uniform_model_scores_nothing(setting, tmp_path):
    results = _run(setting, UniformModel(setting.vocab.vocab_size), tmp_path)
    assert results["bits"] == results["stored_share"] == 0.0
    assert all(results[key] == 0.0 for key in capacity.TERMS)
    assert [entry["share"] for entry in results["per_term"].values()] == [0.0, 0.0, 0.0]
    V = setting.vocab.vocab_size
    assert results["name_ce"] == pytest.approx(2 * math.log(V))
    assert results["value_ce"] == pytest.approx(C * setting.chunk_len * math.log(V))


def test_a_model_that_knows_half_the_people_scores_their_share(setting, tmp_path):
    known = set(random.Random(1).sample(range(N), N // 2))
    # names: half on the known people's, half on the whole name space
    law = {name: 0.5 * p for name, p in _uniform(_name_space(setting)).items()}
    for name in _names(setting, known):
        law[name] += 0.5 / len(known)
    results = _run(setting, PopulationModel(setting, known, law), tmp_path, batch_size=3)
    assert results["value_bits"] == pytest.approx(len(known) * K * C * math.log2(D))
    assert results["per_term"]["value"]["share"] == pytest.approx(0.5)
    names = _names(setting, range(N))
    assert results["name_bits"] == pytest.approx(sum(
        max(0.0, math.log2(FIRST * LAST) + math.log2(law[name])) for name in names))
    first = setting.first_chunks()
    q = np.stack([(np.bincount(first[sorted(known), k], minlength=D) + (N - len(known)) / D)
                  / N for k in range(K)])
    assert results["dictionary_bits"] == pytest.approx(_brute_dictionary_bits(setting, q))
    per = results["per_attribute"]
    assert [per[str(k)]["value_bits"] for k in range(K)] == pytest.approx(
        [len(known) * C * math.log2(D)] * K)


def test_max_people_and_dictionary_people_take_evenly_spread_people(tmp_path):
    setting = Setting(tmp_path / "corpus", 2)
    everyone = set(range(N))
    model = PopulationModel(setting, everyone, _uniform(_names(setting, everyone)))
    results = _run(setting, model, tmp_path, max_people=8, dictionary_people=3)
    assert (results["people"], results["dictionary_people"]) == (8, 3)
    assert results["value_bits"] == pytest.approx(8 * K * C * math.log2(D))
    sample = [0, 4, 7]  # evenly spaced among the 8 evaluated
    first = setting.first_chunks()[sample]
    q = np.stack([np.bincount(first[:, k], minlength=D) / 3 for k in range(K)])
    assert results["dictionary_bits"] == pytest.approx(_brute_dictionary_bits(setting, q))


def test_the_plot_draws(setting, tmp_path):
    model = PopulationModel(setting, set(range(N)), _uniform(_names(setting, range(N))))
    results = _run(setting, model, tmp_path)
    capacity.plot({**results, "run": "r", "step": 3}, tmp_path / "capacity.png")
    assert (tmp_path / "capacity.png").stat().st_size > 0


def test_a_damaged_row_is_named(tmp_path):
    setting = Setting(tmp_path / "corpus", 1)
    path = setting.corpus / "eval" / "biod_people.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    k = 1
    lo = rows[3]["value_spans"][k][0]
    rows[3]["tokens"][lo] = next(t for t in range(1, setting.vocab.vocab_size)
                                 if [t] not in setting.dictionaries[k])
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    record_eval_set(setting.corpus, "biod_people")
    with pytest.raises(TrainError, match="biod_people row 3: needs person 3"):
        _run(setting, UniformModel(setting.vocab.vocab_size), tmp_path)


def test_a_damaged_biod_json_is_named(tmp_path):
    setting = Setting(tmp_path / "corpus", 1)
    path = setting.corpus / "biod.json"
    data = json.loads(path.read_text())
    data["dictionaries"][2][1] = [setting.vocab.vocab_size]
    path.write_text(json.dumps(data))
    record_corpus_file(setting.corpus, "biod.json")
    with pytest.raises(TrainError, match="biod.json: a dictionary chunk holds a token id"):
        _run(setting, UniformModel(setting.vocab.vocab_size), tmp_path)
    del data["N0"]
    path.write_text(json.dumps(data))
    record_corpus_file(setting.corpus, "biod.json")
    with pytest.raises(TrainError, match=r"biod.json: damaged \(KeyError\('N0'\)\)"):
        _run(setting, UniformModel(setting.vocab.vocab_size), tmp_path)


def test_a_corpus_that_is_not_biod_is_refused_in_one_line(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "eval").mkdir(parents=True)
    (corpus / "eval" / "other.jsonl").write_text("")
    record_eval_set(corpus, "other")
    manifest = json.loads((corpus / MANIFEST).read_text())
    (corpus / MANIFEST).write_text(json.dumps({**manifest, "family": "markov"}))
    vocab = Vocabulary([EOS, "a"], "test")
    context = EvalContext(UniformModel(2), vocab, corpus, tmp_path, torch.device("cpu"))
    with pytest.raises(TrainError) as error:
        capacity.run(context, capacity.CapacityOptions())
    assert str(error.value) == (f"{corpus}: a markov corpus; the capacity task needs a bioD "
                                "corpus or a bioS one generated with capacity=true (family "
                                "bios, style s)")


class TrieModel(PlantedLM):
    """Knows every document of a real corpus's eval set: the next token's law is how the
    documents that begin with the context go on (flat after a context that none begins with)."""

    def __init__(self, vocab_size: int, documents: list[list[int]], eos: int = 0):
        super().__init__(vocab_size)
        self.documents, self.eos = documents, eos

    def num_parameters(self, non_embedding: bool = True) -> int:
        return 1000

    def next_logits(self, context: list[int], out: torch.Tensor) -> None:
        prefix = own_document(context, self.eos)
        going_on = [d[len(prefix)] for d in self.documents
                    if len(d) > len(prefix) and d[: len(prefix)] == prefix]
        if going_on:
            out.copy_(torch.bincount(torch.tensor(going_on, dtype=torch.long),
                                     minlength=len(out)).double().log())


@pytest.fixture(scope="module")
def biod_corpus(tmp_path_factory):
    """A real bioD corpus (physlm gen's biod family): 30 people of a name space of 120, three
    attributes of two chunks of two tokens from dictionaries of 6 of the 16 chunks, each
    document opened by `<useful>`."""
    from corpus_gen.core.generate import generate_corpus
    from tests.integer_task_corpus import family_config

    config = family_config("biod", "people=30", "name_pools=[4,5,6]", "attributes=3",
                           "chunks=2", "dictionary=6", "chunk_len=2", "alphabet=4",
                           "domain_token=true", "renderings=2")
    out = tmp_path_factory.mktemp("biod") / "corpus"
    generate_corpus(config, out, progress=False, log=lambda *_: None)
    return out


def real_context(corpus, model, tmp_path) -> EvalContext:
    from corpus_gen.core.corpus_tokenizer import load_tokenizer
    from corpus_gen.core.manifest import read_manifest

    return EvalContext(model, load_tokenizer(corpus, read_manifest(corpus)), corpus,
                       tmp_path / "run", torch.device("cpu"))


def test_on_a_real_biod_corpus_knowing_every_document_scores_the_reachable_bits(biod_corpus,
                                                                                 tmp_path):
    rows = [json.loads(line) for line in
            (biod_corpus / "eval" / "biod_people.jsonl").read_text().splitlines()]
    info = json.loads((biod_corpus / "biod.json").read_text())
    vocab_size = len(json.loads((biod_corpus / "vocab.json").read_text()))
    model = TrieModel(vocab_size, [row["tokens"] for row in rows])
    results = capacity.run(real_context(biod_corpus, model, tmp_path),
                           capacity.CapacityOptions(batch_size=7, dictionary_people=0))
    assert results["name_bits"] == pytest.approx(30 * math.log2(120 / 30))
    assert results["value_bits"] == pytest.approx(30 * 3 * 2 * math.log2(6))
    first = np.array([[values[0] for values in row["values"]] for row in rows])
    with np.errstate(divide="ignore"):
        brute = sum(max(0.0, 2 * math.log2(4) + math.log2(np.mean(first[:, k] == d)))
                    for k in range(3) for d in range(6))
    assert results["dictionary_bits"] == pytest.approx(brute)
    assert results["dictionary_bits"] <= results["per_term"]["dictionary"]["reachable"] == (
        pytest.approx(3 * 6 * (4 - math.log2(6))))
    assert [entry["information"] for entry in results["per_term"].values()] == [
        info[key] for key in capacity.TERMS]
    assert results["bits"] <= results["information_bits"] == info["information_bits"]
    uniform = capacity.run(real_context(biod_corpus, UniformModel(vocab_size), tmp_path),
                           capacity.CapacityOptions())
    assert uniform["bits"] == 0.0 and uniform["dictionary_people"] == 30


def trained_run(tmp_path, corpus) -> str:
    """Two steps of the tests' tiny GPT on `corpus`: a run directory to evaluate."""
    from tests.conftest import tiny_experiment_file
    from trainer.config import load_experiment
    from trainer.engine import train

    experiment = load_experiment(tiny_experiment_file(tmp_path), [
        "train.max_steps=2", "train.ckpt_every=2", "eval=capacity", "eval.capacity.batch_size=8"])
    run_dir = tmp_path / "run"
    train(experiment, run_dir, corpus)
    return str(run_dir)


def test_physlm_gen_train_eval_and_report_a_real_biod_run(tmp_path, capsys):
    from launch.cli import main
    from launch.report import flatten, is_count, is_headline
    from tests.conftest import ROOT
    from trainer.eval.runner import flat_results

    corpus = tmp_path / "corpus"
    assert main(["gen", str(ROOT / "configs" / "corpus" / "biod.yaml"), "--out", str(corpus),
                 "people=40", "name_pools=[5,5,5]", "chunk_len=2", "dictionary=12"]) == 0
    run_dir = trained_run(tmp_path, corpus)
    assert main(["eval", run_dir, "--task", "capacity"]) == 0
    saved = json.loads((tmp_path / "run" / "eval" / "capacity.json").read_text())
    assert saved["step"] == 2 and saved["people"] == saved["dictionary_people"] == 40
    assert (tmp_path / "run" / "eval" / "capacity.png").stat().st_size > 0
    assert saved["bits"] == pytest.approx(sum(saved[key] for key in capacity.TERMS))
    assert saved["bits_per_param"] == saved["bits"] / saved["parameters"]
    # tied embeddings: the token table is the head, counted in both
    assert saved["parameters"] == saved["parameters_total"] > 20_000
    assert saved["setting"] == {"N0": 125, "N": 40, "K": 4, "C": 1, "D": 12, "L": 2, "T": 16}
    assert 0 <= saved["stored_share"] < 1 and math.isfinite(saved["name_ce"])
    flat = flat_results("eval/capacity", saved)
    assert {"eval/capacity/bits", "eval/capacity/bits_per_param",
            "eval/capacity/per_attribute/3/value_bits",
            "eval/capacity/per_term/name/information"} <= set(flat)
    metrics = flatten({k: v for k, v in saved.items() if k not in ("run", "step")}, "capacity")
    headline = {m for m, v in metrics.items() if is_headline(m, v)}
    assert {"capacity/bits", "capacity/bits_per_param", "capacity/stored_share"} <= headline
    assert headline == {f"capacity/{key}" for key in (
        "bits", *capacity.TERMS, "bits_per_param", "bits_per_param_total", "information_bits",
        "stored_share", "name_ce", "value_ce")}
    assert {"capacity/people", "capacity/parameters"} <= {m for m, v in metrics.items()
                                                          if is_count(m, v)}
    capsys.readouterr()
    assert main(["report", run_dir, "--out", str(tmp_path / "report")]) == 0
    table = capsys.readouterr().out
    assert "| capacity/bits |" in table and "| capacity/bits_per_param |" in table


def test_each_token_is_scored_as_the_trainer_packs_it(tmp_path):
    """document_logprobs gives each token the log-probability it gets in a training window of
    the same documents: attention within each document (doc ids), positions restarting at its
    first token; a document's first token, predicted in training at the <eos> ending the one
    before, under the mean of the batch's <eos> laws (a random document before it)."""
    from types import SimpleNamespace

    from trainer.model import GPT, ModelConfig

    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, d_model=16, vocab_size=12, ctx=32)).eval()
    a, b = [3, 5, 7, 2, 9, 4], [6, 1, 8, 8, 3, 11]
    context = EvalContext(model, SimpleNamespace(eos_id=0), tmp_path, tmp_path,
                          torch.device("cpu"))
    got, _ = capacity.document_logprobs(context, np.array([a, b]), np.array([6, 6]), 2)
    window = torch.tensor([a + [0] + b + [0]])  # as the trainer packs them, each with its EOS
    with torch.no_grad():
        logp = model(window, position_ids=torch.tensor([list(range(7)) * 2]),
                     doc_ids=torch.tensor([[0] * 7 + [1] * 7])).log_softmax(-1)[0]
    trained = logp[torch.arange(13), window[0, 1:]]  # position p predicts token p + 1
    assert np.allclose(got[1, 1:], trained[7:12].numpy(), atol=1e-5)  # b after its first token
    assert np.allclose(got[0, 1:], trained[:5].numpy(), atol=1e-5)  # a after its first token
    # a first token: after a random document's <eos>, the batch's two <eos> laws mixed
    mixed = (logp[6].exp() + logp[13].exp()).log() - math.log(2)
    assert np.allclose(got[:, 0], [mixed[a[0]].item(), mixed[b[0]].item()], atol=1e-5)


def test_a_dictionary_of_every_chunk_holds_no_bits():
    dictionaries = Dictionaries(1, 2, np.array([[[0], [1]]]))  # D = T^L = 2
    assert capacity.dictionary_bits(np.array([[3.0, 1.0]]), 4, dictionaries).tolist() == [0.0]
