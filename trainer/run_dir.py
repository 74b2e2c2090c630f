"""A run directory: the names of its files, how they are written, and the one reader of each
file others read (`config.yaml`, `metrics.jsonl`, the `checkpoints/latest` pointer).
A run writes only inside its directory (a symbolic link out of it is refused), one writer at a
time (a lock naming its holder), and a write that fails (full disk, read-only directory) is one
line naming the file; so is a `config.yaml` or `metrics.jsonl` that cannot be read.

Imports no torch: whatever reads or writes run directories (`physlm status`, `physlm report`)
can use it cheaply.
"""

import errno
import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import yaml

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.io import LOCK, directory_lock, replacing
from trainer.errors import TrainError

CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
EVAL = "eval"
LATEST = "latest"  # checkpoints/latest: the name of the newest complete checkpoint
STEP = "step-"  # checkpoints/step-000100: a checkpoint of step 100
META = "meta.json"  # a checkpoint's identity and step, written last: it makes one complete
WEIGHTS = "weights.pt"  # a checkpoint's consolidated fp32 weights, which evaluation loads
STOP_FILE = ".stop"  # asks a training run to stop with a checkpoint (trainer.preempt)
STOPPED_FILE = "stopped.json"  # the record of a clean stop, until the run starts again
WANDB_ID = "wandb_id.txt"
WANDB_DIR = "wandb"  # W&B's own files
JOB = "job.json"  # the local executor's record of a run's job
LOG = "log.txt"  # the output of a run's jobs under the local executor, appended
# what a run leaves in its directory; `resume=overwrite` removes exactly these
RUN_FILES = (CHECKPOINTS, METRICS, EVAL, CONFIG, WANDB_ID)
# every name physlm writes under: none may be a link out of the run directory
WRITTEN = (*RUN_FILES, WANDB_DIR, LOCK, JOB, LOG)
# libyaml's parser overflows the C stack (SIGSEGV) on flow nesting ~50,000 deep: refused first
MAX_CONFIG_NESTING = 1000
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # ~20x faster where built


def step_of(name: str) -> int | None:
    """The step a checkpoint directory's name (`step-000100`) gives; None for another name."""
    digits = name.removeprefix(STEP)
    return int(digits) if name.startswith(STEP) and digits.isdigit() else None


def checkpoint_steps(checkpoints: Path) -> dict[Path, int]:
    """Each checkpoint directory in `checkpoints` (`step-000100`) and the step its name gives."""
    return {path: step for path in checkpoints.glob(f"{STEP}*")
            if (step := step_of(path.name)) is not None}


def read_latest(checkpoints: Path) -> str | None:
    """The name `checkpoints/latest` points at (the newest complete checkpoint), None where
    there is no pointer. OSError and ValueError (not UTF-8) pass: each caller words them."""
    pointer = checkpoints / LATEST
    return pointer.read_text().strip() if pointer.exists() else None


def latest_checkpoint(checkpoints: Path) -> Path | None:
    """The checkpoint `latest` points at, None where there is none; a TrainError where it
    points at a directory that is not a complete checkpoint (no meta.json)."""
    name = read_latest(checkpoints)
    if name is None:
        return None
    path = checkpoints / name
    if not (path / META).exists():
        raise TrainError(f"{checkpoints / LATEST}: points at {path}, which is not a complete "
                         "checkpoint")
    return path


def point_latest(checkpoints: Path, name: str) -> None:
    """Point `latest` at the checkpoint `name`, whole or not at all. OSError passes as it is:
    the checkpoint's writer words it."""
    with replacing(checkpoints / LATEST) as tmp:
        tmp.write_text(name)


def read_metrics(run_dir: Path) -> list[dict]:
    """The lines `metrics.jsonl` logged, the one rule for every reader (training's resume,
    `physlm status`, `physlm report`): a last line cut short is left out, a damaged line before
    it is a TrainError naming it."""
    path = run_dir / METRICS
    return read_metrics_file(path)[0] if path.exists() else []


def read_metrics_file(path: Path) -> tuple[list[dict], str | None]:
    """The logged lines of a metrics.jsonl, and its last line if a write cut it short (a full
    disk, a killed process; a reader may also meet a line being written). A damaged line
    before the last is an error: only its last line can have been cut short."""
    try:
        lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    except OSError as exc:
        raise TrainError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    logged = []
    for number, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):  # cut short, not UTF-8, or nested too deep
            entry = None
        if not isinstance(entry, dict):
            shown = line[:60].decode(errors="replace")
            if number == len(lines):
                return logged, shown
            raise TrainError(f"{path}: line {number} is not JSON ({shown!r}); only the last "
                             "line can be cut short by an interrupted write: mend or delete "
                             "the line")
        logged.append(entry)
    return logged, None


def read_run_config(run_dir: Path) -> dict:
    """The run's `config.yaml` (the config its training resolved) as a mapping; a TrainError
    naming the file when it is missing, not UTF-8, not YAML, nested too deep or not a mapping."""
    path = run_dir / CONFIG
    if not path.is_file():
        raise TrainError(f"{run_dir}: not a run directory (no {CONFIG})")
    try:
        text = path.read_text()
        if _flow_nesting(text) > MAX_CONFIG_NESTING:
            raise ValueError(f"nested over {MAX_CONFIG_NESTING} deep")
        config = yaml.load(text, Loader=_YAML_LOADER)
    except (OSError, ValueError, RecursionError, yaml.YAMLError) as exc:  # ValueError: UTF-8
        raise TrainError(f"{path}: damaged run config: {' '.join(str(exc).split())}") from None
    if not isinstance(config, dict):
        raise TrainError(f"{path}: damaged run config: not a mapping of settings")
    return config


def _flow_nesting(text: str) -> int:
    """How deep `[`/`{` nest in `text` at most (brackets inside quotes count too: an upper
    bound). Cheap where there are few brackets, as in every config physlm writes."""
    if text.count("[") + text.count("{") <= MAX_CONFIG_NESTING:
        return 0
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


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
    """Write `text` to `path` whole or not at all (a failed write leaves the old file as it
    was, in a one-line error)."""
    try:
        with replacing(path) as tmp:
            tmp.write_text(text)
    except OSError as exc:
        raise write_error(path, exc) from None
