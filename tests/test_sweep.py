"""Sweeps: a sweep file expands into runs with stable names and one directory each, written as a
plan that local processes (and Slurm jobs) run; runs that share a corpus config share a corpus,
one failing run fails alone, and a rerun does only what is not done."""

import json
import shutil
from pathlib import Path

import pytest

import configs
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.generate import corpus_fingerprint
from launch.cli import main
from launch.plan import load_plan, read_plan, write_plan
from launch.status import statuses
from launch.sweep import load_sweep
from tests.test_slurm import fake_slurm  # noqa: F401 (fixture)
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
    # steps enough that the run cannot end before the interrupt reaches it (150 took ~2 s)
    command = [sys.executable, "-m", "launch.cli", "sweep", str(path), "train.max_steps=600",
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
    assert 0 < stopped < 600  # saved off the ckpt_every grid, on request
    assert json.loads((run_dir / "job.json").read_text())["state"] == "stopped"
    assert "train  | pos-rope: stopped; a rerun resumes" in out
    row, = statuses(tmp_path / "runs/sweep")
    assert row.state == "pending" and row.detail == f"stopped at step {stopped}; rerun resumes"
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resumed from {run_dir.relative_to(tmp_path)}/checkpoints/step-{stopped:06d}" in \
        (run_dir / "log.txt").read_text()
    assert checkpoint_step(run_dir) == 600


def test_a_launch_is_refused_while_a_run_of_the_plan_is_still_being_trained(tmp_path,
                                                                           monkeypatch):
    import socket
    import subprocess
    import sys

    from launch.local import execute
    from launch.local_process import process_start
    from trainer.errors import TrainError

    monkeypatch.chdir(tmp_path)
    plan = load_plan(write_sweep(tmp_path, "grid: {model.pos: [rope]}\n"), [])
    run_dir = plan.runs[0].run_dir
    run_dir.mkdir(parents=True)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as job:
        alive = {"state": "running", "stage": "train", "pid": job.pid,
                 "started": process_start(job.pid), "host": socket.gethostname()}
        (run_dir / "job.json").write_text(json.dumps(alive))
        with pytest.raises(TrainError, match=f"run pos-rope: still running \\(train, pid "
                                             f"{job.pid} on "):
            execute(plan, log=lambda _: None)
        job.kill()
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


def _plan_output(plan) -> tuple:
    """All a plan says: plan.json's record, each run's experiment file, experiment, corpus."""
    from launch.plan import experiment_yaml, plan_record

    return (plan_record(plan), [experiment_yaml(run.experiment) for run in plan.runs],
            [run.experiment for run in plan.runs], [run.corpus.out for run in plan.runs])


def test_a_grid_is_planned_from_a_few_builds_and_equals_building_each_run_from_the_files(
        tmp_path, monkeypatch):
    import launch.sweep_compose
    from launch.sweep_compose import Composer

    monkeypatch.chdir(tmp_path)
    # a key another key interpolates (ckpt_every follows max_steps) is built the ordinary way
    (tmp_path / "interpolating.yaml").write_text(
        BASE.replace("ckpt_every: 4", "ckpt_every: '${.max_steps}'"))
    path = tmp_path / "sweep.yaml"
    path.write_text("""\
experiment: interpolating.yaml
overrides: {train.warmup_steps: 2}
grid:
  train.lr: [0.001, 0.002]
  shape: {wide: {model.d_model: 64, model.n_head: 4}, deep: {model.n_layer: 2}}
  eval.qa.splits: [[test], [train, test]]
  train.max_steps: [4, 6]
seeds: [0, 1]
""")
    builds = []
    build = launch.sweep_compose.load_experiment
    monkeypatch.setattr(launch.sweep_compose, "load_experiment",
                        lambda *args: builds.append(args) or build(*args))
    fast = load_plan(path, ["train.log_every=2"])
    # the base, and one check of each key an axis or override sets (9); the 16 points whose
    # max_steps differs from the base's are built the ordinary way (ckpt_every follows it)
    assert len(fast.runs) == 32 and len(builds) == 1 + 9 + 16
    assert {(r.experiment.train.max_steps, r.experiment.train.ckpt_every) for r in fast.runs} \
        == {(4, 4), (6, 6)}
    monkeypatch.setattr(Composer, "experiment", lambda self, o: build(self.base, o))
    assert _plan_output(fast) == _plan_output(load_plan(path, ["train.log_every=2"]))


def test_every_shipped_sweep_plans_as_building_each_run_from_the_files_does(tmp_path,
                                                                             monkeypatch):
    from launch.sweep_compose import Composer
    from trainer.config import load_experiment as build

    monkeypatch.chdir(tmp_path)
    fast = {name: _plan_output(load_plan(configs.find("sweep", name), []))
            for name in configs.names("sweep")}
    monkeypatch.setattr(Composer, "experiment", lambda self, o: build(self.base, o))
    for name, output in fast.items():
        assert output == _plan_output(load_plan(configs.find("sweep", name), [])), name
        for text, experiment in zip(output[1], output[2]):  # experiment.yaml: OmegaConf's text
            assert text == _omegaconf_yaml(experiment)


def _omegaconf_yaml(experiment) -> str:
    from dataclasses import asdict

    from omegaconf import OmegaConf

    from corpus_gen.core.config import config_dict

    return OmegaConf.to_yaml({
        "name": experiment.name, "corpus": config_dict(experiment.corpus),
        "model": asdict(experiment.model), "train": asdict(experiment.train),
        "eval": OmegaConf.to_container(OmegaConf.structured(experiment.eval))})


def test_a_corpus_is_named_after_the_variant_it_is_not_the_config_it_was_made_from(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    single, multi = load_plan(configs.find("sweep", "bios_single_vs_multi"), []).corpora
    assert single.name.startswith("bios_s_single-") and single.config.variant == "single"
    assert multi.name.startswith("bios_s_multi5_permute-")  # the base's own name: unchanged
    assert single.config_file.name == f"corpus-{single.name}.yaml"
    retry = load_plan(configs.find("sweep", "igsm_retry_rate"), ["corpus.format=qp"]).corpora
    assert {c.name.rsplit("-", 1)[0] for c in retry} == {"igsm_med_qp"}
    cfg, = load_plan(configs.find("sweep", "pos_encodings_cfg"), []).corpora
    assert cfg.name.startswith("cfg-")  # an unnamed (inline) corpus reads as its family


def test_a_run_name_longer_than_a_directory_name_is_refused_at_plan_time_naming_the_axis(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write_sweep(tmp_path, "grid: {train.init_from: [short, " + "x" * 300 + "]}\n")
    assert main(["sweep", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}: grid.train.init_from='xxx" in err
    assert "makes a run name of 310 bytes, and a directory's name holds at most 255" in err
    path.write_text("experiment: base.yaml\nname: " + "n" * 256 + "\nseeds: [0]\n")
    assert main(["sweep", str(path), "--dry-run"]) == 2
    assert "is 256 bytes; it names a directory" in capsys.readouterr().err


def _trained_as(run, **changed) -> None:
    """Leave in the run's directory what training leaves: config.yaml (the experiment as it
    was trained, `changed` by dotted key), a final checkpoint and its evaluation."""
    from dataclasses import asdict

    from omegaconf import OmegaConf

    from corpus_gen.core.config import config_dict

    experiment = run.experiment
    trained = OmegaConf.create({
        "name": experiment.name, "corpus_dir": str(run.corpus.out),
        "corpus": config_dict(experiment.corpus),
        "model": {**asdict(experiment.model), "vocab_size": 600, "ctx": 64},
        "train": asdict(experiment.train), "eval": asdict(experiment.eval)})
    for key, value in changed.items():
        OmegaConf.update(trained, key, value)
    (run.run_dir / "checkpoints" / "step-000004").mkdir(parents=True)
    (run.run_dir / "checkpoints" / "latest").write_text("step-000004")
    (run.run_dir / "eval").mkdir()
    (run.run_dir / "eval" / "qa.json").write_text(json.dumps({"step": 4}))
    (run.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(trained))


def test_a_run_trained_with_other_settings_is_refused_and_redo_changed_moves_it_aside(
        tmp_path, monkeypatch, capsys):
    from launch.plan import settle_changed

    monkeypatch.chdir(tmp_path)
    path = write_sweep(tmp_path, "grid: {model.pos: [rope]}\n")
    plan = load_plan(path, [])
    write_plan(plan)
    run = plan.runs[0]
    _trained_as(run, **{"model.d_model": 16, "train.wandb.mode": "offline"})
    experiment_file = run.experiment_file.read_text()
    assert main(["sweep", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"physlm sweep: error: run pos-rope: {run.run_dir} was trained with other "
                   "settings (model.d_model: 16 -> 32); pass --redo-changed to move it aside "
                   "and train it again, or restore the setting")
    assert main(["submit", str(path), "--dry-run"]) == 2  # so does a submission
    assert "(model.d_model: 16 -> 32); pass --redo-changed" in capsys.readouterr().err
    assert run.experiment_file.read_text() == experiment_file  # nothing rewritten
    lines: list[str] = []
    settle_changed(load_plan(path, []), redo=True, log=lines.append)
    aside, = (tmp_path / "runs/sweep").glob("replaced-*/pos-rope")
    assert (aside / "checkpoints" / "latest").read_text() == "step-000004"  # kept whole
    assert not run.run_dir.exists()
    assert lines == [f"run    | pos-rope: trained with other settings (model.d_model: 16 -> "
                     f"32); moved to {aside.relative_to(tmp_path)}, trained again"]
    # the same settings (tracking and what training derives aside): kept as done
    write_plan(plan)
    _trained_as(run, **{"train.wandb.mode": "offline", "name": "renamed"})
    settle_changed(load_plan(path, []), redo=False)


@pytest.mark.parametrize("overrides, change", [
    ([], None),
    (["model.rope.theta=500.0"], None),  # an option of an encoding the run does not use
    (["model.relative.buckets=16"], "model.relative.buckets: 8 -> 16"),
    (["model.pos=rope"], 'model.pos: "relative" -> "rope"'),
])
def test_a_run_saved_before_the_encodings_owned_their_options_is_compared_in_todays_layout(
        tmp_path, overrides, change):
    from launch.plan import config_change

    legacy = Path(__file__).parent / "golden/legacy_run"  # config.yaml: relative_buckets: 8
    run = tmp_path / "run"
    shutil.copytree(legacy, run)
    flat = "  relative_buckets: 8\n  relative_max_distance: 32\n"
    path = tmp_path / "legacy.yaml"  # its experiment file in today's layout
    path.write_text((legacy / "experiment.yaml").read_text()
                    .replace(flat, "  relative: {buckets: 8, max_distance: 32}\n"))
    assert flat not in path.read_text()
    assert config_change(load_plan(path, overrides, root=str(run)).runs[0]) == change


def test_a_job_record_whose_pid_now_names_another_process_is_not_a_running_job(tmp_path):
    import os
    import socket

    from launch.local_process import process_start
    from launch.status import process_alive

    host = socket.gethostname()
    mine = {"state": "running", "pid": os.getpid(), "host": host}  # this test, not a job
    assert not process_alive({**mine, "started": "another-boot/12345"})
    assert not process_alive(mine)  # an older record: not a physlm command line either
    assert process_alive({**mine, "started": process_start(os.getpid())})


def test_a_job_dies_with_its_executor_even_when_the_executor_is_killed_hard(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    executor = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time, types
        from pathlib import Path
        import launch.local
        launch.local.command = lambda run, stage: ["-c", "import time; time.sleep(120)"]
        run = types.SimpleNamespace(name="r", run_dir=Path({str(tmp_path)!r}))
        job = launch.local._start(run, "train", 1, lambda line: None)
        print(job.process.pid, flush=True)
        time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True)
    job = int(executor.stdout.readline())
    executor.send_signal(signal.SIGKILL)
    executor.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _alive(job):
        time.sleep(0.1)
    if _alive(job):
        os.kill(job, signal.SIGKILL)
        pytest.fail("the job outlived its executor")


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie no one reaps yet counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _trained_with_other_settings(tmp_path, monkeypatch):
    """A sweep whose one run directory holds a run trained with model.d_model 16, where the
    plan now says 32; its path and plan."""
    monkeypatch.chdir(tmp_path)
    path = write_sweep(tmp_path, "grid: {model.pos: [rope]}\n")
    plan = load_plan(path, [])
    write_plan(plan)
    _trained_as(plan.runs[0], **{"model.d_model": 16})
    return path, plan


@pytest.mark.parametrize("verb", ["submit", "sweep"])
def test_a_dry_run_with_redo_changed_moves_nothing_and_says_what_it_would_move(
        verb, tmp_path, monkeypatch, capsys):
    path, plan = _trained_with_other_settings(tmp_path, monkeypatch)
    run_dir = plan.runs[0].run_dir
    assert main([verb, str(path), "--dry-run"]) == 2  # refused as the real launch would be
    assert "trained with other settings (model.d_model: 16 -> 32)" in capsys.readouterr().err
    assert main([verb, str(path), "--dry-run", "--redo-changed"]) == 0
    assert (run_dir / "checkpoints" / "latest").read_text() == "step-000004"
    assert not list((tmp_path / "runs/sweep").glob("replaced-*"))
    assert (f"run    | pos-rope: trained with other settings (model.d_model: 16 -> 32); would "
            f"be moved to {run_dir.parent}/replaced-<time>/ and trained again (a dry run moves "
            "nothing)") in capsys.readouterr().out


def test_redo_changed_moves_nothing_while_the_plans_jobs_are_queued(
        tmp_path, monkeypatch, capsys, fake_slurm):  # noqa: F811 (fixture)
    monkeypatch.chdir(tmp_path)
    path = write_sweep(tmp_path, "grid: {model.pos: [rope]}\n")
    assert main(["submit", str(path)]) == 0  # jobs 1001-1005: gen x3, train, eval
    run = load_plan(path, []).runs[0]
    _trained_as(run, **{"model.d_model": 16})
    (fake_slurm / "squeue.txt").write_text("1004_0|RUNNING|None\n")
    capsys.readouterr()
    assert main(["submit", str(path), "--redo-changed"]) == 2
    assert "still queued or running: 1004 (train sweep)" in capsys.readouterr().err
    assert (run.run_dir / "checkpoints" / "latest").read_text() == "step-000004"  # in its place


def test_redo_changed_moves_an_experiments_run_files_aside_and_keeps_its_plan_and_jobs(
        tmp_path, monkeypatch, fake_slurm):  # noqa: F811 (fixture)
    monkeypatch.chdir(tmp_path)
    write_sweep(tmp_path, "")
    assert main(["submit", "base.yaml"]) == 0
    plan = load_plan(tmp_path / "base.yaml", [])
    root = plan.root
    assert plan.runs[0].run_dir == root  # an experiment's run directory is its plan's root
    _trained_as(plan.runs[0], **{"model.d_model": 16})
    assert main(["submit", "base.yaml", "--redo-changed"]) == 0
    aside, = root.parent.glob(f"replaced-*/{root.name}")
    assert (aside / "checkpoints" / "latest").read_text() == "step-000004"
    assert sorted(p.name for p in aside.iterdir()) == [
        "checkpoints", "config.yaml", "eval", "experiment.yaml", "sweep.json"]
    assert not (root / "checkpoints").exists() and (root / "plan.json").is_file()
    # the jobs submitted before (1001-1005) are still listed, the new ones after them
    listed = json.loads((root / "slurm" / "jobs.json").read_text())["jobs"]
    assert [job["id"] for job in listed] == [str(n) for n in range(1001, 1011)]


def test_redo_changed_refuses_to_move_a_run_directory_a_trainer_works_in(
        tmp_path, monkeypatch, capsys):
    from corpus_gen.core.io import LOCK, directory_lock

    path, plan = _trained_with_other_settings(tmp_path, monkeypatch)
    run_dir = plan.runs[0].run_dir
    with directory_lock(run_dir, "physlm train", LOCK):
        assert main(["sweep", str(path), "--redo-changed"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"physlm sweep: error: {run_dir}: physlm train (pid ")
    assert err.endswith(" works in it, so it cannot be moved aside now; wait for it to finish, "
                        "or stop it, and launch again\n") and len(err.splitlines()) == 1
    assert (run_dir / "checkpoints" / "latest").read_text() == "step-000004"


@pytest.mark.parametrize("name", ["log.txt", "job.json"])
def test_the_local_executor_writes_no_log_or_job_record_through_a_link_out(
        tmp_path, monkeypatch, name):
    import launch.local
    from trainer.errors import TrainError

    monkeypatch.chdir(tmp_path)
    plan = load_plan(write_sweep(tmp_path, "grid: {model.pos: [rope]}\n"), [])
    run_dir = plan.runs[0].run_dir
    run_dir.mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("kept")
    (run_dir / name).symlink_to(outside)

    def generate(*args):
        raise AssertionError("the run directory was not refused")

    monkeypatch.setattr(launch.local, "_generate_corpora", generate)
    with pytest.raises(TrainError, match=f"{run_dir / name}: a symbolic link to {outside}, "
                                         "outside the run directory"):
        launch.local.execute(plan, log=lambda _: None)
    assert outside.read_text() == "kept"


def test_a_job_of_the_local_executor_inherits_no_torchrun_world(tmp_path, monkeypatch):
    import types

    import launch.local

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "outer")  # an executor started under torchrun
    monkeypatch.setattr(launch.local, "command", lambda run, stage: [
        "-c", "import os; print('run id', os.environ.get('TORCHELASTIC_RUN_ID'))"])
    run = types.SimpleNamespace(name="r", run_dir=tmp_path)
    job = launch.local._start(run, "train", 1, lambda line: None)
    job.process.wait()
    job.log.close()
    # its clean stop exits 75, as the executor expects, not 0 as under torchrun
    assert "run id None" in (tmp_path / "log.txt").read_text()


def test_a_job_process_loads_no_library_between_fork_and_exec(tmp_path, monkeypatch):
    import ctypes
    import os
    import subprocess
    import sys
    from functools import partial

    from launch.local_process import die_with_parent

    def no_loading(*args, **kwargs):  # in the forked child, before exec: dlopen may deadlock
        raise RuntimeError("a library loaded after fork")

    monkeypatch.setattr(ctypes, "CDLL", no_loading)
    ask = ("import ctypes; signal = ctypes.c_int(); "
           "ctypes.CDLL(None).prctl(2, ctypes.byref(signal)); print(signal.value)")  # GET
    job = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True,
                         preexec_fn=partial(die_with_parent, os.getpid()), check=True)
    assert job.stdout == "15\n"  # SIGTERM when the executor dies
