"""What the numerics need to know about the other training processes: this process's rank, and a
max over all ranks. Both ask torch.distributed at call time (a model is usually built before the
process group exists) and act as a single process when it is not initialized or has one rank.
"""

from __future__ import annotations

import torch

__all__ = ["rank", "world_size", "max_over_ranks"]


def _initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def rank() -> int:
    """This process's rank in the default group; 0 without one."""
    return torch.distributed.get_rank() if _initialized() else 0


def world_size() -> int:
    """The default group's size; 1 without one."""
    return torch.distributed.get_world_size() if _initialized() else 1


def max_over_ranks(t: torch.Tensor) -> torch.Tensor:
    """The elementwise max of t over every rank (an all_reduce of a copy; t is left as it is), or
    t itself in a single process. Every rank must call it at the same point, like any collective.
    On CUDA the reduction is queued on the device: the host does not wait for it."""
    if world_size() <= 1:
        return t
    out = t.detach().clone()
    torch.distributed.all_reduce(out, op=torch.distributed.ReduceOp.MAX)
    return out
