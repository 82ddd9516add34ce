"""Multi-process data-parallel training through ``torchrun`` (DDP; gloo on CPU, nccl on GPU).

Nothing here starts processes: ``torchrun --nproc_per_node=N ...`` (or ``python -m
torch.distributed.run``) starts them and sets ``WORLD_SIZE``/``RANK``/``LOCAL_RANK``;
:func:`init_distributed` joins the process group when ``WORLD_SIZE > 1``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from synattn.errors import ConfigError


@dataclass(frozen=True)
class DistributedContext:
    """Where this process runs.

    Attributes:
        rank, world_size, local_rank: the torchrun coordinates (0, 1, 0 for a single process).
        device: this process's device (``cuda:LOCAL_RANK`` with CUDA).
        owns_group: this context created the process group (and destroys it in :meth:`close`).
    """

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes logs and checkpoints."""
        return self.rank == 0

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over the processes (one all-reduce)."""
        if self.world_size == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)  # [k]
        dist.all_reduce(t)
        return t.tolist()

    def sum_dict(self, values: dict[str, float]) -> dict[str, float]:
        """Sums dicts of floats over the processes; a key missing on a process counts as 0."""
        if self.world_size == 1:
            return dict(values)
        gathered: list[dict[str, float] | None] = [None] * self.world_size
        dist.all_gather_object(gathered, values)
        out: dict[str, float] = {}
        for part in gathered:
            for key, value in (part or {}).items():
                out[key] = out.get(key, 0.0) + value
        return out

    def main_says(self, flag: bool) -> bool:
        """Rank 0's ``flag``, on every process (for decisions taken from rank 0's clock)."""
        if self.world_size == 1:
            return flag
        t = torch.tensor([float(flag) if self.is_main else 0.0], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def close(self) -> None:
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()


def check_device(device: str) -> None:
    """Raises :class:`ConfigError` when ``train.device`` asks for CUDA on a machine without it."""
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device=cuda, but this machine has no usable CUDA device (torch "
                          f"{torch.__version__}); use train.device=cpu or auto")


def init_distributed(device: str = "auto") -> DistributedContext:
    """Joins the torchrun process group (when ``WORLD_SIZE > 1``) and picks this process's device.

    Args:
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.

    Returns:
        The context; a single process gets rank 0 of 1.
    """
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    check_device(device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    owns = False
    if world > 1 and not dist.is_initialized():
        if use_cuda:
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        owns = True
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    where = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    return DistributedContext(rank, world, local_rank, where, owns)
