"""What the probe task reads off a bios corpus (Part 3.1): whether a person's attributes can be
read linearly off the hidden states. The subjects are people; the columns the six attributes.

- P-probe: the person's first biography as trained (kind bio, copy 0, the shard's own tokens).
  For each attribute, the hidden state at the token just before the attribute's value first
  appears (the paper's "special position") predicts that attribute; skipped where the value
  comes before the text names the person (a template may open with it), since no hidden state
  there can know whom it is about. Not the name's end: many bioS biographies start with the
  name, and there causal attention makes the hidden state the Q-probe's, which says what the
  name alone recalls, not what the biography's text stores.
- Q-probe: the full name alone, as a document starts (positions from 0); the hidden state at its
  last token predicts each of the six attributes.

Labels: the birth month for the birth date (12 classes), the value itself for the other five.
"""

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from corpus_gen.bios.bio_r import DATE_FORMATS, format_date
from corpus_gen.bios.people import ATTRIBUTES, MONTHS, full_name
from corpus_gen.core import probe_targets as probes
from corpus_gen.core.config import require
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.manifest import read_manifest
from corpus_gen.core.shards import read_shard
from corpus_gen.core.tokenizer import CorpusTokenizer


@dataclass
class BiosProbeOptions:
    """The bios family's fields of the experiment's `eval.probe` group."""

    max_people: int = 1000  # people probed, the first met in the stream (0: all)

    def validate(self) -> None:
        require(self.max_people >= 0 and self.max_people != 1, "max_people", self.max_people,
                "must be 0 (all) or >= 2: probes need probe-train and probe-test people")


def read_biographies(corpus_dir: Path, max_people: int) -> list[dict]:
    """The first biography (kind bio, copy 0) of the first `max_people` people (0: all) met in
    the stream: each sample's json (text, person, ...) and, as `ids`, its tokens as trained."""
    manifest = read_manifest(corpus_dir)
    found = []
    for entry in manifest["shards"]:
        path = corpus_dir / entry["name"]
        if not path.is_file():
            raise CorpusError(f"{path}: shard missing; run physlm verify {corpus_dir}")
        for sample in read_shard(path):
            meta = sample["json"]
            if meta.get("kind") == "bio" and meta.get("copy") == 0:
                found.append({**meta, "ids": sample["ids"].tolist()})
                if len(found) == max_people:
                    return found
    return found


def label(person: dict, attribute: str) -> str:
    return MONTHS[person["birth_month"] - 1] if attribute == "birth_date" else person[attribute]


def _spellings(person: dict, attribute: str) -> list[str]:
    if attribute == "birth_date":  # bioS writes the first style; bioR any of them
        return [format_date(person["birth_month"], person["birth_day"], person["birth_year"],
                            style) for style in range(len(DATE_FORMATS))]
    return [person[attribute]]


def special_positions(tokenizer: CorpusTokenizer, text: str, ids: list[int], person: dict
                      ) -> tuple[dict[str, int], dict[str, str]]:
    """Per attribute, the index in `ids` (the text's tokens) of the token just before the
    attribute's value first appears in `text`; and why each other attribute has none:
    `not_found` (the value is not in the text as whole words), `before_name` (the value comes
    before the text first names the person in full, as in "Official paperwork gives October 2,
    1996 as the birth date for X": no hidden state there can know whom it is about) or
    `tokenization` (the text before the value does not tokenize into the first tokens of
    `ids`)."""
    name = full_name(person)
    named = text.find(name) + len(name) if name in text else len(text)
    found, missing = {}, {}
    for attribute in ATTRIBUTES:
        starts = [m.start() for value in _spellings(person, attribute)
                  if (m := re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text))]
        if not starts or min(starts) < named:
            missing[attribute] = "before_name" if starts else "not_found"
            continue
        # the prefix ends at the space before the value's word: words tokenize on their own
        cut = text.rfind(" ", 0, min(starts))
        prefix = tokenizer.encode(text[:cut]) if cut > 0 else []
        if not prefix or ids[: len(prefix)] != prefix:
            missing[attribute] = "tokenization"
            continue
        found[attribute] = len(prefix) - 1
    return found, missing


def p_targets(request: probes.ProbeRequest, docs: list[dict]) -> probes.KindTargets:
    """Each biography as trained, read at its special positions within the model's context:
    one row per (person, attribute found), labelled for that attribute alone."""
    limit = request.max_positions or math.inf
    positions, owned, skipped = [], [], Counter()
    for doc in docs:
        found, missing = special_positions(request.tokenizer, doc["text"], doc["ids"],
                                           doc["person"])
        skipped.update(missing.values())
        fits = {a: p for a, p in found.items() if p < limit}  # learned positions end at ctx
        skipped["too_long"] += len(found) - len(fits)
        positions.append(list(fits.values()))
        owned += [(doc["person"], a) for a in fits]
    labels = {attribute: [label(person, a) if a == attribute else None for person, a in owned]
              for attribute in ATTRIBUTES}
    reading = probes.Reading([d["ids"] for d in docs], positions)
    return probes.KindTargets(labels, dict(+skipped), reading)


def q_targets(request: probes.ProbeRequest, docs: list[dict]) -> probes.KindTargets:
    """The full name alone, read at its last token: one row per person, every attribute."""
    names = [request.tokenizer.encode(full_name(d["person"])) for d in docs]
    labels = {a: [label(d["person"], a) for d in docs] for a in ATTRIBUTES}
    reading = probes.Reading(names, [[len(name) - 1] for name in names])
    return probes.KindTargets(labels, {}, reading)


KINDS = {"p": p_targets, "q": q_targets}


def targets(request: probes.ProbeRequest) -> probes.ProbeTargets:
    docs = read_biographies(request.corpus_dir, request.options.max_people)
    kinds = {kind: KINDS[kind](request, docs) for kind in request.kinds}
    return probes.ProbeTargets("people", "attribute", kinds)


SPEC = probes.ProbeSpec({"p": "P-probe: biography, token before each value",
                         "q": "Q-probe: the name alone"}, targets, BiosProbeOptions)
