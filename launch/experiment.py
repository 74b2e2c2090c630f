"""`physlm run`: generate (cached by config hash) -> train -> evaluate, locally."""

from pathlib import Path

from corpus_gen import __version__
from corpus_gen.core.config import fingerprint
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.manifest import MANIFEST, read_json
from trainer.config import Experiment
from trainer.errors import TrainError

CORPUS_CACHE = Path("corpora")


def corpus_dir(experiment: Experiment) -> Path:
    """Where this experiment's corpus lives: one directory per (corpus config, code version)."""
    if experiment.corpus is None:
        raise TrainError(f"{experiment.source}: no corpus group; add one or pass --corpus DIR")
    fp = fingerprint(experiment.corpus, __version__)
    return CORPUS_CACHE / f"{experiment.corpus_name}-{fp[:8]}"


def ensure_corpus(experiment: Experiment, workers: int, log=print) -> Path:
    out = corpus_dir(experiment)  # raises unless the experiment has a corpus group
    manifest = out / MANIFEST
    if manifest.exists() and read_json(manifest)["fingerprint"] == fingerprint(
            experiment.corpus, __version__):
        log(f"gen    | cached corpus {out}")
        return out
    log(f"gen    | generating {out}")
    generate_corpus(experiment.corpus, out, workers=workers, progress=False,
                    log=lambda *_: None)
    return out


def run_dir_for(experiment: Experiment, run_dir: str | None) -> Path:
    return Path(run_dir) if run_dir else Path("runs") / experiment.name
