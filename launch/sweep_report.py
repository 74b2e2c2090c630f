"""`physlm report ROOT` on a plan's root (a sweep, suite or experiment launched from plan.json):
one row per run by its axis values, the seeds averaged, and each headline metric plotted
against the first axis that is not the seed.

It reads `<root>/plan.json` (launch/plan.py's `read_plan`) and each run's directory as
`physlm report` does (`read_run`): metrics are named and chosen the same way (`qa/test/exact`,
`train/loss`; headline = a rate outside the slices). A run without a directory, or whose files
cannot be read yet (training still writing them), is reported as missing with the reason;
it never stops the report. `<out>` then holds, written whole or not at all:

- `sweep.md`: the runs table (axis columns, each headline metric, the run linked to its
  directory; `—` where a run lacks a metric); where the plan has a `seed` axis, the seeds
  table: one row per setting of the other axes, each metric as `mean ± std` over the seeds
  (std: the sample standard deviation, n - 1; one seed: its value alone, said so), `n` the
  settings' runs that could be read and `(n=k)` after a mean over fewer of them; the runs not
  reported and why; the plots. A rate measured over nothing (an empty split) reads "no data",
  never 0; `—` is a metric the run does not have.
- `sweep.csv`: long format, one line per (run, metric), every number of every readable run,
  slices too, at full precision: `run,<axis>...,metric,value,step`; an axis value as plan.json
  writes it (strings bare, numbers, true/false and null as JSON).
- `plots/<metric with / as ->.png`: for the MAX_PLOTS headline metrics most runs have, the
  metric against the first non-seed axis, one series per combination of the other non-seed
  axes, seeds averaged with std error bars ("one seed, no spread" in the title where there is
  one seed): lines with markers over a numeric axis (x in numeric order), grouped bars over a
  labelled one (in plan order), each bar's value written on it. A rate's axis is 0 to 1 with its
  chance dashed, as the runs' own plots draw it: the run's `<metric>_chance` or the nearest
  `chance` above the metric in its result (one line where every run's is the same, else one per
  series or bar); the chances themselves are not plotted. "no data" marks a point whose runs
  measured nothing.
- `plots/<task>-runs.png`: a task's own figure across the runs, where the task draws one
  (`Task.plot_runs`; capacity: bits against parameters with the 1 and 2 bits/param lines), its
  series the non-seed axes after the first.
- `runs/`: `physlm report` of the readable runs (paper numbers, counts, loss curves, eval plots).
"""

import csv
import io
import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from launch.plan import PLAN, PlannedRun, read_plan
from launch.report import (
    NO_DATA,
    REPORT_FILES,
    Run,
    format_metric,
    is_headline,
    publish,
    read_run,
    report,
)
from launch.sweep import SEED_AXIS
from trainer.errors import TrainError

if TYPE_CHECKING:
    from collections.abc import Callable

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MISSING = "—"
MAX_PLOTS = 12  # one figure per headline metric, for the most common ones only
NOT_RATES = ("loss", "eval_loss", "kl", "nll", "reference_nll")  # headline floats not in [0, 1]
SWEEP_FILES = REPORT_FILES | {"sweep.md", "sweep.csv", "runs"}  # a previous report of either kind
Scalar = str | int | float | bool | None


@dataclass
class SweepResults:
    name: str
    kind: str  # sweep | suite | experiment
    axes: list[str]  # in plan order; the seed axis among them where there is one
    runs: list[PlannedRun]
    read: dict[str, Run]  # run name -> its directory's contents, for the runs that could be read
    unread: dict[str, str]  # run name -> why it could not be read

    @property
    def varied(self) -> list[str]:
        """The axes that are settings, not repetitions."""
        return [axis for axis in self.axes if axis != SEED_AXIS]

    def cell(self, run: str, metric: str) -> str:
        """The run's metric in a table: its value, no data, or `—` where it has none."""
        return format_metric(self.read[run].metrics, metric, MISSING) if run in self.read \
            else MISSING

    @property
    def seeds(self) -> int:
        """How many seeds the plan repeats each setting with (1 without a seed axis)."""
        return len({run.axes.get(SEED_AXIS) for run in self.runs})


