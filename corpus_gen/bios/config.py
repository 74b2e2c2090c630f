"""The bios corpus config and its variant grammar (`single`, `multi<M>`, `permute`, `fullname`)."""

import re
from dataclasses import dataclass, field

from corpus_gen.bios.manipulation import FORMS
from corpus_gen.bios.pools import load_pools
from corpus_gen.core.config import CorpusConfig, require
from corpus_gen.core.errors import ConfigError

MAX_COPIES = 4096  # documents per person; also the stride that keys (person, copy) pairs


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
