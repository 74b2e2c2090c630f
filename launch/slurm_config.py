"""The settings of `physlm submit` (what it asks Slurm for), their checks, and Slurm's time and
size formats. `launch.slurm.load_slurm_config` layers them from a plan, a file and the command
line."""

import re
from dataclasses import dataclass, field

from corpus_gen.core.config import require

LAUNCHERS = ("torchrun", "srun")
TIME_KEYS = ("time", "gen_time", "eval_time")
_TIME = re.compile(r"(\d+-)?\d+(:\d+){0,2}")  # MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM:SS
_MEM = re.compile(r"\d+[KMGT]?")


@dataclass
class SlurmConfig:
    """What `physlm submit` asks Slurm for. Layers: these defaults < the sweep file's `slurm:`
    < `--slurm FILE` < `slurm.KEY=VALUE`. An optional key left unset is the cluster's default."""

    partition: str | None = None  # --partition of every job (gen jobs: unless cpu_partition)
    cpu_partition: str | None = None  # --partition of the corpus generation jobs (no GPU)
    account: str | None = None  # --account of every job
    qos: str | None = None  # --qos of every job
    constraint: str | None = None  # --constraint (node features, e.g. a100) of every job
    nodes: int = 1  # nodes per training run
    gpus_per_node: int = 1  # GPUs per training node, one process each (0: CPU, one process)
    # --cpus-per-task of train jobs: with torchrun one task per node runs all the node's
    # processes, so give it their CPUs together; with srun a task is one process. An eval job
    # (one GPU) gets the CPUs of one process
    cpus_per_task: int | None = None
    mem: str | None = None  # --mem (per node) of train jobs, e.g. 200G
    # --mem of each generation job and each evaluation job (unset: an eval job gets its GPU's
    # share of `mem`). Unset, a job gets the cluster's default, which is a whole node's memory
    # where the cluster sets no DefMemPerCPU
    gen_mem: str | None = None
    eval_mem: str | None = None
    time: str = "24:00:00"  # train jobs' time limit; a longer run requeues from its checkpoint
    gen_time: str = "04:00:00"  # each corpus generation job's time limit
    eval_time: str = "02:00:00"  # each evaluation job's time limit
    gen_tasks: int = 8  # array tasks per corpus, each generating a contiguous range of shards
    gen_cpus: int = 4  # CPUs of each generation job, and its `physlm gen --workers`
    max_concurrent: int = 0  # at most this many tasks of an array at once (%N); 0: no cap
    # USR1 this many seconds before a train job's time limit: checkpoint, requeue (0: none)
    signal_seconds: int = 300
    # torchrun: one srun task per node, spawning a process per GPU (c10d rendezvous on the
    # first node) | srun: one srun task per GPU, ranks from SLURM_PROCID
    launcher: str = "torchrun"
    # shell lines run before physlm in every job: `module load cuda/12.4`,
    # `source ~/venvs/physlm/bin/activate`
    setup: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # more #SBATCH lines of every job: --exclusive
    python: str = "python"  # the interpreter (after setup) that runs `-m launch.cli`

    def validate(self) -> None:
        for key in ("nodes", "gen_tasks", "gen_cpus"):
            require(getattr(self, key) >= 1, key, getattr(self, key), "must be >= 1")
        for key in ("gpus_per_node", "max_concurrent", "signal_seconds"):
            require(getattr(self, key) >= 0, key, getattr(self, key), "must be >= 0")
        require(self.cpus_per_task is None or self.cpus_per_task >= 1, "cpus_per_task",
                self.cpus_per_task, "must be >= 1 (or unset: the cluster's default)")
        require(self.launcher in LAUNCHERS, "launcher", self.launcher, "must be torchrun or srun")
        for key in TIME_KEYS:
            require(bool(_TIME.fullmatch(getattr(self, key))), key, getattr(self, key),
                    "must be a Slurm time: MINUTES, HH:MM:SS or D-HH:MM:SS")
        for key in ("mem", "gen_mem", "eval_mem"):
            value = getattr(self, key)
            require(value is None or bool(_MEM.fullmatch(value)), key, value,
                    "must be a Slurm size: a whole number of megabytes, or with K, M, G or T")
        # USR1 at or before the start would stop (and requeue) every job as it begins
        require(self.signal_seconds < slurm_seconds(self.time), "signal_seconds",
                self.signal_seconds, f"must be less than the time limit (time={self.time})")
        # an #SBATCH option's value is one word
        for key in ("partition", "cpu_partition", "account", "qos", "constraint", "mem",
                    "gen_mem", "eval_mem"):
            value = getattr(self, key)
            require(value is None or (value != "" and len(value.split()) == 1), key, value,
                    "must be one word (or unset)")
        for key in ("setup", "extra"):
            for i, line in enumerate(getattr(self, key)):
                require("\n" not in line, f"{key}[{i}]", line, "must be one line")
        require(self.python.strip() != "", "python", self.python, "must name an interpreter")


def slurm_seconds(text: str) -> int:
    """A Slurm time limit in seconds: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = (parts + [0, 0])[:3]
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(parts) == 3:
        return (parts[0] * 60 + parts[1]) * 60 + parts[2]
    return parts[0] * 60 + (parts[1] if len(parts) == 2 else 0)


def megabytes(size: str) -> int:
    """A Slurm size (`200G`, `512`: megabytes) in megabytes."""
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2}
    unit = size[-1] if size[-1] in scale else "M"
    return int(int(size.rstrip("KMGT")) * scale[unit])
