"""An operator that adds to rows of a layer's buffer inside a compiled graph: the fast paths' counts
(MoR's decisions, INT8 fallback's blocks) live in layer buffers, and Dynamo keeps an operator that
mutates its argument as a node of the forward and of the backward graph alike, where an in-place
update of a module buffer inside a backward graph would not be kept. The update itself is built in
traced ops, which Inductor fuses; the buffer is written by one operator call: on CUDA one Triton kernel
whose launch Inductor makes from its own code (``add_rows``), not a Python call per update."""

from __future__ import annotations

import torch


@torch.library.custom_op("lowprec::add_rows_", mutates_args=("buffer",))
def add_rows_(buffer: torch.Tensor, row: int, update: torch.Tensor) -> None:
    """buffer[row:row + len(update), :update.shape[1]] += update (a 2-D update adds to the first
    columns of a 2-D buffer)."""
    rows = buffer.narrow(0, row, update.shape[0])
    if update.dim() == 2:
        rows = rows.narrow(1, 0, update.shape[1])
    rows.add_(update)


@add_rows_.register_fake
def _(buffer, row, update):
    return None


@torch.library.triton_op("lowprec::add_rows_cuda_", mutates_args=("buffer",))
def add_rows_cuda_(buffer: torch.Tensor, row: int, update: torch.Tensor) -> None:
    """``add_rows_`` on a CUDA device where Triton runs (``lowprec.kernels.buffer_updates``)."""
    from ..kernels import buffer_updates as kb
    kb.add_rows(buffer, row, update, launcher=torch.library.wrap_triton)


def add_rows(buffer: torch.Tensor, row: int, update: torch.Tensor) -> None:
    """``add_rows_``, on its Triton kernel where the buffer is on a CUDA device Triton runs on."""
    from ..kernels import buffer_updates as kb
    op = add_rows_cuda_ if kb.takes_kernel(buffer) else add_rows_
    op(buffer, row, update)
