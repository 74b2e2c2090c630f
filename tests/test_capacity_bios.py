"""The capacity task on bioS corpora: `bios_people` holds each person's first biography exactly
as the shards hold it, with spans on the name and on every value; bios.json the information
content; a model that knows every document scores exactly what counting the documents that
share each prefix gives, a uniform one nothing; bioR is refused in one line."""

import json
import math

import pytest

import trainer.eval.capacity as capacity
from corpus_gen.bios.people import DAYS, MONTHS, YEARS
from corpus_gen.bios.pools import load_pools
from corpus_gen.core.corpus_tokenizer import load_tokenizer
from corpus_gen.core.manifest import read_manifest
from corpus_gen.core.shards import read_shard
from tests.test_capacity_eval import TrieModel, UniformModel, real_context, trained_run


@pytest.fixture(scope="module")
def bios_corpus(tmp_path_factory):
    """The tests' training corpus (conftest's train_corpus: bioS multi5+permute, 40 people, QA
    in the stream) generated with capacity=true."""
    from corpus_gen.core.config import load_config
    from corpus_gen.core.generate import generate_corpus
    from corpus_gen.core.registry import schemas
    from tests.conftest import ROOT

    config = load_config(ROOT / "configs/corpus/bios_s_multi5_permute.yaml",
                         ["people=40", "mode=mix", "records_per_shard=60", "capacity=true",
                          "tokenizer.vocab_size=600", "tokenizer.sample_records=300"], schemas())
    out = tmp_path_factory.mktemp("bios_capacity") / "corpus"
    generate_corpus(config, out, progress=False, log=lambda *_: None)
    return out


def _rows(corpus) -> list[dict]:
    return [json.loads(line) for line in
            (corpus / "eval" / "bios_people.jsonl").read_text().splitlines()]


def test_each_row_is_the_persons_first_biography_as_the_shards_hold_it(bios_corpus):
    rows = _rows(bios_corpus)
    manifest = read_manifest(bios_corpus)
    tokenizer = load_tokenizer(bios_corpus, manifest)
    first = {}
    for shard in manifest["shards"]:
        for sample in read_shard(bios_corpus / shard["name"]):
            meta = sample["json"]
            if meta["kind"] == "bio" and meta["copy"] == 0:
                first[meta["person"]["id"]] = (meta["text"], sample["ids"].tolist(),
                                               meta["person"])
    assert [row["person"] for row in rows] == list(range(40)) == sorted(first)
    for row in rows:
        text, ids, person = first[row["person"]]
        assert row["text"] == text and tokenizer.encode(text) == ids
        name = f"{person['first']} {person['middle']} {person['last']}"
        assert row["name"] == name
        spanned = {"name": (name, row["name_span"]),
                   **{key: (person[key], span) for key, span in row["value_spans"].items()}}
        assert len(spanned) == 7
        for value, (start, stop) in spanned.values():
            # the value's words, with at most the glued "'s" or punctuation after them
            assert text[start:stop].startswith(value) and stop - start - len(value) <= 2
            assert start == 0 or text[start - 1] == " "
            assert stop == len(text) or text[stop] == " "
        # the name's first occurrence: no earlier mention of its first name
        assert person["first"] not in text[: row["name_span"][0]]


def test_bios_json_holds_the_information_content(bios_corpus):
    info = json.loads((bios_corpus / "bios.json").read_text())
    pools = load_pools()
    counts = [len(MONTHS) * DAYS * YEARS, len(pools.cities), len(pools.universities),
              len(pools.majors), len(pools.employers)]
    assert [a["values"] for a in info["attributes"].values()] == counts == [67200, 200, 300,
                                                                           100, 263]
    assert info["attributes"]["employer"]["spans"] == ["employer", "company_city"]
    assert info["N0"] == 400 * 400 * 1000 and info["people"] == 40
    assert info["name_bits"] == pytest.approx(math.log2(math.comb(info["N0"], 40)), rel=1e-12)
    assert info["value_bits"] == pytest.approx(40 * math.log2(math.prod(counts)), rel=1e-12)
    assert info["dictionary_bits"] == 0.0
    assert info["information_bits"] == pytest.approx(info["name_bits"] + info["value_bits"])


