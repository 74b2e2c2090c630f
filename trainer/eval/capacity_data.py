"""What the capacity task measures, read from a corpus and verified: the population (its setting
and information content, from `biod.json` or `bios.json`) and the evaluated people's documents
as token ids with the spans of each name and value (eval set `biod_people` or `bios_people`).

bioD rows hold token ids and token spans; bioS rows hold text and character spans of whole
words, which the corpus's tokenizer turns into tokens and token spans: it encodes a text word by
word, so a word's tokens are the same wherever it stands (corpus_gen/core/tokenizer.py). A value
may be read over several spans (bioS scores the employer over its own words and the company
city's, which it determines); unused spans are empty.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus_gen.core.io import read_json_file
from corpus_gen.core.manifest import read_manifest
from trainer.errors import TrainError
from trainer.eval.eval_sets import read_eval_set, verified_corpus_file
from trainer.eval.registry import EvalContext

NEEDS = ("the capacity task needs a bioD corpus or a bioS one generated with capacity=true "
         "(family bios, style s)")
TERMS = ("name_bits", "value_bits", "dictionary_bits")


@dataclass(frozen=True)
class Dictionaries:
    """bioD's value dictionaries: each value C chunks, chunk d of attribute k the L token ids
    dictionaries[k, d] out of an alphabet of T."""

    chunks: int  # C
    alphabet: int  # T
    dictionaries: np.ndarray  # (K, D, L) token ids

    @property
    def size(self) -> int:  # D
        return self.dictionaries.shape[1]

    @property
    def chunk_len(self) -> int:  # L
        return self.dictionaries.shape[2]


@dataclass(frozen=True)
class Population:
    """N people with distinct names out of N0, each with one value per attribute."""

    name_space: int  # N0
    people: int  # N
    attributes: tuple[str, ...]  # the scored attributes' labels
    value_bits: np.ndarray  # (K,): log2 of the number of values each attribute takes
    information: dict[str, float]  # TERMS and information_bits
    setting: dict  # reported with the results
    eval_set: str
    dictionaries: Dictionaries | None = None  # bioD's; None: fixed pools (bioS)
    # bioS: the eval set's spans each attribute's value is read over (the employer's and the
    # company city's); None: one span each (bioD)
    parts: tuple[tuple[str, ...], ...] | None = None


@dataclass(frozen=True)
class Documents:
    """The evaluated people's documents, padded with <eos>, and their spans."""

    tokens: np.ndarray  # (P, W)
    lengths: np.ndarray  # (P,)
    names: np.ndarray  # (P, 2): [start, stop)
    values: np.ndarray  # (P, K, S, 2): the [start, stop) spans each value is read over


def read_population(corpus_dir: Path) -> Population:
    """The corpus's population; a TrainError naming the corpus when it is neither bioD nor
    bioS, naming the file when it is damaged."""
    manifest = read_manifest(corpus_dir)
    family = manifest.get("family")
    if family == "biod":
        return _read_biod(corpus_dir)
    if family == "bios" and any(e.get("name") == "bios.json" for e in manifest.get("files", [])
                                if isinstance(e, dict)):
        return _read_bios(corpus_dir)
    kind = "a bios corpus without bios.json" if family == "bios" else (
        f"a {family or 'family-less'} corpus")
    raise TrainError(f"{corpus_dir}: {kind}; {NEEDS}")


def _read_json(corpus_dir: Path, name: str) -> tuple[Path, dict]:
    path = verified_corpus_file(corpus_dir, corpus_dir / name, NEEDS)
    data = read_json_file(path, TrainError)
    if not isinstance(data, dict):
        raise TrainError(f"{path}: not a JSON object; {NEEDS}")
    return path, data


def _read_biod(corpus_dir: Path) -> Population:
    path, data = _read_json(corpus_dir, "biod.json")
    try:
        chunks, size = int(data["chunks"]), int(data["dictionary"])
        dictionaries = Dictionaries(chunks, int(data["alphabet"]),
                                    np.asarray(data["dictionaries"], dtype=np.int64))
        shape = (int(data["attributes"]), size, int(data["chunk_len"]))
        population = Population(
            int(data["N0"]), int(data["people"]), tuple(map(str, range(shape[0]))),
            np.full(shape[0], chunks * np.log2(max(size, 1))), _terms(data),
            {"N0": int(data["N0"]), "N": int(data["people"]), "K": shape[0], "C": chunks,
             "D": size, "L": shape[2], "T": dictionaries.alphabet},
            str(data.get("eval_set", "biod_people")), dictionaries)
    except (KeyError, TypeError, ValueError) as exc:
        raise TrainError(f"{path}: damaged ({exc!r}); {NEEDS}") from None
    if dictionaries.dictionaries.shape != shape or min(shape) < 1 or chunks < 1 or not (
            0 < population.people <= population.name_space):
        raise TrainError(f"{path}: dictionaries are not K x D x L = {shape}, or the setting "
                         f"is empty; {NEEDS}")
    return population


