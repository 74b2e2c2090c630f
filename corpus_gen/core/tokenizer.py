"""SentencePiece tokenizers trained on the generated text, with a word-level encoding cache.

Training is deterministic: the sample is fixed by the caller, one thread; a BPE model is trained
from the sample's word counts, which gives the bytes training on the texts gives, faster.
Encoding splits on single spaces and looks each word up in a cache. This is exact, not an
approximation: with `split_by_whitespace` no piece crosses a space, so a text's pieces are the
concatenation of its words' pieces (each word carries the leading "▁" the dummy prefix gives).
For the same reason a batch of documents spelled in text units (`Units`) is encoded by gathering
each unit's tokens, every distinct unit encoded once. Tests check both against
`SentencePieceProcessor.encode` over whole corpora.

The word-by-word encoding is `CorpusTokenizer`, which a fixed vocabulary shares (vocabulary.py):
what the shard writer and the evaluation tasks call is the same for both kinds of tokenizer.
"""

import io
import re
import sys
import weakref
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as sp_model

from corpus_gen.core.errors import ConfigError, CorpusError
from corpus_gen.core.records import Units

UNK_ID, BOS_ID, EOS_ID, PAD_ID = 0, 1, 2, 3
NEWLINE = "\n"
_CACHE_LIMIT = 1 << 20
if sys.byteorder != "little":
    raise ImportError("corpus_gen writes little-endian token arrays and needs a little-endian host")


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    model_type: str = "bpe",
    user_symbols: Sequence[str] = (),
) -> bytes:
    """Train a SentencePiece model on `texts` and return its serialized bytes (BPE: from the
    texts' word counts, the same bytes; see `_word_counts`)."""
    texts = list(texts)
    counts = _word_counts(texts) if model_type == "bpe" and _plain(user_symbols) else None
    if counts is None:
        return _train(iter(texts), vocab_size, model_type, user_symbols)
    lines = (f"{word}\t{count}" for word, count in counts.items())
    return _as_text_input(_train(lines, vocab_size, model_type, user_symbols, "tsv"))


def _train(sentences: Iterator[str], vocab_size: int, model_type: str,
           user_symbols: Sequence[str], input_format: str = "text") -> bytes:
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences,
            model_writer=model,
            vocab_size=vocab_size,
            hard_vocab_limit=False,  # a small corpus gets a smaller vocabulary, not an error
            model_type=model_type,
            character_coverage=1.0,
            byte_fallback=True,  # any character round-trips, even one unseen in the sample
            normalization_rule_name="identity",  # keep text exactly as generated
            remove_extra_whitespaces=False,
            split_by_whitespace=True,  # pieces never cross spaces: makes the word cache exact
            split_digits=False,
            user_defined_symbols=[NEWLINE, *user_symbols],
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_id=PAD_ID,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            max_sentence_length=_MAX_SENTENCE_BYTES,
            num_threads=1,
            minloglevel=2,
            **({"input_format": input_format} if input_format != "text" else {}),
        )
    except RuntimeError as exc:  # SentencePiece's own check, raised with a traceback
        needed = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(exc))
        if needed is None:
            raise
        raise ConfigError("tokenizer.vocab_size", vocab_size, f"must be at least {needed[1]} "
                          "for this corpus: each of its characters, the 256 bytes and the "
                          "special symbols take a piece") from None
    return model.getvalue()


# Training on whole texts vs on word counts. With `split_by_whitespace` the BPE trainer splits
# each normalised text into words at its spaces and from then on sees only the sorted table of
# word counts, besides the character counts, which are the same either way (one "▁" per word).
# So one "word<TAB>count" line per distinct word (its `tsv` input) trains the same model, without
# loading and normalising megabytes of repeated words: 2,979 lines instead of 29 MB for 20,000 iGSM
# problems. Texts on which the two differ fall back to training on the texts: SentencePiece skips a
# whole text with its unknown-character mark or longer than the sentence limit (word counts would
# keep its words), and a tab, a space that does not separate two words, or a user symbol with a
# space would not split the same way.
_MAX_SENTENCE_BYTES = 1 << 16
_UNK_MARK = "\u2585"  # SentencePiece's kUNKStr


def _plain(user_symbols: Sequence[str]) -> bool:
    return not any(" " in symbol for symbol in user_symbols)


