"""The compiled JSON of unit batches (corpus_gen/core/unit_json.py) is, byte for byte, what
orjson writes for `{"text": text, **meta}`, and a compiled family's shards are the bytes the
Python path writes."""

import dataclasses
from pathlib import Path

import numpy as np
import orjson
import pytest

from corpus_gen.core import registry
from corpus_gen.core.config import load_config
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.records import UnitBatch, Units
from corpus_gen.core.unit_json import json_objects

CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "corpus"
# units needing JSON escapes (quote, backslash, control, non-ASCII), of 1 to 12 bytes
UNITS = Units(["a", "bc", 'say "hi"', "back\\slash", "tab\there", "café", "日本語", "x y",
               "€5", "z", "\u0001ctl", "end."])


def _batch(rng: np.random.Generator, documents: int) -> UnitBatch:
    lengths = rng.integers(1, 9, documents)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ids = rng.integers(0, len(UNITS), int(offsets[-1]))
    metas = [orjson.dumps({"n": int(n), "name": ["é", "a\"b", "ok"][n % 3], "list": [1, n]})
             .decode() for n in range(documents)]
    return UnitBatch(UNITS, ids, offsets, metas)


@pytest.mark.parametrize("seed", range(5))
def test_objects_are_orjsons_bytes_of_text_and_meta(seed):
    batch = _batch(np.random.default_rng(seed), 40)
    objects, bounds = json_objects(batch)
    expected = [orjson.dumps({"text": text, **orjson.loads(meta)})
                for text, meta in zip(batch.texts(), batch.metas)]
    assert bounds.tolist() == np.concatenate([[0], np.cumsum([len(e) + 1 for e in expected])]
                                             ).tolist()
    assert objects.tobytes() == b"".join(e + b"," for e in expected)


def test_a_document_of_one_unit_and_a_batch_of_one_document():
    batch = UnitBatch(UNITS, np.array([6]), np.array([0, 1]), ['{"k":1}'])
    objects, bounds = json_objects(batch)
    assert objects.tobytes() == '{"text":"日本語","k":1},'.encode()
    assert bounds.tolist() == [0, len(objects)]


@pytest.mark.parametrize("per_sample", [1, 5])
@pytest.mark.parametrize("name, sizes", [("mano", []), ("depo2", ["max_n=12", "max_k=4"])])
def test_a_compiled_family_writes_the_bytes_of_the_python_path(tmp_path, monkeypatch, per_sample,
                                                                name, sizes):
    """Shards written the compiled way (JSON and tokens) and the Python way: identical files.
    mano's units are a token each, depo2's words several."""
    config = load_config(CONFIGS / f"{name}.yaml", ["samples=300", "records_per_shard=70",
                                                     "eval_samples=2", *sizes,
                                                     f"docs_per_sample={per_sample}"],
                         registry.schemas())
    family = registry.get_family(config.family)
    corpora = {}
    for compiled in (True, False):
        monkeypatch.setitem(registry._FAMILIES, config.family,
                            dataclasses.replace(family, compiled=compiled))
        out = tmp_path / f"compiled-{compiled}"
        generate_corpus(config, out, 1, progress=False, log=lambda *_: None)
        corpora[compiled] = {p.name: p.read_bytes() for p in sorted(out.glob("train/*.tar"))}
    assert len(corpora[True]) == 5
    assert corpora[True] == corpora[False]
