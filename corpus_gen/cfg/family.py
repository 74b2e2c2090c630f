"""The cfg family: documents "<bos> 2 3 1 ..." (terminal k spelled k + 1) with the string's parse
tree in `meta` as its rule choices in level order (`rules`; see sample.py), and `grammar.json` in
the corpus directory.

String n of a stream is a pure function of (seed, stream, n) (see sample.py), so every shard holds
fresh strings of its own; `cfg_test` strings come from a stream no training shard draws from.
"""

from collections.abc import Callable, Iterator

import numpy as np
import orjson

from corpus_gen.cfg.config import CfgConfig
from corpus_gen.cfg.sample import Samples, sample
from corpus_gen.core.records import BATCH, Record, UnitBatch, Units
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key

BOS = "<bos>"
_UNITS: dict[int, Units] = {}  # per terminal count: one vocabulary, so the tokenizer caches it


def units(terminals: int) -> Units:
    """Unit 0 is BOS, unit k + 1 terminal k."""
    if terminals not in _UNITS:
        _UNITS[terminals] = Units([BOS, *(str(k + 1) for k in range(terminals))])
    return _UNITS[terminals]


def user_symbols(terminals: int) -> tuple[str, ...]:
    """Each word one reserved piece (with its leading "▁"), so a terminal is exactly one token
    whatever the tokenizer learns."""
    return tuple(f"\u2581{word}" for word in units(terminals).strings.tolist())


def layout(config: CfgConfig) -> Layout:
    grammar = config.load_grammar()
    return Layout(records=config.samples,
                  summary={"samples": config.samples, "eval_samples": config.eval_samples,
                           "depth": grammar.depth, "terminals": grammar.terminals},
                  user_symbols=user_symbols(grammar.terminals))


def _draw(config: CfgConfig, stream: str, start: int, stop: int) -> Samples:
    return sample(config.load_grammar(), derive_key(config.seed, "cfg", stream),
                  np.arange(start, stop))


def batches(config: CfgConfig, start: int, stop: int) -> Iterator[UnitBatch]:
    vocabulary = units(config.load_grammar().terminals)
    for lo in range(start, stop, BATCH):
        drawn = _draw(config, "train", lo, min(lo + BATCH, stop))
        starts = drawn.offsets[:-1]
        ids = np.insert(drawn.terminals + 1, starts, 0)  # BOS before each string
        offsets = drawn.offsets + np.arange(len(drawn.offsets))
        metas = [orjson.dumps({"rules": drawn.rule_list(i)}).decode() for i in range(len(drawn))]
        yield UnitBatch(vocabulary, ids, offsets, metas)


def records(config: CfgConfig, start: int, stop: int) -> Iterator[Record]:
    for batch in batches(config, start, stop):
        yield from (Record(text, orjson.loads(meta))
                    for text, meta in zip(batch.texts(), batch.metas))


def text(terminals: np.ndarray) -> str:
    return " ".join([BOS, *(terminals + 1).astype(str).tolist()])


def eval_sets(config: CfgConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    return {"cfg_test": lambda: _rows(config)}


def _rows(config: CfgConfig) -> Iterator[dict]:
    """Held-out strings: text, terminals (0-based) and rule choices."""
    for lo in range(0, config.eval_samples, BATCH):
        drawn = _draw(config, "test", lo, min(lo + BATCH, config.eval_samples))
        for i in range(len(drawn)):
            string = drawn.string(i)
            yield {"id": lo + i, "text": text(string), "terminals": string.tolist(),
                   "rules": drawn.rule_list(i)}


def files(config: CfgConfig) -> dict[str, bytes]:
    return {"grammar.json": config.load_grammar().to_json().encode()}
