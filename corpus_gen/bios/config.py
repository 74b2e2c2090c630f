"""The bios corpus config and its variant grammar (`single`, `multi<M>`, `permute`, `fullname`)."""

import re
from dataclasses import dataclass, field
from typing import ClassVar

from corpus_gen.bios.manipulation import FORMS
from corpus_gen.bios.pools import load_pools
from corpus_gen.core.config import CorpusConfig, require
from corpus_gen.core.errors import ConfigError

MAX_COPIES = 4096  # documents per person; also the stride that keys (person, copy) pairs
# bios: a biography of a person outside the population (a name no real person has, random
# attributes), written as the corpus writes a real person's first biography
JUNK_KINDS = ("bios",)
MAX_JUNK_RATIO = 1023
DOMAIN_TOKEN = "<useful>"  # with domain_token, the first word of every useful document


@dataclass(frozen=True)
class Variant:
    copies: int  # independently templated biographies per person
    permute: bool  # shuffle the six sentences of each biography
    fullname: bool  # full name in every sentence instead of pronouns


def parse_variant(text: str, key: str = "variant") -> Variant:
    """`single`, `multi5`, `multi5_permute`, `single+permute+fullname`, ... in any order."""
    copies, permute, fullname = None, False, False
    for part in filter(None, re.split(r"[_+]", text)):
        multi = re.fullmatch(r"multi(\d+)", part)
        if part == "single" and copies is None:
            copies = 1
        elif multi and copies is None and 1 <= int(multi.group(1)) < MAX_COPIES:
            copies = int(multi.group(1))
        elif part == "permute" and not permute:
            permute = True
        elif part == "fullname" and not fullname:
            fullname = True
        else:
            raise ConfigError(key, text, f"unknown or repeated variant part {part!r}; compose "
                              f"single | multi<M> (1 <= M < {MAX_COPIES}) with permute, fullname")
    return Variant(copies or 1, permute, fullname)


