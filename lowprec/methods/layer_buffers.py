"""A layer's per-slot state buffers inside a compiled graph.

``add_rows``: an operator that adds to rows of a layer's buffer. The fast paths' counts (MoR's
decisions, INT8 fallback's blocks) live in layer buffers, and Dynamo keeps an operator that mutates
its argument as a node of the forward and of the backward graph alike, where an in-place update of a
module buffer inside a backward graph would not be kept. The update itself is built in traced ops,
which Inductor fuses; the buffer is written by one operator call: on CUDA one Triton kernel whose
launch Inductor makes from its own code (``add_rows``), not a Python call per update.

``register_pass_buffers``: per-slot state that both graphs update, kept as two tensors, one the
forward's GEMM slots update and one the backward's. A backward that updates a tensor the forward
updated too gets the forward's result as an input of its own (AOTAutograd's functional view of the
mutation), so Inductor copies it, updates the copy and writes it back at the end: two launches per
layer and step for a few dozen bytes (per-tensor MoR: 14 of a 98 M block's 92 backward launches).
Readers take ``merged_slots``: each slot's row from the tensor its GEMM updates. Users: MoR's
decision counts (``lowprec.methods.mor``), INT8 fallback's levels, steps and counts
(``lowprec.methods.int8_fallback_state``: on the CPU, a one-layer dynamic-rule step compiled to 25
kernels, 9 of them over such copies, and to 23 with none after)."""

from __future__ import annotations

from typing import Optional

import torch

from ..recipes import SLOTS

# the name of a pass buffer's backward tensor is its forward one's with this suffix
BACKWARD_SUFFIX = "_backward"
# the slots of SLOTS that the forward's GEMM updates
FORWARD_SLOTS = tuple(i for i, (gemm, _) in enumerate(SLOTS) if gemm == "fprop")


def register_pass_buffers(module: torch.nn.Module, name: str, zeros: torch.Tensor) -> None:
    """Registers ``name`` (the forward's) and ``name + BACKWARD_SUFFIX`` (the backward's), each a
    copy of ``zeros``, a per-slot tensor (one row per slot of ``SLOTS``), outside the state dict;
    nothing if ``module`` has them already."""
    if hasattr(module, name):
        return
    module.register_buffer(name, zeros.clone(), persistent=False)
    module.register_buffer(name + BACKWARD_SUFFIX, zeros.clone(), persistent=False)


def pass_buffers(module, name: str) -> Optional[tuple]:
    """(forward tensor, backward tensor) of ``register_pass_buffers``, or None."""
    fwd = getattr(module, name, None)
    return None if fwd is None else (fwd, getattr(module, name + BACKWARD_SUFFIX))


def pass_buffer(module, name: str, gemm: str) -> Optional[torch.Tensor]:
    """The tensor of ``name`` that GEMM ``gemm``'s slots update, or None."""
    buffers = pass_buffers(module, name)
    return None if buffers is None else buffers[0 if gemm == "fprop" else 1]


def merged_slots(fwd: torch.Tensor, bwd: Optional[torch.Tensor] = None) -> torch.Tensor:
    """One per-slot tensor: the forward slots' rows of ``fwd``, the others' of ``bwd`` (a copy);
    without ``bwd``, ``fwd`` itself: state kept outside a layer, one tensor for both passes."""
    if bwd is None:
        return fwd
    out = bwd.clone()
    out[list(FORWARD_SLOTS)] = fwd[list(FORWARD_SLOTS)]
    return out


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
