"""The igsm evaluation task: scoring generated solutions (right, wrong, malformed, empty, cut
off), the task on a corpus with stubbed generations, and end to end after a tiny training run."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import trainer.eval.generation as generation
import trainer.eval.igsm as igsm
from corpus_gen.core.config import load_config
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.manifest import FORMAT
from corpus_gen.core.registry import schemas
from corpus_gen.core.tokenizer import Tokenizer
from corpus_gen.igsm.checker import REASONS
from tests.conftest import record_eval_set
from trainer.config import load_experiment
from trainer.engine import train
from trainer.eval.registry import EvalContext, eval_schema, tasks
from trainer.eval.runner import evaluate

SETS = ["igsm_test", "igsm_train_templates", "igsm_op5"]
REASONS_OR_OURS = (*REASONS, "truncated", "prompt_too_long", "checker_error")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tiny igsm corpus: 80 training problems of <= 3 ops, 6 problems per eval set."""
    out = tmp_path_factory.mktemp("igsm")
    path = out.parent / "igsm_eval_corpus.yaml"
    path.write_text("family: igsm\n")
    config = load_config(path, ["problems=80", "max_op=3", "max_edge=4", "ood_ops=[5]",
                                "eval_problems=6", "records_per_shard=40",
                                "tokenizer.vocab_size=400", "tokenizer.sample_records=80"],
                         schemas())
    generate_corpus(config, out, progress=False, log=lambda *_: None)
    return out


def _rows(corpus, name="igsm_test"):
    return igsm.load_rows(corpus, name, 0)


def test_the_task_is_registered():
    task = tasks()["igsm"]
    assert task.run is igsm.run and task.plot is igsm.plot


def test_a_reference_solution_is_right(corpus):
    for row in _rows(corpus):
        verdict = igsm.score_text(row, row["solution"])
        assert verdict["solution"] and verdict["answer"] and verdict["reason"] is None, verdict
        # what a model emits after "Solution:" decodes with the leading space dropped or kept
        assert igsm.score_text(row, " " + row["solution"])["solution"]


def test_a_wrong_value_is_wrong_but_the_answer_may_still_be_right(corpus):
    row = _rows(corpus)[0]
    first = row["solution"].split(". ")[0]  # "Define X as s; ...; so s = <n>"
    head, _, value = first.rpartition(" = ")
    wrong = row["solution"].replace(first, f"{head} = {(int(value) + 1) % 23}", 1)
    verdict = igsm.score_text(row, wrong)
    assert not verdict["solution"] and verdict["reason"] == "wrong_value"
    assert verdict["step"] == 0 and verdict["answer"]  # "Answer: n" is still the right n

    answer = row["answer"]
    wrong_answer = row["solution"].replace(f"Answer: {answer}.", f"Answer: {(answer + 1) % 23}.")
    verdict = igsm.score_text(row, wrong_answer)
    assert (verdict["solution"], verdict["answer"], verdict["reason"]) == (
        False, False, "wrong_answer")


@pytest.mark.parametrize("text", ["", "   ", "%%% garbage Define as ; so = =", "Answer: x.",
                                  "Define Nothing's Thing as q; so q = 3. Answer: 3.",
                                  "Define", "\x00\ufffd" * 50, None])
def test_malformed_and_empty_generations_are_wrong_with_a_reason(corpus, text):
    for row in _rows(corpus)[:3]:
        verdict = igsm.score_text(row, text)
        assert verdict["solution"] is False and verdict["reason"] in REASONS_OR_OURS
        assert isinstance(verdict["detail"], str)


