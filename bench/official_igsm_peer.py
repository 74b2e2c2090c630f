"""Peer benchmark: the official iGSM generator of facebookresearch/iGSM.

Obtain a checkout (outside this repo) holding its packages ``const``, ``data_gen``, ``math_gen``
and ``tools``, e.g.::

    git --git-dir=<mirror> archive HEAD const data_gen math_gen tools | tar -x -C /tmp/igsm_official

then::

    python bench/official_igsm_peer.py --checkout /tmp/igsm_official --problems 500 --difficulty med

Nothing of the official code is copied here: its packages are imported from the checkout at run
time. A problem is made exactly as the official README's ``get_prob_sol_ans_triple`` does: a new
``IdGen(max_op, max_edge, perm_level=5, detail_level=0)`` per problem (med: 15 / 20, hard: 21 /
28), then ``gen_prob(range(23), p_format="pq")``. The "light" op law is drawn in ``IdGen``'s
constructor, so one instance per problem is what gives the official op distribution.

Two import-time shims, no change to the generation path:
- ``tools.tools`` builds a GPT-2 tokenizer at import (``GPT2Tokenizer.from_pretrained('gpt2')``,
  which needs the network or a local copy). A stub ``transformers`` module is in place while
  ``tools.tools`` is imported, whose tokenizer returns an empty encoding: the timed work is the
  official problem + solution text, not GPT-2 tokenization (which would only slow it down).
- ``pandas`` (used only by ``tools.display_table``, never here) is stubbed if not installed.
The previous ``sys.modules`` entries are restored after the import.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import sys
import time
import types
from collections import Counter
from pathlib import Path
from typing import Any

from peer_imports import stubbed_modules

PRESETS = {"med": (15, 20), "hard": (21, 28)}  # official README: (max_op, max_edge)
_PACKAGES = ("const", "data_gen", "math_gen", "tools")


class _NoTensor:
    def tolist(self) -> list[int]:
        return []


class _NoTokenizer:
    """Stands in for the GPT-2 tokenizer: ``encode(text, return_tensors='pt')[0].tolist()``."""

    _EMPTY = (_NoTensor(),)

    def encode(self, text: str, return_tensors: str | None = None) -> tuple[_NoTensor]:
        return self._EMPTY

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        return ""

    @classmethod
    def from_pretrained(cls, *_args: Any, **_kwargs: Any) -> _NoTokenizer:
        return cls()


def _stub(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def _comes_from(module: types.ModuleType, root: Path) -> bool:
    """Whether an imported (namespace) package lies under root."""
    paths = list(getattr(module, "__path__", [])) or [getattr(module, "__file__", None) or ""]
    return all(str(p).startswith(str(root)) for p in paths)


def load_official(checkout: str | Path) -> type:
    """Import the official packages from `checkout`; return its ``IdGen`` class."""
    root = Path(checkout).resolve()
    missing = [p for p in _PACKAGES if not (root / p).is_dir()]
    if missing:
        raise FileNotFoundError(f"{root}: not an iGSM checkout (missing {', '.join(missing)})")
    clash = [p for p in _PACKAGES if p in sys.modules and not _comes_from(sys.modules[p], root)]
    if clash:
        raise RuntimeError(f"modules {clash} are already imported from elsewhere")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    stubs = {"transformers": _stub("transformers", GPT2Tokenizer=_NoTokenizer)}
    try:
        importlib.import_module("pandas")
    except ImportError:
        stubs["pandas"] = _stub("pandas")
    with stubbed_modules(stubs):
        importlib.import_module("tools.tools")
        id_gen = importlib.import_module("data_gen.pretrain.id_gen")
    return id_gen.IdGen


def run_official_igsm(checkout: str | Path, n_problems: int, difficulty: str, seed: int = 0
                      ) -> dict[str, Any]:
    """Generate `n_problems` iGSM problems (problem text, question, solution, answer) with the
    official generator, one core; return {"problems", "seconds" (generation only, excluding the
    import), "chars" (problem + solution text), "ops": Counter of the official ``n_op``,
    "steps": Counter of solution sentences}."""
    max_op, max_edge = PRESETS[difficulty]
    id_gen_class = load_official(checkout)
    random.seed(seed)  # the official code draws from the global generators (tools.fix_seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy is a dependency of both projects
        pass
    hashes = list(range(23))
    ops: Counter[int] = Counter()
    steps: Counter[int] = Counter()
    chars = 0
    began = time.perf_counter()
    for _ in range(n_problems):
        gen = id_gen_class(max_op=max_op, max_edge=max_edge, perm_level=5, detail_level=0)
        gen.gen_prob(hashes, p_format="pq")
        chars += len(gen.prob) + len(gen.sol)
        ops[int(gen.problem.n_op)] += 1
        steps[len(gen.problem.solution)] += 1
    seconds = time.perf_counter() - began
    return {"problems": n_problems, "seconds": seconds, "chars": chars, "ops": ops,
            "steps": steps}


def sample(checkout: str | Path, difficulty: str, seed: int = 0) -> tuple[str, str, int]:
    """One official problem: (problem + question text, solution text, answer)."""
    max_op, max_edge = PRESETS[difficulty]
    id_gen_class = load_official(checkout)
    random.seed(seed)
    gen = id_gen_class(max_op=max_op, max_edge=max_edge, perm_level=5, detail_level=0)
    gen.gen_prob(list(range(23)), p_format="pq")
    return gen.prob, gen.sol, gen.problem.ans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", required=True, help="checkout of facebookresearch/iGSM")
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--difficulty", choices=sorted(PRESETS), default="med")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", action="store_true", help="print one problem and its solution")
    args = ap.parse_args()
    if args.show:
        prob, sol, ans = sample(args.checkout, args.difficulty, args.seed)
        print(f"{prob}\nSolution:{sol}\nAnswer: {ans}")
        return
    result = run_official_igsm(args.checkout, args.problems, args.difficulty, args.seed)
    result["rate"] = result["problems"] / result["seconds"]
    result["ops"] = dict(sorted(result["ops"].items()))
    result["steps"] = dict(sorted(result["steps"].items()))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
