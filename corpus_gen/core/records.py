"""The unit every family produces: one document's text, its loss spans and its ground truth."""

from dataclasses import dataclass, field


@dataclass(slots=True)
class Record:
    """One training document.

    `text` is whitespace-normalised (single spaces, no leading or trailing space) so tokenization
    can be done word by word. `no_loss` lists character spans [start, end) that lie on word
    boundaries and are excluded from the loss (mask 0); everything else counts (mask 1).
    `meta` is the family's ground truth, stored beside the text in the shard's `json` member.
    `pieces`, when given, is the text cut at spaces (" ".join(pieces) == text) into units that
    recur across documents (a template's words, a value with its punctuation): the tokenizer
    then encodes each distinct piece once instead of every word of every document.
    """

    text: str
    meta: dict = field(default_factory=dict)
    no_loss: tuple[tuple[int, int], ...] = ()
    pieces: list[str] | None = None
