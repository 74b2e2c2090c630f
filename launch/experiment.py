"""`physlm run`: generate (cached by config hash) -> train -> evaluate, locally."""

import functools
import time
from collections.abc import Callable
from pathlib import Path

import configs
from corpus_gen.core.config import CorpusConfig, read_yaml
from corpus_gen.core.errors import CorpusError
from corpus_gen.core.generate import corpus_fingerprint, generate_corpus
from corpus_gen.core.io import read_json_file
from corpus_gen.core.manifest import MANIFEST
from corpus_gen.core.verify import verify_corpus
from launch.sweep import safe_name
from trainer.config import Experiment
from trainer.errors import TrainError

CORPUS_CACHE = Path("corpora")
_LABEL_MAX = 200  # bytes of a corpus directory's name before its hash (NAME_MAX: 255)


def corpus_dir(experiment: Experiment) -> Path:
    """Where this experiment's corpus lives: one directory per (corpus config, code version),
    `corpora/<corpus_label>-<fingerprint[:8]>`."""
    if experiment.corpus is None:
        raise TrainError(f"{experiment.source}: no corpus group; add one or pass --corpus DIR")
    return CORPUS_CACHE / f"{corpus_label(experiment)}-{corpus_fingerprint(experiment.corpus)[:8]}"


def corpus_label(experiment: Experiment) -> str:
    """What the corpus is, to read in its directory's name: the corpus config's name, unless a
    setting that name stands for was changed (a sweep's `corpus.variant: single` on a
    bios_s_multi5_permute base): then the family and those settings' values as they are now
    (`bios_s_single`); an unnamed corpus (a mapping without `base`) reads as its family. The
    settings a shipped config's name stands for are the text values it sets (bios: style,
    variant; igsm: difficulty, format; cfg: grammar). At most _LABEL_MAX bytes."""
    label = experiment.corpus_name
    if label in ("inline", "default"):  # a mapping with no `base`: unnamed
        label = experiment.corpus.family
    named = _named_settings(experiment.corpus_name)
    now = {key: getattr(experiment.corpus, key, None) for key in named}
    if now != named:
        parts = [Path(str(value)).stem for key, value in now.items() if key != "family"]
        label = safe_name("_".join([experiment.corpus.family, *parts]))
    return label.encode()[:_LABEL_MAX].decode(errors="ignore")


@functools.cache
def _named_settings(name: str) -> dict[str, str]:
    """The text values a shipped corpus config sets ({} for any other name: a user's file,
    `inline`)."""
    if name not in configs.names("corpus"):
        return {}
    return {str(key): value for key, value in read_yaml(configs.find("corpus", name)).items()
            if isinstance(value, str)}


def ensure_corpus(experiment: Experiment, workers: int, log=print) -> Path:
    """The experiment's corpus, in its cache directory (see `prepare_corpus`)."""
    out = corpus_dir(experiment)  # raises unless the experiment has a corpus group
    prepare_corpus(experiment.corpus, out, workers, log)
    return out


def prepare_corpus(config: CorpusConfig, out: Path, workers: int, log=print) -> None:
    """Generate the corpus of `config` in `out` if absent, reuse it if every checksum verifies,
    and repair it (only the damaged files regenerated) otherwise."""
    if corpus_finished(config, out):
        problems = verify_corpus(out)
        if not problems:
            log(f"gen    | cached corpus {out} (checksums verified)")
            return
        for problem in problems:
            log(f"gen    | {problem}")
        log(f"gen    | repairing {out}")
    else:
        log(f"gen    | generating {out}")
    generate_corpus(config, out, workers=workers, log=lambda *_: None)


def corpus_finished(config: CorpusConfig, out: Path) -> bool:
    """Whether `out` holds the manifest of this config's corpus (its files not checked)."""
    try:
        return read_json_file(out / MANIFEST).get("fingerprint") == corpus_fingerprint(config)
    except (FileNotFoundError, CorpusError):
        return False


def run_dir_for(experiment: Experiment, run_dir: str | None) -> Path:
    return Path(run_dir) if run_dir else Path("runs") / experiment.name


def run_experiment(experiment: Experiment, run_dir: Path, workers: int,
                   log: Callable[[str], None] = print) -> tuple[Path, dict]:
    """gen (cached) -> train (resumed if the run exists) -> eval; the corpus directory and the
    evaluation results."""
    from trainer.engine import train
    from trainer.eval.runner import evaluate

    began = time.perf_counter()
    corpus = ensure_corpus(experiment, workers, log)
    log(f"gen    | done in {took(began)}")
    log(f"train  | {run_dir}")
    began = time.perf_counter()
    metrics = train(experiment, run_dir, corpus)
    if "loss" not in metrics:
        log("train  | nothing to train: the run is already at train.max_steps")
    else:
        log(f"train  | done: loss {metrics['loss']:.4f} ({took(began)})")
    log(f"eval   | {', '.join(experiment.eval.tasks)}")
    began = time.perf_counter()
    results = evaluate(run_dir, experiment.eval.tasks, experiment.eval, corpus)
    log(f"eval   | done in {took(began)}")
    return corpus, results


def took(began: float) -> str:
    """Wall time since `began`, as the stage lines print it: 4.1 s, 6m32s."""
    seconds = time.perf_counter() - began
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
