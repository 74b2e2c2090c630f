"""Peer benchmark: the official Part 4.1 generators of facebookresearch/PhysicsLM4
(``data-synthetic-pretrain/Depo/depo.py``, ``Brevo/brevo.py``, ``Mano/mano.py``).

Obtain a checkout (outside this repo), e.g.::

    git --git-dir=<mirror> archive HEAD data-synthetic-pretrain | tar -x -C /tmp/physlm4

then (``--checkout`` is the checkout's root or its data-synthetic-pretrain folder; the
environment variable PHYSLM4_CHECKOUT stands in for it)::

    python bench/official_p41_peer.py --checkout /tmp/physlm4 sample depo1 --samples 200
    python bench/official_p41_peer.py --checkout /tmp/physlm4 defects

Nothing of the official code is copied here: each script is read from the checkout at run time,
parsed, patched as a syntax tree only as far as it needs to run, and executed as a module of its
own. As shipped none of the three runs: each uses ``random`` without importing it. The patches,
none of which changes what a sample is:
- every script: ``random`` is imported into its namespace, and its module-level ``print(...)``
  demo calls (which draw samples at import) are dropped;
- depo.py: ``bos_token_id`` is never defined; it is set to 9999 (the value brevo.py and mano.py
  use). ``depo_data`` asserts ``len(token_type) == len(list_label)`` on a name defined nowhere
  (a NameError on every call); the name is read as ``text``, the token list the labels are
  parallel to;
- brevo.py: ``defaultdict`` and ``deque`` (from collections) are imported into its namespace.

The training samplers, as the scripts' demos call them (one module-level ``random.Random`` per
script, reseeded here):
- depo: ``depo_data(N, K, mini_vocab=..., min_tlen=..., max_tlen=...)`` (QA=False: training);
- brevo: ``topsort_data(N, multi=...)``;
- mano: ``encode_pure_arithmetic(rng, qids=[1..L], lens=[1..L], ops, knowledge_augment=True)``.

``defects`` runs what the issue says of the shipped code and reports what happened: the
scripts unpatched (their error), Brevo's verifiers on its own samples (the generator ends a
sample with ``eos_token_id`` 9998, the verifiers require the last token to be
``bos_token_id`` 9999, so every sample is rejected; with the last token set to 9999 they
accept), and the query Brevo draws (always the last node of its random node order).
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import os
import random
import sys
import time
import types
from pathlib import Path
from typing import Any

_ROOT = Path("data-synthetic-pretrain")
_SCRIPTS = {"depo": "Depo/depo.py", "brevo": "Brevo/brevo.py", "mano": "Mano/mano.py"}
ENV = "PHYSLM4_CHECKOUT"
BOS = 9999  # depo.py's missing bos_token_id: the value brevo.py and mano.py use
# the paper's training settings (configs/corpus/<name>.yaml reproduce them)
TASKS: dict[str, dict[str, Any]] = {
    "depo1": {"script": "depo", "N": 375, "K": 8, "mini_vocab": 50, "min_tlen": 1,
              "max_tlen": 2},
    "depo2": {"script": "depo", "N": 125, "K": 16, "mini_vocab": 3, "min_tlen": 5,
              "max_tlen": 7},
    "brevo1": {"script": "brevo", "N": 110, "multi": False},
    "brevo2": {"script": "brevo", "N": 50, "multi": True},
    "mano": {"script": "mano", "L": 10, "ops": ["+", "-", "*"]},
}


def scripts_dir(checkout: str | Path | None) -> Path:
    """The data-synthetic-pretrain folder of a PhysicsLM4 checkout (its root or the folder)."""
    if checkout is None:
        checkout = os.environ.get(ENV)
    if not checkout:
        raise FileNotFoundError(f"no official checkout: pass --checkout or set {ENV}")
    root = Path(checkout).resolve()
    for cand in (root / _ROOT, root):
        if (cand / _SCRIPTS["mano"]).is_file():
            return cand
    raise FileNotFoundError(f"{_SCRIPTS['mano']} not found under {root} or {root / _ROOT}")


class _Patch(ast.NodeTransformer):
    """Drops module-level print(...) calls; in `rename`'s function, reads one name as another."""

    def __init__(self, rename: tuple[str, str, str] | None) -> None:
        self.rename = rename  # (function, name, read as)
        self.renamed = 0

    def visit_Module(self, node: ast.Module) -> ast.Module:
        node.body = [s for s in node.body if not _is_print(s)]
        return self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        if self.rename and node.name == self.rename[0]:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id == self.rename[1]:
                    sub.id = self.rename[2]
                    self.renamed += 1
        return node


def _is_print(statement: ast.stmt) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
            and isinstance(statement.value.func, ast.Name) and statement.value.func.id == "print")