@dataclass
class BiosConfig(CorpusConfig):
    family: str = "bios"
    people: int = 10000
    style: str = "s"  # s: bioS (templated sentences), r: bioR (free-form grammar)
    variant: str = "single"
    qa_train_fraction: float = 0.5  # people whose QA goes to qa_train; the rest is held out
    # pretrain: biographies only; mix: + QA documents of the qa_train people; qa: their QA
    # documents only (a finetuning corpus: pair it with tokenizer.reuse and train.init_from)
    mode: str = "pretrain"
    qa_copies: int = 1  # mix/qa mode: QA documents per qa_train person
    qa_loss: str = "all"  # mix/qa mode: "all" tokens count in the loss, or the "answer" only
    celebrities: int = 0  # > 0: people [0, celebrities) get celebrity_variant, QA trains on them
    celebrity_variant: str = "multi5_permute"
    inverse: bool = False  # + eval sets inverse_<split>: the name from attributes (Part 3.2)
    inverse_qa: int = 0  # mix/qa mode: inverse QA documents per qa_train person (Part 3.2)
    manipulation: bool = False  # + eval sets manipulation_<split>: yes/no questions (Part 3.2)
    manipulation_qa: int = 0  # mix/qa mode: manipulation documents per qa_train person, form
    manipulation_forms: list[str] = field(default_factory=lambda: ["plain", "cot"])
    data_dir: str | None = None  # value pools; None: the tables shipped in the package
    # Part 3.3's junk mixes: J junk documents per useful one (a biography or QA document of the
    # stream), one useful at a keyed place in each run of J + 1 (the paper's 1:7 is J = 7)
    junk_ratio: int = 0
    junk: str = "bios"  # the kind of junk (JUNK_KINDS)
    domain_token: bool = False  # DOMAIN_TOKEN first in every useful document, never in junk
    # Part 3.3: + bios.json (the information content) and eval set bios_people (bioS only)
    capacity: bool = False
    # keys added after corpora were made without them: left out of the fingerprint at these
    # values, so those corpora (and their runs' saved data positions) keep theirs
    ADDED_LATER: ClassVar[dict] = {**CorpusConfig.ADDED_LATER, "junk_ratio": 0, "junk": "bios",
                                   "domain_token": False, "capacity": False}

    def validate(self) -> None:
        super().validate()
        require(self.people >= 2, "people", self.people, "need at least 2 people")
        name_space = load_pools(self.data_dir).name_space
        require(self.people <= name_space, "people", self.people, f"exceeds the {name_space:,} "
                "unique full names the first x middle x last pools allow")
        require(self.style in ("s", "r"), "style", self.style, "must be 's' (bioS) or 'r' (bioR)")
        variant = self._checked_variant("variant")
        require(0.0 < self.qa_train_fraction < 1.0, "qa_train_fraction", self.qa_train_fraction,
                "must be strictly between 0 and 1")
        require(self.mode in ("pretrain", "mix", "qa"), "mode", self.mode,
                "must be pretrain, mix or qa")
        require(1 <= self.qa_copies < MAX_COPIES, "qa_copies", self.qa_copies,
                f"must be in [1, {MAX_COPIES})")
        require(0 <= self.inverse_qa < MAX_COPIES, "inverse_qa", self.inverse_qa,
                f"must be in [0, {MAX_COPIES})")
        require(not self.inverse_qa or self.mode != "pretrain", "inverse_qa", self.inverse_qa,
                "needs mode=mix or qa (inverse QA documents of the qa_train people)")
        require(0 <= self.manipulation_qa < MAX_COPIES, "manipulation_qa",
                self.manipulation_qa, f"must be in [0, {MAX_COPIES})")
        require(not self.manipulation_qa or self.mode != "pretrain", "manipulation_qa",
                self.manipulation_qa, "needs mode=mix or qa (manipulation documents of the "
                "qa_train people)")
        for form in self.manipulation_forms:
            require(form in FORMS, "manipulation_forms", form,
                    f"unknown form; known: {', '.join(FORMS)}")
        require(len(set(self.manipulation_forms)) == len(self.manipulation_forms),
                "manipulation_forms", self.manipulation_forms, "names a form twice")
        require(self.qa_loss in ("all", "answer"), "qa_loss", self.qa_loss,
                "must be 'all' or 'answer'")
        require(0 <= self.celebrities < self.people, "celebrities", self.celebrities,
                "must be in [0, people)")
        require(not self.capacity or (self.style == "s" and self.mode != "qa"), "capacity",
                self.capacity, "needs bioS biographies in the stream: style s, mode pretrain or "
                "mix")
        require(0 <= self.junk_ratio <= MAX_JUNK_RATIO, "junk_ratio", self.junk_ratio,
                f"must be in [0, {MAX_JUNK_RATIO}]")
        require(self.junk in JUNK_KINDS, "junk", self.junk, f"one of {', '.join(JUNK_KINDS)}")
        require(not self.junk_ratio or self.people < name_space, "junk", self.junk,
                f"bios junk needs names outside the population: people < the {name_space:,} "
                "names the pools allow")
        if self.celebrities:
            celebrity = self._checked_variant("celebrity_variant")
            require(celebrity.copies >= variant.copies, "celebrity_variant",
                    self.celebrity_variant, f"celebrities need at least as many biographies as "
                    f"the others ({self.variant})")

    def _checked_variant(self, key: str) -> Variant:
        text = getattr(self, key)
        variant = parse_variant(text, key)
        if self.style == "r":
            require(not (variant.permute or variant.fullname), key, text,
                    "permute and fullname apply to bioS (style=s) only")
        return variant

    @property
    def qa_train_people(self) -> int:
        """QA-train people are the prefix [0, n): celebrities, or a qa_train_fraction share."""
        return self.celebrities or max(1, int(self.people * self.qa_train_fraction))
