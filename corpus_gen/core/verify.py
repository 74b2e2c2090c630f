"""`physlm verify`: re-check every file the manifest lists against its sha256."""

import os
from pathlib import Path

from corpus_gen.core.io import sha256_file
from corpus_gen.core.manifest import MANIFEST, corpus_path, manifest_entries, read_manifest

# files this process has hashed and found right, with what identifies their bytes on disk:
# the trainer reads a shard that `physlm run` has just verified without hashing it again
_VERIFIED: set[tuple] = set()


def file_verifies(path: Path, sha256: str) -> bool:
    """Whether `path` holds bytes of this sha256 (read once per process while it is unchanged:
    same inode, size and modification time)."""
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns, sha256)
    if key in _VERIFIED:
        return True
    if sha256_file(path) != sha256:
        return False
    _VERIFIED.add(key)
    return True


def verify_corpus(out: Path) -> list[str]:
    """Problems found, one line each naming the file; empty when the corpus is intact. A
    manifest naming a file outside the corpus is refused (CorpusError) before any is read."""
    manifest = read_manifest(out)
    problems = []
    for entry in manifest_entries(manifest):
        path = corpus_path(out, entry["name"], out / MANIFEST)
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif not file_verifies(path, entry["sha256"]):
            problems.append(f"{path}: sha256 mismatch (corrupt or modified)")
    return problems
