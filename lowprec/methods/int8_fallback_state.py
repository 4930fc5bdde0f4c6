"""A layer's device-side state for INT8 training with block fallback (``lowprec.methods.int8_fallback``):
the dynamic rule's EMA level and the fallback counts, one row per (GEMM, operand) slot
(``lowprec.recipes.SLOTS``).

They are buffers of the layer (``FallbackBuffers.register``), so an eager step (the emulation, a
telemetry step) and a compiled step update the same tensors, and a compiled step updates them in its
graph: through operators that mutate their buffer (``set_level`` here; for the counts
``add_rows`` of ``lowprec.methods.layer_buffers``), which Dynamo keeps as nodes in the forward and
the backward graph alike. Each is a pair of pass buffers (``layer_buffers.register_pass_buffers``:
one tensor for the forward GEMM's slots, one for the backward's, so that the backward does not
copy and write back what the forward updated); a GEMM's quantizer takes its pass's
(``FallbackBuffers.of(layer, gemm)``), readers take them merged (``FallbackBuffers.merged``).
Nothing here reads a device tensor on the host except ``FallbackBuffers.slot_rows``, which a
checkpoint or a report calls.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

from ..recipes import SLOTS
from .layer_buffers import add_rows, merged_slots, pass_buffer, pass_buffers, register_pass_buffers

# the buffers' names on a layer, in FallbackBuffers' field order
BUFFER_NAMES = ("fallback_levels", "fallback_steps", "fallback_counts")
# the columns of ``counts``: training calls, blocks quantized, blocks that fell back
COUNT_COLUMNS = ("calls", "blocks", "fallback_blocks")


class FallbackBuffers(NamedTuple):
    """``levels`` (fp32, one per slot): the dynamic rule's EMA level, +inf while a slot has none
    (its first call then uses its own level); ``steps`` (int64): the training calls that moved the
    level; ``counts`` (int64, (slots, 3)): ``COUNT_COLUMNS`` over training calls."""
    levels: torch.Tensor
    steps: torch.Tensor
    counts: torch.Tensor

    @classmethod
    def new(cls, device=None) -> "FallbackBuffers":
        n = len(SLOTS)
        return cls(torch.full((n,), math.inf, dtype=torch.float32, device=device),
                   torch.zeros(n, dtype=torch.int64, device=device),
                   torch.zeros(n, len(COUNT_COLUMNS), dtype=torch.int64, device=device))

    @classmethod
    def register(cls, layer: torch.nn.Module) -> None:
        """The buffers on ``layer`` (once; on its parameters' device), a pair per pass. Not in the
        state dict: the level travels in the quantizer's extra state (``state_for_layer``), and the
        counts restart with a run, like MoR's decision counts."""
        if cls.passes(layer):
            return
        param = next(layer.parameters(), None)
        for name, t in zip(BUFFER_NAMES, cls.new(None if param is None else param.device)):
            register_pass_buffers(layer, name, t)

    @classmethod
    def of(cls, layer, gemm: str) -> Optional["FallbackBuffers"]:
        """The buffers that GEMM ``gemm``'s slots update: of a layer that ``register`` equipped,
        its pass's; a FallbackBuffers (state kept outside a layer, never compiled) is both passes'.
        None for anything else."""
        if isinstance(layer, FallbackBuffers):
            return layer
        bufs = [pass_buffer(layer, n, gemm) for n in BUFFER_NAMES]
        return None if any(b is None for b in bufs) else cls(*bufs)

    @classmethod
    def passes(cls, layer) -> tuple:
        """Every FallbackBuffers of ``layer``: the forward's and the backward's; one outside a layer;
        none for a layer without them."""
        if isinstance(layer, FallbackBuffers):
            return (layer,)
        pairs = [pass_buffers(layer, n) for n in BUFFER_NAMES]
        return () if any(p is None for p in pairs) else tuple(cls(*ts) for ts in zip(*pairs))

    @classmethod
    def merged(cls, layer) -> "FallbackBuffers":
        """One FallbackBuffers to read: each slot's rows from the pass that updates them (copies of a
        layer's pair)."""
        return cls(*(merged_slots(*pair) for pair in zip(*cls.passes(layer))))

    def reset_level(self) -> None:
        self.levels.fill_(math.inf)
        self.steps.zero_()

    def slot_rows(self) -> list[dict]:
        """Host copies, one dict per slot: gemm, operand, level, steps and the counts."""
        levels, steps, counts = (t.detach().cpu() for t in self)
        return [{"gemm": g, "operand": o, "level": levels[i], "steps": int(steps[i]),
                 **{c: int(counts[i, j]) for j, c in enumerate(COUNT_COLUMNS)}}
                for i, (g, o) in enumerate(SLOTS)]


# An operator that mutates its buffers: Dynamo keeps it as a graph node, forward and backward, where an
# in-place update of a module buffer inside a backward graph would not be kept.
@torch.library.custom_op("lowprec::int8_fallback_set_level_", mutates_args=("levels", "steps"))
def set_level_(levels: torch.Tensor, steps: torch.Tensor, slot: int, level: torch.Tensor) -> None:
    """levels[slot] = level (a 0-d tensor); steps[slot] += 1."""
    levels.narrow(0, slot, 1).copy_(level.reshape(1))
    steps.narrow(0, slot, 1).add_(1)


@set_level_.register_fake
def _(levels, steps, slot, level):
    return None


@torch.library.triton_op("lowprec::int8_fallback_set_level_cuda_", mutates_args=("levels", "steps"))
def set_level_cuda_(levels: torch.Tensor, steps: torch.Tensor, slot: int, level: torch.Tensor) -> None:
    """``set_level_`` on a CUDA device where Triton runs (``lowprec.kernels.buffer_updates``)."""
    from ..kernels import buffer_updates as kb
    kb.set_level(levels, steps, slot, level.reshape(1), launcher=torch.library.wrap_triton)


def set_level(levels: torch.Tensor, steps: torch.Tensor, slot: int, level: torch.Tensor) -> None:
    """``set_level_``, on its Triton kernel where the buffers are on a CUDA device Triton runs on
    (one launch from Inductor's code instead of a Python operator call)."""
    from ..kernels import buffer_updates as kb
    op = set_level_cuda_ if kb.takes_kernel(levels) else set_level_
    op(levels, steps, slot, level)


def count_call(counts: torch.Tensor, slot: int, mask: torch.Tensor) -> None:
    """One training call of a slot: its blocks (``mask``'s size) and those that fell back, counted
    without reading the mask on the host (the update built in traced ops, one operator call)."""
    fell = mask.sum().to(torch.int64)
    row = torch.stack([torch.ones_like(fell), torch.full_like(fell, mask.numel()), fell])
    add_rows(counts, slot, row.reshape(1, -1))