def _word_counts(texts: list[str]) -> Counter[str] | None:
    """How often each space-separated word occurs in the texts SentencePiece trains on; None if
    some text would not train the same from word counts."""
    counts: Counter[str] = Counter()
    for text in texts:
        if not text:
            continue
        if "\t" in text or "  " in text or text[0] == " " or text[-1] == " ":
            return None
        if _UNK_MARK in text or (len(text) > _MAX_SENTENCE_BYTES // 4
                                 and len(text.encode()) > _MAX_SENTENCE_BYTES):
            continue
        counts.update(text.split(" "))
    return counts


def _as_text_input(model: bytes) -> bytes:
    """The model without its trainer spec's `input_format`, as training on texts leaves it: byte
    for byte the model trained on the texts."""
    proto = sp_model.ModelProto()
    proto.ParseFromString(model)
    proto.trainer_spec.ClearField("input_format")
    return proto.SerializeToString()


def reused_model(source: str, user_symbols: Sequence[str]) -> bytes:
    """The tokenizer of another corpus (`tokenizer.reuse`: its directory or its tokenizer.model),
    if it has the reserved symbols this corpus's family writes."""
    path = Path(source)
    file = path / "tokenizer.model" if path.is_dir() else path
    if not file.is_file():
        raise CorpusError(f"tokenizer.reuse={source}: no tokenizer at {file}")
    tokenizer = Tokenizer.load(file)
    missing = [s for s in (NEWLINE, *user_symbols) if tokenizer.token_id(s) is None]
    if missing:
        raise CorpusError(f"tokenizer.reuse={source}: {file} lacks the reserved symbols "
                          f"{missing} this corpus writes")
    return tokenizer.model_bytes


class _Cache(dict):
    """word -> its token ids as array bytes, so encoding a text is one `bytes.join`.
    Emptied when full: units that recur come back at once, and memory stays bounded."""

    def __init__(self, encode):
        super().__init__()
        self.encode = encode

    def __missing__(self, unit: str) -> bytes:
        if len(self) >= _CACHE_LIMIT:
            self.clear()
        ids = self[unit] = self.encode(unit)
        return ids