def test_a_solution_cut_by_the_token_budget_is_truncated(corpus):
    row = max(_rows(corpus), key=lambda r: len(r["solution"]))
    cut = row["solution"][: len(row["solution"]) // 2]
    assert igsm.score_text(row, cut, truncated=True)["reason"] == "truncated"
    assert igsm.score_text(row, cut)["reason"] != "truncated"


def test_summary_counts_per_op_and_failures(corpus):
    rows = _rows(corpus)
    texts = [r["solution"] if i % 2 == 0 else "junk" for i, r in enumerate(rows)]
    summary = igsm.summarize([(r, igsm.score_text(r, t)) for r, t in zip(rows, texts)])
    assert summary["n"] == len(rows) and summary["solution"] == summary["answer"] == 0.5
    assert sum(e["n"] for e in summary["per_op"].values()) == len(rows)
    assert set(summary["per_op"]) == {str(r["op"]) for r in rows}
    assert summary["failures"] == {"malformed": len(rows) // 2}


class _Model(SimpleNamespace):
    pass


def test_the_task_with_perfect_stub_generations_scores_one(corpus, tmp_path, monkeypatch):
    """Generation stubbed by the reference solutions' tokens: everything through tokenization,
    decoding, checking and aggregation must come out right; too few positions are handled."""
    tokenizer = Tokenizer.load(corpus / "tokenizer.model")
    reference = {}
    for name in SETS:
        for row in _rows(corpus, name):
            prompt = tokenizer.encode(row["prompt"])
            full = tokenizer.encode(f"{row['prompt']} {row['solution']}")
            assert full[: len(prompt)] == prompt
            reference[tuple(prompt)] = full[len(prompt):]

    def fake_generate(model, prompts, max_new_tokens, eos_id=None):
        assert eos_id == tokenizer.eos_id and max_new_tokens >= 1
        return [reference[tuple(p)][:max_new_tokens] for p in prompts]

    monkeypatch.setattr(generation, "generate", fake_generate)
    model = _Model(positional=SimpleNamespace(max_positions=None))
    context = EvalContext(model, tokenizer, corpus, tmp_path, None)
    results = igsm.run(context, igsm.IgsmOptions(batch_size=4))
    assert list(results) == [*SETS, "in_distribution", "out_of_distribution"]
    for name in SETS:
        assert results[name]["solution"] == results[name]["answer"] == 1.0
        assert results[name]["n"] == 6 and results[name]["failures"] == {}
    assert results["igsm_op5"]["distribution"] == "ood"
    assert set(results["igsm_op5"]["per_op"]) == {"5"}
    assert results["in_distribution"]["n"] == 12
    assert results["out_of_distribution"]["sets"] == ["igsm_op5"]
    lines = (tmp_path / "eval" / igsm.GENERATIONS).read_text().splitlines()
    assert len(lines) == 18 and json.loads(lines[0])["solution"] is True

    model.positional.max_positions = 150  # learned positions: prompts that fill them are
    # scored wrong without generating; the others get what room is left
    results = igsm.run(context, igsm.IgsmOptions(batch_size=4))
    for name in SETS:
        entry = results[name]
        assert entry["failures"].get("prompt_too_long", 0) + entry["failures"].get(
            "truncated", 0) + round(entry["solution"] * entry["n"]) == entry["n"]
    assert any("prompt_too_long" in results[n]["failures"] for n in SETS)
    igsm.plot(results, tmp_path / "igsm.png")
    assert (tmp_path / "igsm.png").stat().st_size > 0


def test_missing_sets_and_other_corpora_are_named(corpus, tmp_path):
    from trainer.errors import TrainError

    with pytest.raises(TrainError, match="igsm_op99.jsonl: missing"):
        igsm.load_rows(corpus, "igsm_op99", 0)
    assert igsm.default_sets(corpus) == SETS
    assert len(igsm.load_rows(corpus, "igsm_test", 2)) == 2
    (tmp_path / "eval").mkdir()
    for text, message in (('{"id": 0, "prompt": "x"}\n', r"igsm_bad.jsonl:1: no 'op'; "),
                          ("{}\nnot json\n", "igsm_bad.jsonl:1: no 'id'"),
                          ('{"id": 0, "prompt": "x", "op": 1, "problem": {}}\nnot json\n',
                           "igsm_bad.jsonl:2: not JSON")):
        (tmp_path / "eval" / "igsm_bad.jsonl").write_text(text)
        record_eval_set(tmp_path, "igsm_bad")  # the manifest agrees: the rows are what is bad
        with pytest.raises(TrainError, match=message):
            igsm.load_rows(tmp_path, "igsm_bad", 0)
    with pytest.raises(TrainError, match="no igsm eval sets"):
        manifest = {"format": FORMAT, "eval": [], "shards": [], "tokenizer": {}}
        (tmp_path / "manifest.json").write_text(json.dumps(manifest))
        igsm.default_sets(tmp_path)


def test_eval_config_validation(tmp_path):
    from corpus_gen.core.errors import ConfigError

    path = tmp_path / "exp.yaml"
    path.write_text("name: t\neval: igsm\n")
    assert load_experiment(path, []).eval.tasks == ["igsm"]
    for bad in ("eval.igsm.batch_size=0", "eval.igsm.max_problems=-1", "eval.igsm.sets=[qa_test]"):
        with pytest.raises(ConfigError, match=bad.split("=")[0].removeprefix("eval.")):
            load_experiment(path, [bad])


def test_end_to_end_train_then_evaluate(corpus, tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("name: t\nmodel:\n  n_layer: 2\n  n_head: 2\n  d_model: 32\n"
                    "train:\n  ctx: 512\n  micro_batch: 2\n  lr: 0.003\n  warmup_steps: 1\n"
                    "  max_steps: 3\n  ckpt_every: 3\n  log_every: 1\n"
                    "  wandb:\n    mode: disabled\neval: igsm\n")
    run_dir = tmp_path / "run"
    train(load_experiment(path, []), run_dir, corpus)
    config = eval_schema()(tasks=["igsm"],
                           igsm=igsm.IgsmOptions(max_problems=3, batch_size=2, max_new_tokens=12))
    results = evaluate(run_dir, ["igsm"], config, corpus)["igsm"]
    saved = json.loads((run_dir / "eval" / "igsm.json").read_text())
    assert saved == json.loads(json.dumps(results)) and saved["step"] == 3
    assert (run_dir / "eval" / "igsm.png").stat().st_size > 0
    for name in [*SETS, "in_distribution", "out_of_distribution"]:
        entry = saved[name]
        assert entry["n"] == (6 if name == "in_distribution" else 3)
        assert 0 <= entry["solution"] <= entry["answer"] <= 1 and 0 <= entry["truncated"] <= 1
        assert sum(entry["failures"].values()) == entry["n"] - round(entry["solution"] * entry["n"])
        assert set(entry["failures"]) <= set(REASONS_OR_OURS)
        assert sum(op["n"] for op in entry["per_op"].values()) == entry["n"]
        for op in entry["per_op"].values():
            assert 0 <= op["solution"] <= op["answer"] <= 1
    assert saved["igsm_op5"]["distribution"] == "ood"
    assert len((run_dir / "eval" / igsm.GENERATIONS).read_text().splitlines()) == 9


def test_shipped_configs_load():
    root = Path(__file__).resolve().parent.parent / "configs" / "experiment"
    for name in ("igsm_cpu", "p21_igsm_med_pq", "p21_igsm_hard_pq", "p22_igsm_med_retry"):
        experiment = load_experiment(root / f"{name}.yaml", [])
        assert experiment.eval.tasks == ["igsm"] and experiment.corpus.family == "igsm"


def _first_value_wrong(row: dict) -> str:
    """The row's solution with its first step's value off by one (mod 23)."""
    first = row["solution"].split(". ")[0]
    head, _, value = first.rpartition(" = ")
    return row["solution"].replace(first, f"{head} = {(int(value) + 1) % 23}", 1)


def test_the_answer_is_compared_mod_23(corpus):
    row = _rows(corpus)[0]
    text = _first_value_wrong(row).replace(f"Answer: {row['answer']}.",
                                           f"Answer: {row['answer'] + 23}.")
    verdict = igsm.score_text(row, text)
    assert verdict["solution"] is False and verdict["answer"] is True


def test_an_earlier_mistake_is_not_blamed_on_the_token_budget(corpus):
    row = max(_rows(corpus), key=lambda r: r["solution"].count(". "))
    cut = ". ".join(_first_value_wrong(row).split(". ")[:3]) + ". Define"  # then cut off
    verdict = igsm.score_text(row, cut, truncated=True)
    assert (verdict["reason"], verdict["step"]) == ("wrong_value", 0)


def test_a_generation_that_fills_its_budget_is_truncated(corpus, tmp_path, monkeypatch):
    tokenizer = Tokenizer.load(corpus / "tokenizer.model")
    define = tokenizer.encode(" Define")[:1]
    monkeypatch.setattr(generation, "generate",
                        lambda model, prompts, n, eos_id=None: [define * n for _ in prompts])
    context = EvalContext(_Model(positional=SimpleNamespace(max_positions=None)), tokenizer,
                          corpus, tmp_path, None)
    results = igsm.run(context, igsm.IgsmOptions(sets=["igsm_test"], max_new_tokens=5))
    assert results["igsm_test"]["truncated"] == 1.0
    assert results["igsm_test"]["failures"] == {"truncated": 6}
