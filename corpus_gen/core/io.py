"""Files appear whole or not at all: write to a temporary name, then rename; each writer holds
a lock file in the directory, which no other writer can take while its holder lives. JSON is
read the one way (`read_json_file`, `parse_json`): what is not JSON, not UTF-8 or nested too deep
is one line naming the file."""

import errno
import fcntl
import hashlib
import json
import os
import socket
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from corpus_gen.core.errors import CorpusError

TMP_MARK = ".tmp-"
LOCK = ".lock"
# errors of the device, not of the program: the file is named and finished files are kept
_WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds
    (a failure leaves `path` as it was). OSError passes as it is: each caller words it."""
    tmp = path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with suppress(OSError):  # on a read-only filesystem this fails too: say the first error
            tmp.unlink(missing_ok=True)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """`replacing(path)`, where a full or failing disk is a one-line CorpusError naming `path`."""
    try:
        with replacing(path) as tmp:
            yield tmp
    except OSError as exc:
        if exc.errno not in _WRITE_ERRORS:
            raise
        raise CorpusError(f"{path}: cannot write it: {exc.strerror}; files already finished "
                          "are kept") from None


def atomic_write(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def remove_stale_temporaries(directory: Path, targets: Collection[Path] | None = None) -> None:
    """Drop temporaries left by a killed run; they never hold a finished file. Given `targets`,
    only the temporaries of those files: the caller's lock covers only them, and another
    writer's temporaries are not stale. Call it only while holding that lock."""
    for tmp in directory.rglob(f".*{TMP_MARK}*"):
        target = tmp.with_name(tmp.name[1:].rpartition(TMP_MARK)[0])
        if targets is None or target in targets:
            tmp.unlink(missing_ok=True)


@contextmanager
def directory_lock(directory: Path, what: str, name: str = LOCK) -> Iterator[None]:
    """Hold `directory`/`name` while the block runs; a second writer fails at once with a line
    saying who holds it. The kernel drops the lock when its process dies, however it dies."""
    path = directory / name
    with open(path, "a+") as f:
        try:
            _flock_exclusive(f)
            # the holder removes the file when it is done: a lock on a removed file is no lock
            if os.fstat(f.fileno()).st_ino != os.stat(path).st_ino:
                raise BlockingIOError
        except (BlockingIOError, FileNotFoundError):
            f.seek(0)
            raise busy(directory, f.read().strip() or "another process") from None
        f.seek(0)
        f.truncate()
        f.write(f"{what} (pid {os.getpid()} on {socket.gethostname()}, since "
                f"{time.strftime('%Y-%m-%d %H:%M:%S')})")
        f.flush()
        try:
            yield
        finally:
            with suppress(OSError):  # a lock file left behind is no lock: its holder has gone
                path.unlink(missing_ok=True)


def _flock_exclusive(f, tries: int = 20, pause: float = 0.025) -> None:
    """An exclusive lock on `f`, or BlockingIOError. It tries for about half a second, so that a
    `lock_holder` probe's brief shared lock is never taken for a writer."""
    for _ in range(tries - 1):
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(pause)
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


def lock_holder(path: Path) -> str | None:
    """Who holds the lock file `path` (the line its holder wrote), or None if no live process
    does. The probe takes a shared lock, so probes never block one another."""
    try:
        with open(path) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return f.read().strip() or "another process"
            return None  # closing the file drops the probe's lock
    except FileNotFoundError:  # its holder finished
        return None


def busy(directory: Path, holder: str) -> CorpusError:
    return CorpusError(f"{directory}: {holder} is writing here; wait for it to finish or choose "
                       "another directory")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def parse_json(data: str | bytes, where: str, error: type[Exception] = CorpusError) -> object:
    """`data` as JSON; a one-line `error` naming `where` if it is not JSON, not UTF-8, or
    nested too deep to parse."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON or UTF-8
        raise error(f"{where}: not JSON ({str(exc).splitlines()[0]})") from None


def read_json_file(path: Path, error: type[Exception] = CorpusError) -> dict:
    """The JSON object in `path`: FileNotFoundError where there is none; a one-line `error`
    naming it where it cannot be read, is not JSON (`parse_json`) or is not an object."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise error(f"{path}: unreadable: {exc.strerror or exc}") from None
    payload = parse_json(data, str(path), error)
    if not isinstance(payload, dict):
        raise error(f"{path}: not a JSON object")
    return payload
