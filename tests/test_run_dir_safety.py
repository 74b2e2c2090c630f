"""A run directory writes only inside itself, one writer at a time, and a write that fails (a
full disk, a read-only directory) ends in one line with the last checkpoint kept."""

import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from launch.cli import main
from trainer import tracking
from trainer.engine import train
from trainer.errors import Preempted, TrainError
from trainer.preempt import StopRequest
from trainer.run_dir import STOPPED_FILE, read_metrics, read_run_config
from trainer.tracking import Tracker

LINK_OUT = ("a symbolic link to {target}, outside the run directory; a run writes only inside "
            "its directory: remove the link (to keep the run elsewhere, link the whole run "
            "directory instead)")
AGAIN = "free space (or make the run directory writable) and run again"


@pytest.fixture(scope="module")
def trained(train_corpus, tmp_path_factory) -> Path:
    """A run stopped at step 2 of 6 (a checkpoint, metrics, config), copied by each test."""
    from conftest import tiny_experiment_file

    from trainer.config import load_experiment

    run = tmp_path_factory.mktemp("trained") / "run"
    experiment = load_experiment(tiny_experiment_file(tmp_path_factory.mktemp("exp")),
                                 ["train.max_steps=6", "train.ckpt_every=2"])
    with pytest.raises(Preempted):  # a signal at step 1 stops it at step 2
        train(experiment, run, train_corpus,
              on_step=lambda step, _: step == 1 and os.kill(os.getpid(), signal.SIGUSR1))
    return run


def _train(directory: Path, corpus: Path, run: Path, *overrides: str) -> int:
    """`physlm train` of the tiny experiment, to step 6 unless `overrides` say otherwise."""
    from conftest import tiny_experiment_file

    return main(["train", str(tiny_experiment_file(directory)), "--corpus", str(corpus),
                 "--run-dir", str(run), "train.max_steps=6", "train.ckpt_every=2", *overrides])


