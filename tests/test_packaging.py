"""A non-editable install carries the shipped configs: named configs load from any folder."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHECK = """
import sys
from pathlib import Path
import configs, launch.cli
from trainer.config import load_experiment
from corpus_gen.cfg.grammar import load_grammar
assert load_grammar("cfg3k").depth == 7  # the grammar tables are package data
assert Path(launch.cli.__file__).is_relative_to(sys.argv[1]), launch.cli.__file__
experiment = load_experiment(launch.cli._config_file("experiment", "quickstart"), [])
shipped = Path(configs.__file__).parent == Path(sys.argv[1]) / "configs"
print(experiment.name, experiment.corpus_name, shipped)
gen = ["gen", "bios_s_single", "people=100", "--out", sys.argv[2], "--no-progress"]
sys.exit(launch.cli.main(gen))
"""


def test_an_installed_copy_loads_shipped_configs_by_name_from_any_folder(tmp_path):
    source, site = tmp_path / "source", tmp_path / "site"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    for package in ("corpus_gen", "trainer", "launch", "configs"):  # a build writes beside them
        shutil.copytree(ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(source)], check=True,
                   capture_output=True, cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-c", _CHECK, str(site), str(tmp_path / "corpus")],
                          capture_output=True, text=True, cwd=elsewhere,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "quickstart bios_s_multi5_permute True"
    assert (tmp_path / "corpus" / "manifest.json").is_file()
