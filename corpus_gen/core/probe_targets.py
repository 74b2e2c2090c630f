"""What a corpus family offers the probe evaluation task (trainer/eval/probe.py), which knows no
family: the kinds of probe its corpora support, its own options, and for one corpus the hidden
states to read with their labels. A family registers a `ProbeSpec` as `Family.probe_targets`.

The task splits the *subjects* (a family's unit: a person, a held-out string) into probe-train
and probe-test; every kind reads one token list per subject (document i is about subject i).
Per kind, layer and *column* (an attribute, an NT level) it fits a logistic probe on the rows of
probe-train subjects and scores it on those of probe-test subjects.
"""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corpus_gen.core.tokenizer import CorpusTokenizer


@dataclass(frozen=True)
class ProbeRequest:
    """What the task asks of a family's targets for one corpus."""

    corpus_dir: Path
    tokenizer: CorpusTokenizer
    # eval.probe: the family reads its own options' fields (and the task's `seed` if it draws)
    options: Any
    kinds: list[str]  # the kinds asked, of the family's own
    max_positions: int | None  # tokens the model can read (learned positions); None: no limit
    # the corpus's files, read as every evaluation task reads them (verified against the
    # manifest; a missing or damaged one is refused naming it and `needs`, what the task needs)
    read_eval_set: Callable[[str, Mapping[str, type], str], Iterator[dict]]  # name, fields, needs
    verified_file: Callable[[Path, str], Path]  # path, needs


@dataclass
class Reading:
    """Hidden states to read: one token list per subject, each read as a document starts
    (position 0), and per document the token indices read. Rows of features run document by
    document, each document's positions in the order given."""

    documents: list[list[int]]
    positions: list[list[int]]


@dataclass
class KindTargets:
    # per column (attribute, NT level), the label of each row of the reading; None: that row
    # is not probed for that column
    labels: dict[str, list]
    skipped: dict[str, int]  # positions not read, by reason ("too_long", "before_name")
    reading: Reading | None = None  # None: the targets' shared reading


@dataclass
class ProbeTargets:
    subjects: str  # what the split divides, plural ("people"): the results' key of their counts
    columns: str  # what a column is ("attribute", "NT level"): the heat maps' axis
    kinds: dict[str, KindTargets]  # the kinds asked
    # the positions every kind reads, where they share them: read once, and the results count
    # them per side (`positions`)
    reading: Reading | None = None
    # what the results open with and the heat maps' title names (a cfg corpus's grammar)
    facts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeSpec:
    """A family's probes (`Family.probe_targets`)."""

    # per kind, its name (the results' key, a value of eval.probe.kinds) and the heat map's
    # title, in the order results list them
    kinds: dict[str, str]
    targets: Callable[[ProbeRequest], ProbeTargets]
    # a dataclass with validate(): the family's options, fields of eval.probe beside the task's
    # own (a name two families share is refused when the task assembles its options)
    options: type | None = None
