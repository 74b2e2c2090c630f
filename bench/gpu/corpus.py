"""The tiny bios corpus (QA mixed into the stream) the zero and generation sections share."""

import functools
from pathlib import Path

from context import ROOT


@functools.cache  # once per proof run: the sections share it
def tiny_corpus(work: Path) -> Path:
    from corpus_gen.core.config import load_config
    from corpus_gen.core.generate import generate_corpus
    from corpus_gen.core.registry import schemas

    config = load_config(ROOT / "configs/corpus/bios_s_multi5_permute.yaml",
                         ["people=40", "mode=mix", "records_per_shard=60",
                          "tokenizer.vocab_size=600", "tokenizer.sample_records=300"], schemas())
    out = work / "corpus"
    generate_corpus(config, out, progress=False, log=lambda *_: None)
    return out