class Point(NamedTuple):
    x: Scalar
    mean: float | None  # None: its runs measured nothing (no data)
    std: float  # sample std over the seeds; 0 for one
    n: int  # seeds averaged
    chance: float | None  # the runs' mean chance of the metric, where they give one


def read_sweep(root: Path) -> SweepResults:
    """plan.json under `root` and every run directory it names that can be read; a TrainError
    naming the file (and key) where plan.json is missing or malformed."""
    record, runs = read_plan(root)
    axes = _checked_axes(root / PLAN, record, runs)
    read, unread = {}, {}
    for run in runs:
        try:
            read[run.name] = read_run(run.run_dir, run.name)
        except TrainError as exc:  # not started, or a file still being written
            unread[run.name] = str(exc)
    return SweepResults(str(record.get("name", root.name)), str(record.get("kind", "plan")),
                        axes, runs, read, unread)


def _checked_axes(path: Path, record: dict, runs: list[PlannedRun]) -> list[str]:
    """The plan's axes, each run giving each of them one JSON scalar (what the tables and
    plots group by)."""
    axes = record.get("axes")
    if not isinstance(axes, list) or not all(isinstance(axis, str) for axis in axes):
        raise TrainError(f"{path}: axes: expected a list of axis names, got {axes!r}")
    for i, run in enumerate(runs):
        if sorted(run.axes) != sorted(axes) or not all(
                isinstance(v, Scalar) for v in run.axes.values()):
            raise TrainError(f"{path}: runs[{i}].axes: expected one scalar for each of {axes}, "
                             f"got {run.axes!r}")
    return axes


def headline_metrics(sweep: SweepResults) -> list[str]:
    """Every headline metric any run has, in the order the runs (in plan order) first have it."""
    return list(dict.fromkeys(metric for run in sweep.read.values()
                              for metric, value in run.metrics.items()
                              if is_headline(metric, value)))


def most_common(sweep: SweepResults, metrics: list[str], limit: int = MAX_PLOTS) -> list[str]:
    """The `limit` metrics the most runs have, kept in the given order."""
    having = {m: sum(m in run.metrics for run in sweep.read.values()) for m in metrics}
    chosen = set(sorted(metrics, key=lambda m: -having[m])[:limit])  # stable: ties by order
    return [metric for metric in metrics if metric in chosen]


def _text(value: Scalar) -> str:
    """An axis value as plan.json writes it, strings bare."""
    return value if isinstance(value, str) else json.dumps(value)


def _setting(run: PlannedRun, axes: list[str]) -> tuple:
    return tuple(run.axes[axis] for axis in axes)


def _grouped(sweep: SweepResults, metric: str, axes: list[str]) -> dict[tuple, list[Run]]:
    """The runs that have the metric (a value or no data) by their values of `axes` (so the
    seeds of one setting come together), every setting of the plan a key, in plan order, empty
    where no run has it."""
    groups: dict[tuple, list[Run]] = {}
    for run in sweep.runs:
        having = groups.setdefault(_setting(run, axes), [])
        if run.name in sweep.read and metric in sweep.read[run.name].metrics:
            having.append(sweep.read[run.name])
    return groups


def _values(runs: list[Run], metric: str) -> list[float]:
    """The runs' values of the metric, those with no data left out."""
    return [run.metrics[metric] for run in runs if run.metrics[metric] is not None]


def chance_of(metrics: dict, metric: str) -> float | None:
    """A metric's chance in its run: `<metric>_chance`, or the nearest `chance` above it."""
    parts = metric.split("/")
    keys = [f"{metric}_chance", *("/".join([*parts[:i], "chance"]) for i in
                                  range(len(parts) - 1, 0, -1))]
    return next((metrics[key] for key in keys if metrics.get(key) is not None), None)


def is_rate(metric: str) -> bool:
    """A share in [0, 1] (accuracy, mass, ...): every headline float but losses and
    divergences."""
    return metric.rsplit("/", 1)[-1] not in NOT_RATES


