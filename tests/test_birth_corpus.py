"""The birth family: bigram sequences with triggers, checked against brute-force truth (every
trigger followed by its output, the loss on outputs from their second occurrence, the bigram and
unigram laws by chi-square at fixed seeds) and the eval sets' positions recomputed by hand."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from corpus_gen.birth import bigrams, sequences
from corpus_gen.birth import family as birth
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import get_family
from corpus_gen.core.shards import read_shard
from launch.cli import main
from tests.integer_task_corpus import (
    assert_independent_of_workers_and_shard_size,
    chi_square_p,
    family_config,
)

ROOT = Path(__file__).resolve().parent.parent
COUNTS = json.loads((ROOT / "corpus_gen/birth/data/shakespeare_char_counts.json").read_text())
V = len(COUNTS["chars"])


def _config(*overrides: str):
    return family_config("birth", *overrides)


def _sequences(config, start: int, stop: int) -> list[tuple[np.ndarray, dict, np.ndarray]]:
    """(tokens (T,), meta, loss (T,)) of each training sequence in [start, stop)."""
    out = []
    for batch in get_family("birth").batches(config, start, stop):
        loss = np.ones(len(batch.ids), np.uint8) if batch.loss is None else batch.loss
        for i, meta in enumerate(batch.metas):
            a, b = batch.offsets[i], batch.offsets[i + 1]
            out.append((batch.ids[a:b], json.loads(meta), loss[a:b]))
    return out


def _outputs_by_hand(tokens: list[int], triggers: list[int]) -> list[tuple[int, int, int]]:
    """(position, trigger, occurrence) of every token that follows a trigger."""
    found, seen = [], {}
    for t in range(1, len(tokens)):
        if tokens[t - 1] in triggers:
            seen[tokens[t - 1]] = seen.get(tokens[t - 1], 0) + 1
            found.append((t, tokens[t - 1], seen[tokens[t - 1]]))
    return found


def test_the_vocabulary_is_the_65_characters_then_eos_with_whitespace_named():
    names = get_family("birth").vocabulary(_config())
    assert len(names) == V + 1 == 66 and names[-1] == "<eos>"
    assert names[0] == "<nl>" and names[1] == "<sp>"
    assert names[2:V] == tuple(COUNTS["chars"][2:])


def test_the_bayes_floor_is_the_bigram_conditional_entropy_2_4526():
    unigram_rows = [sum(row) for row in COUNTS["bigram_counts"]]
    total = sum(unigram_rows)
    by_hand = -sum(n / total * math.log(n / unigram_rows[a])
                   for a, row in enumerate(COUNTS["bigram_counts"]) for n in row if n)
    assert bigrams.bayes_floor() == pytest.approx(by_hand, abs=1e-12)
    assert round(bigrams.bayes_floor(), 4) == 2.4526
    assert get_family("birth").layout(_config()).summary["bayes_floor"] == 2.4526


@pytest.mark.parametrize("overrides", [
    ("trigger_mode=frequent", "output_mode=uniform"),
    ("trigger_mode=drawn", "output_mode=bigram", "triggers=12"),
    ("trigger_mode=drawn", "output_mode=held_out", "seq_len=40"),
])
def test_every_trigger_is_followed_by_its_output_and_the_loss_counts_its_repeats(overrides):
    config = _config(*overrides)
    frequent = sorted(range(V), key=lambda c: -COUNTS["unigram_counts"][c])[:config.triggers]
    for tokens, meta, loss in _sequences(config, 0, 300):
        triggers, outputs = meta["triggers"], meta["outputs"]
        assert len(tokens) == config.seq_len and len(set(triggers)) == config.triggers
        if config.trigger_mode == "frequent":
            assert triggers == frequent
        if config.output_mode == "held_out":
            assert max(outputs) < 48  # 'j'..'z' held out
        found = _outputs_by_hand(tokens.tolist(), triggers)
        for t, trigger, _ in found:
            assert tokens[t] == outputs[triggers.index(trigger)]
        assert np.flatnonzero(loss).tolist() == [t for t, _, c in found if c >= 2]


def test_the_loss_option_all_counts_every_token_and_shards_hold_the_text(tmp_path):
    for loss in ("context_outputs", "all"):
        config = _config("samples=40", "seq_len=64", f"loss={loss}", "eval_samples=3")
        out = tmp_path / loss
        manifest = generate_corpus(config, out, progress=False, log=lambda *_: None)
        names = json.loads((out / "vocab.json").read_text())
        assert manifest["tokenizer"]["eos_id"] == V
        samples = [s for shard in manifest["shards"] for s in read_shard(out / shard["name"])]
        assert len(samples) == 40
        for sample in samples:
            tokens = sample["ids"].tolist()
            assert " ".join(names[str(i)] for i in tokens) == sample["json"]["text"]
            found = _outputs_by_hand(tokens, sample["json"]["triggers"])
            expected = ([1] * 64 if loss == "all" else
                        [int(any(t == p and c >= 2 for p, _, c in found)) for t in range(64)])
            assert sample["mask"].tolist() == expected


def test_ordinary_tokens_follow_the_bigram_law_and_the_first_the_unigram_law():
    # drawn triggers: every character is an ordinary token in most sequences
    sequences = _sequences(_config("trigger_mode=drawn", "triggers=3", "seq_len=128"), 0, 3000)
    bigram = np.array(COUNTS["bigram_counts"], dtype=float)
    after = {c: np.zeros(V) for c in (1, 43, 46)}  # "<sp>", "e", "h"
    first = np.zeros(V)
    for tokens, meta, _ in sequences:
        first[tokens[0]] += 1
        for a, b in zip(tokens[:-1].tolist(), tokens[1:].tolist()):
            if a in after and a not in meta["triggers"]:
                after[a][b] += 1
    for a, observed in after.items():
        assert observed.sum() > 5000
        assert chi_square_p(observed, bigram[a]) > 1e-6
    assert chi_square_p(first, np.array(COUNTS["unigram_counts"], dtype=float)) > 1e-6


def test_drawn_triggers_are_successive_draws_from_the_unigram_law():
    unigram = np.array(COUNTS["unigram_counts"], dtype=float)
    sequences = _sequences(_config("trigger_mode=drawn", "triggers=2", "seq_len=4"), 0, 20000)
    first, second = np.zeros(V), np.zeros(V)
    for _, meta, _ in sequences:
        first[meta["triggers"][0]] += 1
        second[meta["triggers"][1]] += 1
    assert chi_square_p(first, unigram) > 1e-6
    # the second: P(c) = sum over a != c of p(a) p(c) / (1 - p(a))
    p = unigram / unigram.sum()
    law = p * ((p / (1 - p)).sum() - p / (1 - p))
    assert law.sum() == pytest.approx(1)
    assert chi_square_p(second, law) > 1e-6


@pytest.mark.parametrize("mode", ["uniform", "bigram", "held_out"])
def test_outputs_follow_their_law(mode):
    sequences = _sequences(_config("trigger_mode=frequent", "triggers=1", "seq_len=2",
                                   f"output_mode={mode}"), 0, 20000)
    observed = np.bincount([meta["outputs"][0] for _, meta, _ in sequences], minlength=V)
    law = {"uniform": np.ones(V), "held_out": (np.arange(V) < 48).astype(float),
           "bigram": np.array(COUNTS["bigram_counts"][1], dtype=float)}[mode]  # after "<sp>"
    assert observed[law == 0].sum() == 0
    assert chi_square_p(observed[law > 0], law[law > 0]) > 1e-6


def test_each_triggers_bigram_output_follows_the_law_after_that_trigger():
    config = _config("trigger_mode=frequent", "triggers=2", "seq_len=4", "output_mode=bigram")
    drawn = birth._draw(config, "train", np.arange(20000))
    assert drawn.triggers[0].tolist() == [1, 43]  # "<sp>", "e": the two most frequent
    law = np.array(COUNTS["bigram_counts"][43], dtype=float)  # after "e", not after "<sp>"
    observed = np.bincount(drawn.outputs[:, 1], minlength=V)
    assert observed[law == 0].sum() == 0
    assert chi_square_p(observed[law > 0], law[law > 0]) > 1e-6


def test_ood_outputs_are_uniform_over_all_17_held_out_characters():
    config = _config("trigger_mode=frequent", "triggers=1", "seq_len=2", "output_mode=held_out")
    observed = np.bincount(birth._draw(config, "ood", np.arange(17000)).outputs[:, 0],
                           minlength=V)
    assert observed[:48].sum() == 0 and (observed[48:] > 0).all()
    assert chi_square_p(observed[48:], np.ones(V - 48)) > 1e-6


def test_a_category_is_the_first_whose_cumulative_count_exceeds_the_draw():
    cumulative = np.array([0, 3, 3, 5], dtype=np.int64)  # counts 0, 3, 0, 2
    drawn = [sequences._category(cumulative, np.uint64(h)) for h in range(10)]
    assert drawn == [1, 1, 1, 3, 3] * 2  # the draw mod 5; ids 0 and 2 (no count) never


def test_eval_rows_give_each_outputs_position_and_occurrence_and_ood_holds_held_out_outputs():
    config = _config("trigger_mode=drawn", "output_mode=held_out", "eval_samples=600",
                     "seq_len=96")
    sets = get_family("birth").eval_sets(config)
    assert list(sets) == ["birth_test", "birth_ood"]
    names = get_family("birth").vocabulary(config)
    for name, rows in sets.items():
        rows = list(rows())
        assert [r["id"] for r in rows] == list(range(600))
        for row in rows:
            assert " ".join(names[t] for t in row["tokens"]) == row["text"]
            found = _outputs_by_hand(row["tokens"], row["triggers"])
            assert row["positions"] == [t for t, _, _ in found]
            assert row["occurrence"] == [c for _, _, c in found]
            held_out = [o >= 48 for o in row["outputs"]]
            assert all(held_out) if name == "birth_ood" else not any(held_out)
    train = [meta for _, meta, _ in _sequences(config, 0, 5)]
    assert [r["triggers"] for r in list(sets["birth_test"]())[:5]] != [m["triggers"]
                                                                     for m in train]
    assert list(get_family("birth").eval_sets(_config())) == ["birth_test"]


def test_sequences_are_the_same_whatever_the_range_drawn():
    config = _config("trigger_mode=drawn", "seq_len=32")
    whole = [tokens.tolist() for tokens, _, _ in _sequences(config, 0, 1200)]
    assert [t.tolist() for t, _, _ in _sequences(config, 1100, 1110)] == whole[1100:1110]
    assert [t.tolist() for t, _, _ in _sequences(config, 7, 8)] == whole[7:8]
    other = _sequences(_config("trigger_mode=drawn", "seq_len=32", "seed=1"), 0, 20)
    assert [t.tolist() for t, _, _ in other] != whole[:20]


def test_shards_are_byte_identical_whatever_the_workers_and_the_same_documents_whatever_size(
        tmp_path):
    assert_independent_of_workers_and_shard_size(
        "birth", ["trigger_mode=drawn", "seq_len=48", "eval_samples=20"], tmp_path)


@pytest.mark.parametrize("override, key", [
    ("triggers=66", "triggers"),
    ("triggers=-1", "triggers"),
    ("seq_len=9", "seq_len"),  # 5 triggers need 10
    ("seq_len=1", "seq_len"),
    ("trigger_mode=random", "trigger_mode"),
    ("output_mode=ood", "output_mode"),
    ("held_out_share=0", "held_out_share"),
    ("held_out_share=1.0", "held_out_share"),
    ("held_out_share=0.99", "held_out_share"),  # trains no id (int(0.01 x 65) = 0)
    ("loss=outputs", "loss"),
    ("triggers=0", "loss"),  # context_outputs with no outputs
    ("samples=0", "samples"),
    ("eval_samples=-1", "eval_samples"),
])
def test_bad_values_are_refused_naming_their_key(override, key):
    with pytest.raises(ConfigError) as err:
        _config(override)
    assert err.value.key == key


def test_physlm_gen_makes_a_small_corpus_and_refuses_a_bad_key_in_one_line(tmp_path, capsys):
    config = str(ROOT / "configs/corpus/birth.yaml")
    out = tmp_path / "c"
    assert main(["gen", config, "samples=50", "eval_samples=7", "output_mode=held_out",
                 "--out", str(out)]) == 0
    assert len((out / "eval" / "birth_ood.jsonl").read_text().splitlines()) == 7
    assert json.loads((out / "manifest.json").read_text())["summary"]["bayes_floor"] == 2.4526
    capsys.readouterr()
    assert main(["gen", config, "triggers=70", "--out", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err == ("physlm gen: error: command line: triggers=70: between 0 "
                                       "and the vocabulary's 65 characters\n")
