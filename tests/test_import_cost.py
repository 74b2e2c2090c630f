"""Reading an experiment imports neither torch, deepspeed nor numba: sweeps, status and dry runs
read many experiment files, importing torch alone takes seconds, and numba with its first
compiled call about one (the corpus families that compile loops import it when they draw)."""

import json
import subprocess
import sys

import configs

# in a fresh interpreter: read every shipped experiment and suite, noting the import chain of
# the first module that imports torch, deepspeed or numba (the assertion then names it)
SCRIPT = """
import json, sys, traceback

HEAVY = ("torch", "deepspeed", "numba")

class Watch:
    chain = None
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY and Watch.chain is None:
            Watch.chain = [f"{f.filename}:{f.lineno}" for f in traceback.extract_stack()
                           if "importlib" not in f.filename][:-1]
        return None

sys.meta_path.insert(0, Watch())
import configs
from launch.suite import is_suite, load_suite
from trainer.config import load_experiment

read = []
for name in configs.names("experiment"):
    path = configs.find("experiment", name)
    (load_suite if is_suite(path) else load_experiment)(path, [])
    read.append(name)
print(json.dumps({"read": read, "chain": Watch.chain,
                  "modules": [m for m in HEAVY if m in sys.modules]}))
"""


def test_reading_every_shipped_experiment_imports_neither_torch_deepspeed_nor_numba():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["read"] == configs.names("experiment") and len(result["read"]) >= 20
    assert result["modules"] == [], "imported by:\n" + "\n".join(result["chain"])
