"""The trainer's host-memory setting (glibc): the buffers a training step frees are reused by
the next step instead of coming back as fresh pages that fault in one by one."""

import subprocess
import sys

import pytest

STEPS = """
import resource, sys, torch
if sys.argv[1] == "kept":
    from trainer.host_memory import keep_freed_host_memory
    assert keep_freed_host_memory()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                            torch.nn.Linear(1024, 256))  # activations of 4 and 16 MiB
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(4096, 256)
def step():
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()
for _ in range(10):  # the heap settles
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _page_faults(arm: str) -> int:
    """Page faults in 10 steps, after 10 untimed ones, in a fresh process."""
    out = subprocess.run([sys.executable, "-c", STEPS, arm], capture_output=True, text=True,
                         check=True).stdout
    return int(out.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc: Linux")
def test_a_steps_freed_buffers_are_reused_instead_of_faulting_in_again():
    default, kept = _page_faults("default"), _page_faults("kept")
    assert default > 20_000  # 10 steps' worth of 16 MiB buffers (4,096 pages each), mostly
    assert kept * 8 < default  # at most a heap growth or two
