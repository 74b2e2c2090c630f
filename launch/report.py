"""`physlm report RUN... [--out DIR]`: every run's evaluation metrics in one table, the papers'
numbers beside ours, the loss curves overlaid and each task's plots side by side.

It reads only run directories: `config.yaml`, `metrics.jsonl` and `eval/<task>.json` / `.png`.
A metric is named by its path in the task's JSON (`qa/test/exact`, `igsm/igsm_op23/solution`;
a quantized evaluation's under its file's name, `qa@int8/test/exact`, never beside a paper's
number); `step`, `run` and `quantize` are bookkeeping, not metrics. The final training loss
(and eval loss) from `metrics.jsonl` join as `train/loss` and `train/eval_loss`. In
`report.md`:

- the metrics table holds the headline numbers: every rate (a float) outside the slices, i.e.
  a task's, split's, set's or form's overall numbers; the slices are the breakdowns under a
  `per_` key (`per_attribute`, `per_level`, `per_op`, `per_question`) and lists (per layer);
- the counts table holds the whole numbers outside the slices (`n`, `too_long`, failure counts);
- `metrics.csv` holds every number of every run, slices too, one line each, at full precision.

A rate measured over nothing (null in the JSON, or beside a count of 0: an empty split) is "no
data" in the tables and blank in the CSV, never 0. The papers' numbers (`data/paper_numbers.yaml`,
each with its paper, section and setting) appear beside a run's metric only where the run's
config matches the paper's setting.
"""

import csv
import io
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from corpus_gen.core.io import TMP_MARK, read_json_file
from trainer.errors import TrainError
from trainer.run_dir import EVAL, read_metrics, read_run_config

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PAPER_NUMBERS = Path(__file__).parent / "data" / "paper_numbers.yaml"
REPORT_FILES = {"report.md", "metrics.csv", "loss.png", "plots"}  # what a report directory holds
# top-level keys of an eval JSON that are not metrics (`quantize`: the weights' scheme, in the
# results of `physlm eval --quantize`, eval/<task>@int8.json, reported as task `qa@int8`)
BOOKKEEPING = ("step", "run", "quantize")
NO_DATA = "no data"  # a rate measured over nothing
CSV_COLUMNS = ("run", "experiment", "metric", "ours", "paper", "paper_setting", "paper_source",
               "step")


@dataclass
class Run:
    path: Path  # as given on the command line
    label: str  # its column in the tables
    config: dict
    log: list[dict]  # metrics.jsonl
    metrics: dict[str, float | int | None] = field(default_factory=dict)  # None: no data
    steps: dict[str, int | None] = field(default_factory=dict)  # metric -> step it was measured
    evaluated: dict[str, int | None] = field(default_factory=dict)  # task -> checkpoint step
    plots: dict[str, Path] = field(default_factory=dict)  # task -> its eval/<task>.png


@dataclass
class PaperNumber:
    metric: str
    value: float
    setting: str
    source: str
    when: dict = field(default_factory=dict)
    unless: dict = field(default_factory=dict)

    def applies(self, config: dict) -> bool:
        """Every `when` key has its value and no `unless` key has its (a missing key: null)."""
        return (all(lookup(config, k) == v for k, v in self.when.items())
                and not any(lookup(config, k) == v for k, v in self.unless.items()))


