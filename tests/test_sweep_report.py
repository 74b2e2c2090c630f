"""`physlm report` on a sweep's root: runs by axis values, seeds averaged, metrics vs axes, from
plan.json and run directories made in code."""

import csv
import json
import math
from pathlib import Path

import pytest
import yaml
from matplotlib.container import BarContainer

from launch.report import flatten
from launch.sweep_report import metric_figure, read_sweep, series, sweep_report
from trainer.errors import TrainError

PNG = b"\x89PNG\r\n\x1a\n"
# qa/test/exact of seeds 0 and 1 per (n_layer, pos); the n_layer axis is listed out of order
EXACT = {(4, "rope"): (0.40, 0.60), (4, "learned"): (0.50, 0.70),
         (2, "rope"): (0.80, 0.90), (2, "learned"): (0.30, 0.30)}
AXES = ["model.n_layer", "pos", "seed"]


def _qa(exact: float) -> dict:
    return {"step": 60, "run": "x",
            "test": {"exact": exact, "n": 100, "per_attribute": {"major": {"exact": exact / 2}}}}


def _name(axes: dict) -> str:
    return ".".join(f"{axis.rsplit('.', 1)[-1]}-{value}" for axis, value in axes.items())


def make_sweep(root: Path, axes: list[str], points: list[tuple[dict, float | None]],
               kind: str = "sweep") -> Path:
    """plan.json as physlm sweep writes it, and one run directory per point as training and
    `physlm eval` leave it: qa/test/exact = the point's number, train/loss = 3 + that number;
    None: the run was never started (no directory)."""
    runs = []
    for values, exact in points:
        name = _name(values) or "only"
        runs.append({"name": name, "dir": name, "axes": values, "corpus_dir": "/c/bios-1234",
                     "parent": None, "max_steps": 60, "tasks": ["qa"]})
        if exact is not None:
            (root / name / "eval").mkdir(parents=True)
            (root / name / "config.yaml").write_text(yaml.safe_dump({"name": name}))
            log = [{"step": 30, "loss": 5.0}, {"step": 60, "loss": 3 + exact}]
            (root / name / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in log))
            (root / name / "eval" / "qa.json").write_text(json.dumps(_qa(exact)))
    plan = {"name": "depth", "kind": kind, "source": "s.yaml", "axes": axes, "runs": runs}
    (root / "plan.json").write_text(json.dumps(plan))
    return root


def grid(root: Path, exact: dict = EXACT) -> Path:
    return make_sweep(root, AXES, [({"model.n_layer": layers, "pos": pos, "seed": seed}, value)
                                   for (layers, pos), values in exact.items()
                                   for seed, value in enumerate(values)])


def _table(markdown: str, title: str) -> list[list[str]]:
    """The cells of the Markdown table under `## title`, its header first (the alignment row
    left out)."""
    lines = markdown.split(f"## {title}\n\n", 1)[1].split("\n\n## ", 1)[0].splitlines()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines
            if line.startswith("|")]
    return rows[:1] + rows[2:]


def test_the_seeds_table_gives_mean_and_sample_std_per_setting(tmp_path):
    markdown = sweep_report(grid(tmp_path / "sweep"), tmp_path / "out")
    # 0.4, 0.6: mean 0.5, sample std sqrt((0.1^2 + 0.1^2) / 1) = 0.141; 0.8, 0.9: 0.071
    assert _table(markdown, "Seeds averaged") == [
        ["model.n_layer", "pos", "n", "qa/test/exact", "train/loss"],
        ["4", "rope", "2", "0.500 ± 0.141", "3.500 ± 0.141"],
        ["4", "learned", "2", "0.600 ± 0.141", "3.600 ± 0.141"],
        ["2", "rope", "2", "0.850 ± 0.071", "3.850 ± 0.071"],
        ["2", "learned", "2", "0.300 ± 0.000", "3.300 ± 0.000"]]  # in plan order
    assert (tmp_path / "out" / "sweep.md").read_text() == markdown


