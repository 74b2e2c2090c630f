"""CPU pressure (Linux PSI), shared by the benchmarks that rank only the quiet steps of a shared
machine: a step during which another task waited for a core ran slower for reasons of its own."""

import os
import shlex
import sys


def cpu_stall_us() -> int | None:
    """Microseconds, since boot, in which at least one task waited for a CPU (Linux PSI); None
    where the kernel does not expose it."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().split("total=")[1])
    except (OSError, IndexError, ValueError):
        return None


def print_run_footer(threads: int) -> None:
    """The command that reproduces the run, and the load it ended under."""
    print("Command: python " + " ".join(shlex.quote(a) for a in sys.argv))
    one, five, fifteen = os.getloadavg()
    print(f"Load average (1, 5, 15 min) at the end: {one:.2f} {five:.2f} {fifteen:.2f} "
          f"on {os.cpu_count()} cores (this run alone adds about its thread count)")
    if one > threads + 1:
        print("WARNING: something else competed for the CPU; these figures are suspect")