def is_chance(metric: str) -> bool:
    leaf = metric.rsplit("/", 1)[-1]
    return leaf == "chance" or leaf.endswith("_chance")


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _table(header: list[str], rows: list[list[str]], numbers: list[str]) -> str:
    """A Markdown table, the columns of `numbers` right-aligned."""
    align = "".join("---:|" if column in numbers else "---|" for column in header)
    return "\n".join([f"| {' | '.join(header)} |", f"|{align}",
                      *(f"| {' | '.join(row)} |" for row in rows)])


def runs_table(sweep: SweepResults, metrics: list[str], out: Path) -> str:
    """One row per run in plan order: its axis values, each metric, its name linked to its
    directory (relative to `out`, where sweep.md lands)."""
    rows = []
    for run in sweep.runs:
        cells = [sweep.cell(run.name, m) for m in metrics]
        link = os.path.relpath(os.path.abspath(run.run_dir), os.path.abspath(out))
        rows.append([_text(run.axes[a]) for a in sweep.axes] + cells + [f"[{run.name}]({link})"])
    return _table([*sweep.axes, *metrics, "run"], rows, metrics)


def seeds_table(sweep: SweepResults, metrics: list[str]) -> str:
    """One row per setting of the non-seed axes: `mean ± std` over its seeds for each metric;
    empty where the plan has no seed axis."""
    if SEED_AXIS not in sweep.axes:
        return ""
    varied = sweep.varied
    read = [_setting(run, varied) for run in sweep.runs if run.name in sweep.read]
    columns = [_grouped(sweep, metric, varied) for metric in metrics]
    rows = []
    for key in dict.fromkeys(_setting(run, varied) for run in sweep.runs):
        n = read.count(key)
        rows.append([*map(_text, key), str(n), *(_mean_std_cell(_values(c[key], m), n,
                                                                len(c[key]))
                                                 for c, m in zip(columns, metrics))])
    return _table([*varied, "n", *metrics], rows, ["n", *metrics])


def _mean_std_cell(values: list[float], n: int, having: int) -> str:
    """`mean ± std` of `values` over `n` runs read, `having` of which have the metric."""
    if not values:
        return NO_DATA if having else MISSING
    mean, std = _mean_std(values)
    cell = f"{mean:.3f}" if len(values) == 1 else f"{mean:.3f} ± {std:.3f}"
    return cell if len(values) == n else f"{cell} (n={len(values)})"


