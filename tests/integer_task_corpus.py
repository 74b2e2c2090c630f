"""What the fixed-vocabulary family tests (depo, brevo, mano and the sandboxes) share: a family's
config from overrides, its training records and its one eval set's rows, generated in process,
the check that a corpus does not depend on the worker count or the shard size, and the
chi-square test of draws against their law."""

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from scipy.stats import chi2

from corpus_gen.core.config import CorpusConfig, corpus_config
from corpus_gen.core.generate import generate_corpus
from corpus_gen.core.registry import get_family, schemas
from corpus_gen.core.shards import read_shard
from corpus_gen.core.words import split_words


def family_config(family: str, *overrides: str) -> CorpusConfig:
    given = OmegaConf.from_dotlist([f"family={family}", *overrides])
    return corpus_config([(given, "test")], schemas())


def training_records(config: CorpusConfig, start: int, stop: int) -> list:
    return list(get_family(config.family).records(config, start, stop))


def eval_rows(config: CorpusConfig) -> list[dict]:
    """The rows of the family's eval set (each of these families has one)."""
    (rows,) = get_family(config.family).eval_sets(config).values()
    return list(rows())


def readable_words(names: list[str]) -> list[str]:
    """The readable words a run of token names spells, which must end with a complete word."""
    words, rest = split_words(names)
    assert rest == ()
    return [" ".join(word) for word in words]


def assert_independent_of_workers_and_shard_size(family: str, overrides: list[str],
                                                 tmp_path: Path, samples: int = 700,
                                                 sized_by: list[str] | None = None) -> None:
    """`assert_corpus_independent_of_workers_and_shard_size` for a family's config from
    overrides. `sized_by`: the overrides that make a corpus of `samples` training documents, for
    a family without a `samples` key (default: samples=<samples>)."""
    assert_corpus_independent_of_workers_and_shard_size(
        lambda per_shard: family_config(family, *overrides,
                                        *(sized_by or [f"samples={samples}"]),
                                        f"records_per_shard={per_shard}"), tmp_path, samples)


def assert_corpus_independent_of_workers_and_shard_size(
        config: Callable[[int], CorpusConfig], tmp_path: Path, records: int) -> None:
    """Two workers write every file of one worker byte for byte (the datasheet's timings
    aside), and 1,000 documents a shard hold the same documents and eval sets as 150; `config`
    gives the corpus's config for a number of records a shard, `records` its training
    documents."""
    def gen(name: str, workers: int, per_shard: int) -> tuple[Path, dict]:
        out = tmp_path / name
        return out, generate_corpus(config(per_shard), out, workers=workers, progress=False,
                                    log=lambda *_: None)

    one, two, big = gen("one", 1, 150), gen("two", 2, 150), gen("big", 1, 1000)
    files = [{p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
              if p.is_file() and p.name != "datasheet.md"} for out, _ in (one, two)]
    assert one[1]["records"] == records
    assert len([n for n in files[0] if n.startswith("train/")]) == -(-records // 150)
    assert files[0] == files[1]
    assert _shard_contents(*one) == _shard_contents(*big)
    eval_sets = [n for n in files[0] if n.startswith("eval/")]
    assert eval_sets and all((big[0] / n).read_bytes() == files[0][n] for n in eval_sets)


def _shard_contents(out: Path, manifest: dict) -> list[tuple[bytes, bytes, str]]:
    return [(s["ids"].tobytes(), s["mask"].tobytes(), json.dumps(s["json"]))
            for shard in manifest["shards"] for s in read_shard(out / shard["name"])]


def chi_square_p(observed: np.ndarray, law: np.ndarray) -> float:
    """The chi-square p-value of counts against a law (probabilities or expected counts, scaled
    to the counts' total): a cell the law rules out must be empty, and the cells expecting
    fewer than 5 are merged into one."""
    observed = np.asarray(observed, dtype=float)
    expected = np.asarray(law, dtype=float) / np.sum(law) * observed.sum()
    assert observed[expected == 0].sum() == 0, "draws where the law puts no mass"
    live = expected > 0
    small = live & (expected < 5)
    counts = np.append(observed[live & ~small], observed[small].sum())
    means = np.append(expected[live & ~small], expected[small].sum())
    keep = means > 0
    statistic = ((counts[keep] - means[keep]) ** 2 / means[keep]).sum()
    return float(chi2.sf(statistic, keep.sum() - 1))


FIVE_SIGMA = 5.733e-7  # two-sided tail of 5 sigma: the chi-square tests' level


def assert_law(counts: np.ndarray, law: np.ndarray) -> None:
    """Counts drawn from the law, by chi-square at the 5 sigma level."""
    assert chi_square_p(counts, law) > FIVE_SIGMA, (counts, law)