class UnitTable:
    """The tokens of every unit of one vocabulary encoded so far, a row each, padded to the
    longest: unit u's are rows[u, :length[u]] (length -1: not encoded yet). A batch's tokens
    are its units' rows taken at once with the padding dropped, which costs a few operations
    per unit where a gather through an index per token costs several per token (a compiled
    family's writer copies the rows in its own loop: unit_tokens.py)."""

    def __init__(self, size: int, dtype: str):
        self.length = np.full(size, -1, dtype=np.int64)
        self.rows = np.zeros((size, 1), dtype=dtype)
        self.filled = np.zeros((size, 1), dtype=bool)  # where rows holds a token

    def encode_missing(self, ids: np.ndarray, strings: np.ndarray, encode) -> None:
        """Encode the units of `ids` not encoded yet; `encode` gives a string's token bytes."""
        missing = self.length[ids] < 0
        if missing.any():
            for unit in np.unique(ids[missing]).tolist():
                self._add(unit, np.frombuffer(encode(strings[unit]), dtype=self.rows.dtype))

    def gather(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The tokens of units `ids` (all encoded) back to back and each one's count."""
        return (np.take(self.rows, ids, axis=0)[np.take(self.filled, ids, axis=0)],
                self.length[ids])

    def _add(self, unit: int, tokens: np.ndarray) -> None:
        if len(tokens) > self.rows.shape[1]:  # a longer unit: every row widens
            wider = len(tokens) - self.rows.shape[1]
            self.rows = np.pad(self.rows, ((0, 0), (0, wider)))
            self.filled = np.pad(self.filled, ((0, 0), (0, wider)))
        self.rows[unit, :len(tokens)] = tokens
        self.filled[unit, :len(tokens)] = True
        self.length[unit] = len(tokens)


class CorpusTokenizer:
    """What the shard writer and the evaluation tasks use of a corpus's tokenizer, whichever kind
    it is (`load_tokenizer` in corpus_tokenizer.py gives one): a text is encoded word by word,
    each single-space-separated word's token bytes looked up in `_words`, which a subclass fills
    (a SentencePiece model's cache, a fixed vocabulary's names)."""

    _words: dict[str, bytes]

    def __init__(self, model_bytes: bytes, vocab_size: int, eos_id: int):
        self.model_bytes = model_bytes  # the tokenizer's file, byte for byte
        self.vocab_size = vocab_size
        self.eos_id = eos_id
        self.dtype = "<u2" if self.vocab_size <= 1 << 16 else "<u4"
        self._array_code = "H" if self.dtype == "<u2" else "I"
        self._itemsize = array(self._array_code).itemsize
        # a vocabulary's table lives as long as the vocabulary does
        self._unit_tables: weakref.WeakKeyDictionary[Units, UnitTable] = (
            weakref.WeakKeyDictionary())

    def encode(self, text: str) -> list[int]:
        return array(self._array_code, self.encode_bytes(text)).tolist()

    def _encode_slow(self, text: str) -> bytes:
        """The token bytes of a text whose words are not single-space separated."""
        raise NotImplementedError

    def encode_bytes(self, text: str) -> bytes:
        """Token ids as little-endian array bytes of `self.dtype`."""
        if not text or "  " in text or text[0] == " " or text[-1] == " ":
            return self._encode_slow(text)  # words are not single-space separated: no shortcut
        return b"".join(map(self._words.__getitem__, text.split(" ")))

    def encode_units(self, units: Units, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The tokens of the text " ".join(units.strings[ids]) as one array of `self.dtype`,
        and the number of tokens of each unit occurrence."""
        return self.unit_table(units, ids).gather(ids)

    def unit_table(self, units: Units, ids: np.ndarray) -> UnitTable:
        """The vocabulary's table of encoded units, with every unit of `ids` in it."""
        table = self._unit_tables.get(units)
        if table is None:
            table = self._unit_tables[units] = UnitTable(len(units), self.dtype)
        table.encode_missing(ids, units.strings, self.encode_bytes)
        return table

    def count(self, ids: bytes) -> int:
        return len(ids) // self._itemsize

    def encode_words(self, words: Sequence[str]) -> tuple[list[bytes], np.ndarray]:
        """Each word's token bytes (as `encode_bytes`) and token count, for the words of a
        single-space-separated text."""
        pieces = [self._words[word] for word in words]
        counts = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)) // self._itemsize
        return pieces, counts

    def encode_masked(self, text: str, masked: Sequence[tuple[int, int]]
                      ) -> tuple[bytes, bytes]:
        """Token ids (as `encode_bytes`) and a uint8 loss mask over them: 0 for the tokens of
        every word that starts inside a `masked` character span [start, end), else 1."""
        words = text.split(" ")
        pieces, counts = self.encode_words(words)
        starts = np.cumsum([0] + [len(word) + 1 for word in words[:-1]])
        masked_words = np.zeros(len(words), dtype=bool)
        for start, end in masked:
            masked_words[np.searchsorted(starts, start):np.searchsorted(starts, end)] = True
        mask = np.repeat((~masked_words).astype(np.uint8), counts)
        return b"".join(pieces), mask.tobytes()

    def token_id(self, piece: str) -> int | None:
        """The id of the token spelled `piece`; None if the vocabulary has none."""
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError


class Tokenizer(CorpusTokenizer):
    """A trained SentencePiece model with fast, exact encoding of whitespace-normalised text."""

    def __init__(self, model: bytes):
        self.processor = spm.SentencePieceProcessor(model_proto=model)
        super().__init__(model, self.processor.get_piece_size(), self.processor.eos_id())
        self._words = _Cache(self._encode_slow)

    @classmethod
    def load(cls, path: Path) -> "Tokenizer":
        try:
            return cls(Path(path).read_bytes())
        except (OSError, RuntimeError) as exc:
            raise CorpusError(f"{path}: cannot load tokenizer: {exc}") from exc

    def _encode_slow(self, text: str) -> bytes:
        return array(self._array_code, self.processor.encode(text)).tobytes()

    def token_id(self, piece: str) -> int | None:
        # SentencePiece answers an unknown piece with <unk>'s id
        found = self.processor.piece_to_id(piece)
        return found if self.processor.id_to_piece(found) == piece else None

    def decode(self, ids: Sequence[int]) -> str:
        return self.processor.decode(list(map(int, ids)))
