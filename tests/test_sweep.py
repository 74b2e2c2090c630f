"""Sweeps: a sweep file expands into runs with stable names and one directory each, written as a
plan that local processes (and Slurm jobs) run; runs that share a corpus config share a corpus,
one failing run fails alone, and a rerun does only what is not done."""

import json
from pathlib import Path

import pytest

import configs
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import corpus_fingerprint
from launch.cli import main
from launch.plan import load_plan, read_plan, write_plan
from launch.status import statuses
from launch.sweep import load_sweep
from trainer.config import load_experiment

BASE = """\
name: base
corpus: {base: bios_s_multi5_permute, people: 24, mode: mix, qa_copies: 1,
         records_per_shard: 100, tokenizer: {vocab_size: 600, sample_records: 200}}
model: {n_layer: 1, n_head: 2, d_model: 32}
train: {max_steps: 4, ckpt_every: 4, ctx: 64, micro_batch: 4, lr: 0.003, warmup_steps: 1,
        log_every: 1, wandb: {mode: disabled}}
eval: {tasks: [qa], qa: {max_people: 2, splits: [test]}}
"""


def write_sweep(tmp_path: Path, body: str, name: str = "sweep.yaml") -> Path:
    (tmp_path / "base.yaml").write_text(BASE)
    path = tmp_path / name
    path.write_text("experiment: base.yaml\n" + body)
    return path


def test_a_grid_with_a_labelled_axis_and_seeds_expands_in_order_with_readable_names(tmp_path):
    path = write_sweep(tmp_path, """\
name: ab
overrides: {train.lr: 0.002}
grid:
  model.pos: [rope, learned]
  shape:
    wide: {model.d_model: 64, model.n_head: 4}
    deep: {model.n_layer: 3}
seeds: [0, 7]
""")
    sweep = load_sweep(path, ["train.max_steps=5"])
    assert sweep.axes == ["model.pos", "shape", "seed"]
    assert [p.name for p in sweep.points[:3]] == [
        "pos-rope.shape-wide.seed-0", "pos-rope.shape-wide.seed-7", "pos-rope.shape-deep.seed-0"]
    assert len(sweep.points) == 8 and len({p.name for p in sweep.points}) == 8
    point = sweep.points[6]  # learned, deep, seed 0
    assert point.axes == {"model.pos": "learned", "shape": "deep", "seed": 0}
    e = point.experiment
    assert (e.model.pos, e.model.n_layer, e.model.d_model, e.train.seed) == ("learned", 3, 32, 0)
    assert (e.train.lr, e.train.max_steps) == (0.002, 5)  # sweep overrides, then command line
    assert e.name == "ab-pos-learned.shape-deep.seed-0"
    assert sweep.points[1].experiment.train.seed == 7


def test_zipped_axes_advance_together_and_cross_the_grid(tmp_path):
    path = write_sweep(tmp_path, """\
grid: {train.lr: [0.001, 0.003]}
zip: {model.n_layer: [1, 2, 3], model.d_model: [96, 64, 32]}
""")
    points = load_sweep(path, []).points
    assert [(p.experiment.model.n_layer, p.experiment.model.d_model) for p in points[:3]] == \
        [(1, 96), (2, 64), (3, 32)]
    assert points[3].name == "lr-0.003.n_layer-1.d_model-96" and len(points) == 6


