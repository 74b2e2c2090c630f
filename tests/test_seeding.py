import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from corpus_gen.core.seeding import derive_key, feistel_permute, randint

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("domain", [1, 2, 7, 1000, 4097, 160_000])
def test_feistel_permute_is_a_bijection_of_the_domain(domain):
    out = feistel_permute(np.arange(domain), domain, key=123)
    assert sorted(out.tolist()) == list(range(domain))


def test_feistel_permute_depends_on_key_and_is_pure_per_index():
    a = feistel_permute(np.arange(1000), 1000, key=1)
    b = feistel_permute(np.arange(1000), 1000, key=2)
    assert (a != b).mean() > 0.9
    # one index alone maps where it maps inside the full batch
    assert feistel_permute(np.array([417]), 1000, key=1)[0] == a[417]


# every public draw of the module, as plain ints: what another process must reproduce exactly
DRAWS = """
import json, sys
import numpy as np
from corpus_gen.core.seeding import derive_key, feistel_permute, hash_u64, randint
keys = [derive_key(0, "bios", "names"), derive_key(1, "bios", "names"), derive_key(3, "x"),
        derive_key(2**40 + 7, "igsm", 5, ("op", 2), None, 1.5, "\\u00e9")]
index = np.arange(0, 5000, 7)
json.dump({"keys": keys, "hash": hash_u64(keys[0], index).tolist(),
           "randint": randint(keys[1], index, 97).tolist(),
           "permute": feistel_permute(index, 160_000, keys[2]).tolist(),
           "str_hash": hash("bios")}, sys.stdout)
"""


def _draws_in_a_child(hash_seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", DRAWS], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def _draws_here() -> dict:
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(DRAWS, namespace)
    return json.loads(out.getvalue())


def test_draws_are_identical_in_other_processes_whatever_their_hash_seed():
    here = _draws_here()
    children = [_draws_in_a_child(seed) for seed in ("0", "1", "4242")]
    # the children really ran under different str hashes (so a key built on hash() would differ)
    assert len({child.pop("str_hash") for child in children}) == 3
    here.pop("str_hash")
    for child in children:
        assert child == here  # exact: every key and every drawn integer
    # and fixed values, so a change of the scheme itself (not only of the process) is caught
    assert here["keys"][2] == derive_key(3, "x") == 13337591031270513106
    assert here["keys"][0] != here["keys"][1]
    assert len(here["hash"]) == len(here["permute"]) == 715
    assert len(set(here["permute"])) == 715 and max(here["permute"]) < 160_000


def test_randint_is_roughly_uniform():
    draws = randint(derive_key(0, "u"), np.arange(120_000), 12)
    counts = np.bincount(draws, minlength=12)
    assert draws.min() == 0 and draws.max() == 11
    assert np.abs(counts / 10_000 - 1).max() < 0.05
