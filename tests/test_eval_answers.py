"""The scoring that the answer tasks (depo, brevo, mano) share: no rows is no data, and the
failures come most frequent first."""

from trainer.eval.answers import scored


def test_no_rows_score_none_not_zero():
    assert scored([], [], "k") == {"accuracy": None, "n": 0, "failures": {}, "per_k": {}}


def test_failures_come_most_frequent_first_and_each_level_apart():
    rows = [{"k": 1}, {"k": 1}, {"k": 2}, {"k": 2}]
    results = scored(rows, ["wrong_word", "no_word", "no_word", None], "k")
    assert list(results["failures"].items()) == [("no_word", 2), ("wrong_word", 1)]
    assert results["per_k"] == {"1": {"accuracy": 0.0, "n": 2}, "2": {"accuracy": 0.5, "n": 2}}
