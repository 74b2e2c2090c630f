"""The birth evaluation task on a tiny birth corpus (physlm gen's own eval sets): a hand-built
induction head predicts every output from its trigger's second occurrence on (test and OOD sets)
and scores 1.0 on the induction scores and memories; a random model is at chance; the counts
are the rows'; bad options and sequences the model cannot hold are named."""

import json

import pytest
import torch

import trainer.eval.birth as birth
from corpus_gen.core.errors import ConfigError
from tests.conftest import ROOT, tiny_experiment_file
from tests.planted_answers import assert_registered_with_its_shipped_config
from tests.test_mechanisms import induction_gpt
from trainer.config import load_experiment
from trainer.errors import TrainError
from trainer.eval.registry import EvalContext
from trainer.model import GPT, ModelConfig

T, ROWS, VOCAB = 48, 40, 66  # 65 characters and <eos>


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from corpus_gen.core.config import load_config
    from corpus_gen.core.generate import generate_corpus
    from corpus_gen.core.registry import schemas

    out = tmp_path_factory.mktemp("birth") / "corpus"
    config = load_config(ROOT / "configs" / "corpus" / "birth.yaml",
                         [f"seq_len={T}", "triggers=3", "output_mode=held_out", "samples=16",
                          f"eval_samples={ROWS}"], schemas())
    generate_corpus(config, out, progress=False, log=lambda *_: None)
    return out


def context_for(model, corpus, run_dir) -> EvalContext:
    from corpus_gen.core.corpus_tokenizer import load_tokenizer
    from corpus_gen.core.manifest import read_manifest

    (run_dir / "eval").mkdir(parents=True, exist_ok=True)
    return EvalContext(model, load_tokenizer(corpus, read_manifest(corpus)), corpus, run_dir,
                       torch.device("cpu"))


def rows_of(corpus, name: str) -> list[dict]:
    return [json.loads(line) for line in (corpus / "eval" / f"{name}.jsonl").read_text()
            .splitlines()]


def test_the_task_is_registered_and_bad_options_are_named(tmp_path):
    assert_registered_with_its_shipped_config(tmp_path, "birth", birth, birth.BirthOptions)
    for bad in ("max_rows=-1", "batch_size=0", "map_positions=1"):
        with pytest.raises(ConfigError, match=f"birth.{bad.split('=')[0]}"):
            load_experiment(tiny_experiment_file(tmp_path), [f"eval.birth.{bad}"])


def test_a_hand_built_induction_head_predicts_every_output_in_context(corpus, tmp_path):
    results = birth.run(context_for(induction_gpt(VOCAB, T), corpus, tmp_path),
                        birth.BirthOptions(batch_size=16, map_positions=24))
    test, ood = results["test"], results["ood"]
    seconds = sum(c >= 2 for row in rows_of(corpus, "birth_test") for c in row["occurrence"])
    firsts = sum(c == 1 for row in rows_of(corpus, "birth_test") for c in row["occurrence"])
    assert (test["n"], test["context_n"], test["first_n"]) == (ROWS, seconds, firsts)
    assert test["bigram_n"] == ROWS * (T - 1) - seconds - firsts
    assert test["context_accuracy"] == ood["context_accuracy"] == 1.0 and ood["n"] == ROWS
    assert test["context_loss"] < 1e-3
    assert test["first_accuracy"] < 0.3  # its first occurrence says nothing of the output
    assert test["bayes_floor"] == 2.4526
    assert test["bigram_gap"] == pytest.approx(test["bigram_loss"] - 2.4526)
    assert results["previous_token"]["score"] == pytest.approx(1.0, abs=1e-6)
    assert results["induction"]["score"] == pytest.approx(1.0, abs=1e-6)
    assert results["induction"]["n"] == seconds  # one query a trigger before a second output
    assert results["previous_token"]["per_layer"][0] == [pytest.approx(1.0, abs=1e-6)]
    assert results["induction"]["uniform"] < 0.5  # the triggers are the frequent characters
    assert results["memories"] == {"output": 1.0, "induction_key": 1.0, "previous_token": 1.0}
    assert (tmp_path / "eval" / birth.ATTENTION).stat().st_size > 0
    birth.plot(results, tmp_path / "birth.png")
    assert (tmp_path / "birth.png").stat().st_size > 0