def _is_numeric(values: list[Scalar]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def x_values(sweep: SweepResults) -> list[Scalar]:
    """The first non-seed axis's values: in numeric order on a numeric axis, else plan order."""
    values = list(dict.fromkeys(run.axes[sweep.varied[0]] for run in sweep.runs))
    return sorted(values) if _is_numeric(values) else values


def series(sweep: SweepResults, metric: str) -> dict[str, list[Point]]:
    """The metric against the first non-seed axis, x as `x_values` orders it: one series per
    combination of the other non-seed axes (labelled `axis=value, ...`, in plan order), the
    seeds of each point averaged, with their chance; a point no run has is left out, one whose
    runs have no data has mean None."""
    x_axis, *others = sweep.varied
    order = x_values(sweep)
    lines: dict[str, list[Point]] = {}
    for key, having in _grouped(sweep, metric, [*others, x_axis]).items():
        label = ", ".join(f"{axis}={_text(value)}" for axis, value in zip(others, key))
        points = lines.setdefault(label, [])
        if having:
            values = _values(having, metric)
            mean, std = _mean_std(values) if values else (None, 0.0)
            chances = [c for run in having if (c := chance_of(run.metrics, metric)) is not None]
            points.append(Point(key[-1], mean, std, len(values),
                                statistics.mean(chances) if chances else None))
    return {label: sorted(points, key=lambda p: order.index(p.x))
            for label, points in lines.items() if points}


def metric_figure(sweep: SweepResults, metric: str) -> "Figure":
    """`series` drawn: lines with markers over a numeric axis, grouped bars over a labelled one;
    std error bars; a rate on 0-1 with its chance dashed; "no data" where a point has none."""
    from matplotlib.figure import Figure

    lines, order = series(sweep, metric), x_values(sweep)
    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.subplots()
    chances = {p.chance for points in lines.values() for p in points if p.chance is not None}
    if _is_numeric(order):
        for label, points in lines.items():
            drawn = [p for p in points if p.mean is not None]
            line = ax.errorbar([p.x for p in drawn], [p.mean for p in drawn],
                               yerr=[p.std for p in drawn], marker="o", capsize=3, label=label)
            with_chance = [p for p in points if p.chance is not None]
            if len(chances) > 1 and with_chance:
                ax.plot([p.x for p in with_chance], [p.chance for p in with_chance], "--",
                        color=line.lines[0].get_color(), linewidth=1.2,
                        label=f"chance, {label}" if label else "chance")
            _no_data(ax, [p.x for p in points if p.mean is None])
        ax.set_xticks(order)  # the values swept, not 2.25 layers
    else:
        _bars(ax, lines, order, per_bar_chance=len(chances) > 1)
    if len(chances) == 1:
        chance = chances.pop()
        ax.axhline(chance, color="gray", linestyle="--", linewidth=1.2,
                   label=f"chance {chance:.3f}")
    if is_rate(metric):
        ax.set_ylim(-0.02, 1.02)  # accuracy's whole range; a 0 and a chance of 0 stay visible
    ax.set_xlabel(sweep.varied[0])
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} ({_spread(sweep)})")
    ax.grid(alpha=0.3)
    if (len(sweep.varied) > 1 and lines) or chances:
        ax.legend(title=", ".join(sweep.varied[1:]) or None, fontsize=8)
    fig.tight_layout()
    return fig


def _spread(sweep: SweepResults) -> str:
    """What a point is: one run, one seed, or the mean of several."""
    if SEED_AXIS not in sweep.axes:
        return "one run each"
    return "one seed, no spread" if sweep.seeds == 1 else \
        f"mean ± std over {sweep.seeds} seeds"


def _no_data(ax: "Axes", xs: list) -> None:
    for x in xs:
        ax.text(x, 0.01, NO_DATA, rotation=90, ha="center", va="bottom", fontsize=7,
                color="gray")


def _bars(ax: "Axes", lines: dict[str, list[Point]], order: list[Scalar],
          per_bar_chance: bool) -> None:
    """One group of bars per x value, one bar per series, side by side within the group, its
    value on it; its chance a dashed tick across it where chances differ."""
    width = 0.8 / max(len(lines), 1)
    legend = "chance"  # the first tick's label; the others go unnamed
    for i, (label, points) in enumerate(lines.items()):
        offset = (i - (len(lines) - 1) / 2) * width
        drawn = [p for p in points if p.mean is not None]
        bars = ax.bar([order.index(p.x) + offset for p in drawn], [p.mean for p in drawn],
                      width, yerr=[p.std for p in drawn], capsize=3, label=label)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
        _no_data(ax, [order.index(p.x) + offset for p in points if p.mean is None])
        for p in points if per_bar_chance else []:
            if p.chance is not None:
                x = order.index(p.x) + offset
                ax.hlines(p.chance, x - width / 2, x + width / 2, colors="black",
                          linestyles="--", linewidth=1.2, label=legend)
                legend = "_nolegend_"
    ax.set_xticks(range(len(order)), [_text(x) for x in order])
    ax.set_xlim(-0.5, len(order) - 0.5)  # a group without bars ("no data") keeps its place


