"""What the integer-token family tests (depo, brevo, mano) share: a family's config from
overrides, its training records and its one eval set's rows, generated in process."""

from omegaconf import OmegaConf

from corpus_gen.core.config import CorpusConfig, corpus_config
from corpus_gen.core.registry import get_family, schemas
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
