"""Generator versions: a corpus's bytes change only together with its generator version.

The fingerprint a corpus is cached and resumed under hashes its config and
`generator_version(config)` (the core's CORE_VERSION and the family's `version`). So a change
of output must come with a version bump, or `physlm run` and a resumed `gen` would keep shards the
current code no longer writes. This test pins the sha256 of every file (tokenizer, shards, eval
sets) of small configs per generator version, in tests/golden/generators.json:

- output changed, version not bumped: fails, asking for the bump;
- version bumped, digests not recorded: fails until they are. Record them with
  `PHYSLM_RECORD_GOLDEN=1 python -m pytest tests/test_golden.py`, which only ever adds the
  entry of a version not recorded yet: a recorded version's digests are never rewritten.
"""

import hashlib
import json
import os
from pathlib import Path

import pytest

from corpus_gen.core.config import load_config
from corpus_gen.core.generate import generate_corpus, generator_version
from corpus_gen.core.manifest import manifest_entries
from corpus_gen.core.registry import schemas

GOLDEN = Path(__file__).parent / "golden" / "generators.json"
SMALL = ["tokenizer.vocab_size=800", "tokenizer.sample_records=300"]
CONFIGS = {  # family -> name -> overrides
    "bios": {
        "single": ["people=200"],
        "multi3_permute_fullname": ["people=120", "variant=multi3+permute+fullname"],
        "mix_celebrity_answer_loss": ["people=200", "celebrities=30", "mode=mix",
                                      "qa_copies=2", "qa_loss=answer"],
        "bior_mix": ["people=80", "style=r", "mode=mix"],
        "junk_domain_mix_capacity": ["people=100", "variant=multi2_permute", "mode=mix",
                                     "junk_ratio=3", "domain_token=true", "capacity=true"],
    },
    "igsm": {
        "med_pq_retry": ["problems=200", "eval_problems=20", "retry_rate=0.3"],
        "hard_qp_reask_fake_masked": ["problems=120", "eval_problems=10", "difficulty=hard",
                                      "format=qp", "reask=true", "retry_rate=0.2",
                                      "retry_kind=fake", "retry_mask=true"],
    },
    "cfg": {
        "cfg3f": ["grammar=cfg3f", "samples=400", "eval_samples=20", "tokenizer.vocab_size=300"],
        "random_grammar": ["grammar=random", "random.sizes=[1,2,3,2]", "random.rules=[2,3]",
                           "samples=300", "eval_samples=10", "tokenizer.vocab_size=300"],
    },
    # fixed vocabularies: no tokenizer options (SMALL is not added)
    "depo": {
        "one_token_words": ["max_n=20", "max_k=4", "mini_vocab=24", "min_len=1", "max_len=1",
                            "samples=300", "eval_samples=5"],
        "long_words": ["max_n=20", "max_k=8", "mini_vocab=3", "min_len=3", "max_len=5",
                       "samples=300", "eval_samples=5"],
    },
    "brevo": {
        "single_token": ["max_n=20", "mini_vocab=20", "min_len=1", "max_len=1", "samples=300",
                         "eval_samples=5"],
        "words_query_last": ["max_n=20", "mini_vocab=4", "min_len=2", "max_len=3",
                             "query=last", "samples=300", "eval_samples=5"],
    },
    "mano": {
        "asm": ["max_ops=6", "samples=300", "eval_samples=5"],
        "with_division": ["max_ops=4", "ops=+-*/", "samples=300", "eval_samples=5"],
    },
    "birth": {
        "frequent_uniform": ["seq_len=64", "samples=300", "eval_samples=5"],
        "drawn_bigram_all": ["seq_len=48", "trigger_mode=drawn", "output_mode=bigram",
                             "loss=all", "samples=300", "eval_samples=5"],
        "held_out": ["seq_len=32", "output_mode=held_out", "samples=300", "eval_samples=5"],
    },
    "markov": {
        "switching": ["seq_len=40", "samples=300", "eval_samples=5"],
        "fixed_alphabet3": ["table=fixed", "order=2", "alphabet=3", "seq_len=40",
                            "samples=300", "eval_samples=5"],
        "fresh_order2": ["table=fresh", "order=2", "initial=uniform", "seq_len=40",
                         "samples=300", "eval_samples=5", "reference_samples=64"],
    },
    "recall": {
        "paper": ["samples=300"],
        "zipf_distinct": ["subjects=8", "relations=3", "distinct_answers=true",
                          "subject_zipf=1.0", "relation_zipf=0.5", "seq_len=12", "samples=300"],
    },
    "khop": {
        "paper_alphabet": ["seq_len=40", "max_hops=8", "samples=300", "eval_samples=5"],
        "binary_weighted": ["alphabet=2", "max_hops=3", "seq_len=12", "hop_weights=[0,1,1,2]",
                            "samples=300", "eval_samples=5"],
    },
    "biod": {
        "bios_pools": ["people=300"],
        "random_junk": ["people=150", "name_pools=[20,20]", "renderings=2", "junk_ratio=7"],
        "biod_junk_domain": ["people=200", "name_pools=[20,20]", "attributes=3", "chunks=2",
                             "dictionary=10", "chunk_len=2", "alphabet=8", "renderings=2",
                             "junk_ratio=3", "junk=biod", "domain_token=true"],
    },
}
FIXED_VOCABULARY = ("depo", "brevo", "mano", "birth", "markov", "recall", "khop", "biod")