def task_plots(sweep: SweepResults) -> dict[str, "Callable[[Path], None]"]:
    """Each evaluated task's own figure across the runs (`Task.plot_runs`, where it has one),
    by file name: the runs' results (the task's metrics, prefix dropped) grouped into series by
    the non-seed axes after the first, as `series` groups them."""
    from trainer.eval.registry import tasks

    others = sweep.varied[1:]
    drawn = {}
    for name, task in tasks().items():
        if task.plot_runs is None:
            continue
        grouped: dict[str, list[dict]] = {}
        for run in sweep.runs:
            if run.name in sweep.read and name in sweep.read[run.name].evaluated:
                found = {metric.removeprefix(f"{name}/"): value
                         for metric, value in sweep.read[run.name].metrics.items()
                         if metric.startswith(f"{name}/")}
                label = ", ".join(f"{axis}={_text(run.axes[axis])}" for axis in others)
                grouped.setdefault(label, []).append(found)
        if grouped:
            drawn[f"plots/{name}-runs.png"] = (
                lambda path, plot=task.plot_runs, grouped=grouped: plot(grouped, path))
    return drawn


def plot_name(metric: str) -> str:
    return f"plots/{metric.replace('/', '-')}.png"


def sweep_csv(sweep: SweepResults) -> str:
    """Every number of every readable run, one line each: `run,<axis>...,metric,value,step`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run", *sweep.axes, "metric", "value", "step"])
    for run in sweep.runs:
        if run.name in sweep.read:
            found = sweep.read[run.name]
            axes = [_text(run.axes[a]) for a in sweep.axes]
            for metric, value in found.metrics.items():
                step = found.steps[metric]
                writer.writerow([run.name, *axes, metric, value, "" if step is None else step])
    return out.getvalue()


def _not_reported(sweep: SweepResults) -> str:
    """The runs without evaluation results, and why (not a run that evaluates nothing: a
    suite's pretraining run)."""
    notes = []
    for run in sweep.runs:
        if run.name in sweep.unread:
            notes.append(f"- {run.name}: {sweep.unread[run.name]}")
        elif run.tasks and not sweep.read[run.name].evaluated:
            notes.append(f"- {run.name}: no evaluation results yet (eval/ holds none)")
    return "## Not reported\n\n" + "\n".join(notes) if notes else ""


def _seeds_note(sweep: SweepResults) -> str:
    return "One seed: its value alone, no spread" if sweep.seeds == 1 else \
        f"Mean ± sample std over the {sweep.seeds} seeds"


def sweep_report(root: Path, out: Path) -> str:
    """Write `out`/sweep.md, sweep.csv, plots/ and runs/ for the plan under `root`, all at once
    or nothing; returns sweep.md's text."""
    sweep = read_sweep(root)
    metrics = headline_metrics(sweep)
    plotted = most_common(sweep, [m for m in metrics if not is_chance(m)]) \
        if sweep.varied else []
    across = task_plots(sweep)
    seeds = seeds_table(sweep, metrics)
    readable = [run.run_dir for run in sweep.runs if run.name in sweep.read]
    evaluated = sum(bool(run.evaluated) for run in sweep.read.values())
    markdown = "\n\n".join(part for part in [
        f"# physlm report: {sweep.kind} {sweep.name}",
        f"{len(sweep.runs)} runs, {evaluated} with evaluation results. Headline rates only; "
        "every number of every run is in [sweep.csv](sweep.csv).",
        *(["Each run's own report (paper numbers, counts, loss curves, eval plots): "
           "[runs/report.md](runs/report.md)."] if readable else []),
        "## Runs", runs_table(sweep, metrics, out),
        *(["## Seeds averaged", f"{_seeds_note(sweep)}; n: runs read, (n=k) where fewer have "
           f"the metric.\n\n{seeds}"] if seeds else []),
        _not_reported(sweep),
        *(["## Plots", "\n\n".join([*(f"![{name}]({name})" for name in across),
                                     *(f"![{m}]({plot_name(m)})" for m in plotted)])]
          if plotted or across else [])] if part) + "\n"

    def fill(directory: Path) -> None:
        (directory / "sweep.md").write_text(markdown)
        (directory / "sweep.csv").write_text(sweep_csv(sweep))
        (directory / "plots").mkdir()
        for metric in plotted:
            metric_figure(sweep, metric).savefig(directory / plot_name(metric), dpi=120)
        for name, draw in across.items():
            draw(directory / name)
        if readable:
            report(readable, directory / "runs")

    publish(out, fill, SWEEP_FILES)
    return markdown