def load(script: str, checkout: str | Path | None, patched: bool = True) -> types.ModuleType:
    """The official script as a fresh module (`patched`: as described in this docstring;
    otherwise exactly as shipped, demo prints included)."""
    path = scripts_dir(checkout) / _SCRIPTS[script]
    tree = ast.parse(path.read_text(), str(path))
    module = types.ModuleType(f"official_{script}")
    module.__file__ = str(path)
    if patched:
        patch = _Patch(("depo_data", "token_type", "text") if script == "depo" else None)
        tree = ast.fix_missing_locations(patch.visit(tree))
        if script == "depo" and patch.renamed != 1:
            raise RuntimeError(f"{path}: expected one use of token_type in depo_data, found "
                               f"{patch.renamed}: not the script these patches were made for")
        module.random = random
        if script == "depo":
            module.bos_token_id = BOS
        if script == "brevo":
            module.defaultdict, module.deque = collections.defaultdict, collections.deque
    exec(compile(tree, str(path), "exec"), module.__dict__)
    return module


def sampler(task: str, checkout: str | Path | None, seed: int):
    """A function drawing one official training sample (its token list) for `task`."""
    spec = TASKS[task]
    module = load(spec["script"], checkout)
    if spec["script"] == "depo":
        module.rng = random.Random(seed)
        return lambda: module.depo_data(spec["N"], spec["K"], mini_vocab=spec["mini_vocab"],
                                        min_tlen=spec["min_tlen"], max_tlen=spec["max_tlen"])[0]
    if spec["script"] == "brevo":
        module.rng = random.Random(seed)
        return lambda: module.topsort_data(spec["N"], multi=spec["multi"])[0]
    rng, lengths = random.Random(seed), list(range(1, spec["L"] + 1))
    return lambda: module.encode_pure_arithmetic(rng, lengths, lengths, spec["ops"], True)


def sample(task: str, checkout: str | Path | None, n: int, seed: int) -> dict[str, Any]:
    """n official training samples: samples/s on one core (wall and CPU) and their tokens."""
    draw = sampler(task, checkout, seed)
    began, cpu = time.perf_counter(), time.process_time()
    tokens = sum(len(draw()) for _ in range(n))
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    return {"task": task, "samples": n, "seconds": [wall, cpu], "rate": n / wall,
            "tokens": tokens}


def _unpatched_error(script: str, checkout: str | Path | None) -> str:
    try:
        load(script, checkout, patched=False)
    except Exception as exc:  # what the shipped script raises is the finding
        return f"{type(exc).__name__}: {exc}"
    return "runs"


def _patched_call_error(checkout: str | Path | None) -> str:
    """depo.py with every patch but the token_type one: what depo_data raises."""
    path = scripts_dir(checkout) / _SCRIPTS["depo"]
    tree = ast.fix_missing_locations(_Patch(None).visit(ast.parse(path.read_text())))
    module = types.ModuleType("official_depo_unfixed")
    module.random, module.bos_token_id = random, BOS
    exec(compile(tree, str(path), "exec"), module.__dict__)
    try:
        module.depo_data(10, 3)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "runs"


def defects(checkout: str | Path | None, n: int = 300, seed: int = 0) -> dict[str, Any]:
    """The shipped scripts' defects, each confirmed by running it."""
    found: dict[str, Any] = {f"{s}.py as shipped": _unpatched_error(s, checkout)
                             for s in _SCRIPTS}
    found["depo.py depo_data with bos_token_id and random given"] = _patched_call_error(checkout)
    brevo = load("brevo", checkout)
    rng = random.Random(seed)
    verdicts: dict[str, collections.Counter] = {}
    for multi, verify in ((False, brevo.TopoSortDepthStats.parse_tokens),
                          (True, brevo.TopoSortDepthStats.parse_tokens_multi)):
        counts = verdicts[f"brevo multi={multi}"] = collections.Counter()
        for _ in range(n):
            size = rng.randint(3, 50)
            tokens = brevo.TopoSortDepthStats(size, vocab_size=50).generate_tokens(rng,
                                                                                   multi)[0]
            counts[f"last token {tokens[-1]}"] += 1
            counts["accepted as generated"] += verify(tokens)[0]
            counts["accepted with the last token 9999"] += verify(tokens[:-1] + [BOS])[0]
        counts["samples"] = n
    found["brevo verifiers on the generator's own samples"] = {
        k: dict(v) for k, v in verdicts.items()}
    last = 0
    for i in range(n):  # the same seed twice: the DAG's node order, then the sample's query
        size = 3 + i % 48
        graph = brevo.TopoSortDepthStats(size, vocab_size=50)
        nodes, _ = graph.generate_dag(random.Random(i))
        _, topo, _ = graph.generate_sample(random.Random(i))
        last += topo[-1] == nodes[-1]
    found["brevo query is the last node of the node order"] = f"{last} of {n} samples"
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", help=f"PhysicsLM4 checkout (or ${ENV})")
    sub = ap.add_subparsers(dest="command", required=True)
    one = sub.add_parser("sample", help="time the official training sampler")
    one.add_argument("task", choices=sorted(TASKS))
    one.add_argument("--samples", type=int, default=200)
    one.add_argument("--seed", type=int, default=0)
    sub.add_parser("defects", help="confirm the shipped scripts' defects by running them")
    args = ap.parse_args()
    if args.command == "sample":
        result = sample(args.task, args.checkout, args.samples, args.seed)
    else:
        result = defects(args.checkout)
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
