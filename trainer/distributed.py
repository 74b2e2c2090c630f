"""Process-group setup for torchrun, srun or a plain single process, on CPU or GPU."""

import os
import socket
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device


def free_port() -> int:
    """A TCP port free on this host now (the OS picks it), for a rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup() -> Dist:
    """Initialise torch.distributed through DeepSpeed (gloo on CPU, nccl on GPU).

    Under torchrun the environment names rank and world; under Slurm's srun the SLURM_*
    variables do; a plain `physlm train` is a world of one.
    """
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:
        os.environ.update(RANK=os.environ["SLURM_PROCID"],
                          WORLD_SIZE=os.environ["SLURM_NTASKS"],
                          LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0"))
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(free_port())
    cuda = torch.cuda.is_available()
    if not cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before deepspeed is imported
    import deepspeed

    if not cuda:
        _shared_memory_op(int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"]))
    local_rank = int(os.environ["LOCAL_RANK"])
    if cuda:
        torch.cuda.set_device(local_rank)
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo", verbose=False)
    return Dist(rank=torch.distributed.get_rank(), world_size=torch.distributed.get_world_size(),
                local_rank=local_rank,
                device=torch.device("cuda", local_rank) if cuda else torch.device("cpu"))


def _shared_memory_op(world_size: int, rank: int) -> None:
    """DeepSpeed on CPU compiles a shared-memory all-reduce op (~1-2 minutes, once per machine)
    when it initialises. A single process has nothing to reduce: skip it. Several processes use
    it: say so before the silent compile."""
    import deepspeed.ops
    from torch.utils.cpp_extension import _get_build_directory

    name = "deepspeed_shm_comm"
    if world_size == 1:
        deepspeed.ops.__compatible_ops__[name] = False  # what DeepSpeed checks before building
    elif rank == 0 and not os.path.exists(os.path.join(_get_build_directory(name, False),
                                                       f"{name}.so")):
        print(f"DeepSpeed is compiling its CPU communication op {name} (first multi-process "
              "CPU run on this machine, 1-2 minutes; cached afterwards)", flush=True)
