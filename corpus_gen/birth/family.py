"""The birth family ("Birth of a Transformer", Bietti et al. 2023): character sequences of
tiny-shakespeare's bigram law in which K triggers are each followed, within a sequence, always by
the sequence's own output for it (sequences.py). The loss counts the outputs from each trigger's
second occurrence on (what an induction head can predict) or every token; the eval sets hold the
sequences with each output's position and occurrence, for in-context accuracy, and, with
held-out outputs, an out-of-distribution set whose outputs training never has.

Token i is character i (sorted; "<nl>" and "<sp>" name the newline and the space), "<eos>" is the
last id. A document is one sequence of seq_len tokens; its meta holds its triggers and their
outputs (ids).
"""

import functools
from collections.abc import Callable, Iterator

import numpy as np
import orjson

from corpus_gen.birth import bigrams
from corpus_gen.birth.config import BirthConfig
from corpus_gen.core.records import BATCH, Record, UnitBatch, Units, batch_records
from corpus_gen.core.registry import Layout
from corpus_gen.core.seeding import derive_key
from corpus_gen.core.vocabulary import EOS

BATCH_TOKENS = BATCH * 256  # tokens drawn together: BATCH sequences of the default length


@functools.lru_cache(maxsize=1)
def _units() -> Units:
    return Units(bigrams.token_names())


def vocabulary(config: BirthConfig) -> tuple[str, ...]:
    return (*bigrams.token_names(), EOS)


def layout(config: BirthConfig) -> Layout:
    return Layout(records=config.samples,
                  summary={"samples": config.samples, "eval_samples": config.eval_samples,
                           "seq_len": config.seq_len, "triggers": config.triggers,
                           # the loss floor on tokens drawn from the bigram law (nats)
                           "bayes_floor": round(bigrams.bayes_floor(), 4)})


def _law(config: BirthConfig, stream: str):
    """The law of a stream's sequences: train and birth_test draw outputs from the trained ids,
    birth_ood from the held-out ones."""
    from corpus_gen.birth.sequences import Law  # numba: paid when sequences are drawn

    counts = bigrams.counts()
    ids = np.arange(len(counts.chars))
    trained = (bigrams.trained_outputs(config.held_out_share)
               if config.output_mode == "held_out" else len(ids))
    return Law(counts.unigram, counts.bigram, config.triggers,
               bigrams.most_frequent(config.triggers) if config.trigger_mode == "frequent"
               else None, config.output_mode == "bigram",
               ids[trained:] if stream == "ood" else ids[:trained])


def _draw(config: BirthConfig, stream: str, index: np.ndarray):
    from corpus_gen.birth import sequences  # numba, as in _law

    return sequences.draw(derive_key(config.seed, "birth", stream), index, config.seq_len,
                          _law(config, stream))


def _per_batch(config: BirthConfig) -> int:
    """Sequences drawn together: ~BATCH_TOKENS tokens whatever their length."""
    return max(1, BATCH_TOKENS // config.seq_len)


def batches(config: BirthConfig, start: int, stop: int) -> Iterator[UnitBatch]:
    for lo in range(start, stop, _per_batch(config)):
        index = np.arange(lo, min(lo + _per_batch(config), stop))
        drawn = _draw(config, "train", index)
        loss = None if config.loss == "all" else (drawn.occurrence >= 2).view(np.uint8).ravel()
        metas = [orjson.dumps({"triggers": t, "outputs": o}).decode()
                 for t, o in zip(drawn.triggers.tolist(), drawn.outputs.tolist())]
        yield UnitBatch(_units(), drawn.tokens.ravel(),
                        np.arange(len(index) + 1, dtype=np.int64) * config.seq_len, metas, loss)


def records(config: BirthConfig, start: int, stop: int) -> Iterator[Record]:
    for batch in batches(config, start, stop):
        yield from batch_records(batch)


def eval_sets(config: BirthConfig) -> dict[str, Callable[[], Iterator[dict]]]:
    sets = {"birth_test": lambda: _rows(config, "test")}
    if config.output_mode == "held_out":
        sets["birth_ood"] = lambda: _rows(config, "ood")
    return sets


def _rows(config: BirthConfig, stream: str) -> Iterator[dict]:
    """`eval_samples` sequences: tokens, triggers, outputs, and each output's position (token t
    follows a trigger) and occurrence (1 for a trigger's first output: in-context accuracy
    counts 2 and up)."""
    names = bigrams.token_names()
    for lo in range(0, config.eval_samples, _per_batch(config)):
        index = np.arange(lo, min(lo + _per_batch(config), config.eval_samples))
        drawn = _draw(config, stream, index)
        for i, (tokens, occurrence) in enumerate(zip(drawn.tokens.tolist(),
                                                     drawn.occurrence.tolist())):
            positions = [t for t, c in enumerate(occurrence) if c]
            yield {"id": int(index[i]), "tokens": tokens,
                   "text": " ".join(names[t] for t in tokens),
                   "triggers": drawn.triggers[i].tolist(), "outputs": drawn.outputs[i].tolist(),
                   "positions": positions, "occurrence": [occurrence[t] for t in positions]}
