"""`physlm report`: tables, CSV, paper numbers and plots from run directories made in code."""

import csv
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launch.cli import main
from launch.report import (
    PaperNumber,
    flatten,
    loss_figure,
    paper_beside,
    read_paper_numbers,
    read_run,
    report,
)

ROOT = Path(__file__).resolve().parent.parent
GPT2_SMALL = {"n_layer": 12, "d_model": 768}  # the papers' iGSM model's shape
PNG = b"\x89PNG\r\n\x1a\n"


def _split(exact: float, first: float, n: int) -> dict:
    return {"exact": exact, "first_token": first, "n": n, "too_long": 0,
            "per_attribute": {"birth_date": {"exact": exact / 2, "first_token": first, "n": n // 2},
                              "major": {"exact": 1.0, "first_token": 1.0, "n": n - n // 2}}}


QA = {"step": 600, "run": "x", "test": _split(0.483, 0.513, 300),
      "train": _split(0.95, 0.953, 300)}
REVERSAL = {"step": 600, "run": "x",
            "test": {"forward_exact": 0.347, "forward_n": 300, "inverse_full_name": 0.0,
                     "inverse_first_name": 0.008, "inverse_n": 250,
                     "per_level": {"1": {"full_name": 0.0, "first_name": 0.0, "n": 50}}}}
LOG = [{"step": 1, "loss": 7.6, "lr": 2e-4, "grad_norm": 1.7, "tokens_per_s": 3851.9, "mfu": None,
        "memory_gb": 0.7, "tokens": 4096},
       {"step": 50, "loss": 3.4, "lr": 1e-3, "grad_norm": 0.9, "tokens_per_s": 1124.7, "mfu": None,
        "memory_gb": 0.8, "tokens": 204800, "eval_loss": 3.6},
       {"step": 60, "loss": 3.1, "lr": 3e-4, "grad_norm": 0.4, "tokens_per_s": 848.5, "mfu": None,
        "memory_gb": 0.8, "tokens": 245760}]


def _config(name: str, variant: str = "multi5_permute", **corpus) -> dict:
    return {"name": name, "corpus_dir": "corpora/x",
            "corpus": {"family": "bios", "style": "s", "variant": variant, "mode": "mix",
                       "celebrities": 0, **corpus},
            "train": {"max_steps": 60, "init_from": None}, "eval": {"tasks": ["qa"]}}


def make_run(root: Path, name: str, config: dict, evals: dict[str, dict],
             log: list[dict] = LOG) -> Path:
    """A run directory as training and `physlm eval` leave it (checkpoints aside)."""
    run = root / name
    (run / "eval").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in log))
    for task, result in evals.items():
        (run / "eval" / f"{task}.json").write_text(json.dumps(result, indent=1))
        (run / "eval" / f"{task}.png").write_bytes(PNG + f"{name} {task}".encode())
    return run


def _rows(table: str) -> dict[str, list[str]]:
    """A Markdown table's rows: first cell -> the other cells."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]
    return {row[0]: row[1:] for row in rows[2:]}


def test_the_table_shows_each_headline_number_of_the_eval_json(tmp_path):
    run = make_run(tmp_path, "multi", _config("multi"), {"qa": QA})
    rows = _rows(report([run], tmp_path / "report"))
    assert rows == {"qa/test/exact": ["0.483"], "qa/test/first_token": ["0.513"],
                    "qa/train/exact": ["0.950"], "qa/train/first_token": ["0.953"],
                    "train/loss": ["3.100"], "train/eval_loss": ["3.600"]}
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "| qa/test/n | 300 |" in markdown and "| qa/test/too_long | 0 |" in markdown
    assert "per_attribute" not in markdown  # deeper slices: the CSV only


def test_the_csv_parses_back_to_every_number_of_every_run(tmp_path):
    single = make_run(tmp_path, "single", _config("p31_bios_s_single_mix", "single"), {"qa": QA})
    multi = make_run(tmp_path, "multi", _config("multi"), {"qa": QA, "reversal": REVERSAL})
    report([single, multi], tmp_path / "report")
    with open(tmp_path / "report" / "metrics.csv") as f:
        lines = list(csv.DictReader(f))
    got = {(line["run"], line["metric"]): float(line["ours"]) for line in lines}
    want = {("single", k): v for k, v in flatten({"test": QA["test"], "train": QA["train"]},
                                                 "qa").items()}
    want |= {("multi", k): v for k, v in flatten({"test": QA["test"], "train": QA["train"]},
                                                 "qa").items()}
    want |= {("multi", k): v for k, v in flatten({"test": REVERSAL["test"]}, "reversal").items()}
    want |= {(run, "train/loss"): 3.1 for run in ("single", "multi")}
    want |= {(run, "train/eval_loss"): 3.6 for run in ("single", "multi")}
    assert got == want
    assert got[("multi", "qa/test/per_attribute/birth_date/exact")] == 0.483 / 2  # full precision
    steps = {(line["run"], line["metric"]): line["step"] for line in lines}
    assert steps[("multi", "reversal/test/inverse_n")] == "600"
    assert steps[("multi", "train/eval_loss")] == "50"  # where it was last logged
    assert {line["experiment"] for line in lines if line["run"] == "single"} == {
        "p31_bios_s_single_mix"}


def test_paper_numbers_sit_beside_the_matching_metric_of_the_matching_run_only(tmp_path):
    single = make_run(tmp_path, "single", _config("p31_bios_s_single_mix", "single"),
                      {"qa": QA, "reversal": REVERSAL})
    multi = make_run(tmp_path, "multi", _config("p31_bios_s_multi5_permute_mix"), {"qa": QA})
    rows = _rows(report([single, multi], tmp_path / "report"))
    assert rows["qa/test/exact"] == ["0.483 (paper 0.866)", "0.483"]
    assert rows["reversal/test/inverse_full_name"] == ["0.000 (paper 0)", ""]
    assert [row for row in rows.values() if any("paper" in cell for cell in row)] == [
        rows["qa/test/exact"], rows["reversal/test/inverse_full_name"]]
    with open(tmp_path / "report" / "metrics.csv") as f:
        papers = {(line["run"], line["metric"]): (line["paper"], line["paper_source"])
                  for line in csv.DictReader(f) if line["paper"]}
    assert papers == {
        ("single", "qa/test/exact"): (
            "0.866", "Part 3.1 (arXiv:2309.14316), Result 1: mixed training => knowledge "
                     "extraction"),
        ("single", "reversal/test/inverse_full_name"): (
            "0.0", "Part 3.2 (arXiv:2309.14402): knowledge inverse search")}
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert ("- qa/test/exact = 0.866 beside single: bioS single (one biography each), mixed "
            "training from scratch") in markdown


@pytest.mark.parametrize("config, metric, paper", [
    (_config("p31_bios_s_single_mix", "single"), "qa/test/exact", 0.866),
    (_config("p31_bios_s_multi5_permute_mix"), "qa/test/exact", None),
    ({**_config("ft", "single"), "train": {"init_from": "runs/pre"}}, "qa/test/exact", 0.097),
    ({**_config("ft"), "train": {"init_from": "runs/pre"}}, "qa/test/exact", 0.96),
    (_config("p31_celebrity-with", "single", celebrities=100), "qa/test/exact", 0.868),
    (_config("p31_celebrity-without", "single"), "qa/test/exact", 0.044),
    (_config("bio_r_single_mix", "single", style="r"), "qa/test/exact", None),
    ({"name": "no_corpus_group", "corpus": None, "train": {}}, "qa/test/exact", None),
    ({"name": "p21", "corpus": {"difficulty": "med", "retry_rate": 0.0}, "model": GPT2_SMALL},
     "igsm/igsm_op23/solution", 0.78),
    ({"name": "p22", "corpus": {"difficulty": "med", "retry_rate": 0.5}, "model": GPT2_SMALL},
     "igsm/igsm_op23/solution", 0.95),
    ({"name": "p21h", "corpus": {"difficulty": "hard", "retry_rate": 0.0}, "model": GPT2_SMALL},
     "igsm/igsm_op32/solution", 0.84),
    ({"name": "p21", "corpus": {"difficulty": "med", "retry_rate": 0.2}, "model": GPT2_SMALL},
     "igsm/igsm_op23/solution", None),
    ({"name": "deep", "corpus": {"difficulty": "med", "retry_rate": 0.0},
      "model": {"n_layer": 20, "d_model": 576}}, "igsm/igsm_op23/solution", None),
])
def test_the_paper_number_shown_is_the_one_of_the_runs_setting(tmp_path, config, metric, paper):
    run = read_run(make_run(tmp_path, "r", config, {metric.split("/")[0]: {}}), "r")
    run.metrics[metric] = 0.5
    shown = paper_beside([run], read_paper_numbers())
    assert {key: number.value for key, number in shown.items()} == (
        {("r", metric): paper} if paper is not None else {})


def _exclusive(a: PaperNumber, b: PaperNumber) -> bool:
    """No config can match both: a key both require differently, or one requires what the
    other rules out."""
    return (any(k in b.when and b.when[k] != v for k, v in a.when.items())
            or any(a.when.get(k, object()) == v for k, v in b.unless.items())
            or any(b.when.get(k, object()) == v for k, v in a.unless.items()))


def test_of_two_shipped_paper_numbers_that_can_meet_the_first_names_its_experiment():
    papers = read_paper_numbers()
    assert len(papers) >= 11 and all(p.source.startswith("Part ") for p in papers)
    for a, b in itertools.combinations(papers, 2):  # in file order: the first that applies wins
        assert a.metric != b.metric or _exclusive(a, b) or "name" in a.when, (a, b)


def test_runs_with_different_metrics_give_the_union_with_blanks(tmp_path):
    qa_run = make_run(tmp_path, "qa_run", _config("a"), {"qa": QA})
    reversal_run = make_run(tmp_path, "rev_run", _config("b"), {"reversal": REVERSAL}, log=[])
    rows = _rows(report([qa_run, reversal_run], tmp_path / "report"))
    assert rows["qa/test/exact"] == ["0.483", ""]
    assert rows["reversal/test/forward_exact"] == ["", "0.347"]
    assert rows["train/loss"] == ["3.100", ""]  # the second run logged nothing
    assert list(rows) == ["qa/test/exact", "qa/test/first_token", "qa/train/exact",
                          "qa/train/first_token", "train/loss", "train/eval_loss",
                          "reversal/test/forward_exact", "reversal/test/inverse_full_name",
                          "reversal/test/inverse_first_name"]


def test_loss_curves_are_overlaid_one_line_per_run(tmp_path):
    first = make_run(tmp_path, "first", _config("a"), {"qa": QA})
    later = [{**line, "loss": line["loss"] / 2} for line in LOG]
    second = make_run(tmp_path, "second", _config("b"), {"qa": QA}, log=later)
    runs = [read_run(first, "first"), read_run(second, "second")]
    ax = loss_figure(runs).axes[0]
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
             for line in ax.lines}
    tokens = [4096, 204800, 245760]
    assert lines == {"first": (tokens, [7.6, 3.4, 3.1]), "first (eval loss)": ([204800], [3.6]),
                     "second": (tokens, [3.8, 1.7, 1.55]), "second (eval loss)": ([204800], [3.6])}
    assert ax.get_xlabel() == "tokens"
    report([first, second], tmp_path / "report")
    assert (tmp_path / "report" / "loss.png").read_bytes().startswith(PNG)


def test_eval_plots_are_copied_and_shown_side_by_side(tmp_path):
    first = make_run(tmp_path, "first", _config("a"), {"qa": QA, "reversal": REVERSAL})
    second = make_run(tmp_path, "second", _config("b"), {"qa": QA})
    report([first, second], tmp_path / "report")
    out = tmp_path / "report"
    markdown = (out / "report.md").read_text()
    assert ("## qa\n\n| first | second |\n|---|---|\n"
            "| ![qa, first](plots/qa-1.png) | ![qa, second](plots/qa-2.png) |") in markdown
    assert "## reversal\n\n| first |\n|---|\n| ![reversal, first](plots/reversal-1.png) |" \
        in markdown
    assert (out / "plots" / "qa-2.png").read_bytes() == (second / "eval" / "qa.png").read_bytes()
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "qa-1.png", "qa-2.png", "reversal-1.png"]


def test_runs_of_one_directory_name_are_told_apart_by_their_path(tmp_path):
    a = make_run(tmp_path / "a", "quickstart", _config("q"), {"qa": QA})
    b = make_run(tmp_path / "b", "quickstart", _config("q"), {"qa": QA})
    table = report([a, b], tmp_path / "report")
    assert table.splitlines()[0] == f"| metric | {a} | {b} |"


def test_the_cli_prints_the_table_and_replaces_a_previous_report(tmp_path, capsys):
    single = make_run(tmp_path, "single", _config("s", "single"), {"qa": QA, "reversal": REVERSAL})
    multi = make_run(tmp_path, "multi", _config("m"), {"qa": QA})
    out = tmp_path / "report"
    assert main(["report", str(single), str(multi), "--out", str(out)]) == 0
    assert main(["report", str(multi), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| qa/test/exact | 0.483 (paper 0.866) | 0.483 |" in printed
    assert printed.endswith(f"report | {out}: report.md, metrics.csv, loss.png, plots/\n")
    assert sorted(p.name for p in (out / "plots").iterdir()) == ["qa-1.png"]  # the new report's
    assert "single" not in (out / "report.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["multi", "report", "single"]


def test_a_directory_that_is_not_a_run_stops_in_one_line_and_writes_nothing(tmp_path, capsys):
    good = make_run(tmp_path, "good", _config("g"), {"qa": QA})
    not_a_run = tmp_path / "corpora"
    not_a_run.mkdir()
    before = sorted(tmp_path.rglob("*"))
    assert main(["report", str(good), str(not_a_run), "--out", str(tmp_path / "rep")]) == 2
    assert capsys.readouterr().err == (f"physlm report: error: {not_a_run}: not a run directory "
                                       "(no config.yaml)\n")
    assert sorted(tmp_path.rglob("*")) == before
    missing = tmp_path / "nowhere"
    done = subprocess.run([sys.executable, "-m", "launch.cli", "report", str(good), str(missing)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"physlm report: error: {missing}: not a run directory "
                           "(no such directory)\n")
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("damage, message", [
    (lambda run: (run / "eval" / "qa.json").write_text('{"test": '),
     "eval/qa.json: not JSON (Expecting value: line 1 column 10 (char 9))"),
    (lambda run: (run / "eval" / "qa.json").write_text("[" * 200_000 + "]" * 200_000),
     "eval/qa.json: not JSON (maximum recursion depth exceeded while decoding a JSON array "
     "from a unicode string)"),
    (lambda run: (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n'),
     "metrics.jsonl: line 2 is not JSON ('{\"step\": 2, \"lo'); only the last line can be cut "
     "short by an interrupted write: mend or delete the line"),
    (lambda run: (run / "config.yaml").write_text("- a list\n"),
     "config.yaml: damaged run config: not a mapping of settings"),
    (lambda run: (run / "config.yaml").write_text("name: [unclosed\n"),
     "config.yaml: damaged run config: while parsing a flow sequence in \"<unicode string>\", "
     "line 1, column 7 did not find expected ',' or ']' in \"<unicode string>\", line 2, "
     "column 1"),
    (lambda run: (run / "config.yaml").write_text("name: " + "[" * 200_000 + "]" * 200_000),
     "config.yaml: damaged run config: nested over 1000 deep"),
])
def test_an_unreadable_run_file_is_named_in_one_line(tmp_path, capsys, damage, message):
    run = make_run(tmp_path, "run", _config("r"), {"qa": QA})
    damage(run)
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 2
    assert capsys.readouterr().err == f"physlm report: error: {run}/{message}\n"
    assert not (tmp_path / "rep").exists()


def test_report_drops_a_torn_last_metrics_line_as_training_does(tmp_path, capsys):
    """A disk that filled mid-line: the trainer resumes past the torn line, so the report reads
    the log by the same rule (trainer.run_dir.read_metrics) instead of refusing the run."""
    run = make_run(tmp_path, "run", _config("r"), {"qa": QA})
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 61, "loss": 2.')
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0
    assert "| train/loss | 3.100 |" in capsys.readouterr().out  # step 60's, the last whole line
    assert read_run(run, "run").log == LOG


def test_an_out_directory_holding_anything_else_is_refused_untouched(tmp_path, capsys):
    run = make_run(tmp_path, "run", _config("r"), {"qa": QA})
    assert main(["report", str(run), "--out", str(run)]) == 2
    assert capsys.readouterr().err == (f"physlm report: error: {run}: exists and is not a "
                                       "physlm report; choose another --out\n")
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "eval", "metrics.jsonl"]


def test_headline_rates_and_counts_leave_the_slices_to_the_csv(tmp_path):
    manipulation = {"step": 600, "chance": 0.5, "test": {"plain": {
        "accuracy": 0.52, "n": 100, "majority": 0.55,
        "per_question": {"parity": {"accuracy": 0.5, "n": 50, "majority": 0.6}}}}}
    probe = {"people": {"train": 80}, "p": {"layers": [0, 1], "accuracy": {"major": [0.1, 0.9]}},
             "summary": {"p_major": 0.9}, "best_layer": {"p_major": 1}}
    run = make_run(tmp_path, "run", _config("r"), {"manipulation": manipulation, "probe": probe},
                   log=[])
    rows = _rows(report([run], tmp_path / "report"))
    assert rows == {"manipulation/chance": ["0.500"], "manipulation/test/plain/accuracy": ["0.520"],
                    "manipulation/test/plain/majority": ["0.550"],
                    "probe/summary/p_major": ["0.900"]}
    markdown = (tmp_path / "report" / "report.md").read_text()
    counts = markdown[markdown.index("## Counts"):markdown.index("## Loss")]
    assert [line.split(" | ")[0] for line in counts.splitlines()[4:-1]] == [
        "| manipulation/test/plain/n", "| probe/people/train", "| probe/best_layer/p_major"]
    with open(tmp_path / "report" / "metrics.csv") as f:
        metrics = [line["metric"] for line in csv.DictReader(f)]
    assert "manipulation/test/plain/per_question/parity/accuracy" in metrics
    assert "probe/p/accuracy/major/1" in metrics and "probe/p/layers/1" in metrics


def test_flatten_keeps_numbers_at_any_depth_and_skips_text_and_flags():
    result = {"in_distribution": {"distribution": "in", "solution": 0.5, "n": 4,
                                  "failures": {"truncated": 2}, "sets": ["igsm_test"],
                                  "per_op": {"3": {"solution": 1.0}}, "ok": True},
              "layers": [0.25, 0.75]}
    assert flatten(result, "igsm") == {
        "igsm/in_distribution/solution": 0.5, "igsm/in_distribution/n": 4,
        "igsm/in_distribution/failures/truncated": 2,
        "igsm/in_distribution/per_op/3/solution": 1.0,
        "igsm/layers/0": 0.25, "igsm/layers/1": 0.75}


def test_an_empty_split_reads_no_data_in_the_table_and_blank_in_the_csv_not_zero(tmp_path):
    # as scoring used to write it (0.0 over n = 0), and as it writes it now (null)
    old = {**QA, "test": {**_split(0.0, 0.0, 0), "per_attribute": {}}}
    new = {**QA, "test": {"exact": None, "first_token": None, "exact_chance": None,
                          "first_token_chance": None, "n": 0, "too_long": 0,
                          "per_attribute": {}}}
    runs = [make_run(tmp_path, name, _config("p31_bios_s_single_mix", "single"), {"qa": qa})
            for name, qa in (("old", old), ("new", new))]
    rows = _rows(report(runs, tmp_path / "report"))
    assert rows["qa/test/exact"] == ["no data", "no data"]  # and no paper number beside it
    assert rows["qa/test/first_token"] == ["no data", "no data"]
    assert rows["qa/train/exact"] == ["0.950", "0.950"]
    with open(tmp_path / "report" / "metrics.csv") as f:
        ours = {(line["run"], line["metric"]): line["ours"] for line in csv.DictReader(f)}
    assert ours[("old", "qa/test/exact")] == ours[("new", "qa/test/exact")] == ""
    assert ours[("new", "qa/test/n")] == "0"


def test_the_loss_axis_is_logarithmic(tmp_path):
    run = read_run(make_run(tmp_path, "r", _config("a"), {"qa": QA}), "r")
    ax = loss_figure([run]).axes[0]
    assert ax.get_yscale() == "log" and ax.get_ylabel() == "loss (log scale)"


def test_the_table_eval_prints_says_no_data_for_an_empty_split():
    from launch.cli import _summary_table

    result = {"step": 5, "test": {"exact": None, "first_token": None, "n": 0},
              "train": {"exact": 0.0, "first_token": 0.0, "n": 0}}  # as scoring used to write it
    assert _summary_table("qa", result).splitlines()[4:] == [
        "| test | exact | no data |", "| test | first_token | no data |",
        "| train | exact | no data |", "| train | first_token | no data |"]