def lookup(config: dict, dotted: str) -> object:
    """`corpus.variant` in a nested config; None where any part is missing."""
    value: object = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def flatten(value: object, prefix: str) -> dict[str, float | int | None]:
    """The numeric and null (no data) leaves of an eval result, keyed by their path below
    `prefix`."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return {prefix: value} if number or value is None else {}
    return {k: v for key, item in items for k, v in flatten(item, f"{prefix}/{key}").items()}


def in_slice(metric: str) -> bool:
    """Under a breakdown (`qa/test/per_attribute/...`) or in a list (`probe/p/accuracy/...`)."""
    return any(part.startswith("per_") or part.isdigit() for part in metric.split("/")[1:])


def is_headline(metric: str, value: float | int | None) -> bool:
    """A rate (no data counts as one) outside the slices."""
    return isinstance(value, float | None) and not in_slice(metric)


def is_count(metric: str, value: float | int | None) -> bool:
    return isinstance(value, int) and not in_slice(metric)


def with_no_data(metrics: dict[str, float | int | None]) -> dict[str, float | int | None]:
    """`metrics` with None (no data) for each rate measured over nothing: beside a count of 0,
    its sibling `n` or, for `forward_exact`, `forward_n`."""
    def count(metric: str) -> object:
        parent, leaf = metric.rsplit("/", 1)
        return metrics.get(f"{parent}/{leaf.split('_')[0]}_n", metrics.get(f"{parent}/n"))

    return {metric: None if isinstance(value, float) and count(metric) == 0 else value
            for metric, value in metrics.items()}


def read_paper_numbers(path: Path = PAPER_NUMBERS) -> list[PaperNumber]:
    return [PaperNumber(**entry) for entry in yaml.safe_load(path.read_text())]


def read_run(path: Path, label: str) -> Run:
    """A run directory's config, training log and eval results; a TrainError naming what is
    not a run or cannot be read."""
    if not path.is_dir():
        raise TrainError(f"{path}: not a run directory (no such directory)")
    run = Run(path, label, read_run_config(path), read_metrics(path))
    for result_path in sorted((path / EVAL).glob("*.json")):
        result = read_json_file(result_path, TrainError)
        task = result_path.stem
        run.evaluated[task] = result.get("step")
        found = with_no_data(flatten({k: v for k, v in result.items()
                                      if k not in BOOKKEEPING}, task))
        run.metrics.update(found)
        run.steps.update(dict.fromkeys(found, run.evaluated[task]))
        if result_path.with_suffix(".png").is_file():
            run.plots[task] = result_path.with_suffix(".png")
    for key in ("loss", "eval_loss"):  # eval_loss is logged only every train.eval_every steps
        logged = [line for line in run.log if line.get(key) is not None]
        if logged:
            run.metrics[f"train/{key}"] = logged[-1][key]
            run.steps[f"train/{key}"] = logged[-1].get("step")
    return run


def _labels(paths: list[Path]) -> list[str]:
    """Each run's column: its directory's name, or the path given where two names collide."""
    names = [path.resolve().name for path in paths]
    return [name if names.count(name) == 1 else str(path) for name, path in zip(names, paths)]


def paper_beside(runs: list[Run], papers: list[PaperNumber]) -> dict[tuple[str, str], PaperNumber]:
    """(run label, metric) -> the paper's number for that run's setting, where the run has it."""
    beside = {}
    for run in runs:
        for paper in papers:
            if run.metrics.get(paper.metric) is not None and paper.applies(run.config):
                beside.setdefault((run.label, paper.metric), paper)
    return beside


def metric_table(runs: list[Run], keep: Callable[[str, float | int], bool],
                 beside: dict[tuple[str, str], PaperNumber]) -> str:
    """One row per metric `keep` selects (the union over runs), one column per run; blank where
    a run lacks the metric; the paper's number in brackets after ours where it applies; empty
    when no run has such a metric."""
    metrics = list(dict.fromkeys(m for run in runs for m, v in run.metrics.items() if keep(m, v)))
    if not metrics:
        return ""
    lines = [f"| metric | {' | '.join(run.label for run in runs)} |",
             f"|---|{'---:|' * len(runs)}"]
    for metric in metrics:
        cells = []
        for run in runs:
            cell = format_metric(run.metrics, metric, "")
            paper = beside.get((run.label, metric))
            cells.append(f"{cell} (paper {paper.value:g})" if paper else cell)
        lines.append(f"| {metric} | {' | '.join(cells)} |")
    return "\n".join(lines)


def format_metric(metrics: dict[str, float | int | None], metric: str, missing: str) -> str:
    """A table cell: the value, "no data" for a rate over nothing, `missing` where the run
    lacks the metric."""
    if metric not in metrics:
        return missing
    value = metrics[metric]
    return NO_DATA if value is None else str(value) if isinstance(value, int) else f"{value:.3f}"


def metrics_csv(runs: list[Run], beside: dict[tuple[str, str], PaperNumber]) -> str:
    """Every metric of every run, one line each: ours at full precision, the paper's beside."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for run in runs:
        for metric, value in run.metrics.items():
            paper = beside.get((run.label, metric))
            step = run.steps[metric]
            writer.writerow([run.label, run.config.get("name", ""), metric, value,  # None: ""
                             *((paper.value, paper.setting, paper.source) if paper else
                               ("", "", "")), "" if step is None else step])
    return out.getvalue()


