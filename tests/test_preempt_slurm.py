"""A clean stop of a train job launched by torchrun or srun, as slurm/train.sh runs it: the
workers exit 0 under torchrun (which then prints no ChildFailedError) and 75 under srun, the run
directory records the stop, and the script requeues the job on Slurm's USR1, the requeued job
resumes, and a stop asked by hand ends as not done (exit 75)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corpus_gen.core.generate import generate_corpus
from launch.plan import load_plan
from launch.slurm import load_slurm_config, submit
from tests.test_slurm import fake_slurm, work  # noqa: F401 (fixtures)
from trainer.distributed import free_port
from trainer.run_dir import STOP_FILE, STOPPED_FILE


def _job_id_of_a_free_port() -> str:
    """A job id whose rendezvous port (slurm/train.sh: 20000 + id % 20000) is free now: jobs of
    tests side by side on one machine must not meet in one rendezvous."""
    while not 20000 <= (port := free_port()) < 40000:
        pass
    return str(port - 20000)


def _start(script: Path, env: dict, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(["bash", str(script)], env=env, stdout=out, stderr=out)


def _wait_for_lines(metrics: Path, lines: int, job: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= lines):
        assert job.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.01)


@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_a_train_job_stopped_cleanly_is_requeued_on_usr1_and_not_done_otherwise(
        work, fake_slurm, launcher):  # noqa: F811 (fixtures)
    plan = load_plan(Path("exp.yaml"), ["train.max_steps=300"])
    config = load_slurm_config(plan, None, [f"launcher={launcher}", "gpus_per_node=0",
                                            f"python={sys.executable}"])
    jobs = submit(plan, config, dry_run=True, log=lambda _: None)
    corpus, run_dir = plan.corpora[0], plan.runs[0].run_dir
    generate_corpus(corpus.config, corpus.out, progress=False, log=lambda _: None)
    train = next(job.script for job in jobs if job.kind == "train")
    assert ("torch.distributed.run" in train.read_text()) == (launcher == "torchrun")
    job_id = _job_id_of_a_free_port()
    env = {**os.environ, "SLURM_JOB_ID": job_id, "SLURM_JOB_NODELIST": "node1",
           "SLURM_NNODES": "1", "SLURM_ARRAY_TASK_ID": "0", "OMP_NUM_THREADS": "1"}
    metrics, log = run_dir / "metrics.jsonl", work / "train.log"
    record = plan.root / "slurm" / "records" / f"{job_id}_0.jsonl"  # what `physlm status` reads

    job = _start(train, env, log)
    _wait_for_lines(metrics, 3, job, log)
    job.send_signal(signal.SIGUSR1)  # to the batch shell only, as --signal=B: does
    assert job.wait(timeout=300) == 0, log.read_text()[-3000:]
    printed = log.read_text()
    assert "ChildFailedError" not in printed and "Traceback" not in printed, printed[-3000:]
    assert (fake_slurm / "scontrol.log").read_text() == f"requeue {job_id}\n"
    assert _events(record) == [("started", None), ("requeued", None)]
    step = int((run_dir / "checkpoints/latest").read_text().removeprefix("step-"))
    assert 3 <= step < 300 and f"stopped at step {step} on request" in printed
    assert json.loads((run_dir / STOPPED_FILE).read_text())["step"] == step
    assert not (run_dir / STOP_FILE).exists()

    # the requeued job resumes; a stop asked by hand is no preemption: not requeued, not done
    job = _start(train, env, log)
    _wait_for_lines(metrics, step + 2, job, log)
    (run_dir / STOP_FILE).touch()
    assert job.wait(timeout=300) == 75, log.read_text()[-3000:]
    assert f"resumed from {run_dir.resolve()}/checkpoints/step-{step:06d}" in log.read_text()
    assert (fake_slurm / "scontrol.log").read_text() == f"requeue {job_id}\n"
    assert json.loads((run_dir / STOPPED_FILE).read_text())["step"] > step
    assert _events(record)[2:] == [("started", None), ("ended", 75)]


def _events(record: Path) -> list[tuple[str, int | None]]:
    return [(event["event"], event.get("exit_code"))
            for event in map(json.loads, record.read_text().splitlines())]
