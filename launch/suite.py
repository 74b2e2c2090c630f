"""Suites: one experiment file of several runs, for the papers' comparisons (bioS single vs
multi5+permute, with vs without celebrities). `runs` maps each run's name to an experiment
(the keys of an experiment file); `defaults` holds the groups the runs share, and a run's own
group replaces the default's whole. A run with `parent: <earlier run>` finetunes: it starts from
that run's weights (`train.init_from`) and its corpus takes the parent corpus's tokenizer
(`corpus.tokenizer.reuse`), the "pretrain, then finetune" of Part 3.1. A suite is run as a
plan (`launch.plan`), as a sweep is: each run in `<root>/<run>`, a run after its parent.
"""

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from corpus_gen.core.config import COMMAND_LINE, read_yaml, refuse_unknown_keys
from corpus_gen.core.errors import ConfigError
from corpus_gen.core.registry import get_family
from trainer.config import Experiment, build_experiment

SUITE_KEYS = ("name", "defaults", "runs")


@dataclass
class SuiteRun:
    name: str
    experiment: Experiment
    parent: str | None  # the earlier run whose weights and tokenizer this one starts from


@dataclass
class Suite:
    name: str
    runs: list[SuiteRun]
    source: str


def is_suite(path: Path) -> bool:
    return "runs" in read_yaml(path)


def load_suite(path: Path, overrides: list[str]) -> Suite:
    """The suite file's runs, each a validated experiment with the command line's overrides."""
    source = str(path)
    given = read_yaml(path)
    refuse_unknown_keys(given, SUITE_KEYS, "suite", source)
    name = str(given.get("name", path.stem))
    defaults, runs = given.get("defaults") or OmegaConf.create({}), given.runs
    for key, value in (("defaults", defaults), ("runs", runs)):
        if not isinstance(value, DictConfig) or (key == "runs" and not value):
            raise ConfigError(key, value, "must be a mapping" +
                              (" of run names to experiments" if key == "runs" else ""), source)
    result: list[SuiteRun] = []
    for run, body in runs.items():
        if not isinstance(body, DictConfig):
            raise ConfigError(f"runs.{run}", body, "must be a mapping of experiment keys",
                              source)
        merged = OmegaConf.create({**{k: defaults[k] for k in defaults},
                                   **{k: body[k] for k in body}})
        parent = merged.pop("parent", None)
        known = [r.name for r in result]
        if parent is not None and parent not in known:
            raise ConfigError(f"runs.{run}.parent", parent, "must name an earlier run of the "
                              f"suite (earlier: {', '.join(known) or 'none'})", source)
        try:
            experiment = build_experiment(merged, source, overrides, f"{name}-{run}")
        except ConfigError as exc:  # name the run the key belongs to
            if exc.source == COMMAND_LINE:
                raise
            raise ConfigError(f"runs.{run}.{exc.key}", exc.value, exc.reason,
                              exc.source) from None
        result.append(SuiteRun(str(run), experiment, parent))
    return Suite(name, result, source)


def finetune_from(experiment: Experiment, parent_dir: Path, parent_corpus: Path) -> None:
    """Make `experiment` finetune the run in `parent_dir`: its weights, and the tokenizer of its
    corpus (as the path `corpus_dir` gives, relative: the path is part of the corpus config);
    a family of a fixed vocabulary has no tokenizer to take: its corpora share vocab.json."""
    experiment.train.init_from = str(parent_dir)
    corpus = experiment.corpus
    if (corpus is not None and corpus.tokenizer.reuse is None
            and get_family(corpus.family).vocabulary is None):
        corpus.tokenizer.reuse = str(parent_corpus)