def test_a_model_that_knows_every_biography_scores_what_counting_prefixes_gives(bios_corpus,
                                                                               tmp_path):
    """The planted model's law after a prefix is how the documents sharing it go on, so a span
    [a, b) of a document costs log2(c(a) / c(b)) bits, c(j) the documents sharing its first j
    tokens (its first token: after a random document, the same count)."""
    tokenizer = load_tokenizer(bios_corpus, read_manifest(bios_corpus))
    rows = _rows(bios_corpus)
    documents = [tokenizer.encode(row["text"]) for row in rows]
    model = TrieModel(tokenizer.vocab_size, documents, tokenizer.eos_id)
    results = capacity.run(real_context(bios_corpus, model, tmp_path),
                           capacity.CapacityOptions(batch_size=9))
    info = json.loads((bios_corpus / "bios.json").read_text())

    def token_span(row: dict, span: list[int]) -> tuple[int, int]:
        text = row["text"]
        return (len(tokenizer.encode(text[: span[0] - 1])) if span[0] else 0,
                len(tokenizer.encode(text[: span[1]])))

    def cost(doc: list[int], a: int, b: int) -> float:
        shared = [sum(d[:j] == doc[:j] for d in documents) for j in (a, b)]
        return math.log2(shared[0] / shared[1])

    names, values = 0.0, 0.0
    for row, doc in zip(rows, documents):
        names += max(0.0, math.log2(info["N0"]) - cost(doc, *token_span(row, row["name_span"])))
        for entry in info["attributes"].values():
            spent = sum(cost(doc, *token_span(row, row["value_spans"][part]))
                        for part in entry["spans"])
            values += max(0.0, math.log2(entry["values"]) - spent)
    assert results["name_bits"] == pytest.approx(names, rel=1e-6)  # float32 log-probabilities
    assert results["value_bits"] == pytest.approx(values, rel=1e-6)
    assert results["dictionary_bits"] == 0.0
    # knowing each person, a value after the name costs nothing: nearly all the value bits
    assert 0.9 < results["per_term"]["value"]["share"] <= 1.0
    assert results["per_term"]["value"]["reachable"] == pytest.approx(
        40 * math.log2(67200 * 200 * 300 * 100 * 263))
    assert results["name_bits"] >= results["per_term"]["name"]["reachable"] == pytest.approx(
        40 * math.log2(info["N0"] / 40))
    assert list(results["per_attribute"]) == list(info["attributes"])
    assert results["setting"]["values"]["employer"] == 263
    uniform = capacity.run(real_context(bios_corpus, UniformModel(tokenizer.vocab_size),
                                        tmp_path), capacity.CapacityOptions())
    assert uniform["bits"] == 0.0 and uniform["people"] == 40


