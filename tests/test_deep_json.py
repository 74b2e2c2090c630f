"""A corpus's JSON and YAML nested 200,000 deep (a manifest, a progress record, a corpus config)
is one line naming the file, not a RecursionError traceback or a crashed process. (Grammar
files: tests/test_cfg_grammar.py; eval sets: tests/test_eval_sets.py; a run's files:
tests/test_status_local.py, tests/test_report.py, tests/test_run_dir_safety.py.)"""

import subprocess
import sys

import pytest

from corpus_gen.core.errors import CorpusError
from corpus_gen.core.manifest import MANIFEST, PROGRESS, recorded_entries
from corpus_gen.core.verify import verify_corpus
from launch.slurm_status import _events, read_jobs
from trainer.errors import TrainError

DEEP = "[" * 200_000 + "]" * 200_000


def test_a_manifest_nested_too_deep_is_one_line_naming_it(tmp_path):
    (tmp_path / MANIFEST).write_text(DEEP)
    with pytest.raises(CorpusError, match=f"^{tmp_path / MANIFEST}: not JSON \\(maximum "
                                          "recursion depth exceeded"):
        verify_corpus(tmp_path)


def test_gen_rebuilds_a_progress_record_nested_too_deep(tmp_path):
    (tmp_path / PROGRESS).mkdir()
    record = tmp_path / PROGRESS / "train__shard-000000.tar.json"
    record.write_text(DEEP)
    logged = []
    assert recorded_entries(tmp_path, logged.append) == {}
    assert logged == [f"{record}: unreadable; rebuilding it"]


def test_a_corpus_config_nested_too_deep_is_one_line_not_a_crash(tmp_path):
    """OmegaConf's YAML loader overflows the C stack on it (the process dies, SIGSEGV): run in
    a process of its own."""
    path = tmp_path / "corpus.yaml"
    path.write_text(f"family: bios\npeople: {DEEP}\n")
    code = ("from corpus_gen.core.config import read_yaml\nimport sys\n"
            "from corpus_gen.core.errors import CorpusError\n"
            "try:\n    read_yaml(sys.argv[1])\nexcept CorpusError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1
    assert done.stdout.startswith(f"{path}: not valid YAML: maximum recursion depth exceeded")


def test_a_slurm_job_record_line_nested_too_deep_is_skipped_as_a_torn_one(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "started"}\n' + DEEP + "\n")
    assert _events(path) == [{"event": "started"}]


def test_a_slurm_jobs_file_nested_too_deep_is_one_line(tmp_path):
    path = tmp_path / "jobs.json"
    path.write_text(DEEP)
    with pytest.raises(TrainError, match=f"^{path}: unreadable \\(RecursionError: maximum "
                                         "recursion depth exceeded"):
        read_jobs(path)
