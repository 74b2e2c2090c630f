"""Preemption: a signal or the stop file stops a run at a step boundary with a checkpoint, the
CLI exits 75, and the requeued run resumes exactly."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from conftest import tiny_experiment_file

import trainer.engine
from trainer import checkpoint
from trainer.config import load_experiment
from trainer.distributed import free_port
from trainer.engine import train
from trainer.errors import Preempted
from trainer.run_dir import STOP_FILE, STOPPED_FILE, read_metrics

ROOT = Path(__file__).resolve().parent.parent
STOPPED = re.compile(r"stopped at step (\d+) on request \(signal or (\S+)\); checkpoint (\S+) "
                     r"saved; run again to resume")


@pytest.fixture
def corpus(train_corpus):
    return train_corpus


def _experiment(tmp_path, *overrides):
    return load_experiment(tiny_experiment_file(tmp_path), list(overrides))


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    return [(m["step"], m["loss"]) for m in read_metrics(run_dir)]


def _assert_same_weights(a: Path, b: Path) -> None:
    """The two checkpoints' consolidated weights are bit for bit equal."""
    expected = torch.load(a / "weights.pt")["state_dict"]
    actual = torch.load(b / "weights.pt")["state_dict"]
    assert expected.keys() == actual.keys()
    for key, value in expected.items():
        assert torch.equal(value, actual[key]), key


def _signal_after(step: int):
    """An on_step hook sending this process SIGUSR1 once `step` is done."""

    def hook(done, _):
        if done == step:
            os.kill(os.getpid(), signal.SIGUSR1)

    return hook


def test_a_signal_stops_at_the_next_step_boundary_and_the_resumed_run_is_exact(
        corpus, tmp_path, capsys):
    args = ("train.max_steps=8", "train.ckpt_every=5", "model.dropout=0.1")
    train(_experiment(tmp_path, *args), tmp_path / "straight", corpus)
    run = tmp_path / "run"
    handler = signal.getsignal(signal.SIGUSR1)
    # sent after step 2's all-reduce, which carries the request: step 3's sees it
    with pytest.raises(Preempted) as stopped:
        train(_experiment(tmp_path, *args), run, corpus, on_step=_signal_after(2))
    checkpoints = run / "checkpoints"
    assert stopped.value.step == 3
    assert stopped.value.checkpoint == checkpoints / "step-000003"
    assert str(stopped.value) == (
        f"stopped at step 3 on request (signal or {run / STOP_FILE}); checkpoint "
        f"{checkpoints / 'step-000003'} saved; run again to resume")
    assert (checkpoints / "latest").read_text() == "step-000003"
    assert json.loads((run / STOPPED_FILE).read_text()) == {
        "step": 3, "checkpoint": str(checkpoints / "step-000003")}
    assert signal.getsignal(signal.SIGUSR1) is handler  # put back when train() ended

    capsys.readouterr()
    train(_experiment(tmp_path, *args), run, corpus)
    assert "resumed from" in capsys.readouterr().out
    assert not (run / STOPPED_FILE).exists()
    assert _losses(run) == _losses(tmp_path / "straight")
    _assert_same_weights(tmp_path / "straight/checkpoints/step-000008", checkpoints / "step-000008")


def test_the_stop_file_stops_the_run_saves_once_on_the_grid_and_is_removed(
        corpus, tmp_path, monkeypatch):
    saved = []
    real_save = checkpoint.save

    def counting_save(state, checkpoints, keep_last):
        saved.append(state.step)
        return real_save(state, checkpoints, keep_last)

    monkeypatch.setattr(checkpoint, "save", counting_save)
    run = tmp_path / "run"

    def request_after_1(step, _):
        if step == 1:
            (run / STOP_FILE).touch()

    with pytest.raises(Preempted) as stopped:
        train(_experiment(tmp_path, "train.max_steps=6", "train.ckpt_every=2"), run, corpus,
              on_step=request_after_1)
    assert stopped.value.step == 2 and saved == [2]  # step 2 is on the ckpt_every grid
    assert not (run / STOP_FILE).exists()


def test_a_stale_stop_file_does_not_stop_the_requeued_run(corpus, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / STOP_FILE).touch()
    train(_experiment(tmp_path, "train.max_steps=3", "train.ckpt_every=3"), run, corpus)
    assert [step for step, _ in _losses(run)] == [1, 2, 3]
    assert not (run / STOP_FILE).exists()


def test_a_signal_during_set_up_stops_at_the_first_step(corpus, tmp_path, monkeypatch):
    real_setup = trainer.engine.setup

    def setup_then_sigterm():
        world = real_setup()
        os.kill(os.getpid(), signal.SIGTERM)
        return world

    monkeypatch.setattr(trainer.engine, "setup", setup_then_sigterm)
    with pytest.raises(Preempted) as stopped:
        train(_experiment(tmp_path, "train.max_steps=4"), tmp_path / "run", corpus)
    assert stopped.value.step == 1
    assert (stopped.value.checkpoint / "meta.json").exists()


def test_a_request_at_the_last_step_finishes_the_run_normally(corpus, tmp_path):
    metrics = train(_experiment(tmp_path, "train.max_steps=3"), tmp_path / "run", corpus,
                    on_step=_signal_after(2))
    assert "loss" in metrics
    assert (tmp_path / "run/checkpoints/latest").read_text() == "step-000003"


