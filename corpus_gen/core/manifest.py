"""`manifest.json`: what a corpus directory holds, written last, and per-file progress records.

Each finished file (shard, eval set, tokenizer) gets a small record in `.progress/` as soon as it
is renamed into place. A rerun keeps a file whose record matches the config fingerprint and whose
sha256 still verifies, so an interrupted or damaged run repairs only what is missing or bad. The
manifest and the progress records describe the same files: either rebuilds the other, and a file
neither describes is generated again.

Every file a manifest or progress record names lies inside the corpus directory: a relative path
without `..` that no symlink leads out of (`corpus_path`), so no reader of a corpus ever opens,
hashes or trains on a file elsewhere.
"""

import json
from pathlib import Path, PurePosixPath

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import atomic_write, read_json_file, sha256_file

MANIFEST = "manifest.json"
PROGRESS = ".progress"
FORMAT = 1


def write_json(path: Path, payload: dict) -> None:
    atomic_write(path, (json.dumps(payload, indent=1, sort_keys=True) + "\n").encode())


def progress_path(out: Path, name: str) -> Path:
    return out / PROGRESS / (name.replace("/", "__") + ".json")


def record_progress(out: Path, entry: dict) -> None:
    write_json(progress_path(out, entry["name"]), entry)


def corpus_path(out: Path, name: object, listed_in: Path) -> Path:
    """The path of file `name` that `listed_in` (a manifest or progress record) lists, refused
    in one line unless it lies inside the corpus `out`."""
    if not isinstance(name, str) or not name:
        reason = "is not a file name"
    elif PurePosixPath(name).is_absolute() or Path(name).is_absolute():
        reason = "is an absolute path"
    elif ".." in PurePosixPath(name).parts:
        reason = "climbs out of the corpus with '..'"
    elif not (out / name).resolve().is_relative_to(out.resolve()):
        reason = "is a symlink out of the corpus"
    else:
        return out / name
    raise CorpusError(f"{listed_in}: entry {name!r} {reason}; a corpus lists only files inside "
                      f"{out}")


def check_entries_inside(out: Path, entries: list, listed_in: Path) -> None:
    """Refuse (`corpus_path`) the first of `entries` whose name is no file inside `out`."""
    for entry in entries:
        if isinstance(entry, dict) and "name" in entry:
            corpus_path(out, entry["name"], listed_in)


def manifest_entries(manifest: dict) -> list[dict]:
    """Every file entry of a manifest: tokenizer, shards, eval sets, the family's files."""
    return [manifest["tokenizer"], *manifest["shards"], *manifest["eval"],
            *manifest.get("files", [])]


def recorded_entries(out: Path, log) -> dict[str, dict]:
    """What earlier runs recorded about the files of `out`, by file name: the manifest's entries,
    overlaid by the progress records (written as each file finished, so never older). Unreadable
    records are named and skipped: the files they describe are checked against the other record
    or generated again."""
    entries: dict[str, dict] = {}
    paths = [out / MANIFEST] if (out / MANIFEST).exists() else []
    paths += sorted((out / PROGRESS).glob("*.json"))
    for path in paths:
        try:
            record = read_json_file(path)
            found = manifest_entries(record) if path.name == MANIFEST else [record]
            check_entries_inside(out, found, path)
            entries.update({entry["name"]: entry for entry in found})
        except (CorpusError, KeyError, TypeError, OSError):
            log(f"{path}: unreadable; rebuilding it")
    return entries


def is_intact(out: Path, entry: dict, fingerprint: str) -> bool:
    """Whether the file `entry` describes belongs to `fingerprint` and still matches its sha256."""
    path = out / entry["name"]
    return (entry.get("fingerprint") == fingerprint and path.is_file()
            and sha256_file(path) == entry.get("sha256"))


def read_manifest(out: Path) -> dict:
    path = out / MANIFEST
    try:
        manifest = read_json_file(path)
    except FileNotFoundError:
        raise CorpusError(f"{out}: no {MANIFEST}; not a finished physlm corpus") from None
    if manifest.get("format") != FORMAT:
        raise CorpusError(f"{path}: unsupported manifest format {manifest.get('format')!r}")
    missing = [key for key in ("shards", "tokenizer", "eval") if key not in manifest]
    if missing:
        raise CorpusError(f"{path}: damaged manifest, no {', '.join(missing)}; rerun physlm gen "
                          "to rebuild it")
    try:
        entries = manifest_entries(manifest)
    except TypeError:
        raise CorpusError(f"{path}: damaged manifest, its file lists are not lists; rerun "
                          "physlm gen to rebuild it") from None
    check_entries_inside(out, entries, path)
    return manifest
