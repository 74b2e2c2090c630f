"""`physlm status` of submitted runs on a cluster without Slurm accounting: sacct refuses,
squeue forgets ended jobs, and what each job's script records of itself (its start, its end and
exit code, a requeue) still tells how the chain went; the rendered scripts are run with bash
as Slurm would run them, with the fake Slurm commands of tests/fake_slurm/."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from launch.cli import main
from launch.slurm import submit
from launch.slurm_status import slurm_states
from launch.status import statuses
from tests.test_slurm import finish_run, plan_and_config

pytest_plugins = ["tests.test_slurm"]  # its fixtures: work, fake_slurm

FAILING_PYTHON = """#!/bin/bash
echo "Traceback (most recent call last):"
echo "physlm gen: error: corpora/x: cannot write it: No space left on device (ENOSPC)" >&2
exit 2
"""


def submitted_without_accounting(fake_slurm: Path, *overrides: str, sacct_exit: int = 1):
    """The tiny experiment submitted (jobs 1001 gen-prepare, 1002 gen-array of 2 tasks, 1003
    gen-manifest, 1004 train, 1005 eval) to a cluster whose sacct refuses and whose queue is
    empty: every job has ended, or was never run."""
    plan, config = plan_and_config("exp.yaml", "gen_tasks=2", *overrides)
    jobs = submit(plan, config, dry_run=False, log=lambda _: None)
    assert [job.job_id for job in jobs] == ["1001", "1002", "1003", "1004", "1005"]
    (fake_slurm / "sacct.disabled").write_text(str(sacct_exit))
    return plan, jobs


def run_job(script: Path, job_id: str, task: int | None = None, **env: str
            ) -> subprocess.Popen:
    """Start a rendered script as Slurm would: its job id, array task and log."""
    slurm = {"SLURM_JOB_ID": job_id}
    if task is not None:
        slurm |= {"SLURM_ARRAY_JOB_ID": job_id, "SLURM_ARRAY_TASK_ID": str(task),
                  "SLURM_JOB_ID": str(int(job_id) + 100 + task)}  # a task's own job id
    name = f"{job_id}_{task}" if task is not None else job_id
    log = script.parent / "logs" / f"physlm-{script.stem}-{name}.out"
    with open(log, "a") as out:
        return subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **slurm, **env})


def events(plan, key: str) -> list[tuple]:
    path = plan.root / "slurm" / "records" / f"{key}.jsonl"
    lines = path.read_text().splitlines()
    return [(event["event"], event.get("exit_code")) for event in map(json.loads, lines)]


def test_a_job_records_its_start_and_its_exit_code_however_it_ends(work, fake_slurm):
    (work / "fail.sh").write_text(FAILING_PYTHON)
    (work / "fail.sh").chmod(0o755)
    plan, jobs = submitted_without_accounting(fake_slurm, f"python={work / 'fail.sh'}")
    prepare, array = jobs[0].script, jobs[1].script
    assert run_job(prepare, "1001").wait() == 2
    assert events(plan, "1001") == [("started", None), ("ended", 2)]
    record = json.loads((plan.root / "slurm" / "records" / "1001.jsonl").read_text()
                        .splitlines()[0])
    assert record["job_id"] == "1001" and record["host"] and record["time"]
    # a task of an array is recorded under its array's id and its index
    job = run_job(array, "1002", 1, PATH=f"{work}{os.pathsep}{os.environ['PATH']}")
    assert job.wait() == 2 and events(plan, "1002_1") == [("started", None), ("ended", 2)]
    # scancel or a time limit: SIGTERM, recorded as 128 + 15
    (work / "slow.sh").write_text("#!/bin/bash\nsleep 30\n")
    (work / "slow.sh").chmod(0o755)
    _, config = plan_and_config("exp.yaml", "gen_tasks=2", f"python={work / 'slow.sh'}")
    submit(plan, config, dry_run=True, log=lambda _: None)
    job = run_job(prepare, "1006")
    deadline = time.monotonic() + 30
    while not (plan.root / "slurm" / "records" / "1006.jsonl").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=60) == 143
    assert events(plan, "1006") == [("started", None), ("ended", 143)]


@pytest.mark.parametrize("sacct_exit", [1, 0])
def test_a_failed_chain_without_accounting_names_the_failed_job_and_its_error(
        work, fake_slurm, capsys, sacct_exit):
    (work / "fail.sh").write_text(FAILING_PYTHON)
    (work / "fail.sh").chmod(0o755)
    plan, jobs = submitted_without_accounting(fake_slurm, f"python={work / 'fail.sh'}",
                                              sacct_exit=sacct_exit)
    prepare, _, manifest = (job.script for job in jobs[:3])
    assert run_job(prepare, "1001").wait() == 2
    # the array and (after it) the training and evaluation were cancelled before they started;
    # the manifest job ran (afterany) and failed too
    assert run_job(manifest, "1003").wait() == 2
    row, = statuses(plan.root)
    assert (row.run, row.state, row.step) == ("runs/tiny", "failed", 0)
    assert row.detail == ("train job 1004_0 cancelled: dependency 1003 (gen-manifest) failed: "
                          "physlm gen: error: corpora/x: cannot write it: No space left on "
                          "device (ENOSPC)")
    assert main(["status", "runs/tiny"]) == 1
    assert "| runs/tiny | failed | 0/6 |" in capsys.readouterr().out


def test_an_evaluation_running_after_its_training_left_the_queue_is_running(work, fake_slurm):
    plan, _ = submitted_without_accounting(fake_slurm)
    records = plan.root / "slurm" / "records"
    for key, line in [("1004_0", '{"event": "started"}'),
                      ("1004_0", '{"event": "ended", "exit_code": 0}'),
                      ("1005_0", '{"event": "started"}')]:
        with open(records / f"{key}.jsonl", "a") as f:
            f.write(line + "\n")
    finish_run(plan.runs[0].run_dir, 6, evaluated=False)
    (fake_slurm / "squeue.txt").write_text("1005_0|RUNNING|None\n")
    assert slurm_states(plan.root) == {"tiny": ("running", "eval job 1005_0 RUNNING")}
    # then the evaluation fails: its exit code and its log's last error line
    (fake_slurm / "squeue.txt").write_text("")
    with open(records / "1005_0.jsonl", "a") as f:
        f.write('{"event": "ended", "exit_code": 2}\n')
    log = plan.root / "slurm" / "logs" / "physlm-eval-tiny-1005_0.out"
    log.write_text("physlm eval: error: runs/tiny/eval: cannot write it\n")
    row, = statuses(plan.root)
    assert (row.state, row.step, row.detail) == (
        "eval failed", 0, "eval job 1005_0 FAILED (exit code 2): physlm eval: error: "
                          "runs/tiny/eval: cannot write it")


def test_a_job_that_left_the_queue_without_recording_its_end_was_killed(work, fake_slurm):
    plan, _ = submitted_without_accounting(fake_slurm)
    (plan.root / "slurm" / "records" / "1004_0.jsonl").write_text('{"event": "started"}\n')
    assert slurm_states(plan.root)["tiny"] == (
        "failed", "train job 1004_0 FAILED (killed before it could record its end: time limit, "
                  "memory or node)")
    (fake_slurm / "squeue.down").write_text("")  # no queue to ask: the record is all there is
    assert slurm_states(plan.root)["tiny"] == (
        "running", "train job 1004_0 RUNNING (by its record; squeue did not answer)")


def test_a_requeued_run_waits_at_its_checkpoints_step_not_its_last_logged_one(work,
                                                                              fake_slurm):
    plan, _ = submitted_without_accounting(fake_slurm)
    run_dir = plan.runs[0].run_dir
    (plan.root / "slurm" / "records" / "1004_0.jsonl").write_text(
        '{"event": "started"}\n{"event": "requeued"}\n')
    finish_run(run_dir, 3, evaluated=False)  # the checkpoint USR1 asked for
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "loss": 5.0 - step / 10}) + "\n" for step in range(1, 6)))
    (fake_slurm / "squeue.txt").write_text("1004_0|PENDING|BeginTime\n")
    row, = statuses(plan.root)
    assert (row.state, row.step, row.loss) == ("pending", 3, 4.7)
    assert row.detail == "train job 1004_0 requeued (BeginTime), resumes at step 3"


def test_jobs_submitted_before_the_scripts_kept_records_are_read_from_the_queue_alone(
        work, fake_slurm):
    plan, _ = submitted_without_accounting(fake_slurm)
    path = plan.root / "slurm" / "jobs.json"
    jobs = json.loads(path.read_text())
    for job in jobs["jobs"]:
        del job["records"]
    path.write_text(json.dumps(jobs))
    assert slurm_states(plan.root) == {}  # gone from the queue: nothing known, the files tell
    (fake_slurm / "squeue.txt").write_text("1004_0|RUNNING|None\n")
    assert slurm_states(plan.root) == {"tiny": ("running", "train job 1004_0 RUNNING")}
