"""The trainer's host-memory setting (glibc): the buffers a training step frees are reused by
the next step instead of going back to the kernel and coming back as fresh pages that fault in
one by one."""

import ctypes
import functools
import json
import subprocess
import sys

import pytest

STEPS = """
import ctypes, json, mmap, resource, sys, torch

class MallInfo2(ctypes.Structure):  # malloc.h's struct mallinfo2
    _fields_ = [(name, ctypes.c_size_t) for name in "arena ordblks smblks hblks hblkhd "
                "usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
def held():  # bytes the allocator holds from the kernel: heap plus mmapped blocks
    info = libc.mallinfo2()
    return info.arena + info.hblkhd
def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

# Whether this kernel counts a fault per small page, as the steps' buffers get them: touch a
# fresh 16 MiB mapping, as malloc makes one, page by page (some sandboxes count no faults at
# all, and transparent huge pages set to "always" would fault it in 2 MiB at a time).
probe = mmap.mmap(-1, 1 << 24)
before = minor_faults()
for offset in range(0, 1 << 24, mmap.PAGESIZE):
    probe[offset] = 1
probe_faults = minor_faults() - before
probe.close()

if sys.argv[1] == "kept":
    from trainer.host_memory import keep_freed_host_memory
    assert keep_freed_host_memory()
torch.set_num_threads(1)  # one allocating thread, so one malloc arena
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 64))  # activations of 1 and 64 MiB
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(4096, 64)
def step():
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()
for _ in range(10):  # the heap settles
    step()
before, held_after_step = minor_faults(), []
for _ in range(10):
    step()
    held_after_step.append(held())
step_faults = minor_faults() - before
big = torch.ones(1 << 24)  # 64 MiB: above glibc's largest default mmap threshold (32 MiB)
held_with_big = held()
del big
print(json.dumps({"probe_faults": probe_faults, "step_faults": step_faults,
                  "held_after_step": held_after_step,
                  "handed_back_by_a_free": held_with_big - held()}))
"""

GLIBC = (sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "gnu_get_libc_version")
         and hasattr(ctypes.CDLL(None), "mallinfo2"))  # glibc 2.33 and later


@functools.cache
def _ten_steps(arm: str) -> dict:
    """Page faults and the allocator's holdings in 10 steps, after 10 untimed ones, in a fresh
    process; with the probe's count of faults on 4,096 freshly touched pages."""
    out = subprocess.run([sys.executable, "-c", STEPS, arm], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.splitlines()[-1])


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc (2.33 or later: mallinfo2)")
def test_a_steps_freed_buffers_are_reused_instead_of_faulting_in_again():
    default, kept = _ten_steps("default"), _ten_steps("kept")
    if default["probe_faults"] < 4_096:
        pytest.skip(f"touching 4,096 fresh pages counted {default['probe_faults']} faults: this "
                    f"kernel counts none, or faults them in as huge pages")
    pages = (1 << 26) // 4_096  # in a 64 MiB buffer, above glibc's largest mmap threshold
    assert default["step_faults"] > 10 * 2 * pages  # at least two fresh ones a step
    assert kept["step_faults"] * 8 < default["step_faults"]  # a few heap growths at most (0-3
    # buffers' worth seen here, against 40 buffers' worth without)


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc (2.33 or later: mallinfo2)")
def test_kept_memory_is_never_handed_back_between_steps():
    """Counted by glibc itself, so this holds where the kernel counts no faults."""
    default, kept = _ten_steps("default"), _ten_steps("kept")
    held = kept["held_after_step"]
    assert all(later >= earlier for earlier, later in zip(held, held[1:]))
    assert kept["handed_back_by_a_free"] == 0
    assert default["handed_back_by_a_free"] >= 1 << 26  # the 64 MiB block went back