def loss_figure(runs: list[Run]) -> "Figure":
    """Training loss against tokens (steps where a log lacks them) on a log axis, one line per
    run; eval loss dashed in the run's colour where it was logged."""
    from matplotlib.figure import Figure

    x = "tokens" if all("tokens" in line for run in runs for line in run.log) else "step"
    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.subplots()
    for i, run in enumerate(runs):
        for key, style, suffix in (("loss", "-", ""), ("eval_loss", "--", " (eval loss)")):
            logged = [line for line in run.log if line.get(key) is not None]
            if logged:
                ax.plot([line[x] for line in logged], [line[key] for line in logged], style,
                        color=f"C{i % 10}", label=f"{run.label}{suffix}")
    ax.set_xlabel(x)
    ax.set_yscale("log")  # the early drop and the late creep both show
    ax.set_ylabel("loss (log scale)")
    ax.set_title("training loss")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _runs_table(runs: list[Run]) -> str:
    lines = ["| run | experiment | directory | steps | tokens | evaluated |",
             "|---|---|---|---:|---:|---|"]
    for run in runs:
        last = run.log[-1] if run.log else {}
        tokens = f"{last['tokens']:,}" if isinstance(last.get("tokens"), int) else ""
        evaluated = ", ".join(f"{task} @ step {step}" for task, step in run.evaluated.items())
        lines.append(f"| {run.label} | {run.config.get('name', '')} | {run.path} | "
                     f"{last.get('step', '')} | {tokens} | {evaluated} |")
    return "\n".join(lines)


def _paper_notes(papers: list[PaperNumber], beside: dict[tuple[str, str], PaperNumber]) -> str:
    notes = []
    for paper in papers:
        labels = [label for (label, _), shown in beside.items() if shown is paper]
        if labels:
            notes.append(f"- {paper.metric} = {paper.value:g} beside {', '.join(labels)}: "
                         f"{paper.setting} ({paper.source})")
    if not notes:
        return "No paper number applies to these runs' settings."
    return "Paper numbers shown:\n\n" + "\n".join(notes)


def _plots_section(runs: list[Run]) -> tuple[str, list[tuple[Path, str]]]:
    """Per task, its plots side by side (one column per run that has one), and the copies to
    make: (source, name under the report directory)."""
    sections, copies = [], []
    for task in dict.fromkeys(task for run in runs for task in run.plots):
        # named by the run's position: a run's label may be a path
        having = [(run, f"plots/{task}-{i}.png") for i, run in enumerate(runs, 1)
                  if task in run.plots]
        copies += [(run.plots[task], name) for run, name in having]
        images = [f"![{task}, {run.label}]({name})" for run, name in having]
        sections.append(f"## {task}\n\n| {' | '.join(run.label for run, _ in having)} |\n"
                        f"|{'---|' * len(having)}\n| {' | '.join(images)} |")
    return "\n\n".join(sections), copies


def report(run_dirs: list[Path], out: Path) -> str:
    """Write `out`/report.md, metrics.csv, loss.png and plots/ for `run_dirs`, all at once or
    nothing; returns the metrics table (Markdown)."""
    runs = [read_run(path, label) for path, label in zip(run_dirs, _labels(run_dirs))]
    papers = read_paper_numbers()
    beside = paper_beside(runs, papers)
    table = metric_table(runs, is_headline, beside)
    counts = metric_table(runs, is_count, {})
    plots, copies = _plots_section(runs)
    markdown = "\n\n".join(part for part in [
        "# physlm report", _runs_table(runs),
        "## Metrics",
        "Ours, with the paper's number in brackets where the run's config matches the paper's "
        "setting. Headline rates only; every number (per attribute, per op, ...) is in "
        "[metrics.csv](metrics.csv).",
        table, _paper_notes(papers, beside),
        *(["## Counts", counts] if counts else []),
        "## Loss", "![training loss](loss.png)", plots] if part) + "\n"

    def fill(directory: Path) -> None:
        (directory / "report.md").write_text(markdown)
        (directory / "metrics.csv").write_text(metrics_csv(runs, beside))
        loss_figure(runs).savefig(directory / "loss.png", dpi=120)
        (directory / "plots").mkdir()
        for source, name in copies:
            shutil.copyfile(source, directory / name)

    publish(out, fill)
    return table


def publish(out: Path, fill: Callable[[Path], None], files: set[str] = REPORT_FILES) -> None:
    """Fill a fresh directory beside `out`, then rename it into place: a report appears whole or
    not at all, and a previous one (a directory holding only `files`, nothing else) is replaced
    only once the new one is done."""
    target = Path(os.path.abspath(out))
    if target.exists() and not (target.is_dir() and
                                all(p.name in files for p in target.iterdir())):
        raise TrainError(f"{out}: exists and is not a physlm report; choose another --out")
    tmp = target.with_name(f".{target.name}{TMP_MARK}{os.getpid()}")
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        fill(tmp)
        if target.exists():
            target.rename(old)
        tmp.rename(target)
    except OSError as exc:
        raise TrainError(f"{out}: cannot write the report: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
