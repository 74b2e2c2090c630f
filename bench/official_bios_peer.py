"""Peer benchmark: the official bioS generator of facebookresearch/PhysicsLM4.

Obtain a checkout (outside this repo), e.g.::

    git --git-dir=<mirror> archive HEAD data-synthetic-pretrain | tar -x -C /tmp/physlm4

then ``python bench/official_bios_peer.py --checkout /tmp/physlm4 --people 100000 [--permute]``.

Nothing of the official code is copied here; ``Capo-bioS-bioR.py`` is loaded from the checkout at
run time. Stdlib only (the script's ``np`` is used solely by its bioR prompt code, never called).
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import time
import types
from pathlib import Path
from typing import Any

_CAPO = Path("data-synthetic-pretrain") / "Capo-bioS-bioR"
_SCRIPT = "Capo-bioS-bioR.py"
_PERMUTE_FN = "augmentation_permutation2"
_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


def _capo_dir(checkout: str | Path) -> Path:
    root = Path(checkout)
    for cand in (root / _CAPO, root):
        if (cand / _SCRIPT).is_file():
            return cand
    raise FileNotFoundError(f"{_SCRIPT} not found under {root} or {root / _CAPO}")


def _load_official(capo: Path, rng: random.Random) -> types.ModuleType:
    """Execute the official script as a module (its file name is not importable as-is).

    Two run-time shims, no other change: the script uses ``random`` without importing it, so a
    seeded ``random.Random`` is bound to that name; and ``augmentation_permutation2`` builds the
    permuted text but falls off its end (returns None), so ``return text`` is appended to it in
    the parsed AST. That statement costs nothing measurable and lets us count output characters.
    """
    path = capo / _SCRIPT
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        fn = node if isinstance(node, ast.FunctionDef) else None
        if fn is not None and fn.name == _PERMUTE_FN and not isinstance(fn.body[-1], ast.Return):
            fn.body.append(ast.Return(value=ast.Name(id="text", ctx=ast.Load())))
    ast.fix_missing_locations(tree)
    mod = types.ModuleType("capo_bios_bior")
    mod.__file__ = str(path)
    mod.__dict__["random"] = rng
    exec(compile(tree, str(path), "exec"), mod.__dict__)  # noqa: S102 -- loads the official script
    return mod


def _field(capo: Path, name: str) -> list[str]:
    text = (capo / "fields" / f"{name}.txt").read_text(encoding="utf-8")
    return [s.strip() for s in text.splitlines() if s.strip()]


def _sample_people(n: int, fields: dict[str, list[Any]], rng: random.Random) -> list[dict]:
    """Emulated sampler (the official repo ships none): Part 3.1 bioS distribution.

    Unique (first, middle, last) by rejection, as in the repo's multihop-birthyear.py; uniform
    month, day 1-28, year 1900-2099, birth city, university, major, employer; work city is the
    employer's headquarters city (company.txt is ``name; city``); ``id`` = index, whose parity
    picks He/She inside ``get_text_simple3``.
    """
    choice, randint = rng.choice, rng.randint
    first, middle, last = fields["first_name"], fields["middle_name"], fields["last_name"]
    cities, unis, majors, companies = (
        fields["city"], fields["university"], fields["field"], fields["company"]
    )  # fmt: skip
    seen: set[tuple[str, str, str]] = set()
    people: list[dict] = []
    while len(people) < n:
        name = (choice(first), choice(middle), choice(last))
        if name in seen:
            continue
        seen.add(name)
        company, company_city = choice(companies)
        people.append({
            "id": len(people),
            "first_name": name[0], "middle_name": name[1], "last_name": name[2],
            "birthmonth": choice(_MONTHS), "birthday": randint(1, 28),
            "birthyear": randint(1900, 2099), "birthcity": choice(cities),
            "university": choice(unis), "field": choice(majors),
            "company1name": company, "company1city": company_city,
        })  # fmt: skip
    return people


def run_official_bios(
    checkout: str | Path, n_people: int, permute: bool, seed: int = 0
) -> dict[str, Any]:
    """Generate n_people bioS biographies (single, one per person) text-only with the official
    generator found in a checkout of facebookresearch/PhysicsLM4; return
    {"bios": count, "seconds": wall seconds of generation only, "chars": total characters}.

    Text: official ``get_text_simple3(person)`` (defaults order=0, reverse_md=False): six
    sentences in fixed order, one random template per attribute (46-52 templates each), full
    name in the first sentence and He/She after. permute=True additionally passes each text
    through the official ``augmentation_permutation2(person, text)``, which shuffles the sentences,
    moves the full name to the new first sentence and pronouns to the rest.

    People are sampled by our emulation (``_sample_people``) since the official code has no
    sampler; "seconds" times sampling + text (+ permutation), excluding script/field loading.
    Extra keys "people_seconds" and "text_seconds" give the split.
    """
    capo = _capo_dir(checkout)
    rng = random.Random(seed)
    mod = _load_official(capo, rng)
    fields: dict[str, list[Any]] = {
        k: _field(capo, k)
        for k in ("first_name", "middle_name", "last_name", "city", "university", "field")
    }
    fields["company"] = [tuple(s.split("; ", 1)) for s in _field(capo, "company")]
    get_text, permute_fn = mod.get_text_simple3, getattr(mod, _PERMUTE_FN)

    t0 = time.perf_counter()
    people = _sample_people(n_people, fields, rng)
    t1 = time.perf_counter()
    if permute:
        bios = [permute_fn(p, get_text(p)) for p in people]
    else:
        bios = [get_text(p) for p in people]
    t2 = time.perf_counter()
    return {
        "bios": len(bios),
        "seconds": t2 - t0,
        "chars": sum(map(len, bios)),
        "people_seconds": t1 - t0,
        "text_seconds": t2 - t1,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", required=True, help="PhysicsLM4 checkout (or its Capo dir)")
    ap.add_argument("--people", type=int, required=True)
    ap.add_argument("--permute", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(json.dumps(run_official_bios(args.checkout, args.people, args.permute, args.seed)))


if __name__ == "__main__":
    main()