def test_a_span_that_does_not_cover_whole_words_is_named(bios_corpus, tmp_path):
    import shutil

    from tests.conftest import record_eval_set
    from trainer.errors import TrainError

    corpus = tmp_path / "corpus"
    shutil.copytree(bios_corpus, corpus)
    rows = _rows(corpus)
    rows[5]["value_spans"]["major"][0] += 1  # inside the major's first word
    (corpus / "eval" / "bios_people.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows))
    record_eval_set(corpus, "bios_people")
    tokenizer = load_tokenizer(corpus, read_manifest(corpus))
    with pytest.raises(TrainError, match="bios_people row 5: needs person 5, single-space "
                       "separated text, and spans of whole words for the name and each of "
                       "birth_city, birth_date, company_city, employer, major, university"):
        capacity.run(real_context(corpus, UniformModel(tokenizer.vocab_size), tmp_path),
                     capacity.CapacityOptions())


def test_physlm_eval_measures_a_bios_run(bios_corpus, tmp_path):
    from launch.cli import main

    run_dir = trained_run(tmp_path, bios_corpus)
    assert main(["eval", run_dir, "--task", "capacity"]) == 0
    saved = json.loads((tmp_path / "run" / "eval" / "capacity.json").read_text())
    assert saved["people"] == 40 and saved["dictionary_people"] == 0
    assert saved["bits"] == pytest.approx(saved["name_bits"] + saved["value_bits"])
    assert saved["information_bits"] == json.loads(
        (bios_corpus / "bios.json").read_text())["information_bits"]
    assert 0 <= saved["stored_share"] < 1 and (tmp_path / "run" / "eval" / "capacity.png").exists()
    counts = {"birth_date": 12 * 28 * 200, "birth_city": 200, "university": 300, "major": 100,
              "employer": 263}  # the bioS pools
    assert saved["setting"]["values"] == counts and saved["setting"]["N"] == 40
    assert saved["per_term"]["value"]["reachable"] == pytest.approx(
        40 * sum(math.log2(count) for count in counts.values()))
    attributes = saved["per_attribute"]
    assert sorted(attributes) == sorted(counts)
    assert saved["value_ce"] == pytest.approx(  # mean per person and attribute, in nats
        sum(a["value_ce"] for a in attributes.values()) / len(counts))
    assert sum(a["value_bits"] for a in attributes.values()) == pytest.approx(
        saved["value_bits"])


def test_a_bios_corpus_without_capacity_is_refused_in_one_line(train_corpus, tmp_path,
                                                                capsys):
    from launch.cli import main

    assert not (train_corpus / "bios.json").exists()
    run_dir = trained_run(tmp_path, train_corpus)
    capsys.readouterr()
    assert main(["eval", run_dir, "--task", "capacity"]) == 2
    assert capsys.readouterr().err == (
        f"physlm eval: error: {train_corpus}: a bios corpus without bios.json; the capacity "
        "task needs a bioD corpus or a bioS one generated with capacity=true (family bios, "
        "style s)\n")


@pytest.mark.parametrize(("overrides", "message"), [
    (["style=r"], "capacity=True: needs bioS biographies in the stream: style s"),
    (["mode=qa"], "capacity=True: needs bioS biographies in the stream: style s"),
])
def test_capacity_without_bios_biographies_is_one_line_naming_the_key(overrides, message,
                                                                      tmp_path, capsys):
    from launch.cli import main
    from tests.conftest import ROOT

    assert main(["gen", str(ROOT / "configs/corpus/bios_s_single.yaml"), "--out",
                 str(tmp_path / "c"), "capacity=true", *overrides]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error


def test_with_junk_and_the_domain_token_rows_are_the_useful_biographies_as_trained(bios_config,
                                                                                  tmp_path):
    from corpus_gen.core.generate import generate_corpus

    config = bios_config(people=30, variant="multi2_permute", junk_ratio=3, domain_token="true",
                         capacity="true", records_per_shard=70)
    manifest = generate_corpus(config, tmp_path / "c", progress=False, log=lambda *_: None)
    tokenizer = load_tokenizer(tmp_path / "c", manifest)
    first = {}
    for shard in manifest["shards"]:
        for sample in read_shard(tmp_path / "c" / shard["name"]):
            meta = sample["json"]
            if meta["kind"] == "bio" and meta["copy"] == 0:
                first[meta["person"]["id"]] = (meta["text"], sample["ids"].tolist())
    rows = _rows(tmp_path / "c")
    assert len(rows) == len(first) == 30
    useful = tokenizer.encode("<useful>")
    assert len(useful) == 1
    for row in rows:
        text, ids = first[row["person"]]
        assert row["text"] == text and text.startswith("<useful> ")
        assert tokenizer.encode(text) == ids and ids[0] == useful[0]
        start, stop = row["value_spans"]["major"]
        assert text[start:stop].startswith(row["values"]["major"])
    summary = manifest["summary"]
    info = json.loads((tmp_path / "c" / "bios.json").read_text())
    assert summary["information_bits"] == info["information_bits"]
    assert summary["junk_documents"] == 3 * summary["useful_documents"] == 3 * 60


def test_a_damaged_bios_json_is_named(bios_corpus, tmp_path):
    import shutil

    from tests.conftest import record_corpus_file
    from trainer.errors import TrainError

    corpus = tmp_path / "corpus"
    shutil.copytree(bios_corpus, corpus)
    path = corpus / "bios.json"
    data = json.loads(path.read_text())
    data["attributes"]["major"]["values"] = 0
    path.write_text(json.dumps(data))
    record_corpus_file(corpus, "bios.json")
    tokenizer = load_tokenizer(corpus, read_manifest(corpus))
    context = real_context(corpus, UniformModel(tokenizer.vocab_size), tmp_path)
    with pytest.raises(TrainError, match="bios.json: no attributes, an attribute without "
                       "values or spans"):
        capacity.run(context, capacity.CapacityOptions())
    del data["attributes"]
    path.write_text(json.dumps(data))
    record_corpus_file(corpus, "bios.json")
    with pytest.raises(TrainError, match=r"bios.json: damaged \(KeyError\('attributes'\)\)"):
        capacity.run(context, capacity.CapacityOptions())


def test_a_value_read_over_two_spans_costs_both(bios_corpus, tmp_path):
    # the employer's value is its company and the company's city: a uniform model pays ln V
    # for every token of both spans
    rows = _rows(bios_corpus)
    context = real_context(bios_corpus, None, tmp_path)
    context.model = UniformModel(context.tokenizer.vocab_size)
    results = capacity.run(context, capacity.CapacityOptions())
    encode = context.tokenizer.encode

    def tokens(row: dict, part: str) -> int:
        start, stop = row["value_spans"][part]
        return len(encode(row["text"][:stop])) - (len(encode(row["text"][:start - 1]))
                                                  if start else 0)

    count = sum(tokens(row, part) for row in rows for part in ("employer", "company_city"))
    assert results["per_attribute"]["employer"]["value_ce"] == pytest.approx(
        count / len(rows) * math.log(context.tokenizer.vocab_size), rel=1e-5)