def test_runs_with_one_corpus_config_share_one_corpus_and_the_plan_files_reload_exactly(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_sweep(tmp_path, "grid: {model.pos: [rope, learned], corpus.seed: [0, 1]}\n")
    plan = load_plan(path, [])
    assert plan.root == Path("runs/sweep") and len(plan.runs) == 4
    assert len(plan.corpora) == 2  # two corpus seeds; each shared by both encodings
    assert plan.runs[0].corpus is plan.runs[2].corpus is not plan.runs[1].corpus
    write_plan(plan)
    record, runs = read_plan(plan.root)
    assert record["axes"] == ["model.pos", "corpus.seed"] and record["kind"] == "sweep"
    assert runs[1].axes == {"model.pos": "rope", "corpus.seed": 1}
    assert runs[1].run_dir == Path("runs/sweep/pos-rope.seed-1")
    assert runs[1].tasks == ["qa"] and runs[1].max_steps == 4
    for run in plan.runs:  # each run's experiment file is the run, whatever configs become
        again = load_experiment(run.experiment_file, [])
        assert (again.model, again.train, again.eval) == \
            (run.experiment.model, run.experiment.train, run.experiment.eval)
        assert corpus_fingerprint(again.corpus) == corpus_fingerprint(run.experiment.corpus)
        assert again.train.wandb.group == "sweep"
        assert again.train.wandb.tags == [f"{k}={v}" for k, v in run.axes.items()]
        recorded = json.loads((run.run_dir / "sweep.json").read_text())
        assert recorded["plan"] == "sweep" and recorded["axes"] == run.axes
    assert (plan.root / "plan" / f"corpus-{plan.corpora[0].name}.yaml").is_file()


@pytest.mark.parametrize("body, message", [
    ("grid: {model.poss: [rope]}\n", "grid.model.poss: model.poss='rope'"),
    ("grid: {shape: {a: {model.n_lyer: 2}}}\n", "grid.shape: model.n_lyer=2"),
    ("grid: {model.pos: []}\n", "grid.model.pos=[]: an axis needs at least one value"),
    ("grid: {shape: {}}\n", "grid.shape={}: an axis needs at least one value"),
    ("grid: {model.pos: [rope]}\nsweeps: 3\n", "sweeps=3: unknown sweep key"),
    ("grid: {train.lr: ['1/2', '1_2']}\n", "two runs would be named lr-1_2"),
    ("grid: {train.lr: ['1/2', '1_2']}\nseeds: [0, 1]\n",
     "grid.train.lr='lr-1_2.seed-0': two runs would be named"),
    ("name: ../up\nseeds: [0]\n", "name='../up': must be a plain name"),
    ("zip: {model.n_layer: [1, 2], model.d_model: [32]}\n", "equally many values"),
    ("grid: {seed: [1, 2]}\n", "`seed` is the seeds axis"),
    ("seeds: [0, x]\n", "seeds=[0, 'x']: must be a non-empty list of whole numbers"),
    ("name: x\n", "a sweep needs at least one axis"),
    ("grid: {model.n_layer: [0]}\n", "model.n_layer=0"),
    ("grid: [model.pos]\n", "grid=['model.pos']: must be a mapping of axes"),
    ("gridd: {model.pos: [rope]}\n", "gridd={'model.pos': ['rope']}: unknown sweep key"),
])
def test_bad_sweeps_fail_in_one_line_naming_the_file_and_the_axis(tmp_path, body, message):
    path = write_sweep(tmp_path, body)
    with pytest.raises(ConfigError) as caught:
        load_sweep(path, [])
    assert message in str(caught.value) and str(caught.value).startswith(str(path))


def test_a_corpus_file_as_an_axis_names_its_cache_directory_by_the_files_name(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "small_bios.yaml").write_text(
        "family: bios\npeople: 20\ntokenizer: {vocab_size: 600}\n")
    path = write_sweep(tmp_path, f"grid: {{corpus: [{tmp_path}/mine/small_bios.yaml]}}\n")
    corpus, = load_plan(path, []).corpora
    assert corpus.out.parent == (tmp_path / "corpora").resolve()  # not beside the config file
    assert corpus.name.startswith("small_bios-")


def test_status_of_a_sweep_file_reads_the_plan_the_file_makes_now(tmp_path, monkeypatch,
                                                                  capsys):
    monkeypatch.chdir(tmp_path)
    path = write_sweep(tmp_path, "grid: {model.pos: [rope]}\n")
    write_plan(load_plan(path, []))
    path.write_text("experiment: base.yaml\ngrid: {model.pos: [rope, learned]}\n")
    assert main(["status", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| pos-learned | pending | 0/4 |" in out and "2 pending" in out
    assert main(["status", "no_such_sweep"]) == 2
    assert "no_such_sweep: no such directory or file, and no shipped sweep or experiment" in \
        capsys.readouterr().err


def test_a_sweep_of_a_suite_and_a_missing_base_are_refused(tmp_path):
    (tmp_path / "suite.yaml").write_text("runs: {a: {}}\n")
    (tmp_path / "s.yaml").write_text("experiment: suite.yaml\nseeds: [0]\n")
    with pytest.raises(ConfigError, match="is a suite"):
        load_sweep(tmp_path / "s.yaml", [])
    (tmp_path / "s.yaml").write_text("experiment: nothing_here\nseeds: [0]\n")
    with pytest.raises(ConfigError, match="no shipped experiment of that name"):
        load_sweep(tmp_path / "s.yaml", [])


def test_an_unknown_key_on_the_command_line_is_named_as_the_command_lines(tmp_path):
    path = write_sweep(tmp_path, "seeds: [0]\n")
    with pytest.raises(ConfigError, match="^command line: model.nope=1"):
        load_sweep(path, ["model.nope=1"])


def test_every_shipped_sweep_expands_and_validates(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    names = configs.names("sweep")
    assert {"igsm_depth_width", "pos_encodings_bios", "pos_encodings_igsm", "pos_encodings_cfg",
            "bios_single_vs_multi", "igsm_retry_rate"} <= set(names)
    for name in names:
        plan = load_plan(configs.find("sweep", name), [])
        assert plan.kind == "sweep" and len({r.name for r in plan.runs}) == len(plan.runs) > 1
    retry = load_plan(configs.find("sweep", "igsm_retry_rate"), [])
    assert [r.experiment.corpus.retry_rate for r in retry.runs] == [0.0, 0.1, 0.2, 0.5]
    assert len(retry.corpora) == 4
    shapes = load_plan(configs.find("sweep", "igsm_depth_width"), []).runs
    assert len({r.experiment.model.n_layer * r.experiment.model.d_model ** 2
                for r in shapes}) == 1  # equal non-embedding size
    single_multi = load_plan(configs.find("sweep", "bios_single_vs_multi"), [])
    assert [r.experiment.corpus.variant for r in single_multi.runs] == \
        ["single", "single", "multi5_permute", "multi5_permute"]


def test_dry_run_lists_the_runs_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write_sweep(tmp_path, "grid: {model.pos: [rope, learned]}\n")
    assert main(["sweep", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "sweep sweep: 2 runs in runs/sweep, 1 corpus" in out
    assert "pos-learned  [model.pos=learned]" in out and "(shared by 2 runs)" in out
    assert not (tmp_path / "runs").exists() and not (tmp_path / "corpora").exists()


def test_a_sweep_runs_end_to_end_two_at_a_time_and_a_failed_run_fails_alone(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # finetuning from a run that does not exist fails in training; the other run finishes
    path = write_sweep(tmp_path, "grid: {start: {scratch: {train.seed: 0}, "
                                 "broken: {train.init_from: nowhere}}}\n")
    assert main(["sweep", str(path), "--jobs", "2"]) == 1
    out = capsys.readouterr().out
    rows = {row.name: row for row in statuses(Path("runs/sweep"))}
    assert rows["start-scratch"].state == "done" and rows["start-scratch"].step == 4
    assert rows["start-scratch"].loss is not None
    failed = rows["start-broken"]
    assert failed.state == "failed" and "physlm train: error:" in failed.detail
    assert "nowhere" in failed.detail
    assert "| start-broken | failed | 0/4 |" in out and "1 done, 1 failed" in out
    assert json.loads(Path("runs/sweep/start-scratch/eval/qa.json").read_text())["step"] == 4
    assert len(list(Path("corpora").iterdir())) == 1  # one corpus for both runs
    report = Path("runs/sweep/report")  # the sweep's report, drawn from the finished run
    assert "| scratch |" in (report / "sweep.md").read_text()
    assert (report / "plots" / "qa-test-exact.png").stat().st_size > 0
    # the rerun keeps the finished run and tries only the failed one again
    assert main(["sweep", str(path), "--jobs", "2"]) == 1
    out = capsys.readouterr().out
    assert "start-scratch: done already, kept" in out and "start-broken: started" in out
    assert "start-scratch: started" not in out
    assert main(["status", "runs/sweep"]) == 1
    assert main(["status", "runs/sweep/start-scratch"]) == 0
    assert "| start-scratch | done | 4/4 |" in capsys.readouterr().out
    assert main(["report", str(path)]) == 0  # the sweep file stands for its root
    out = capsys.readouterr().out
    assert "| scratch |" in out and "report | runs/sweep/report: plots, runs, sweep.csv" in out


class _FakeWandbRun:
    def __init__(self, calls: list, **kwargs):
        calls.append(kwargs)
        self.summary: dict = {}
        self.logged: list = []

    def log(self, values: dict, step: int | None = None) -> None:
        self.logged.append(values)

    def finish(self) -> None:
        pass


def test_training_and_evaluation_log_into_one_wandb_run_grouped_and_tagged_by_the_sweep(
        tmp_path, monkeypatch, train_corpus):
    import wandb

    from trainer.engine import train
    from trainer.eval.runner import evaluate

    calls: list[dict] = []
    runs: list[_FakeWandbRun] = []
    monkeypatch.setattr(wandb, "init", lambda **kw: runs.append(_FakeWandbRun(calls, **kw))
                        or runs[-1])
    monkeypatch.chdir(tmp_path)
    path = write_sweep(tmp_path, "grid: {model.pos: [rope]}\nseeds: [3]\n",)
    plan = load_plan(path, ["train.wandb.mode=offline", "train.max_steps=2"])
    run = plan.runs[0]
    write_plan(plan)
    experiment = load_experiment(run.experiment_file, [])
    train(experiment, run.run_dir, train_corpus)
    evaluate(run.run_dir, corpus_dir=train_corpus)
    assert len(calls) == 2 and calls[0]["id"] == calls[1]["id"]  # eval continues the run
    for call in calls:
        assert call["group"] == "sweep" and call["tags"] == ["model.pos=rope", "seed=3"]
        assert call["resume"] == "allow"
    assert calls[0]["config"]["model"]["pos"] == "rope"  # the whole config: panels need no renaming
    assert "eval/qa/test/exact" in runs[1].summary


def test_interrupting_a_sweep_stops_its_run_with_a_checkpoint_and_the_rerun_resumes(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from launch.status import checkpoint_step

    path = write_sweep(tmp_path, "grid: {model.pos: [rope]}\n")
    command = [sys.executable, "-m", "launch.cli", "sweep", str(path), "train.max_steps=150",
               "train.ckpt_every=1000", "eval.tasks=[]"]
    sweep = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    run_dir = tmp_path / "runs/sweep/pos-rope"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (run_dir / "metrics.jsonl").exists():
        time.sleep(0.2)
    sweep.send_signal(signal.SIGINT)  # Ctrl-C: the executor's alone (the job has a session)
    out, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, out
    stopped = checkpoint_step(run_dir)
    assert 0 < stopped < 150  # saved off the ckpt_every grid, on request
    assert json.loads((run_dir / "job.json").read_text())["state"] == "stopped"
    assert "train  | pos-rope: stopped; a rerun resumes" in out
    row, = statuses(tmp_path / "runs/sweep")
    assert row.state == "pending" and row.detail == f"stopped at step {stopped}; rerun resumes"
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resumed from {run_dir.relative_to(tmp_path)}/checkpoints/step-{stopped:06d}" in \
        (run_dir / "log.txt").read_text()
    assert checkpoint_step(run_dir) == 150


def test_a_launch_is_refused_while_a_run_of_the_plan_is_still_being_trained(tmp_path,
                                                                           monkeypatch):
    import os
    import socket

    from launch.local import execute
    from trainer.errors import TrainError

    monkeypatch.chdir(tmp_path)
    plan = load_plan(write_sweep(tmp_path, "grid: {model.pos: [rope]}\n"), [])
    run_dir = plan.runs[0].run_dir
    run_dir.mkdir(parents=True)
    alive = {"state": "running", "stage": "train", "pid": os.getpid(),
             "host": socket.gethostname()}
    (run_dir / "job.json").write_text(json.dumps(alive))
    with pytest.raises(TrainError, match=f"run pos-rope: still running \\(train, pid "
                                         f"{os.getpid()} on "):
        execute(plan, log=lambda _: None)
    assert not (tmp_path / "corpora").exists()  # refused before anything is done


def test_status_prefers_a_later_slurm_job_to_a_local_failure(tmp_path, monkeypatch):
    import launch.status

    monkeypatch.chdir(tmp_path)
    plan = load_plan(write_sweep(tmp_path, "grid: {model.pos: [rope]}\n"), [])
    write_plan(plan)
    (plan.runs[0].run_dir / "job.json").write_text(
        json.dumps({"state": "failed", "error": "an old local failure"}))
    assert statuses(plan.root)[0].detail == "an old local failure"
    monkeypatch.setattr(launch.status, "slurm_states",
                        lambda root: {"pos-rope": ("running", "train job 12_0 RUNNING")})
    row, = statuses(plan.root)
    assert (row.state, row.detail) == ("running", "train job 12_0 RUNNING")
