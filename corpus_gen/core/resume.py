"""What a rerun of `physlm gen` keeps: the files earlier runs finished that still verify.

Before writing, a run reads what the manifest and the progress records say of the directory
(`prepare_output`), refuses a directory holding another corpus, checks that it can write there,
and drops the temporaries a killed run left. Then each file is either kept (`kept_entry`: recorded,
of this corpus, matching its sha256) or generated again.
"""

from pathlib import Path

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import LOCK, atomic_write, read_json_file, remove_stale_temporaries
from corpus_gen.core.manifest import (
    PROGRESS,
    is_intact,
    progress_path,
    record_progress,
    recorded_entries,
)


def prepare_output(out: Path, fp: str, log, lock: str, own: list[str] | None
                   ) -> dict[str, dict]:
    """Check that `out` holds nothing but this corpus; return what earlier runs recorded. The
    writer holding the lock file `lock` probes with a file of its own and, given `own` (a part),
    removes the stale temporaries of those files only: other parts may be writing theirs."""
    recorded = recorded_entries(out, log)
    other = {entry.get("fingerprint") for entry in recorded.values()} - {fp}
    if other:
        raise CorpusError(f"{out}: holds a corpus of another config or code version "
                          f"(fingerprint {sorted(map(str, other))[0]}, this config {fp}); choose "
                          "another --out or remove it yourself")
    # a write probe of this writer's own: concurrent parts must not remove each other's
    probe = out / PROGRESS / ("write-probe" + lock.removeprefix(LOCK))
    try:
        for sub in ("train", "eval", PROGRESS):
            (out / sub).mkdir(parents=True, exist_ok=True)
        atomic_write(probe, b"")
        probe.unlink()
    except (OSError, CorpusError) as exc:
        raise CorpusError(f"{out}: cannot write the output directory: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    targets = None if own is None else {probe, *(out / name for name in own),
                                        *(progress_path(out, name) for name in own)}
    remove_stale_temporaries(out, targets)
    return recorded


def kept_entry(out: Path, name: str, fp: str, recorded: dict[str, dict], log
               ) -> dict | None:
    """The recorded entry of `name` if the file still verifies (its progress record rewritten
    if it was lost), else None: the file is to be generated again."""
    entry = recorded.get(name)
    if entry and is_intact(out, entry, fp):
        try:
            intact_record = read_json_file(progress_path(out, name)) == entry
        except (FileNotFoundError, CorpusError):
            intact_record = False
        if not intact_record:
            record_progress(out, entry)
        return entry
    if (out / name).exists():
        log(f"{out / name}: does not match its checksum; regenerating it")
    return None