def _files(path: Path) -> dict:
    """Every file under `path` (or `path` itself) with its bytes."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): p.read_bytes() for p in files}


def _latest(run: Path) -> Path:
    return run / "checkpoints" / (run / "checkpoints" / "latest").read_text()


@pytest.mark.parametrize("name, resume", [("config.yaml", "auto"), ("metrics.jsonl", "auto"),
                                          ("wandb_id.txt", "auto"), ("checkpoints", "auto"),
                                          ("checkpoints", "overwrite"), ("eval", "overwrite")])
def test_a_run_file_linked_out_of_the_run_directory_is_refused_and_left_unchanged(
        name, resume, trained, train_corpus, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir()
    if name == "eval":
        (outside / "qa.json").parent.mkdir()
        (outside / "qa.json").write_text("{}\n")
    elif name == "wandb_id.txt":
        outside.write_text("someone-elses-run\n")
    else:
        (run / name).rename(outside)
    (run / name).symlink_to(outside)
    before = _files(outside)
    capsys.readouterr()

    code = _train(tmp_path, train_corpus, run, f"train.resume={resume}")
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (f"physlm train: error: {run / name}: "
                                 + LINK_OUT.format(target=outside)), err
    assert _files(outside) == before
    assert not (run / ".lock").exists()


def test_a_link_that_stays_inside_the_run_directory_is_followed(trained, train_corpus,
                                                                 tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / "checkpoints").rename(run / "kept")
    (run / "checkpoints").symlink_to("kept")
    assert _train(tmp_path, train_corpus, run) == 0
    assert (run / "kept" / "latest").read_text() == "step-000006"


def test_a_second_training_in_a_run_directory_is_refused_naming_the_holder(
        trained, train_corpus, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = _files(run)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from corpus_gen.core.io import directory_lock\n"  # the lock physlm gen holds too
         f"with directory_lock(Path({str(run)!r}), 'physlm train'):\n"
         "    print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    try:
        assert holder.stdout.readline() == "held\n"
        capsys.readouterr()
        code = _train(tmp_path, train_corpus, run)
        err = capsys.readouterr().err.strip()
    finally:
        holder.communicate("")  # its stdin closes: it lets go of the lock and exits
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"physlm train: error: {run}: physlm train (pid {holder.pid} on "
                          f"{socket.gethostname()}, since ")
    assert err.endswith(") is writing here; wait for it to finish or choose another directory")
    assert _files(run) == before  # not a step logged, not a checkpoint saved

    assert _train(tmp_path, train_corpus, run) == 0  # the holder is gone
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3, 4, 5, 6]
    assert not (run / ".lock").exists()


def test_resume_drops_a_torn_last_metrics_line_and_continues(trained, train_corpus, tmp_path,
                                                             capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    torn = '{"step": 3, "loss": 6.3'
    with open(run / "metrics.jsonl", "a") as f:
        f.write(torn)  # a disk that filled (or a process killed) in the middle of a line
    # physlm status and report read it by this same rule (tests/test_status_local.py,
    # tests/test_report.py)
    assert [m["step"] for m in read_metrics(run)] == [1, 2]
    capsys.readouterr()

    assert _train(tmp_path, train_corpus, run) == 0
    out = capsys.readouterr().out.splitlines()
    assert (f"train  | {run / 'metrics.jsonl'}: dropped its last line, cut short by an "
            f"interrupted write: {torn}") in out
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3, 4, 5, 6]


def test_a_damaged_metrics_line_before_the_last_is_one_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n')
    tracker = Tracker(tmp_path, "t", {}, "disabled", "p", None)
    with pytest.raises(TrainError) as caught:
        tracker.forget_after(3)
    assert str(caught.value) == (
        f"{tmp_path / 'metrics.jsonl'}: line 2 is not JSON ('{{\"step\": 2, \"lo'); only the "
        "last line can be cut short by an interrupted write: mend or delete the line")


def test_a_full_disk_while_logging_is_one_line_and_keeps_the_last_checkpoint(
        trained, train_corpus, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)

    class FullDisk:
        """The metrics file on a disk that fills at step 5: half a line, then ENOSPC."""

        def __init__(self, path, mode):
            self.file = open(path, mode)

        def __enter__(self):
            return self

        def write(self, text):
            if text.startswith('{"step": 5,'):
                self.file.write(text[:20])
                self.file.flush()
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.file.write(text)

        def __exit__(self, *_):
            self.file.close()

    monkeypatch.setattr(tracking, "open", FullDisk, raising=False)
    capsys.readouterr()
    code = _train(tmp_path, train_corpus, run)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (
        f"physlm train: error: {run / 'metrics.jsonl'}: cannot write it: No space left on "
        f"device (ENOSPC); training stopped, the checkpoints saved so far are kept: {AGAIN}")
    assert _latest(run).name == "step-000004"
    weights = torch.load(_latest(run) / "weights.pt", weights_only=True)["state_dict"]
    assert all(torch.isfinite(t).all() for t in weights.values())

    monkeypatch.undo()  # space again: the run resumes from step 4, past the torn line
    assert _train(tmp_path, train_corpus, run) == 0
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3, 4, 5, 6]


@pytest.fixture
def read_only():
    """Make a directory and all in it read-only for this process: its modes, or for root (whom
    modes do not stop) the immutable attribute, where the filesystem has it."""
    made = []

    def chmod(path: Path, change: int) -> None:
        for item in (path, *path.rglob("*")):
            item.chmod(item.stat().st_mode & ~0o222 | change)

    def make(path: Path) -> None:
        if os.geteuid() != 0:
            chmod(path, 0)
        elif subprocess.run(["chattr", "-R", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("running as root, and chattr +i is not available here")
        made.append(path)

    yield make
    for path in made:
        chmod(path, 0o200) if os.geteuid() != 0 else subprocess.run(["chattr", "-R", "-i",
                                                                     str(path)])


def test_a_read_only_run_directory_is_one_line(trained, train_corpus, tmp_path, read_only,
                                               capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    read_only(run)
    capsys.readouterr()
    code = _train(tmp_path, train_corpus, run)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"physlm train: error: {run / '.lock'}: cannot write it: ")
    assert err.endswith(f"; nothing else was written: {AGAIN}")
    assert _latest(run).name == "step-000002"


def test_a_run_directory_named_in_bytes_that_are_not_utf8_is_one_line(train_corpus, tmp_path,
                                                                      capsys):
    run = tmp_path / os.fsdecode(b"run-\xff")  # as Python passes such a shell argument on
    code = _train(tmp_path, train_corpus, run)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (
        f"physlm train: error: {os.fsencode(run)!r}: not UTF-8 text; physlm writes paths and "
        "values into YAML and JSON files: use a UTF-8 name")
    assert not run.exists()


def _kill_wandb_service() -> None:
    """SIGTERM to this process's W&B service (wandb-core), as Slurm's scancel sends it to every
    process of the job."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, comm, _, ppid = stat.read_text().split()[:4]
        except OSError:
            continue
        if int(ppid) == os.getpid() and comm.startswith("(wandb-core"):
            os.kill(int(pid), 15)
            os.waitpid(int(pid), 0)


