"""`manifest.json`: what a corpus directory holds, written last, and per-file progress records.

Each finished file (shard, eval set, tokenizer) gets a small record in `.progress/` as soon as it
is renamed into place. A rerun keeps a file whose record matches the config fingerprint and whose
sha256 still verifies, so an interrupted or damaged run repairs only what is missing or bad.
"""

import json
from pathlib import Path

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import atomic_write, sha256_file

MANIFEST = "manifest.json"
PROGRESS = ".progress"
FORMAT = 1


def write_json(path: Path, payload: dict) -> None:
    atomic_write(path, (json.dumps(payload, indent=1, sort_keys=True) + "\n").encode())


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        raise CorpusError(f"{path}: unreadable: {exc}") from None


def progress_path(out: Path, name: str) -> Path:
    return out / PROGRESS / (name.replace("/", "__") + ".json")


def record_progress(out: Path, entry: dict) -> None:
    write_json(progress_path(out, entry["name"]), entry)


def intact_entry(out: Path, name: str, fingerprint: str) -> dict | None:
    """The progress record of `name` if the file on disk still matches it, else None."""
    try:
        entry = read_json(progress_path(out, name))
    except (FileNotFoundError, CorpusError):
        return None
    path = out / name
    if entry.get("fingerprint") != fingerprint or not path.is_file():
        return None
    return entry if sha256_file(path) == entry.get("sha256") else None


def read_manifest(out: Path) -> dict:
    path = out / MANIFEST
    try:
        manifest = read_json(path)
    except FileNotFoundError:
        raise CorpusError(f"{out}: no {MANIFEST}; not a finished physlm corpus") from None
    if manifest.get("format") != FORMAT:
        raise CorpusError(f"{path}: unsupported manifest format {manifest.get('format')!r}")
    return manifest