def _physlm_train(exp: Path, corpus: Path, run_dir: Path, logs: Path, overrides: list[str],
                  ranks: int = 0) -> subprocess.Popen:
    """`physlm train` as its own process (under torchrun with `ranks` CPU processes if
    given), its output to `logs`.out and .err."""
    # a port of its own: the in-process runs of this process hold the one os.environ names
    port = str(free_port())
    launcher = [sys.executable]
    if ranks:
        launcher += ["-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
                     f"--master_port={port}"]
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "MASTER_PORT": port}
    with open(logs.with_suffix(".out"), "w") as out, open(logs.with_suffix(".err"), "w") as err:
        return subprocess.Popen(
            [*launcher, "-m", "launch.cli", "train", str(exp), "--corpus", str(corpus),
             "--run-dir", str(run_dir), *overrides], cwd=ROOT, env=env, stdout=out, stderr=err)


def _wait_for_step(run_dir: Path, step: int, process: subprocess.Popen) -> None:
    """Until metrics.jsonl of a fresh run logging every step has `step` complete lines."""
    metrics, deadline = run_dir / "metrics.jsonl", time.monotonic() + 300
    while not (metrics.exists() and metrics.read_text().count("\n") >= step):
        assert process.poll() is None, f"train exited with {process.returncode} before step {step}"
        assert time.monotonic() < deadline, f"no step {step} in 300 s"
        time.sleep(0.02)


def _finish(process: subprocess.Popen, logs: Path) -> tuple[int, str]:
    """Wait for `process`; its exit code and what it printed on stderr."""
    code = process.wait(timeout=300)
    return code, logs.with_suffix(".err").read_text()


def test_sigusr1_to_physlm_train_exits_75_with_a_checkpoint_and_the_rerun_completes(
        corpus, tmp_path, one_thread):
    exp = tiny_experiment_file(tmp_path)
    # steps enough that the run is still going when the signal comes (~30 ms each)
    overrides = ["train.max_steps=150", "train.ckpt_every=1000"]
    train(load_experiment(exp, overrides), tmp_path / "straight", corpus)
    run = tmp_path / "run"
    process = _physlm_train(exp, corpus, run, tmp_path / "first", overrides)
    _wait_for_step(run, 2, process)
    process.send_signal(signal.SIGUSR1)
    code, stderr = _finish(process, tmp_path / "first")
    assert code == 75, stderr[-3000:]
    found = STOPPED.search(stderr)
    assert found, stderr[-3000:]
    step, stop_file, saved = int(found[1]), Path(found[2]), Path(found[3])
    assert 2 < step < 150 and stop_file == run / STOP_FILE
    assert saved == run / "checkpoints" / checkpoint.tag(step) and (saved / "meta.json").exists()

    code, stderr = _finish(_physlm_train(exp, corpus, run, tmp_path / "again", overrides),
                           tmp_path / "again")
    assert code == 0, stderr[-3000:]
    assert f"resumed from {saved}" in (tmp_path / "again.out").read_text()
    assert _losses(run) == _losses(tmp_path / "straight")
    _assert_same_weights(tmp_path / "straight/checkpoints/step-000150",
                         run / "checkpoints/step-000150")


def test_a_signal_to_one_rank_under_torchrun_stops_both_cleanly_and_the_run_resumes_exactly(
        corpus, tmp_path):
    exp = tiny_experiment_file(tmp_path)
    overrides = ["train.max_steps=100", "train.ckpt_every=1000"]
    straight, run = tmp_path / "straight", tmp_path / "run"
    code, stderr = _finish(_physlm_train(exp, corpus, straight, tmp_path / "straight_log",
                                         overrides, ranks=2), tmp_path / "straight_log")
    assert code == 0, stderr[-3000:]
    process = _physlm_train(exp, corpus, run, tmp_path / "first", overrides, ranks=2)
    _wait_for_step(run, 2, process)
    workers = psutil.Process(process.pid).children()
    rank1 = next(w for w in workers if w.environ().get("RANK") == "1")
    rank1.send_signal(signal.SIGUSR1)
    # a clean stop is no failure of torchrun's: its workers exit 0, the run directory says why
    code, stderr = _finish(process, tmp_path / "first")
    steps = {int(step) for step, *_ in STOPPED.findall(stderr)}
    assert code == 0 and len(steps) == 1, stderr[-3000:]
    assert "ChildFailedError" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    step = steps.pop()
    saved = run / "checkpoints" / checkpoint.tag(step)
    assert json.loads((run / STOPPED_FILE).read_text()) == {"step": step,
                                                            "checkpoint": str(saved)}
    # both ranks saved their part at that step: neither went on training
    assert checkpoint.read_meta(saved)["step"] == step and 2 < step < 100
    assert all((saved / f"data-rank{rank}.json").exists() for rank in (0, 1))

    code, stderr = _finish(_physlm_train(exp, corpus, run, tmp_path / "again", overrides,
                                         ranks=2), tmp_path / "again")
    assert code == 0, stderr[-3000:]
    assert f"resumed from {saved}" in (tmp_path / "again.out").read_text()
    assert not (run / STOPPED_FILE).exists()  # the run went on: no longer stopped
    assert _losses(run) == _losses(straight)
    _assert_same_weights(straight / "checkpoints/step-000100", run / "checkpoints/step-000100")
