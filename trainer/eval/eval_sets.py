"""A corpus's eval sets (`eval/<set>.jsonl`), read the one way every task reads them, and
the family's files they are read with (grammar.json), verified the same way.

A set is used only once its sha256 matches the corpus manifest's record of it: an emptied,
truncated or edited set would otherwise score as a real result. Each row must be a JSON object
with the keys (and types) its task needs; a row that is not is one line naming file:line.
"""

from collections.abc import Iterator, Mapping
from pathlib import Path

from corpus_gen.core.io import parse_json
from corpus_gen.core.manifest import MANIFEST, manifest_entries, read_manifest
from corpus_gen.core.verify import file_verifies
from trainer.errors import TrainError


def eval_set_path(corpus_dir: Path, name: str) -> Path:
    return corpus_dir / "eval" / f"{name}.jsonl"


def verified_eval_set(corpus_dir: Path, name: str, needs: str) -> Path:
    """The path of eval set `name`, once it verifies against the corpus manifest; `needs` says
    what corpus has the set, for the error when it is missing."""
    return verified_corpus_file(corpus_dir, eval_set_path(corpus_dir, name), needs)


def verified_corpus_file(corpus_dir: Path, path: Path, needs: str) -> Path:
    """`path` (an eval set, a family's file such as grammar.json), once its sha256 matches the
    corpus manifest's record of it."""
    if not path.is_file():
        raise TrainError(f"{path}: missing; {needs}")
    manifest, listed = read_manifest(corpus_dir), path.relative_to(corpus_dir).as_posix()
    entry = next((e for e in manifest_entries(manifest)
                  if isinstance(e, dict) and e.get("name") == listed), None)
    if entry is None:
        raise TrainError(f"{path}: not listed in {corpus_dir / MANIFEST}; {needs}")
    if not file_verifies(path, entry.get("sha256")):
        raise TrainError(f"{path}: sha256 differs from {corpus_dir / MANIFEST} (damaged or "
                         f"modified); physlm gen of the corpus's config repairs it")
    return path


def read_eval_set(corpus_dir: Path, name: str, fields: Mapping[str, type], needs: str
                  ) -> Iterator[dict]:
    """The rows of eval set `name`, verified first (see `verified_eval_set`), each a dict holding
    `fields` (key -> type); blank lines are skipped. Stop iterating to read fewer rows."""
    path = verified_eval_set(corpus_dir, name, needs)
    return _rows(path, fields)


def _rows(path: Path, fields: Mapping[str, type]) -> Iterator[dict]:
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                yield _parse_row(line.strip(), fields, f"{path}:{number}")


def _parse_row(line: bytes, fields: Mapping[str, type], where: str) -> dict:
    """One row: a JSON object with `fields`; a TrainError naming `where` and what is wrong."""
    row = parse_json(line, where, TrainError)
    if not isinstance(row, dict):
        raise TrainError(f"{where}: not a JSON object")
    for key, kind in fields.items():
        if key not in row:
            raise TrainError(f"{where}: no {key!r}; a row of this set needs "
                             f"{', '.join(fields)}")
        if not isinstance(row[key], kind):
            raise TrainError(f"{where}: {key!r} is {type(row[key]).__name__}, not "
                             f"{kind.__name__}")
    return row
