"""Peer benchmark: the official CFG generator and DPs of facebookresearch/PhysicsLM4
(``data-synthetic-pretrain/Lano-cfg``, Physics of Language Models Part 1).

Obtain a checkout (outside this repo), e.g.::

    git --git-dir=<mirror> archive HEAD data-synthetic-pretrain/Lano-cfg | tar -x -C /tmp/physlm4

then (``--checkout`` may be the checkout's root or its Lano-cfg folder; the environment variable
PHYSLM4_CHECKOUT stands in for it)::

    python bench/official_cfg_peer.py --checkout /tmp/physlm4 sample --strings 2000
    python bench/official_cfg_peer.py --checkout /tmp/physlm4 membership --input strings.json
    python bench/official_cfg_peer.py --checkout /tmp/physlm4 next-token --input strings.json

Nothing of the official code is copied here: ``data_cfg.py`` is imported from the checkout at
run time and only its public methods are called, as its demos call them:
- sampling: ``CFG_Config.from_graph("configs/<grammar>.json")``, then
  ``generate_onedata_pure(random.Random(seed))`` once per string (demo0);
- membership: ``solve_dp_noneq_fast(seq, no_debug=True)``, whose first value is 0 for a member
  and 10000 for a non-member (demo0); it also builds one parse and counts the parses;
- next-token distribution: ``solve_dp_prob_highprecision(seq, debug=False)`` (demo2): ``Decimal``
  arithmetic at 100 digits; its rows (n + 1 of them) are [P(EOS), P(t_1), ..., P(t_T)] after each
  prefix w[:0], ..., w[:n]. It needs a member string (it divides by the prefix's probability,
  and an impossible prefix raises ``decimal.InvalidOperation``). After the call the config holds
  its inside chart (``opt``), whose root entry over the whole string is P(string); that value is
  reported too.

Strings cross this interface as terminal indices 0..T-1 (physlm's), mapped to and from the
official token ids through the config's own ``idx[depth]`` (1..3 for cfg3f).

One import-time shim, no change to any code path used here: ``data_cfg.py`` imports
``xlsxwriter``, used only by ``build_graph`` (drawing a new random grammar, never called here);
if it is not installed, a stub module stands in while ``data_cfg`` is imported. ``torch`` and
``tqdm``, imported at its top as well, must be installed (torch is used only by
``print_graph``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import sys
import time
import types
from pathlib import Path
from typing import Any

from peer_imports import stubbed_modules

_LANO = Path("data-synthetic-pretrain") / "Lano-cfg"
_MODULE = "data_cfg"
ENV = "PHYSLM4_CHECKOUT"


def lano_dir(checkout: str | Path | None) -> Path:
    """The Lano-cfg folder of a PhysicsLM4 checkout (its root or the folder itself)."""
    if checkout is None:
        checkout = os.environ.get(ENV)
    if not checkout:
        raise FileNotFoundError(f"no official checkout: pass --checkout or set {ENV}")
    root = Path(checkout).resolve()
    for cand in (root / _LANO, root):
        if (cand / f"{_MODULE}.py").is_file():
            return cand
    raise FileNotFoundError(f"{_MODULE}.py not found under {root} or {root / _LANO}")


def load_official(checkout: str | Path | None) -> types.ModuleType:
    """Import the official ``data_cfg`` module from the checkout."""
    folder = lano_dir(checkout)
    loaded = sys.modules.get(_MODULE)
    if loaded is not None:
        if Path(loaded.__file__).resolve().parent != folder:
            raise RuntimeError(f"module {_MODULE} is already imported from {loaded.__file__}")
        return loaded
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    stubs = {}
    try:
        importlib.import_module("xlsxwriter")
    except ImportError:
        stubs["xlsxwriter"] = types.ModuleType("xlsxwriter")
    with stubbed_modules(stubs):
        return importlib.import_module(_MODULE)


Seconds = tuple[float, float]  # (wall, CPU of this process)


def _now() -> Seconds:
    return time.perf_counter(), time.process_time()


def _since(began: Seconds) -> Seconds:
    return time.perf_counter() - began[0], time.process_time() - began[1]


class Official:
    """One official grammar config and the terminal-id mapping."""

    def __init__(self, checkout: str | Path | None, grammar: str = "cfg3f") -> None:
        module = load_official(checkout)
        path = lano_dir(checkout) / "configs" / f"{grammar}.json"
        self.config = module.CFG_Config.from_graph(str(path))
        self.ids = list(self.config.idx[self.config.depth])  # physlm terminal k -> official id
        self.index = {token: k for k, token in enumerate(self.ids)}
        self.root = self.config.all[0][0].id

    def to_official(self, string: list[int]) -> list[int]:
        return [self.ids[k] for k in string]

    def from_official(self, seq: list[int]) -> list[int]:
        return [self.index[token] for token in seq]

    def sample(self, n: int, seed: int) -> tuple[list[list[int]], Seconds]:
        """n strings (physlm terminal indices) and the seconds generating them took."""
        rng = random.Random(seed)
        generate = self.config.generate_onedata_pure
        began = _now()
        drawn = [generate(rng) for _ in range(n)]
        seconds = _since(began)
        return [self.from_official(seq) for seq in drawn], seconds

    def membership(self, string: list[int]) -> tuple[bool, Seconds]:
        """Whether the official fast DP accepts the string, and its seconds."""
        seq = self.to_official(string)
        began = _now()
        best = self.config.solve_dp_noneq_fast(seq, no_debug=True)[0]
        return best == 0, _since(began)

    def next_token(self, string: list[int]) -> tuple[list[list[float]], float, Seconds]:
        """The official high-precision next-token rows ([EOS, t_1..t_T] per prefix), P(string)
        from its inside chart, and the seconds the call took (a member string only)."""
        seq = self.to_official(string)
        began = _now()
        probs, _ = self.config.solve_dp_prob_highprecision(seq, debug=False)
        seconds = _since(began)
        whole = float(self.config.opt[0][len(seq) - 1][self.root][0])
        return probs, whole, seconds


def run(task: str, checkout: str | Path | None, grammar: str, strings: list[list[int]],
        n: int, seed: int) -> dict[str, Any]:
    """The task's result; every "seconds" is [wall, CPU] (the import and grammar load
    excluded)."""
    official = Official(checkout, grammar)
    if task == "sample":
        drawn, seconds = official.sample(n, seed)
        return {"strings": drawn, "seconds": seconds,
                "tokens": sum(map(len, drawn))}
    if task == "membership":
        verdicts = [official.membership(s) for s in strings]
        return {"member": [v for v, _ in verdicts], "seconds": [t for _, t in verdicts]}
    if task == "next-token":
        rows = [official.next_token(s) for s in strings]
        return {"probs": [r[0] for r in rows], "string_probability": [r[1] for r in rows],
                "seconds": [r[2] for r in rows]}
    raise ValueError(task)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", help=f"PhysicsLM4 checkout or its Lano-cfg folder (or ${ENV})")
    ap.add_argument("--grammar", default="cfg3f", help="a config under Lano-cfg/configs")
    ap.add_argument("task", choices=["sample", "membership", "next-token"])
    ap.add_argument("--strings", type=int, default=1000, help="sample: how many strings")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--input", help="membership / next-token: a JSON list of strings, each a "
                                    "list of terminal indices 0..T-1")
    ap.add_argument("--output", help="write the JSON result here instead of stdout")
    args = ap.parse_args()
    strings = json.loads(Path(args.input).read_text()) if args.input else []
    result = json.dumps(run(args.task, args.checkout, args.grammar, strings, args.strings,
                            args.seed))
    if args.output:
        Path(args.output).write_text(result)
    else:
        print(result)


if __name__ == "__main__":
    main()