def test_the_runs_table_has_a_row_per_run_axes_first_and_links_each_run(tmp_path):
    root = grid(tmp_path / "sweep")
    markdown = sweep_report(root, root / "report")
    runs = _table(markdown, "Runs")
    assert runs[0] == [*AXES, "qa/test/exact", "train/loss", "run"]
    assert runs[1] == ["4", "rope", "0", "0.400", "3.400",
                       "[n_layer-4.pos-rope.seed-0](../n_layer-4.pos-rope.seed-0)"]
    assert [row[:3] for row in runs[1:]] == [[str(layers), pos, str(seed)]
                                            for layers, pos in EXACT for seed in (0, 1)]
    assert "[runs/report.md](runs/report.md)" in markdown
    assert "| qa/test/exact | 0.400 | 0.600 |" in (root / "report/runs/report.md").read_text()


def test_the_csv_parses_back_to_every_number_of_every_run(tmp_path):
    root = grid(tmp_path / "sweep")
    sweep_report(root, tmp_path / "out")
    with open(tmp_path / "out" / "sweep.csv") as f:
        lines = list(csv.DictReader(f))
    assert list(lines[0]) == ["run", *AXES, "metric", "value", "step"]
    got = {(line["run"], line["metric"]): float(line["value"]) for line in lines}
    want = {}
    for (layers, pos), values in EXACT.items():
        for seed, exact in enumerate(values):
            run = f"n_layer-{layers}.pos-{pos}.seed-{seed}"
            qa = _qa(exact)
            want |= {(run, k): v for k, v in flatten({"test": qa["test"]}, "qa").items()}
            want[(run, "train/loss")] = 3 + exact  # full precision: 3.4, not 3.400
    assert got == want
    first = lines[0]
    assert (first["model.n_layer"], first["pos"], first["seed"]) == ("4", "rope", "0")
    assert {line["step"] for line in lines} == {"60"}


def test_a_numeric_axis_is_plotted_in_numeric_order_one_series_per_other_axis(tmp_path):
    sweep = read_sweep(grid(tmp_path / "sweep"))
    lines = series(sweep, "qa/test/exact")
    assert list(lines) == ["pos=rope", "pos=learned"]
    assert [(p.x, round(p.mean, 6), round(p.std, 6), p.n) for p in lines["pos=rope"]] == [
        (2, 0.85, round(math.sqrt(0.005), 6), 2), (4, 0.5, round(math.sqrt(0.02), 6), 2)]
    sweep_report(grid(tmp_path / "again"), tmp_path / "out")
    plot = tmp_path / "out" / "plots" / "qa-test-exact.png"
    assert plot.read_bytes().startswith(PNG)
    assert sorted(p.name for p in plot.parent.iterdir()) == ["qa-test-exact.png",
                                                             "train-loss.png"]


def test_the_numeric_figure_draws_each_series_as_a_line_with_error_bars(tmp_path):
    ax = metric_figure(read_sweep(grid(tmp_path / "sweep")), "qa/test/exact").axes[0]
    drawn = {c.get_label(): list(c.lines[0].get_xdata()) for c in ax.containers}
    assert drawn == {"pos=rope": [2, 4], "pos=learned": [2, 4]}
    assert ax.get_xlabel() == "model.n_layer" and ax.get_legend().get_title().get_text() == "pos"


def test_a_labelled_axis_is_drawn_as_grouped_bars_in_plan_order(tmp_path):
    shapes = {"L8_d128": 0.2, "L2_d512": 0.6, "L4_d256": 0.4}
    points = [({"shape": s, "pos": p}, v + (0.1 if p == "rope" else 0.0))
              for s, v in shapes.items() for p in ("learned", "rope")]
    sweep = read_sweep(make_sweep(tmp_path, ["shape", "pos"], points))
    ax = metric_figure(sweep, "qa/test/exact").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list(shapes)
    bars = {c.get_label(): c.patches for c in ax.containers if isinstance(c, BarContainer)}
    assert {label: [round(bar.get_height(), 6) for bar in patches]
            for label, patches in bars.items()} == {"pos=learned": [0.2, 0.6, 0.4],
                                                    "pos=rope": [0.3, 0.7, 0.5]}
    learned, rope = bars.values()
    assert learned[0].get_x() < rope[0].get_x() < learned[1].get_x()  # side by side per shape


