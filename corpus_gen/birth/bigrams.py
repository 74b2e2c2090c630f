"""The tiny-shakespeare character statistics the birth family draws from (data/, NOTICE.md): the
65 characters, their unigram and bigram counts, and what follows from them (token names, the
most frequent characters, the held-out outputs, the Bayes floor)."""

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data" / "shakespeare_char_counts.json"
# token names of the two whitespace characters (a fixed vocabulary's names hold no whitespace);
# every other character is its own name
SPELLED = {"\n": "<nl>", " ": "<sp>"}


@dataclass(frozen=True)
class Counts:
    chars: tuple[str, ...]  # token i is chars[i] (sorted, as the official meta.pkl's itos)
    unigram: np.ndarray  # (V,) int64: how often each character occurs
    bigram: np.ndarray  # (V, V) int64: bigram[a, b], how often b follows a


@functools.lru_cache(maxsize=1)
def counts() -> Counts:
    given = json.loads(DATA.read_text(encoding="utf-8"))
    counts = Counts(tuple(given["chars"]), np.array(given["unigram_counts"], dtype=np.int64),
                    np.array(given["bigram_counts"], dtype=np.int64))
    # every character is followed by something (the text's last one too): no empty row to draw
    assert (counts.bigram.sum(1) > 0).all(), f"{DATA}: a character with no bigram"
    return counts


def characters() -> int:
    """V, the vocabulary's characters."""
    return len(counts().chars)


def token_names() -> tuple[str, ...]:
    """The characters' token names by id."""
    return tuple(SPELLED.get(c, c) for c in counts().chars)


def bayes_floor() -> float:
    """The conditional entropy H(next | previous) of the bigram law, in nats: the loss of the
    best predictor of a token drawn from its bigram conditional (2.4526)."""
    pairs = counts().bigram.astype(np.float64)
    rows = pairs.sum(1, keepdims=True)  # (V, 1)
    seen = pairs > 0
    return float(-(pairs[seen] / pairs.sum() * np.log((pairs / rows)[seen])).sum())


def most_frequent(k: int) -> np.ndarray:
    """(k,) the k most frequent characters, most frequent first: the fixed triggers."""
    return np.argsort(-counts().unigram, kind="stable")[:k]


def trained_outputs(share: float) -> int:
    """How many ids, from 0, outputs may take when `share` of the vocabulary is held out: the
    official split (its 0.75 of the 65 ids: 48, the held-out 17 being 'j'..'z')."""
    return int((1 - share) * characters())