def test_a_random_model_is_at_chance(corpus, tmp_path):
    """Init weights attend about uniformly and predict outputs no better than guessing one of
    the 48 output ids."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, d_model=32, vocab_size=VOCAB, ctx=T,
                            pos="learned", mlp="none", tie_embeddings=False)).eval()
    results = birth.run(context_for(model, corpus, tmp_path), birth.BirthOptions(max_rows=20))
    assert results["test"]["n"] == results["ood"]["n"] == 20
    assert results["test"]["context_accuracy"] < 0.1
    for name in ("previous_token", "induction"):
        scores = results[name]
        assert scores["score"] == pytest.approx(scores["uniform"], abs=0.02)
    memories, chance = results["memories"], results["memories_chance"]
    assert chance == {"output": 1 / VOCAB, "induction_key": 1 / 3, "previous_token": 1 / (T - 1)}
    assert memories["output"] < 0.15 and memories["previous_token"] < 0.1, memories
    assert memories["induction_key"] <= 2 / 3  # of 3 triggers
    assert results["test"]["bigram_loss"] == pytest.approx(4.19, abs=0.1)  # ~ln 66


def test_sequences_longer_than_the_learned_positions_are_named(corpus, tmp_path):
    model = GPT(ModelConfig(n_layer=1, n_head=1, d_model=8, vocab_size=VOCAB, ctx=T // 2,
                            pos="learned"))
    with pytest.raises(TrainError, match=f"{T} tokens exceed the model's {T // 2}"):
        birth.run(context_for(model, corpus, tmp_path), birth.BirthOptions())


def test_a_corpus_without_the_set_is_named(tmp_path):
    from tests.conftest import record_eval_set

    (tmp_path / "corpus" / "eval").mkdir(parents=True)
    (tmp_path / "corpus" / "eval" / "other.jsonl").write_text("")
    record_eval_set(tmp_path / "corpus", "other")
    context = EvalContext(GPT(ModelConfig(n_layer=1, n_head=1, d_model=8, vocab_size=VOCAB)),
                          None, tmp_path / "corpus", tmp_path, torch.device("cpu"))
    with pytest.raises(TrainError, match="needs a birth corpus"):
        birth.run(context, birth.BirthOptions())


def test_end_to_end_train_then_physlm_eval(corpus, tmp_path):
    """Two training steps of a tiny GPT on the corpus, then `physlm eval`'s runner: the results,
    the plot and the attention maps land in the run's eval directory."""
    from trainer.engine import train
    from trainer.eval.runner import evaluate

    path = tmp_path / "exp.yaml"
    path.write_text("name: t\nmodel:\n  n_layer: 2\n  n_head: 2\n  d_model: 32\n  mlp: none\n"
                    f"  pos: learned\ntrain:\n  ctx: {T + 16}\n  micro_batch: 2\n  lr: 0.003\n"
                    "  warmup_steps: 1\n  max_steps: 2\n  ckpt_every: 2\n  log_every: 1\n"
                    "  wandb:\n    mode: disabled\neval:\n  tasks: [birth]\n  birth:\n"
                    "    max_rows: 8\n")
    run_dir = tmp_path / "run"
    train(load_experiment(path, []), run_dir, corpus)
    results = evaluate(run_dir)["birth"]
    saved = json.loads((run_dir / "eval" / "birth.json").read_text())
    assert saved == json.loads(json.dumps(results)) and saved["step"] == 2
    assert saved["test"]["n"] == saved["ood"]["n"] == 8
    assert len(saved["induction"]["per_layer"]) == 2 and len(saved["memories"]) == 3
    for picture in ("birth.png", birth.ATTENTION):
        assert (run_dir / "eval" / picture).stat().st_size > 0


def _scored_by_hand(model: GPT, rows: list[dict]) -> dict[str, tuple[float, float, int]]:
    """(accuracy, loss, count) of the first occurrences' outputs and of the later ones'
    (context), from the model's logits."""
    with torch.no_grad():
        logp = model(torch.tensor([row["tokens"] for row in rows])).log_softmax(-1)
    sums = {"first": [0, 0.0, 0], "context": [0, 0.0, 0]}
    for i, row in enumerate(rows):
        for position, occurrence in zip(row["positions"], row["occurrence"]):
            entry = sums["first" if occurrence == 1 else "context"]
            target = row["tokens"][position]
            entry[0] += int(logp[i, position - 1].argmax() == target)
            entry[1] -= float(logp[i, position - 1, target])
            entry[2] += 1
    return {name: (right / n, loss / n, n) for name, (right, loss, n) in sums.items()}


def test_first_accuracy_and_context_loss_are_over_their_own_outputs(corpus, tmp_path):
    rows = rows_of(corpus, "birth_test")
    model = induction_gpt(VOCAB, T)
    results = birth.run(context_for(model, corpus, tmp_path), birth.BirthOptions())["test"]
    first = _scored_by_hand(model, rows)["first"]
    assert 0 < first[0] < 0.3 and results["first_accuracy"] == pytest.approx(first[0])
    torch.manual_seed(0)  # a random model: a context loss far from 0 (about ln 66)
    model = GPT(ModelConfig(n_layer=2, n_head=2, d_model=32, vocab_size=VOCAB, ctx=T,
                            pos="learned", mlp="none", tie_embeddings=False)).eval()
    results = birth.run(context_for(model, corpus, tmp_path / "random"),
                        birth.BirthOptions())["test"]
    context = _scored_by_hand(model, rows)["context"]
    assert results["context_loss"] == pytest.approx(context[1], rel=1e-5)
    assert results["context_n"] == context[2] and len(rows) == ROWS