def test_unfinished_runs_show_a_dash_and_are_listed_with_the_reason(tmp_path):
    root = grid(tmp_path / "sweep", {**EXACT, (2, "learned"): (0.30, None)})
    unevaluated = root / "n_layer-4.pos-rope.seed-1"
    (unevaluated / "eval" / "qa.json").unlink()
    (root / "n_layer-4.pos-learned.seed-1" / "metrics.jsonl").write_text(
        '{"step": 1, "lo\n{"step": 2}\n')  # a torn last line is dropped; a torn line 1 is not
    markdown = sweep_report(root, tmp_path / "out")
    runs = {row[-1].split("]")[0][1:]: row[3:5] for row in _table(markdown, "Runs")[1:]}
    assert runs["n_layer-4.pos-rope.seed-1"] == ["—", "3.600"]  # trained, not evaluated
    assert runs["n_layer-4.pos-learned.seed-1"] == ["—", "—"]
    assert runs["n_layer-2.pos-learned.seed-1"] == ["—", "—"]
    assert runs["n_layer-2.pos-learned.seed-0"] == ["0.300", "3.300"]
    seeds = _table(markdown, "Seeds averaged")
    assert seeds[1] == ["4", "rope", "2", "0.400 (n=1)", "3.500 ± 0.141"]
    assert seeds[2] == ["4", "learned", "1", "0.500", "3.500"]
    assert seeds[4] == ["2", "learned", "1", "0.300", "3.300"]
    missing = markdown.split("## Not reported\n\n")[1].split("\n\n")[0].splitlines()
    assert missing == [
        "- n_layer-4.pos-rope.seed-1: no evaluation results yet (eval/ holds none)",
        f"- n_layer-4.pos-learned.seed-1: {root}/n_layer-4.pos-learned.seed-1/metrics.jsonl: "
        "line 1 is not JSON ('{\"step\": 1, \"lo'); only the last line can be cut short by an "
        "interrupted write: mend or delete the line",
        f"- n_layer-2.pos-learned.seed-1: {root}/n_layer-2.pos-learned.seed-1: not a run "
        "directory (no such directory)"]
    with open(tmp_path / "out" / "sweep.csv") as f:
        assert len({line["run"] for line in csv.DictReader(f)}) == 6  # read runs only


def test_a_suite_without_axes_gets_the_runs_table_only(tmp_path):
    root = make_sweep(tmp_path, [], [({}, 0.25)], kind="suite")
    markdown = sweep_report(root, root / "report")
    assert "| qa/test/exact | train/loss | run |\n|---:|---:|---|\n| 0.250 | 3.250 | [only]" \
        in markdown
    assert "## Seeds averaged" not in markdown and "## Plots" not in markdown
    assert list((root / "report" / "plots").iterdir()) == []


