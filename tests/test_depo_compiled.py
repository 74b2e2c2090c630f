"""The compiled draws (corpus_gen.core.compiled_words, corpus_gen.depo.draws) give exactly the
numpy draws they replace: `Lexicon.draw_shuffled`, the first places of `words.shuffled`, and
depo's layout with its hops drawn by `word_tasks.below`. Those numpy draws are the ones
tests/test_depo_draws.py checks against exact distributions."""

import numpy as np
import pytest

from corpus_gen.core import compiled_words, word_tasks
from corpus_gen.core.words import Lexicon, shuffled
from corpus_gen.depo import draws


def _keys(count: int, seed: int) -> np.ndarray:
    return word_tasks.doc_keys(seed, np.arange(count), np.zeros(count, dtype=np.int64))


@pytest.mark.parametrize("lexicon", [
    Lexicon(3, 5, 7),  # depo2's words: three lengths
    Lexicon(50, 1, 2),  # depo1's: half the draws among 50 one-letter words, many repeats
    Lexicon(2, 1, 2),  # 6 words: documents take all of them
    Lexicon(5, 1, 1),  # one length, few words: the first n of an order of every word
    Lexicon(100, 2, 2),  # one length, too many words to order them all
])
def test_compiled_draw_shuffled_is_the_numpy_draw(lexicon):
    keys = _keys(300, 1)
    n = 1 + np.arange(300) % min(lexicon.size, 130)
    expected = lexicon.draw_shuffled(keys, n, 2, 3)
    assert lexicon.shuffles_all == (lexicon.size == 5)
    assert (compiled_words.draw_shuffled(lexicon, keys, n, 2, 3) == expected).all()
    assert len(compiled_words.draw_shuffled(lexicon, keys[:0], n[:0], 2, 3)) == 0


def test_first_places_are_the_first_of_the_numpy_shuffle():
    keys = _keys(400, 2)
    sizes = np.arange(400) % 140  # empty documents too
    counts = np.minimum(sizes, 10)
    whole = shuffled(keys, sizes, 5)
    rank = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    assert (compiled_words.first_places(keys, sizes, sizes, 5) == whole).all()
    assert (compiled_words.first_places(keys, sizes, counts, 5)
            == whole[rank < np.repeat(counts, sizes)]).all()


def test_the_layout_lists_each_pair_then_asks_each_query_its_hops_drawn_as_below():
    keys = _keys(3, 3)
    n, queries = np.array([3, 5, 4]), np.array([2, 3, 1])
    words = 100 + np.arange(12)  # the cycles back to back: 100-102, 103-107, 108-111
    pairs = np.array([1, 2, 0, 7, 3, 4, 5, 6, 10, 11, 8, 9])
    asked = np.array([2, 0, 4, 6, 7, 9])
    items, hops = draws.lay_out(keys, words, n, pairs, asked, queries, None, 4, 6, (1, 2, 9))
    rank = np.array([0, 1, 0, 1, 2, 0])
    assert hops.tolist() == (word_tasks.below(keys[[0, 0, 1, 1, 1, 2]], 4, 6, rank) + 1).tolist()
    assert items.offsets.tolist() == [0, 15, 38, 51]
    first = items.codes[:15].tolist()
    assert first[:7] == [-1, 101, 102, 102, 100, 100, 101]  # <bos>, the pairs in listed order
    k0, k1 = hops[:2].tolist()
    assert first[7:] == [-1, 102, -1, 100 + (2 + k0) % 3, -1, 100, -1, 100 + k1 % 3]
    assert items.marks[7:15].tolist() == [1 + k0, 0, 9, 0, 1 + k1, 0, 9, 0]
    assert items.marks[[0, 15, 38]].tolist() == [1, 1, 1]
    assert items.loss[:15].tolist() == [0] * 7 + [0, 0, 1, 1] * 2
    given, hops = draws.lay_out(keys, words, n, pairs, asked, queries, np.array([4, 1, 2, 3, 4, 1]),
                                4, 6, (1, 2, 9))
    assert hops.tolist() == [4, 1, 2, 3, 4, 1] and given.codes[10] == 100 + (2 + 4) % 3
    last = given.codes[38:].tolist()  # the third cycle, 108-111: one query, k 1
    assert last[1:9] == [110, 111, 111, 108, 108, 109, 109, 110] and last[10:] == [109, -1, 110]


def test_words_of_one_length_do_not_depend_on_how_many_documents_are_drawn_at_once():
    lexicon = Lexicon(45, 2, 2)  # 2,025 words: a batch of 2,100 orders them in two parts
    keys = _keys(2100, 4)
    n = np.full(2100, 3)
    whole = lexicon.draw_shuffled(keys, n, 1, 2)
    assert (whole[-300:] == lexicon.draw_shuffled(keys[-100:], n[-100:], 1, 2)).all()
