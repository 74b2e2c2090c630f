"""A corpus's tokenizer: prepared by `physlm gen` before any shard, read back by its readers.

A family with a fixed vocabulary (`Family.vocabulary`) gets `vocab.json`, its token names by id
(vocabulary.py). Any other gets a SentencePiece model, `tokenizer.model`, trained on a sample of
its documents (with one worker, the sample's documents are kept for the shards, which need not
generate them again) or copied from another corpus (`tokenizer.reuse`). Either way the manifest's
`tokenizer` entry names the file with its sha256, vocab_size, dtype and eos_id, and
`load_tokenizer` reads it back as a `CorpusTokenizer`.
"""

import dataclasses
import hashlib
from collections.abc import Iterator
from pathlib import Path

from corpus_gen.core.config import CorpusConfig, TokenizerConfig
from corpus_gen.core.errors import ConfigError, CorpusError
from corpus_gen.core.io import atomic_write
from corpus_gen.core.manifest import MANIFEST, corpus_path, is_intact, record_progress
from corpus_gen.core.records import Document, UnitBatch, batch_texts, document
from corpus_gen.core.registry import Family, Layout, get_family
from corpus_gen.core.resume import kept_entry
from corpus_gen.core.tokenizer import CorpusTokenizer, Tokenizer, reused_model, train_tokenizer
from corpus_gen.core.verify import file_verifies
from corpus_gen.core.vocabulary import VOCABULARY, Vocabulary

TOKENIZER = "tokenizer.model"
_SAMPLE_CHUNKS = 64  # the tokenizer sample is taken from this many places along the stream
# With one worker, up to this many tokenizer-sample documents are kept for the shards, which
# then need not generate them again (a few KB each).
_KEEP_SAMPLE_DOCUMENTS = 100_000


def tokenizer_name(config: CorpusConfig) -> str:
    """The file of the corpus's tokenizer: `vocab.json` (a fixed vocabulary), `tokenizer.model`."""
    return VOCABULARY if get_family(config.family).vocabulary else TOKENIZER


def refuse_tokenizer_options(config: CorpusConfig) -> None:
    """A fixed vocabulary is neither trained nor copied: a `tokenizer.*` key set to other than
    its default is refused, not silently ignored."""
    if get_family(config.family).vocabulary is None:
        return
    default = TokenizerConfig()
    for option in dataclasses.fields(TokenizerConfig):
        value = getattr(config.tokenizer, option.name)
        if value != getattr(default, option.name):
            raise ConfigError(f"tokenizer.{option.name}", value,
                              f"family {config.family} has a fixed vocabulary ({VOCABULARY}), "
                              "no SentencePiece tokenizer to set; leave tokenizer.* out")


def read_tokenizer(path: Path) -> CorpusTokenizer:
    """The tokenizer in `path`, of the kind its file's name says."""
    return Vocabulary.load(path) if path.name == VOCABULARY else Tokenizer.load(path)


def load_tokenizer(corpus_dir: Path, manifest: dict) -> CorpusTokenizer:
    """The tokenizer of the corpus in `corpus_dir` that its `manifest` lists, once it verifies."""
    entry = manifest["tokenizer"]
    path = corpus_path(corpus_dir, entry["name"], corpus_dir / MANIFEST)
    if not path.is_file() or not file_verifies(path, entry["sha256"]):
        raise CorpusError(f"{path}: missing or not the tokenizer {corpus_dir / MANIFEST} lists; "
                          "run physlm verify")
    return read_tokenizer(path)


def prepare_tokenizer(config: CorpusConfig, family: Family, layout: Layout, out: Path, fp: str,
                      recorded: dict[str, dict], log,
                      kept: dict[int, Document] | None = None) -> dict:
    """Write the corpus's tokenizer, unless an earlier run's still verifies (a reused one is
    copied again on every run: its source may have changed); return its entry."""
    name = tokenizer_name(config)
    if config.tokenizer.reuse:
        tokenizer = Tokenizer(reused_model(config.tokenizer.reuse, layout.user_symbols))
    else:
        entry = kept_entry(out, name, fp, recorded, log)
        if entry:
            return entry
        if family.vocabulary:
            tokenizer = Vocabulary(family.vocabulary(config), f"family {family.name}")
        else:
            tokenizer = Tokenizer(train_tokenizer(tokenizer_sample(config, family, layout, kept),
                                                  config.tokenizer.vocab_size,
                                                  config.tokenizer.model_type,
                                                  layout.user_symbols))
    atomic_write(out / name, tokenizer.model_bytes)
    entry = {"name": name, "fingerprint": fp,
             "sha256": hashlib.sha256(tokenizer.model_bytes).hexdigest(),
             "vocab_size": tokenizer.vocab_size, "dtype": tokenizer.dtype,
             "eos_id": tokenizer.eos_id}
    if not family.vocabulary:
        entry["user_symbols"] = list(layout.user_symbols)
    record_progress(out, entry)
    return entry


def prepared_tokenizer(config: CorpusConfig, out: Path, fp: str, recorded: dict[str, dict]
                       ) -> dict:
    """The tokenizer the prepare part wrote. A shards part never trains or copies one itself:
    the tasks of an array run at once, and all must encode with the same."""
    entry = recorded.get(tokenizer_name(config))
    if entry and is_intact(out, entry, fp):
        return entry
    raise CorpusError(f"{out}: no tokenizer of this corpus there; run the prepare part first")


def tokenizer_sample(config: CorpusConfig, family: Family, layout: Layout,
                     kept: dict[int, Document] | None = None) -> Iterator[str]:
    """`sample_records` documents taken in equal runs from evenly spaced places of the stream.
    Given `kept`, the sample's record documents are also stored there by stream position, for
    the shards (if there are at most `_KEEP_SAMPLE_DOCUMENTS`)."""
    wanted = min(config.tokenizer.sample_records, layout.records)
    chunks = min(_SAMPLE_CHUNKS, wanted)
    if wanted > _KEEP_SAMPLE_DOCUMENTS:
        kept = None
    for k in range(chunks):
        size = wanted // chunks + (k < wanted % chunks)
        start = k * layout.records // chunks
        for batch in family.document_batches(config, start, start + size):
            if kept is None or isinstance(batch, UnitBatch):
                yield from batch_texts(batch)
            else:
                for position, doc in enumerate(map(document, batch), start):
                    kept[position] = doc
                    yield doc.text
            start += len(batch)
