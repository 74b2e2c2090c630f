"""The word draws Depo and Brevo share (corpus_gen.core.words) against exact distributions: a
document's n distinct words are the first n distinct of its stream of draws (length uniform,
then letters uniform), put in a uniformly random order; checked by chi-square on small
lexicons, and each of the draw's ways (a table or a sort; rows or one sort) against the other."""

import itertools
import math

import numpy as np

from corpus_gen.core import word_tasks, words
from corpus_gen.core.words import Lexicon, shuffled
from tests.draw_checks import fits


def _keys(count: int, seed: int) -> np.ndarray:
    return word_tasks.doc_keys(seed, np.arange(count), np.zeros(count, dtype=np.int64))


def _exact(lexicon: Lexicon, n: int) -> dict[tuple[int, ...], float]:
    """Each ordered n words' probability: the set's, as the first n distinct of independent
    draws (each order of drawing it), spread evenly over its orders."""
    lengths = lexicon.lengths(np.arange(lexicon.size))
    p = 1 / (lexicon.max_len - lexicon.min_len + 1) / lexicon.mini_vocab ** lengths
    exact = {}
    for drawn in itertools.permutations(range(lexicon.size), n):
        taken = np.cumsum([0, *p[list(drawn)]])[:-1]
        chance = float(np.prod(p[list(drawn)] / (1 - taken)))
        key = tuple(sorted(drawn))
        exact[key] = exact.get(key, 0.0) + chance
    return {order: exact[tuple(sorted(order))] / math.factorial(n)
            for order in itertools.permutations(range(lexicon.size), n)}


def _ordered(lexicon: Lexicon, count: int, n: int, seed: int) -> list[tuple[int, ...]]:
    """`count` documents' n words each, in order (drawn 4000 documents at a time)."""
    keys = _keys(count, seed)
    codes = np.concatenate([lexicon.draw_shuffled(keys[lo:lo + 4000], np.full(len(
        keys[lo:lo + 4000]), n), 1, 2) for lo in range(0, count, 4000)])
    return [tuple(row) for row in codes.reshape(-1, n).tolist()]


def test_one_length_words_are_a_uniform_ordered_sample():
    lexicon = Lexicon(5, 1, 1)
    assert fits(_ordered(lexicon, 12000, 3, 1), _exact(lexicon, 3))


def test_words_of_several_lengths_are_the_first_distinct_draws_in_a_uniform_order():
    lexicon = Lexicon(2, 1, 2)  # two words of one letter, each drawn 1/4; four of two, 1/8
    assert fits(_ordered(lexicon, 40000, 3, 3), _exact(lexicon, 3))


def test_the_table_and_the_sort_find_the_same_first_draws(monkeypatch):
    lexicon = Lexicon(3, 1, 3)
    keys, counts = _keys(500, 4), 1 + np.arange(500) % 39
    by_table = lexicon.draw(keys, counts, 1)
    monkeypatch.setattr(words, "_DENSE_CELLS", 0)
    assert (lexicon.draw(keys, counts, 1) == by_table).all()


def test_documents_of_one_size_shuffle_as_among_others():
    keys = _keys(61, 5)
    sizes = np.full(60, 17)
    rows = shuffled(keys[:60], sizes, 3)  # one size: a sort per row
    mixed = shuffled(keys, np.r_[sizes, 1], 3)[:len(rows)]  # sizes differ: one sort
    assert (rows == mixed).all()
    assert (np.sort(rows.reshape(60, 17), 1) == np.arange(17) + 17 * np.arange(60)[:, None]).all()