def _read_bios(corpus_dir: Path) -> Population:
    path, data = _read_json(corpus_dir, "bios.json")
    try:
        attributes = data["attributes"]
        counts = {str(name): int(entry["values"]) for name, entry in attributes.items()}
        parts = tuple(tuple(str(part) for part in entry["spans"])
                      for entry in attributes.values())
        population = Population(
            int(data["N0"]), int(data["people"]), tuple(counts),
            np.log2(np.maximum(1, list(counts.values())), dtype=np.float64), _terms(data),
            {"N0": int(data["N0"]), "N": int(data["people"]), "K": len(counts),
             "values": counts}, str(data["eval_set"]), parts=parts)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TrainError(f"{path}: damaged ({exc!r}); {NEEDS}") from None
    if not counts or min(counts.values()) < 1 or not all(parts) or not (
            0 < population.people <= population.name_space):
        raise TrainError(f"{path}: no attributes, an attribute without values or spans, or "
                         f"an empty population; {NEEDS}")
    return population


def _terms(data: dict) -> dict[str, float]:
    return {key: float(data[key]) for key in (*TERMS, "information_bits")}


def load_documents(context: EvalContext, population: Population, max_people: int
                   ) -> Documents:
    """The first `max_people` rows (0: all) of the population's eval set, verified: in person
    order, with spans inside the documents (bioD: each value's tokens its chunks from the
    dictionaries); a TrainError naming the row that is not."""
    fields = ({"person": int, "tokens": list, "name_span": list, "value_spans": list,
               "values": list} if population.dictionaries is not None else
              {"person": int, "text": str, "name_span": list, "value_spans": dict})
    rows = []
    for row in read_eval_set(context.corpus_dir, population.eval_set, fields, NEEDS):
        rows.append(row)
        if len(rows) == max_people:
            break
    if not rows:
        raise TrainError(f"{context.corpus_dir}: {population.eval_set} has no rows")
    if population.dictionaries is not None:
        return _biod_documents(context, population, rows)
    return _bios_documents(context, population, rows)


def _padded(rows: list[list[int]], eos: int) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(row) for row in rows])
    tokens = np.full((len(rows), max(1, lengths.max())), eos, dtype=np.int64)
    for i, row in enumerate(rows):
        tokens[i, : lengths[i]] = row
    return tokens, lengths


def _biod_documents(context: EvalContext, population: Population, rows: list[dict]
                    ) -> Documents:
    biod, name = population.dictionaries, population.eval_set
    k = len(population.attributes)
    try:
        tokens, lengths = _padded([row["tokens"] for row in rows], context.tokenizer.eos_id)
        names = np.array([row["name_span"] for row in rows], dtype=np.int64).reshape(len(rows), 2)
        values = np.array([row["value_spans"] for row in rows], dtype=np.int64).reshape(
            len(rows), k, 1, 2)
        chunks = np.array([row["values"] for row in rows], dtype=np.int64).reshape(
            len(rows), k, biod.chunks)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TrainError(f"{name}: a row's tokens, spans or values are not integers of "
                         f"biod.json's K x C ({exc}); {NEEDS}") from None
    vocab_size = context.tokenizer.vocab_size
    if not ((biod.dictionaries >= 0) & (biod.dictionaries < vocab_size)).all():
        raise TrainError(f"biod.json: a dictionary chunk holds a token id outside the "
                         f"vocabulary's {vocab_size}; {NEEDS}")
    width = biod.chunks * biod.chunk_len
    dictionary = biod.dictionaries[np.arange(k)[:, None], chunks.clip(
        0, biod.size - 1)]  # (P, K, C, L): the tokens each value should have
    spans = values[:, :, 0]  # (P, K, 2)
    at = spans[..., :1] + np.arange(width)  # (P, K, C L)
    written = np.take_along_axis(tokens[:, None], at.clip(0, tokens.shape[1] - 1), 2)
    bad = (_bad_common(rows, tokens, lengths, names, spans, vocab_size)
           | (spans[..., 1] - spans[..., 0] != width).any(1)
           | ((chunks < 0) | (chunks >= biod.size)).any((1, 2))
           | (written != dictionary.reshape(*at.shape)).any((1, 2)))
    _refuse(bad, f"needs person <i>, token ids below {vocab_size}, a name span and K = {k} "
            f"value spans of C L = {width} tokens inside the document, each holding its values' "
            f"chunks from biod.json's dictionaries", name)
    return Documents(tokens, lengths, names, values)