def test_a_directory_without_plan_json_is_refused_in_one_line_writing_nothing(tmp_path):
    with pytest.raises(TrainError) as error:
        sweep_report(tmp_path, tmp_path / "out")
    assert str(error.value).startswith(f"{tmp_path}: no plan.json here")
    assert "\n" not in str(error.value) and not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage, named", [
    (lambda plan: plan.pop("runs"), "KeyError: 'runs'"),
    (lambda plan: plan["runs"][1].pop("dir"), "KeyError: 'dir'"),
    (lambda plan: plan.update(axes="seed"), "axes: expected a list of axis names, got 'seed'"),
    (lambda plan: plan["runs"][2]["axes"].pop("pos"), "runs[2].axes: expected one scalar for "
                                                      f"each of {AXES}"),
    (lambda plan: plan["runs"][0]["axes"].update(pos=["rope"]), "runs[0].axes: expected"),
])
def test_a_malformed_plan_is_named_in_one_line_with_its_key(tmp_path, damage, named):
    root = grid(tmp_path / "sweep")
    plan = json.loads((root / "plan.json").read_text())
    damage(plan)
    (root / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(TrainError) as error:
        sweep_report(root, tmp_path / "out")
    assert str(error.value).startswith(f"{root}/plan.json: ") and named in str(error.value)
    assert "\n" not in str(error.value) and not (tmp_path / "out").exists()


def test_a_second_report_replaces_the_first_and_other_directories_are_refused(tmp_path):
    root = grid(tmp_path / "sweep")
    sweep_report(root, root / "report")
    (root / "n_layer-4.pos-rope.seed-0" / "eval" / "qa.json").write_text(json.dumps(_qa(0.0)))
    assert _table(sweep_report(root, root / "report"), "Runs")[1][3] == "0.000"
    with pytest.raises(TrainError, match="exists and is not a physlm report"):
        sweep_report(root, root / "n_layer-2.pos-rope.seed-0")


def _rewrite_qa(run_dir: Path, **test: object) -> None:
    """Replace keys of the run's qa.json test split (its n, chance, ...)."""
    path = run_dir / "eval" / "qa.json"
    result = json.loads(path.read_text())
    result["test"].update(test)
    path.write_text(json.dumps(result))


def test_an_accuracy_of_zero_everywhere_is_drawn_on_zero_to_one_with_its_chance(tmp_path):
    shapes = ["L8_d128", "L2_d512"]
    root = make_sweep(tmp_path / "sweep", ["shape"], [({"shape": s}, 0.0) for s in shapes])
    for shape in shapes:
        _rewrite_qa(root / f"shape-{shape}", exact_chance=0.125)
    sweep = read_sweep(root)
    ax = metric_figure(sweep, "qa/test/exact").axes[0]
    assert ax.get_ylim() == (-0.02, 1.02)  # not -0.04..0.04 around invisible bars
    chance = [line for line in ax.lines if line.get_label() == "chance 0.125"]
    assert len(chance) == 1 and list(chance[0].get_ydata()) == [0.125, 0.125]
    assert [t.get_text() for t in ax.texts] == ["0.00", "0.00"]  # each bar's value written
    assert "qa/test/exact_chance" not in [m for m in sweep_report(root, tmp_path / "out")
                                          .split("## Plots", 1)[1].split("](")[0::2]]
    assert not (tmp_path / "out" / "plots" / "qa-test-exact_chance.png").exists()
    loss = metric_figure(sweep, "train/loss").axes[0]
    assert loss.get_ylim() != (-0.02, 1.02)  # a loss is not a rate


def test_chances_that_differ_between_runs_are_drawn_per_bar(tmp_path):
    root = make_sweep(tmp_path / "sweep", ["variant"], [({"variant": v}, 0.5)
                                                        for v in ("single", "multi")])
    _rewrite_qa(root / "variant-single", first_token=0.5, first_token_chance=0.385)
    _rewrite_qa(root / "variant-multi", first_token=0.5, first_token_chance=0.25)
    ax = metric_figure(read_sweep(root), "qa/test/first_token").axes[0]
    dashed = [c for c in ax.collections if c.get_linestyle() != [(0, None)]]  # not error bars
    ticks = [segment[0][1] for c in dashed for segment in c.get_segments()]
    assert sorted(ticks) == [0.25, 0.385]


def test_one_seed_is_said_to_have_no_spread(tmp_path):
    points = [({"pos": p, "seed": 0}, v) for p, v in (("rope", 0.4), ("learned", 0.2))]
    root = make_sweep(tmp_path / "sweep", ["pos", "seed"], points)
    ax = metric_figure(read_sweep(root), "qa/test/exact").axes[0]
    assert ax.get_title() == "qa/test/exact (one seed, no spread)"
    markdown = sweep_report(root, tmp_path / "out")
    assert "One seed: its value alone, no spread; n: runs read" in markdown
    assert metric_figure(read_sweep(grid(tmp_path / "two")), "qa/test/exact").axes[0] \
        .get_title() == "qa/test/exact (mean ± std over 2 seeds)"


def test_an_empty_split_reads_no_data_in_the_tables_and_the_plot_not_zero(tmp_path):
    root = make_sweep(tmp_path / "sweep", ["pos", "seed"],
                      [({"pos": p, "seed": s}, 0.5) for p in ("rope", "learned") for s in (0, 1)])
    for seed in (0, 1):  # evaluated on an empty test split: 0 questions
        _rewrite_qa(root / f"pos-learned.seed-{seed}", exact=0.0, n=0)
    markdown = sweep_report(root, tmp_path / "out")
    runs = {row[-1].split("]")[0][1:]: row[2] for row in _table(markdown, "Runs")[1:]}
    assert runs == {"pos-rope.seed-0": "0.500", "pos-rope.seed-1": "0.500",
                    "pos-learned.seed-0": "no data", "pos-learned.seed-1": "no data"}
    seeds = {row[0]: row[2] for row in _table(markdown, "Seeds averaged")[1:]}
    assert seeds == {"rope": "0.500 ± 0.000", "learned": "no data"}
    ax = metric_figure(read_sweep(root), "qa/test/exact").axes[0]
    assert "no data" in [t.get_text() for t in ax.texts]
    bars = [bar.get_height() for c in ax.containers if isinstance(c, BarContainer) for bar in c]
    assert bars == [0.5]  # the learned setting has no bar, not a bar of 0


def test_a_suite_run_that_evaluates_nothing_is_not_listed_as_unreported(tmp_path):
    root = make_sweep(tmp_path / "suite", ["run"], [({"run": "pretrain"}, 0.5),
                                               ({"run": "finetune"}, 0.7)], kind="suite")
    plan = json.loads((root / "plan.json").read_text())
    plan["runs"][0]["tasks"] = []  # a pretraining run: trained, never evaluated
    (root / "plan.json").write_text(json.dumps(plan))
    for name in ("run-pretrain", "run-finetune"):
        (root / name / "eval" / "qa.json").unlink()
    markdown = sweep_report(root, tmp_path / "out")
    missing = markdown.split("## Not reported\n\n")[1].split("\n\n")[0].splitlines()
    assert missing == ["- run-finetune: no evaluation results yet (eval/ holds none)"]


def test_a_task_with_a_figure_across_runs_gets_it_series_by_the_other_axes(tmp_path,
                                                                          monkeypatch):
    """Task.plot_runs (capacity: bits against parameters) is drawn once for the sweep, fed each
    run's results of that task grouped by the non-seed axes after the first."""
    from trainer.eval import capacity
    from trainer.eval.registry import Task

    root = make_sweep(tmp_path / "sw", ["width", "train.exposures", "seed"],
                      [({"width": w, "train.exposures": e, "seed": 0}, 0.5)
                       for w in (32, 64) for e in (100, 300)])
    for run in json.loads((root / "plan.json").read_text())["runs"]:
        width, exposures = run["axes"]["width"], run["axes"]["train.exposures"]
        (root / run["dir"] / "eval" / "capacity.json").write_text(json.dumps(
            {"step": 60, "bits": width * exposures, "parameters": width * 1000,
             "information_bits": 1e6, "bits_per_param": exposures / 1000}))
    seen = {}

    def spy(series, path):
        seen.update(series)
        capacity.plot_runs(series, path)

    task = Task("capacity", capacity.CapacityOptions, capacity.run, capacity.plot, spy)
    monkeypatch.setattr("trainer.eval.registry.tasks", lambda: {"capacity": task})
    markdown = sweep_report(root, tmp_path / "out")
    assert (tmp_path / "out" / "plots" / "capacity-runs.png").read_bytes().startswith(PNG)
    assert "![plots/capacity-runs.png](plots/capacity-runs.png)" in markdown
    assert sorted(seen) == ["train.exposures=100", "train.exposures=300"]
    assert sorted(run["parameters"] for run in seen["train.exposures=300"]) == [32000, 64000]
    assert sorted(run["bits"] for run in seen["train.exposures=100"]) == [3200, 6400]