def test_a_stop_after_the_wandb_service_died_is_still_a_clean_stop(train_corpus, tmp_path,
                                                                    monkeypatch, capsys):
    run = tmp_path / "run"
    log = Tracker.log

    def log_then_stop_at_step_2(tracker, metrics, step):
        log(tracker, metrics, step)
        if step == 2:  # the job is cancelled: the run is asked to stop, W&B's service dies
            _kill_wandb_service()
            (run / ".stop").touch()

    monkeypatch.setattr(Tracker, "log", log_then_stop_at_step_2)
    code = _train(tmp_path, train_corpus, run, "train.wandb.mode=offline")
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 75, err
    assert len(err) == 2 and err[0].startswith(
        "wandb  | W&B's service process is gone (ConnectionResetError: "), err
    assert err[0].endswith(f"this W&B run stops here; {run / 'metrics.jsonl'} holds every "
                           "logged step")
    assert err[1].startswith("physlm train: stopped at step 3 on request")
    assert _latest(run).name == "step-000003"
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3]


@pytest.mark.parametrize("text, reason", [
    (b"name: [unclosed\n", "while parsing a flow sequence in \"<unicode string>\", line 1, "
     "column 7 did not find expected ',' or ']' in \"<unicode string>\", line 2, column 1"),
    (b"- a list\n", "not a mapping of settings"),
    (b"name: caf\xe9\n", "'utf-8' codec can't decode byte 0xe9 in position 9: invalid "
     "continuation byte"),
    # libyaml's parser would overflow the C stack (the process killed by SIGSEGV)
    (b"name: " + b"[" * 200_000 + b"]" * 200_000, "nested over 1000 deep"),
], ids=["not-yaml", "not-a-mapping", "not-utf8", "too-deep"])
def test_a_damaged_run_config_is_one_line_naming_it(tmp_path, text, reason):
    """The one reader of a run's config.yaml (eval, status, report, a relaunched sweep)."""
    (tmp_path / "config.yaml").write_bytes(text)
    with pytest.raises(TrainError) as caught:
        read_run_config(tmp_path)
    assert str(caught.value) == f"{tmp_path / 'config.yaml'}: damaged run config: {reason}"


def test_a_full_disk_at_a_clean_stop_warns_and_the_stop_stays_a_stop(tmp_path, monkeypatch,
                                                                     capsys):
    """stopped.json cannot be written: a one-line warning, not an error turning exit 75 (a
    clean stop, its checkpoint saved) into exit 2."""
    stop = StopRequest(tmp_path)
    stop.watch_file()
    (tmp_path / ".stop").touch()

    def full_disk(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", full_disk)
    monkeypatch.setattr(Path, "write_bytes", full_disk)
    stop.done(4, tmp_path / "checkpoints" / "step-000004")
    assert capsys.readouterr().err == (
        f"train  | warning: {tmp_path / STOPPED_FILE}: cannot write it: No space left on device "
        "(ENOSPC); nothing else was written: free space (or make the run directory writable) and "
        "run again\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary left, stop file served