def _bad_common(rows: list[dict], tokens: np.ndarray, lengths: np.ndarray, names: np.ndarray,
                spans: np.ndarray, vocab_size: int) -> np.ndarray:
    """(P,): rows out of person order, empty, with tokens outside the vocabulary, an empty or
    outlying name span, or a value span outside the document."""
    return ((np.array([row["person"] for row in rows]) != np.arange(len(rows)))
            | (lengths == 0) | (tokens < 0).any(1) | (tokens >= vocab_size).any(1)
            | (names[:, 0] < 0) | (names[:, 0] >= names[:, 1]) | (names[:, 1] > lengths)
            | (spans[..., 0] < 0).reshape(len(rows), -1).any(1)
            | (spans[..., 0] > spans[..., 1]).reshape(len(rows), -1).any(1)
            | (spans[..., 1] > lengths.reshape(-1, *(1,) * (spans.ndim - 2))).reshape(
                len(rows), -1).any(1))


def _refuse(bad: np.ndarray, needs: str, name: str) -> None:
    if bad.any():
        i = int(np.argmax(bad))
        raise TrainError(f"{name} row {i}: {needs.replace('<i>', str(i))}; {NEEDS}")


def _bios_documents(context: EvalContext, population: Population, rows: list[dict]
                    ) -> Documents:
    """Token ids of each row's text and token spans of its character spans, which must cover
    whole words (a value's word with its glued punctuation counts whole)."""
    tokenizer = context.tokenizer
    width = max(map(len, population.parts))
    documents, spans = [], []  # spans: the name's, then each attribute's parts, padded
    bad = np.zeros(len(rows), dtype=bool)
    for i, row in enumerate(rows):
        words = row["text"].split(" ")
        try:
            if "" in words:  # not single-space separated: its tokens would not be its words'
                raise ValueError(row["text"])
            pieces, counts = tokenizer.encode_words(words)
            starts = np.cumsum([0] + [len(word) + 1 for word in words])  # ends: len(text) + 1
            cumulative = np.concatenate([[0], np.cumsum(counts)])
            char_spans = [[row["name_span"]]] + [
                [row["value_spans"][part] for part in parts] for parts in population.parts]
            spans.append([[_word_span(starts, cumulative, span) for span in group]
                          + [[0, 0]] * (width - len(group)) for group in char_spans])
            documents.append(np.frombuffer(b"".join(pieces), dtype=tokenizer.dtype))
        except (KeyError, TypeError, ValueError):  # a missing part, a span off the words
            bad[i] = True
            spans.append([[[0, 0]] * width] * (1 + len(population.parts)))
            documents.append([])
    tokens, lengths = _padded(documents, tokenizer.eos_id)
    spans = np.array(spans, dtype=np.int64)  # (P, 1 + K, S, 2)
    names, values = spans[:, 0, 0], spans[:, 1:]
    bad |= _bad_common(rows, tokens, lengths, names, values, tokenizer.vocab_size)
    every = sorted({part for parts in population.parts for part in parts})
    _refuse(bad, f"needs person <i>, single-space separated text, and spans of whole words "
            f"for the name and each of {', '.join(every)}", population.eval_set)
    return Documents(tokens, lengths, names, values)


def _word_span(starts: np.ndarray, cumulative: np.ndarray, span: list) -> list[int]:
    """Token [start, stop) of the words a character span [start, stop) covers; a ValueError
    unless it begins at a word's start and ends at a word's end."""
    lo, hi = (int(x) for x in span)
    first = int(np.searchsorted(starts, lo))
    last = int(np.searchsorted(starts, hi + 1))  # words starting at or before hi: hi + 1 ends one
    if not (0 <= lo < hi and first < len(starts) - 1 and starts[first] == lo
            and starts[last] == hi + 1):
        raise ValueError(span)
    return [int(cumulative[first]), int(cumulative[last])]
