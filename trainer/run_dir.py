"""A run directory: the names of its files, and how they are written. A run writes only inside
its directory (a symbolic link out of it is refused), one writer at a time (a lock naming its
holder), and a write that fails (full disk, read-only directory) is one line naming the file.

Imports no torch: whatever reads or writes run directories can use it cheaply.
"""

import errno
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import LOCK, TMP_MARK, directory_lock
from trainer.errors import TrainError

CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
EVAL = "eval"
WANDB_ID = "wandb_id.txt"
WANDB_DIR = "wandb"  # W&B's own files
# what a run leaves in its directory; `resume=overwrite` removes exactly these
RUN_FILES = (CHECKPOINTS, METRICS, EVAL, CONFIG, WANDB_ID)
# every name physlm writes under: none may be a link out of the run directory
WRITTEN = (*RUN_FILES, WANDB_DIR, LOCK)


def inside(run_dir: Path, name: str) -> Path:
    """`run_dir / name`, refused where a symbolic link on its way leads out of `run_dir` (a
    link to elsewhere in the run directory is fine, and so is a run directory that is a link)."""
    path = run_dir / name
    try:
        target, root = path.resolve(), run_dir.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a loop of links
        raise TrainError(f"{path}: cannot follow its links ({exc}); remove the link") from None
    if not target.is_relative_to(root):
        raise TrainError(f"{path}: a symbolic link to {target}, outside the run directory; a "
                         "run writes only inside its directory: remove the link (to keep the "
                         "run elsewhere, link the whole run directory instead)")
    return path


@contextmanager
def run_lock(run_dir: Path, what: str) -> Iterator[None]:
    """Hold the run directory's lock while the block runs (`what`: "physlm train", "physlm
    eval"): a second writer fails at once, in one line naming the holder's command, pid and host.
    Also refuses, before anything is written, a run directory whose files link out of it."""
    for name in WRITTEN:
        inside(run_dir, name)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(run_dir, exc) from None
    with ExitStack() as held:
        try:
            held.enter_context(directory_lock(run_dir, what, LOCK))
        except CorpusError as exc:  # held by another process
            raise TrainError(str(exc)) from None
        except OSError as exc:  # a read-only directory, a full disk: its first write fails
            raise write_error(run_dir / LOCK, exc) from None
        yield  # outside the try: the block's own errors pass as they are


def write_error(path: Path, exc: OSError, kept: str = "nothing else was written") -> TrainError:
    """One line for a failed write: the file, what the system said, and what is `kept`."""
    code = f" ({errno.errorcode[exc.errno]})" if exc.errno in errno.errorcode else ""
    return TrainError(f"{path}: cannot write it: {exc.strerror or exc}{code}; {kept}: free "
                      "space (or make the run directory writable) and run again")


def replace_file(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (a temporary file, then a rename: a failed
    write leaves the old file as it was, in a one-line error)."""
    tmp = path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise write_error(path, exc) from None
    finally:
        with suppress(OSError):  # on a read-only filesystem even this fails: say the first error
            tmp.unlink(missing_ok=True)
