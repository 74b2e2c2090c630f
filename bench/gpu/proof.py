"""physlm's GPU proof in one command: every figure of ../shared/GPU.md's checklist, as JSON and
Markdown.

    python3 bench/gpu/proof.py --out DIR            # on a CUDA machine (bench/gpu/run.sh)
    python3 bench/gpu/proof.py --out DIR --cpu-smoke  # the same sections at toy sizes on CPU

Sections, in order (--sections picks some): zero (DeepSpeed ZeRO 0-3 with a kill and a
resume, eager and compiled), generation (QA generation with and without the KV cache),
attention (every backend against the math one), throughput (GPT-2 small, physlm vs HF), tests
(the CUDA-only tests: last, they largely repeat the attention section). Each is timed and fails
alone: its error goes into the JSON and the next one runs; within a section each row (a
contestant, a backend, a stage) fails alone too. results.json and results.md are rewritten
whenever a row finishes, so a command cut off by its time limit still leaves what finished. A
section that would start after --deadline seconds is recorded as skipped, not run; each section
fits its own work and time limits into the time left (a second call with --sections runs what
was skipped).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
# physlm's packages, the CPU benchmarks' shared builders (bench/) and the sections, uninstalled
sys.path[:0] = [str(HERE.parent.parent), str(HERE.parent), str(HERE)]

import attention_section  # noqa: E402
import generation_section  # noqa: E402
import markdown  # noqa: E402
import tests_section  # noqa: E402
import throughput_section  # noqa: E402
import torch  # noqa: E402
import zero_section  # noqa: E402
from context import Context, one_line  # noqa: E402

# the most informative per second first: the CUDA tests mostly repeat the attention section
SECTIONS = {"zero": zero_section.run, "generation": generation_section.run,
            "attention": attention_section.run, "throughput": throughput_section.run,
            "tests": tests_section.run}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="results.json and results.md go here")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="toy sizes on CPU: the whole script end to end, for CI")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma list of {', '.join(SECTIONS)}")
    p.add_argument("--deadline", type=float, default=540.0,
                   help="seconds after start past which no section starts (a device command "
                        "gets 600)")
    args = p.parse_args(argv)
    unknown = sorted(set(args.sections.split(",")) - set(SECTIONS))
    if unknown:
        p.error(f"--sections: unknown {unknown}; known: {list(SECTIONS)}")
    return args


def environment(argv: list[str]) -> dict:
    cuda = torch.cuda.is_available()
    return {"gpu": torch.cuda.get_device_name(0) if cuda else None,
            "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
            "python": sys.version.split()[0],
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join(["python3", "bench/gpu/proof.py", *argv])}


def run_section(name: str, ctx: Context, results: dict, out: Path) -> dict:
    """Run one section; while it runs, what it publishes is written as status "running", and
    kept when it then fails."""
    began, published = time.perf_counter(), {}

    def publish(fields: dict) -> None:
        published.update(fields)
        results["sections"][name] = {"status": "running", **fields,
                                     "seconds": round(time.perf_counter() - began, 1)}
        write(out, results)

    try:
        result = {"status": "ok", **SECTIONS[name](replace(ctx, publish=publish))}
    except Exception as exc:  # a section fails alone; the others still run
        traceback.print_exc()
        result = {"status": "error", **published, "error": one_line(exc)}
    result["seconds"] = round(time.perf_counter() - began, 1)
    return result


def write(out: Path, results: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "results.md").write_text(markdown.render(results))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("proof: no CUDA device; run with --cpu-smoke for the CPU rehearsal", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results = {"environment": environment(argv), "smoke": args.cpu_smoke, "sections": {}}
    with tempfile.TemporaryDirectory(prefix="physlm-proof-") as work:
        ctx = Context(smoke=args.cpu_smoke, work=Path(work),
                      device=torch.device("cpu" if args.cpu_smoke else "cuda"),
                      started=started, deadline=args.deadline)
        for name in args.sections.split(","):
            if ctx.left() <= 0:
                results["sections"][name] = {"status": "skipped",
                                             "error": f"past the {args.deadline:.0f} s deadline"}
            else:
                print(f"proof: section {name} ({ctx.left():.0f} s left)", flush=True)
                results["sections"][name] = run_section(name, ctx, results, args.out)
                print(f"proof: {name} {results['sections'][name]['status']} in "
                      f"{results['sections'][name]['seconds']} s", flush=True)
            write(args.out, results)
    failed = [n for n, s in results["sections"].items() if s["status"] != "ok"]
    row_errors = [f"{n}: {row['error']}" for n, s in results["sections"].items()
                  for row in s.get("rows", []) if "error" in row]
    print(f"proof: wrote {args.out / 'results.json'}; sections not ok: {failed or 'none'}; "
          f"rows with an error: {len(row_errors)}", *row_errors, sep="\n  ")
    return 1 if failed or row_errors else 0


if __name__ == "__main__":
    sys.exit(main())
