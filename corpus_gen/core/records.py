"""The unit every family produces: one document's text, its loss spans and its ground truth."""

from dataclasses import dataclass, field


@dataclass(slots=True)
class Record:
    """One training document.

    `text` is whitespace-normalised (single spaces, no leading or trailing space) so tokenization
    can be done word by word. `no_loss` lists character spans [start, end) that lie on word
    boundaries and are excluded from the loss (mask 0); everything else counts (mask 1).
    `meta` is the family's ground truth, stored beside the text in the shard's `json` member.
    """

    text: str
    meta: dict = field(default_factory=dict)
    no_loss: tuple[tuple[int, int], ...] = ()
