import subprocess
import sys
from pathlib import Path

import pytest

import trainer.eval.runner
from launch.cli import main

QUICKSTART = Path(__file__).resolve().parent.parent / "configs" / "experiment" / "quickstart.yaml"


def _usage_error(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("verb, workers", [("gen", "0"), ("gen", "-3"), ("run", "0")])
def test_workers_below_one_is_refused_in_one_line(verb, workers, capsys):
    err = _usage_error([verb, "some.yaml", "--workers", workers], capsys)
    assert err == (f"physlm {verb}: error: argument --workers: must be a whole number >= 1, "
                   f"not {workers} (see physlm {verb} --help)\n")


def test_a_missing_verb_is_one_line(capsys):
    assert _usage_error([], capsys) == ("physlm: error: the following arguments are required: "
                                        "VERB (see physlm --help)\n")


def test_help_describes_every_verb_and_shows_the_quickstart(capsys):
    assert main(["--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines if line.startswith("  ") and
            line.split()[0] in ("gen", "verify", "train", "eval", "run")] == [
        "gen", "verify", "train", "eval", "run"]
    assert "  physlm run configs/experiment/quickstart.yaml" in "\n".join(lines)


def test_start_up_imports_none_of_the_heavy_libraries():
    code = ("import launch.cli, sys; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('omegaconf', 'numpy', 'torch', 'orjson', 'deepspeed')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout == "[]\n"


def test_gen_never_imports_torch(tmp_path):
    """Generation needs no torch (webdataset, which imports it, is loaded only to read shards):
    ~1.5 s less start-up, and no torch objects for the garbage collector to walk."""
    config = Path(__file__).resolve().parent.parent / "configs/corpus/bios_s_single.yaml"
    code = ("import launch.cli, sys; code = launch.cli.main(['gen', sys.argv[1], 'people=60', "
            "'--out', sys.argv[2]]); print(code, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, str(config), str(tmp_path / "c")],
                          capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "0 False"


@pytest.mark.parametrize("override, known", [
    ("model.foo=1", "attention, bias, canon, canon_activation, canon_kernel, canon_residual, ctx,"),
    ("train.wandb.foo=1", "entity, group, mode, project, tags"),
    ("eval.qa.foo=1", "batch_size, max_people, splits"),
    ("corpus.foo=1", "capacity, celebrities, celebrity_variant, data_dir, docs_per_sample,"),
])
def test_unknown_keys_list_the_known_ones_and_name_no_class(override, known, capsys):
    assert main(["train", str(QUICKSTART), override]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"physlm train: error: command line: {override}: unknown key; "
                          f"known: {known}")
    assert err.count("\n") == 1 and "Config" not in err and "Schema" not in err


@pytest.mark.parametrize("argv, tasks", [
    ([], None),  # evaluate() reads None as the run's own eval.tasks
    (["--task", "qa", "--task", "igsm"], ["qa", "igsm"]),
])
def test_eval_passes_the_tasks_given_or_none(argv, tasks, tmp_path, monkeypatch, capsys):
    calls = []

    def evaluate(run_dir, task_names, corpus_dir=None, quantize=None):
        calls.append((run_dir, task_names, corpus_dir, quantize))
        return {"qa": {"step": 3, "run": "r", "test": {"exact": 0.5, "n": 2}}}

    monkeypatch.setattr(trainer.eval.runner, "evaluate", evaluate)
    assert main(["eval", str(tmp_path), *argv]) == 0
    assert calls == [(tmp_path, tasks, None, None)]
    assert "| test | exact | 0.500 |" in capsys.readouterr().out


def test_an_unknown_eval_task_names_the_option_and_the_known_tasks(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text(f"name: r\ncorpus_dir: {tmp_path}\neval: {{}}\n"
                                          "train: {wandb: {mode: disabled, project: p}}\n")
    assert main(["eval", str(tmp_path), "--task", "bogus"]) == 2
    err = capsys.readouterr().err
    from trainer.eval.registry import tasks

    known = sorted(tasks())
    assert {"igsm", "manipulation", "probe", "qa", "reversal"} <= set(known)
    assert err == ("physlm eval: error: --task bogus: unknown evaluation task; known: "
                   f"{', '.join(known)}\n")


def test_a_group_replaced_on_the_command_line_is_one_line_when_unknown(capsys):
    assert main(["train", str(QUICKSTART), "model=gpt_huge"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("physlm train: error: command line: model='gpt_huge': no such file")
    assert err.count("\n") == 1


def test_run_prints_each_stage_with_its_duration(tmp_path, monkeypatch, capsys):
    import launch.experiment
    import trainer.engine

    clock = iter([0.0, 4.1, 10.0, 402.5, 500.0, 520.25])
    monkeypatch.setattr("launch.experiment.time.perf_counter", lambda: next(clock))
    monkeypatch.setattr(launch.experiment, "ensure_corpus",
                        lambda experiment, workers, log: tmp_path)
    monkeypatch.setattr(trainer.engine, "train", lambda *args: {"loss": 1.25})
    monkeypatch.setattr(trainer.eval.runner, "evaluate", lambda *args: {
        "qa": {"step": 600, "run": "quickstart", "test": {"exact": 0.5, "n": 2}}})
    assert main(["run", "quickstart", "--run-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "gen    | done in 4.1 s"
    assert out[2] == "train  | done: loss 1.2500 (6m32s)"
    assert out[4] == "eval   | done in 20.2 s"
    assert out[-1] == "| test | exact | 0.500 |"


def test_the_summary_table_shows_nested_rates_and_leaves_out_counts_and_breakdowns():
    from launch.cli import _summary_table

    table = _summary_table("manipulation", {
        "step": 5, "run": "r", "chance": 0.5,
        "test": {"cot": {"accuracy": 0.75, "n": 8,
                         "per_question": {"even_year": {"accuracy": 1.0}}}}})
    assert table.splitlines()[1:] == ["manipulation (step 5)", "| split | metric | value |",
                                      "|---|---|---|", "| all | chance | 0.500 |",
                                      "| test | cot/accuracy | 0.750 |"]


def test_the_summary_table_shows_a_task_without_splits_under_all():
    from launch.cli import _summary_table

    table = _summary_table("mano", {"step": 5, "run": "r", "accuracy": 0.25, "n": 8,
                                    "length": 2, "per_ops": {"1": {"accuracy": 1.0, "n": 4}}})
    assert table.splitlines()[4:] == ["| all | accuracy | 0.250 |"]


def test_a_filesystem_refusal_is_one_line_naming_the_file_and_keeps_finished_files(
        tmp_path, capsys):
    corpus = tmp_path / "corpus"
    (tmp_path / "c.yaml").write_text("family: bios\nvariant: multi5_permute\npeople: 30\n"
                                     "records_per_shard: 30\n"
                                     "tokenizer: {vocab_size: 600, sample_records: 200}\n")
    (corpus / "train" / "shard-000001.tar").mkdir(parents=True)  # a directory where a shard goes
    (corpus / ".progress").mkdir()  # as `physlm gen --part prepare` leaves a corpus being made
    assert main(["gen", str(tmp_path / "c.yaml"), "--out", str(corpus)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("physlm gen: error: "), err
    assert "shard-000001.tar" in err[0] and "Is a directory" in err[0], err
    assert (corpus / "train" / "shard-000000.tar").is_file()  # the shard before it is kept
