"""A fixed vocabulary: the tokenizer of a family whose tokens are given, not learned (integer-token
tasks). Token i is the family's name i (`Family.vocabulary`); a document's text is names joined by
single spaces, each name exactly one token.

End of document: the vocabulary must contain the name `EOS` ("<eos>"), wherever the family puts
it; its index is the manifest's `eos_id`, which the trainer's packer puts after every document,
so a document's own text may not hold it. A corpus keeps its vocabulary as `vocab.json`, the
names by id: {"0": name 0, "1": name 1, ...}.
"""

import json
from array import array
from collections.abc import Sequence
from pathlib import Path

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import parse_json
from corpus_gen.core.tokenizer import CorpusTokenizer

VOCABULARY = "vocab.json"
EOS = "<eos>"


def vocabulary_bytes(names: Sequence[str]) -> bytes:
    """`vocab.json` of these names: one "id": name pair a line."""
    text = json.dumps({str(i): name for i, name in enumerate(names)}, indent=1,
                      ensure_ascii=False)
    return (text + "\n").encode()


class _Names(dict):
    """Name -> its token's array bytes; a word that is no name (or is EOS) is a CorpusError."""

    def __init__(self, names: Sequence[str], array_code: str, where: str):
        super().__init__((name, array(array_code, [i]).tobytes())
                         for i, name in enumerate(names) if name != EOS)
        self.where = where

    def __missing__(self, word: str) -> bytes:
        if word == EOS:
            raise CorpusError(f"{self.where}: a document holds the end-of-document token "
                              f"{EOS!r}; the trainer puts it after each document itself")
        raise CorpusError(f"{self.where}: a document holds {word!r}, which is not a token name "
                          "of the vocabulary")


class Vocabulary(CorpusTokenizer):
    """The tokenizer of a fixed vocabulary; `where` (its file, or its family) names it in
    errors."""

    def __init__(self, names: Sequence[str], where: str, model_bytes: bytes | None = None):
        self.names = _checked(names, where)
        self._ids = {name: i for i, name in enumerate(self.names)}
        self.where = where
        super().__init__(model_bytes or vocabulary_bytes(self.names), len(self.names),
                         self._ids[EOS])
        self._words = _Names(self.names, self._array_code, where)

    @classmethod
    def load(cls, path: Path) -> "Vocabulary":
        """The vocabulary a `vocab.json` holds; a CorpusError naming the file if it holds none."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise CorpusError(f"{path}: cannot read the vocabulary: "
                              f"{exc.strerror or exc}") from None
        given = parse_json(data, str(path))
        if not isinstance(given, dict) or list(given) != [str(i) for i in range(len(given))]:
            raise CorpusError(f"{path}: not a vocabulary; expected the token names by id, "
                              '{"0": name, "1": name, ...}')
        return cls(list(given.values()), str(path), data)

    def _encode_slow(self, text: str) -> bytes:
        if text:
            raise CorpusError(f"{self.where}: a document's text is token names joined by single "
                              f"spaces, not {text[:80]!r}")
        return b""

    def token_id(self, piece: str) -> int | None:
        return self._ids.get(piece)

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.names[int(i)] for i in ids)


def _checked(names: Sequence[str], where: str) -> tuple[str, ...]:
    """`names` as a tuple, or a CorpusError naming the first name that cannot be a token."""
    names = tuple(names)
    seen = set()
    for name in names:
        if not isinstance(name, str) or name.split() != [name]:
            raise CorpusError(f"{where}: token name {name!r} is not a non-empty string without "
                              "whitespace")
        if name in seen:
            raise CorpusError(f"{where}: token name {name!r} is listed twice")
        seen.add(name)
    if EOS not in seen:
        raise CorpusError(f"{where}: no end-of-document token {EOS!r}; a fixed vocabulary names "
                          "it (the trainer puts it after each document)")
    return names
