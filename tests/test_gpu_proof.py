"""bench/gpu/proof.py --cpu-smoke end to end: every section runs at toy sizes on CPU and writes
real figures (the GPU run is the same script; this keeps it from rotting)."""

import importlib
import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("zero", "generation", "attention", "throughput", "tests")  # running order


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("proof")
    # as from a process that trained in-process before (setup() exports MASTER_PORT) and still
    # listens there: the ZeRO workers must each find a rendezvous of their own
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(taken.getsockname()[1])}
        done = subprocess.run([sys.executable, "bench/gpu/proof.py", "--cpu-smoke", "--out",
                               str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                              env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), (out / "results.md").read_text()


def test_every_section_runs_and_is_timed(smoke):
    results, markdown = smoke
    assert results["smoke"] is True and results["environment"]["gpu"] is None
    assert "--cpu-smoke" in results["environment"]["command"]
    assert tuple(results["sections"]) == SECTIONS
    for name in SECTIONS:
        section = results["sections"][name]
        assert section["status"] == "ok", (name, section.get("error"))
        assert section["seconds"] > 0
        assert f"## {name}: ok" in markdown


def test_cuda_tests_are_selected_and_skip_on_cpu(smoke):
    tests = smoke[0]["sections"]["tests"]
    assert tests["skipped"] >= 1 and tests["passed"] == 0 and tests["failed"] == 0
    assert "-m cuda" in tests["command"] and "tests/test_model.py" in tests["command"]


def test_backends_agree_with_math_per_encoding(smoke):
    rows = smoke[0]["sections"]["attention"]["rows"]
    assert not [r for r in rows if "error" in r]
    ran = [r for r in rows if "refused" not in r]
    assert {r["pos"] for r in ran} >= {"none", "learned", "rope", "alibi", "relative"}
    assert {"sdpa", "math", "flex"} <= {r["backend"] for r in ran}
    for row in ran:
        assert row["ran"] == row["backend"], row  # no silent fallback to another backend
        limit = 1e-5 if row["dtype"] == "float32" else 0.05  # bf16: ~8 bits of mantissa
        assert 0 <= row["logits max rel"] < limit, row
        if row["backend"] != "flex":
            assert 0 <= row["grads max rel"] < limit, row
    # bf16 is visibly rounded: a bf16 row equal to fp32 would mean autocast did not run
    assert all(r["logits max abs"] > 0 for r in ran if r["dtype"] == "bfloat16")
    for row in rows:
        if "refused" in row:
            assert row["backend"] != "sdpa" and row["refused"]


def test_flex_forward_is_compared_on_cpu_and_its_gradients_marked_not_run(smoke):
    rows = smoke[0]["sections"]["attention"]["rows"]
    flex = [r for r in rows if r["backend"] == "flex" and "refused" not in r]
    # the encodings flex runs, in fp32 and bf16
    assert {(r["pos"], r["dtype"]) for r in flex} >= {
        (pos, dtype) for pos in ("none", "learned", "rope", "alibi")
        for dtype in ("float32", "bfloat16")}
    for row in flex:  # no flex backward on CPU: sdpa took the pass with gradients
        assert row["grads"] == "not run: with gradients sdpa ran, not flex", row
        assert "grads max rel" not in row


def test_throughput_runs_every_eager_contestant_before_the_compiled_ones(smoke):
    section = smoke[0]["sections"]["throughput"]
    rows = [r for r in section["rows"] if "tokens/s" in r]
    assert not [r for r in section["rows"] if "error" in r or "not started" in r]
    assert {(r["pair"], r["contestant"]) for r in rows} == {
        (pair, name) for pair in ("gpt2", "llama")
        for name in ("physlm eager", "physlm eager + doc mask", "HF eager",
                     "physlm compiled + doc mask")}
    for row in rows:
        assert row["tokens/s"] > 0 and row["MFU"] is None  # no peak FLOP/s for a CPU
        assert math.isfinite(row["vs HF eager"]) and row["vs HF eager"] > 0
    for pair in ("gpt2", "llama"):  # the pair is built alike
        assert len({r["params"] for r in rows if r["pair"] == pair}) == 1
    # what ran: the trainer's default path on CPU is sdpa with the dense document mask
    ran = {(r["pair"], r["contestant"]): r["attention ran"] for r in rows}
    assert ran["gpt2", "physlm eager + doc mask"] == "sdpa"
    assert ran["llama", "HF eager"] == "HF sdpa"


@pytest.fixture
def kit(monkeypatch):
    """import_module for the kit's modules (bench/gpu/, with bench/ for its builders)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    monkeypatch.syspath_prepend(str(ROOT / "bench/gpu"))
    return importlib.import_module


def test_every_eager_contestant_runs_before_the_compiled_ones(kit):
    throughput = kit("throughput_section")
    plan = throughput.planned(throughput.GPU)
    kinds = ["compiled" in name for _, _, name in plan]
    assert kinds == sorted(kinds) and kinds.count(False) == 12  # 2 contexts x 2 pairs x 3
    assert len(plan) == 24 and plan[12][0] == 512  # the compiled ones: context 512 first


def test_no_contestant_starts_past_the_deadline(kit, tmp_path):
    published = []
    ctx = kit("context").Context(smoke=True, work=tmp_path, device=torch.device("cpu"),
                                 started=time.perf_counter() - 100, deadline=100.5,
                                 publish=published.append)
    rows = kit("throughput_section").run(ctx)["rows"]  # 0.5 s left: each needs 1 s at least
    assert len(rows) == 8 and published == []
    for row in rows:
        needs = "5" if "compiled" in row["contestant"] else "1"
        assert row["not started"] == f"0 s left before the deadline; it needs ~{needs} s", row
        assert "tokens/s" not in row


def test_a_compiled_zero_run_is_compared_with_eager_or_gives_the_refusal(kit, tmp_path):
    zero = kit("zero_section")
    eager, compiled = tmp_path / "straight-3", tmp_path / "compiled-3"
    for run_dir, losses in ((eager, [4.0, 3.0]), (compiled, [4.0, 3.09])):
        run_dir.mkdir()
        (run_dir / "metrics.jsonl").write_text("".join(
            json.dumps({"step": step, "loss": loss}) + "\n" for step, loss in enumerate(losses)))
    row = zero.compare_compiled(eager, compiled)
    assert row["steps"] == 2 and row["last loss"] == 3.09
    assert row["loss max abs diff vs eager"] == pytest.approx(0.09)
    assert row["loss max rel diff vs eager"] == pytest.approx(0.03)
    assert row["within 2% of eager"] is False
    (tmp_path / "compiled-3.refused").write_text("train.compile: refused at zero_stage 3\n")
    assert zero.compare_compiled(eager, compiled) == {
        "refused": "train.compile: refused at zero_stage 3"}


def test_killed_runs_resume_to_the_uninterrupted_losses(smoke):
    section = smoke[0]["sections"]["zero"]
    rows = section["rows"]
    assert [(r["zero stage"], r["compile"]) for r in rows] == [(0, False), (1, False)]
    assert section["compiled"].startswith("not run on CPU: ")
    for row in rows:
        assert row["exit code"] == -9 and row["resumed from"] == "step-000004"
        assert row["steps"] == 8 and row["losses identical"] and row["weights identical"]
        assert row["loss max abs diff"] == 0.0 and row["last loss"] < row["first loss"]


def test_generation_with_cache_answers_as_without(smoke):
    rows = smoke[0]["sections"]["generation"]["rows"]
    assert [(r["dtype"], r["KV cache"]) for r in rows] == [
        ("float32", True), ("float32", False), ("bfloat16", True), ("bfloat16", False)]
    assert rows[0]["answers equal to no-cache"] == "8/8"
    for row in rows:  # no EOS: every prompt gets its 8 new tokens
        assert row["questions/s"] > 0
        assert row["new tokens/s"] == pytest.approx(8 * row["questions/s"])