def _digest(family: str, overrides: list[str], tmp_path: Path) -> tuple[str, str]:
    """(generator version, sha256 over the names and sha256s of every file the corpus holds)."""
    (tmp_path / "c.yaml").write_text(f"family: {family}\n")
    small = [] if family in FIXED_VOCABULARY else SMALL
    config = load_config(tmp_path / "c.yaml", small + overrides + ["records_per_shard=150"],
                         schemas())
    manifest = generate_corpus(config, tmp_path / "corpus", progress=False, log=lambda *_: None)
    lines = sorted(f"{entry['name']} {entry['sha256']}" for entry in manifest_entries(manifest))
    return generator_version(config), hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _record(family: str, version: str, name: str, digest: str) -> None:
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    recorded = golden.setdefault(family, {})
    if version in recorded and name in recorded[version]:
        return  # never rewrite a recorded version
    recorded.setdefault(version, {})[name] = digest
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")


@pytest.mark.parametrize(("family", "name"), [(f, n) for f in CONFIGS for n in CONFIGS[f]])
def test_output_changes_only_with_the_generator_version(family, name, tmp_path):
    version, digest = _digest(family, CONFIGS[family][name], tmp_path)
    if os.environ.get("PHYSLM_RECORD_GOLDEN"):
        _record(family, version, name, digest)
    recorded = json.loads(GOLDEN.read_text()).get(family, {})
    assert version in recorded, (
        f"generator version {version} has no recorded digests: if output changed on purpose, "
        "record them: PHYSLM_RECORD_GOLDEN=1 python -m pytest tests/test_golden.py")
    assert recorded[version].get(name) == digest, (
        f"{family} output of config {name!r} changed under the same generator version "
        f"{version}: bump the family's version where it registers (corpus_gen/{family}/"
        "__init__.py), or CORE_VERSION in corpus_gen/core/generate.py if the core's output "
        "changed, then record the new digests")


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part.rpartition("-")[2]) for part in version.split("/"))


def test_the_code_is_at_the_newest_recorded_version_of_each_family():
    """Older versions' digests stay as history; the code never goes back to one."""
    golden = json.loads(GOLDEN.read_text())
    for family in CONFIGS:
        version = generator_version(schemas()[family](family=family))
        assert set(golden[family][version]) == set(CONFIGS[family])
        assert all(_numbers(old) <= _numbers(version) for old in golden[family])
