"""`physlm status` of runs trained on this machine (`physlm train`, `physlm run`, the local
executor): running while a trainer holds the run directory, the step a waiting run resumes
from, trained but not evaluated, a failed evaluation, and the run directory in the run column."""

import json
import os
import socket
from pathlib import Path

from corpus_gen.core.io import LOCK, directory_lock
from launch.cli import main
from launch.plan import load_plan, write_plan
from launch.status import statuses
from tests.test_slurm import EXPERIMENT, finish_run


def trained_run(run_dir: Path, logged: int, saved: int | None) -> Path:
    """What `physlm train --run-dir RUN` of an experiment named `quick` leaves after `logged`
    steps of 600, its latest checkpoint at `saved` (None: none yet)."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(
        "name: quick\ncorpus_dir: corpora/x\ntrain: {max_steps: 600}\neval: {tasks: [qa]}\n")
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "loss": round(6 - step / 100, 2)}) + "\n"
        for step in range(10, logged + 1, 10)))
    if saved is not None:
        finish_run(run_dir, saved, evaluated=False)
    return run_dir


def test_a_run_physlm_train_is_training_now_is_running_with_no_checkpoint_yet(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_dir = trained_run(tmp_path / "runs" / "small", logged=100, saved=None)
    with directory_lock(run_dir, "physlm train", LOCK):  # as physlm train holds it
        assert main(["status", "runs/small"]) == 0
    out = capsys.readouterr().out
    assert "| runs/small | running | 100/600 | 5.0000 | physlm train (pid " \
           f"{os.getpid()} on {socket.gethostname()}, since " in out
    assert out.split("\n")[2].endswith("); no checkpoint yet |")
    # the trainer gone, the run waits to resume: from nothing, not from its last logged step
    row, = statuses(run_dir)
    assert (row.run, row.state, row.step, row.loss, row.detail) == (
        str(run_dir), "pending", 0, None, "no checkpoint yet")


def test_a_waiting_run_shows_the_step_and_loss_of_its_checkpoint(tmp_path):
    row, = statuses(trained_run(tmp_path / "run", logged=130, saved=100))
    assert (row.state, row.step, row.loss, row.detail) == (
        "pending", 100, 5.0, "checkpoint at step 100")


def test_a_trained_run_needs_eval_and_a_failed_evaluation_is_eval_failed(tmp_path, capsys):
    run_dir = trained_run(tmp_path / "run", logged=600, saved=600)
    row, = statuses(run_dir)
    assert (row.state, row.step, row.detail) == ("needs eval", 600, "trained; not evaluated: qa")
    # the local executor's record of the evaluation that failed
    (run_dir / "job.json").write_text(json.dumps(
        {"state": "failed", "stage": "eval", "error": "physlm eval: error: qa_test.jsonl: bad"}))
    assert main(["status", str(run_dir)]) == 1
    assert f"| {run_dir} | eval failed | 600/600 | 0.0000 | physlm eval: error: qa_test.jsonl: " \
           "bad |" in capsys.readouterr().out


def test_the_run_column_is_the_run_directory_not_the_experiment_name(tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)  # named tiny
    write_plan(load_plan(Path("exp.yaml"), [], "runs/mine"))  # physlm run exp.yaml --run-dir
    assert main(["status", "runs/mine"]) == 0
    assert "| runs/mine | pending | 0/6 |" in capsys.readouterr().out
    assert main(["status", "exp.yaml", "--run-dir", "runs/mine"]) == 0
    assert "| runs/mine | pending | 0/6 |" in capsys.readouterr().out


def test_a_status_probe_of_the_lock_never_refuses_a_trainer_starting_at_that_moment(tmp_path):
    import fcntl
    import threading

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / LOCK, "a+") as probe:
        fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)  # what lock_holder holds for an instant
        threading.Timer(0.1, fcntl.flock, (probe, fcntl.LOCK_UN)).start()
        with directory_lock(run_dir, "physlm train", LOCK):  # waits out the probe
            assert (run_dir / LOCK).read_text().startswith("physlm train (pid ")


def test_status_reads_metrics_as_training_does(tmp_path, capsys):
    """One rule for every reader of metrics.jsonl (trainer.run_dir.read_metrics): a last line
    cut short by a full disk is left out; a damaged line before it is one line naming it."""
    run_dir = trained_run(tmp_path / "run", logged=130, saved=None)
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 140, "lo')
    with directory_lock(run_dir, "physlm train", LOCK):  # training: its last line is shown
        assert main(["status", str(run_dir)]) == 0
    assert f"| {run_dir} | running | 130/600 | 4.7000 | physlm train (pid " in \
        capsys.readouterr().out
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('\n{"step": 150, "loss": 4.5}\n')  # the torn line is no longer the last
    other = trained_run(tmp_path / "other", logged=130, saved=100)
    rows = {row.run: row for row in statuses(run_dir) + statuses(other)}
    assert main(["status", str(run_dir)]) == 1  # a row of its own: other runs still show
    assert (rows[str(run_dir)].state, rows[str(run_dir)].detail) == ("damaged", (
        f"{run_dir / 'metrics.jsonl'}: line 14 is not JSON ('{{\"step\": "
        "140, \"lo'); only the last line can be cut short by an interrupted write: "
        "mend or delete the line"))
    assert (rows[str(other)].state, rows[str(other)].step) == ("pending", 100)


def test_status_of_results_nested_too_deep_or_a_damaged_config_is_one_line(tmp_path, capsys):
    run_dir = trained_run(tmp_path / "run", logged=600, saved=600)
    deep = "[" * 200_000 + "]" * 200_000
    (run_dir / "eval").mkdir()
    (run_dir / "eval" / "qa.json").write_text(deep)  # not a result: the run still needs eval
    (run_dir / "job.json").write_text(deep)  # no record of a job
    row, = statuses(run_dir)
    assert (row.state, row.step, row.detail) == ("needs eval", 600, "trained; not evaluated: qa")
    (run_dir / "config.yaml").write_text("name: quick\ntrain: {max_steps: 600\n")
    assert main(["status", str(run_dir)]) == 2
    assert capsys.readouterr().err == (
        f"physlm status: error: {run_dir / 'config.yaml'}: damaged run config: while parsing a "
        "flow mapping in \"<unicode string>\", line 2, column 8 did not find expected ',' or '}' "
        "in \"<unicode string>\", line 3, column 1\n")


def test_with_exposures_a_run_is_done_at_the_steps_its_checkpoints_say(tmp_path):
    """train.exposures: the last step is what training worked out from the corpus (each
    checkpoint's schedule), not train.max_steps."""
    run_dir = trained_run(tmp_path / "run", logged=240, saved=None)
    (run_dir / "config.yaml").write_text(
        "name: quick\ncorpus_dir: corpora/x\ntrain: {max_steps: 600, exposures: 100}\n"
        "eval: {tasks: [qa]}\n")
    row, = statuses(run_dir)
    assert (row.state, row.max_steps) == ("pending", 600)  # no checkpoint: not known yet
    finish_run(run_dir, 240, evaluated=True)
    meta = run_dir / "checkpoints" / "step-000240" / "meta.json"
    meta.write_text(json.dumps({"step": 240, "schedule": {"exposures": 100, "max_steps": 240}}))
    row, = statuses(run_dir)
    assert (row.state, row.step, row.max_steps) == ("done", 240, 240)
    meta.write_text(json.dumps({"step": 240, "schedule": {"exposures": 100, "max_steps": 300}}))
    row, = statuses(run_dir)
    assert (row.state, row.max_steps) == ("pending", 300)  # stopped before its last step
