"""`train.exposures`: how many times each person's documents are seen, in place of max_steps.

Part 3.3 measures knowledge capacity against exposures: training reads the corpus E / R times
over, R being a person's documents in the corpus (a bioD corpus's `renderings`, the M of a bios
`multi<M>` variant, 1 for a family without people: then E counts passes over the corpus), so
that each person's knowledge is read E times.

Counted in tokens. A pass over the corpus is T stream tokens: every document and the `<eos>`
the trainer appends to it. read(s) is the stream tokens the first s steps' windows hold on all
ranks (`PackedBatches.tokens_in`: ctx per window of split documents, the documents of a window
of whole ones, not its padding), epoch by epoch as the iterator yields them. The run takes

    steps = min { s : R * read(s) >= E * T }

and with split documents (the default) read(s) = s * micro_batch * ctx * grad_accum * world_size,
so steps = ceil(E * T / (R * micro_batch * ctx * grad_accum * world_size)). A pass's tail that
the iterator drops (an epoch's last windows short of a batch on some rank, shards over a
multiple of the ranks) is read in a later pass: the exposures reached, R * read(steps) / T, is
E plus less than one step's worth (R * tokens per step / T), and the run logs it.
"""

from pathlib import Path

from corpus_gen.core.manifest import MANIFEST
from trainer.data import PackedBatches
from trainer.errors import TrainError


def documents_per_person(manifest: dict, corpus_dir: Path) -> int:
    """R: each person's documents in the corpus (`train.exposures` over R passes read each
    person E times). A TrainError naming train.exposures and the corpus where the manifest
    counts no tokens, or gives people different numbers of documents."""
    if any("tokens" not in shard for shard in manifest["shards"]):
        raise TrainError(f"train.exposures: {corpus_dir / MANIFEST} counts no tokens per shard, "
                         "which exposures are counted in; use train.max_steps, or a corpus "
                         "made by physlm gen")
    summary = manifest.get("summary") or {}
    if "renderings" in summary:  # bioD
        return int(summary["renderings"])
    if "biographies" not in summary:  # no people: a document is seen once a pass
        return 1
    people, biographies = summary["people"], summary["biographies"]
    if summary.get("celebrities") or biographies % people:
        raise TrainError(f"train.exposures: {corpus_dir} gives its people different numbers of "
                         f"biographies ({biographies} for {people} people, "
                         f"{summary.get('celebrities', 0)} celebrities), so no one number of "
                         "exposures holds for all; use train.max_steps")
    return biographies // people


def steps_for(exposures: int, per_person: int, data: PackedBatches, grad_accum: int) -> int:
    """The fewest optimizer steps whose batches read the corpus `exposures / per_person` times
    (the module's formula); `data` is this rank's loader, at its start."""
    tokens = -(-exposures * data.tokens_per_epoch // per_person)  # ceil: R * read >= E * T
    return -(-data.batches_to_read(tokens) // grad_accum)


def exposures_reached(per_person: int, data: PackedBatches) -> float:
    """The exposures the batches `data` has yielded so far amount to: R * read / T."""
    return per_person * data.tokens_read() / data.tokens_per_epoch
