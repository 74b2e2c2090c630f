"""`physlm verify`: re-check every file the manifest lists against its sha256."""

from pathlib import Path

from corpus_gen.core.io import sha256_file
from corpus_gen.core.manifest import read_manifest


def verify_corpus(out: Path) -> list[str]:
    """Problems found, one line each naming the file; empty when the corpus is intact."""
    manifest = read_manifest(out)
    problems = []
    for entry in [manifest["tokenizer"], *manifest["shards"], *manifest["eval"]]:
        path = out / entry["name"]
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif sha256_file(path) != entry["sha256"]:
            problems.append(f"{path}: sha256 mismatch (corrupt or modified)")
    return problems
