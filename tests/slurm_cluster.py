"""A one-node Slurm cluster on localhost for tests/test_slurm_real.py: munged, slurmctld and
slurmd (Debian's `munge`, `slurmctld`, `slurmd` and `slurm-client` packages) started as this
test session's own daemons, with their own config, key, socket, state and pid files in one
directory, and stopped by the pids they recorded there. No systemd, no cgroups (so it runs in
containers): proctrack/linuxproc, task/none; no accounting (no slurmdbd), as on many clusters.

Commands reach it through SLURM_CONF (`LocalSlurm.env`); it listens on ports of its own, so a
cluster of the machine's (on 6817/6818) is left alone.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = (*DAEMONS, "munge", "sbatch", "squeue", "sinfo", "scontrol", "scancel", "srun")
NODE = "localhost"
START_SECONDS = 60  # for each daemon to come up


class ClusterUnavailable(Exception):
    """Why no cluster could be had here: the test is skipped with it."""


@dataclass
class LocalSlurm:
    directory: Path  # slurm.conf, the munge key and socket, state, spool, logs, pid files

    @property
    def conf(self) -> Path:
        return self.directory / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment of a command (and, through sbatch, of a job) on this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def pid_file(self, daemon: str) -> Path:
        return self.directory / f"{daemon}.pid"

    def run(self, *command: str, check: bool = True) -> str:
        """A Slurm command's stdout; on failure (check) an error naming its stderr."""
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr}")
        return done.stdout

    def logs(self) -> str:
        """The daemons' logs' last lines, for a failure's message."""
        return "\n".join(f"--- {log.name}\n" + "\n".join(log.read_text().splitlines()[-15:])
                         for log in sorted((self.directory / "log").glob("*.log")))


def unavailable() -> str | None:
    """Why a cluster cannot be started here, or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not root: the Slurm daemons run as root"
    missing = [command for command in COMMANDS if shutil.which(command) is None]
    if missing:
        return (f"{', '.join(missing)} not found: apt-get install slurmctld slurmd slurm-client "
                "munge (.ci/run does)")
    return None


def start(directory: Path) -> LocalSlurm:
    """Write the configs into `directory`, start the daemons and wait until the node is idle;
    ClusterUnavailable (every daemon started stopped again) if that fails."""
    reason = unavailable()
    if reason:
        raise ClusterUnavailable(reason)
    cluster = LocalSlurm(directory)
    for sub in ("state", "spool", "log", "munge"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)  # the munge socket's directories must be searchable
    try:
        _start_munged(cluster)
        cluster.conf.write_text(slurm_conf(directory, *_free_ports(2)))
        _daemon(cluster, ["slurmctld"], "slurmctld", lambda: cluster.run("scontrol", "ping"))
        _daemon(cluster, ["slurmd", "-N", NODE], "slurmd", lambda: _node_idle(cluster))
    except (ClusterUnavailable, OSError, RuntimeError, subprocess.SubprocessError) as exc:
        logs = cluster.logs()
        stop(cluster)
        raise ClusterUnavailable(f"{exc}\n{logs}") from None
    return cluster


def slurm_conf(directory: Path, controller_port: int, node_port: int) -> str:
    """The cluster: this machine's CPUs and most of its memory as one node of one partition;
    MinJobAge keeps ended jobs in `squeue --states=all` and `scontrol show job` for the test."""
    memory = _memory_mb() * 9 // 10
    return f"""\
ClusterName=physlmtest
SlurmctldHost={NODE}(127.0.0.1)
SlurmctldPort={controller_port}
SlurmdPort={node_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={directory}/munge/munge.socket
MpiDefault=none
MailProg=/bin/true
StateSaveLocation={directory}/state
SlurmdSpoolDir={directory}/spool
SlurmctldPidFile={directory}/slurmctld.pid
SlurmdPidFile={directory}/slurmd.pid
SlurmctldLogFile={directory}/log/slurmctld.log
SlurmdLogFile={directory}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU={memory // max(os.cpu_count() or 1, 1)}
JobRequeue=1
MinJobAge=3600
KillWait=10
InactiveLimit=0
Waittime=0
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName={NODE} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


def stop(cluster: LocalSlurm) -> None:
    """Cancel the jobs still queued or running (no job outlives the daemons), then SIGTERM each
    daemon this cluster started (by its pid file), SIGKILL one that lingers."""
    _cancel_jobs(cluster)
    for daemon in reversed(DAEMONS):
        path = cluster.pid_file(daemon)
        try:
            pid = int(path.read_text())
        except (OSError, ValueError):
            continue
        _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            _signal(pid, signal.SIGKILL)
        path.unlink(missing_ok=True)


def _cancel_jobs(cluster: LocalSlurm) -> None:
    if not cluster.pid_file("slurmctld").is_file():
        return
    try:
        cluster.run("scancel", f"--user={os.getuid()}")
        deadline = time.monotonic() + 30
        while cluster.run("squeue", "--noheader").strip() and time.monotonic() < deadline:
            time.sleep(0.5)
    except (RuntimeError, subprocess.SubprocessError):
        pass  # the controller is gone: its jobs with it


def _start_munged(cluster: LocalSlurm) -> None:
    """munged with a fresh key of this cluster's and a socket in its directory."""
    munge = cluster.directory / "munge"
    munge.chmod(0o711)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = munge / "munge.socket"
    command = ["munged", "--force", f"--key-file={key}", f"--socket={socket_path}",
               f"--pid-file={cluster.pid_file('munged')}", f"--seed-file={munge / 'seed'}",
               f"--log-file={cluster.directory / 'log' / 'munged.log'}"]
    round_trip = f"munge -n -S {socket_path} | unmunge -S {socket_path}"
    _daemon(cluster, command, "munged", lambda: subprocess.run(
        ["bash", "-c", round_trip], check=True, capture_output=True, timeout=10))


def _daemon(cluster: LocalSlurm, command: list[str], name: str, ready) -> None:
    """Start a daemon (it forks and writes its pid file) and wait until `ready()` passes."""
    done = subprocess.run(command, env=cluster.env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise ClusterUnavailable(f"{name} did not start (exit {done.returncode}): "
                                 f"{done.stderr.strip()}")
    deadline = time.monotonic() + START_SECONDS
    while True:
        try:
            if cluster.pid_file(name).is_file():
                ready()
                return
        except (RuntimeError, subprocess.SubprocessError):
            pass
        if time.monotonic() > deadline:
            raise ClusterUnavailable(f"{name} was not ready within {START_SECONDS} s")
        time.sleep(0.5)


def _node_idle(cluster: LocalSlurm) -> None:
    state = cluster.run("sinfo", "--noheader", f"--nodes={NODE}", "--format=%T").strip()
    if state != "idle":
        raise RuntimeError(f"node {NODE} is {state or 'unknown'}")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise ClusterUnavailable("no MemTotal in /proc/meminfo")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _signal(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass
