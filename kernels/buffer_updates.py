"""Triton kernels for the small in-place updates of a layer's state buffers inside a compiled step: a
delayed scaler's amax history (``lowprec.numerics.scaling.delayed_step_``), the rows added to a
counts buffer (``lowprec.methods.layer_buffers.add_rows_``), the dynamic fallback rule's level of
a slot (``lowprec.methods.int8_fallback_state.set_level_``) and a layer's call counter, read for its
random key and advanced (``lowprec.numerics.rounding_stream.take_count_``).

Why kernels for a few bytes. These updates are operators that mutate their buffers, so that Dynamo
keeps them as nodes of the backward graph too. As opaque operators, Inductor calls each through
Python, and the eager ops inside launch one kernel each: at the 1 B shape, FP8 delayed scaling makes
672 such calls per step (six slots per layer) and the host, not the GPU, set the step's pace. As
``triton_op``s their launches are traced and made from Inductor's generated code, one kernel each.

API (each takes ``launcher``: None to launch here, or ``torch.library.wrap_triton`` inside a
``triton_op``)::

    delayed_step(ring, count, amax, use_max, out)   # out = the amax to quantize with; then record amax
    add_rows(buffer, row, update)                   # buffer[row:row + R, :C] += update (R, C) or (R,)
    set_level(levels, steps, slot, level)           # levels[slot] = level; steps[slot] += 1
    take_count(count, out, advance)                 # out = count; then count += 1 if advance
    takes_kernel(buffer), triton_available(device=None), cuda_ready(), interpreter_active()

Each equals its torch operator bit for bit (the history's max, a read and a write; integer or
float additions of the same values), on one program: every read of the ring happens before a barrier
that precedes its one write, since the lanes that read the slot and the lane that writes it differ.
"""

from __future__ import annotations

import torch

from . import _common as _c
from ._common import _next_pow2

triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()

__all__ = ["delayed_step", "add_rows", "set_level", "take_count", "takes_kernel", "triton_available",
           "cuda_ready", "interpreter_active"]

# the ring's elements one loop step reads (histories are 1024 long by default: one step)
_RING_STEP = 1024
# the largest update ``add_rows`` takes in one program (counts buffers have a few dozen elements)
_MAX_UPDATE = 1 << 14
_JIT_FNS: tuple = ()


if triton is not None:
    from ._common import _max_axis

    @triton.jit
    def _delayed_step_kernel(ring_ptr, count_ptr, amax_ptr, out_ptr, N, USE_MAX: tl.constexpr,
                             BLOCK: tl.constexpr):
        count = tl.load(count_ptr)
        amax = tl.load(amax_ptr)
        if USE_MAX:
            # slots not yet written hold 0, below every amax: the max of all N is the history's
            acc = tl.full([BLOCK], float("-inf"), tl.float32)
            for start in range(0, N, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                acc = tl.maximum(acc, tl.load(ring_ptr + offs, mask=offs < N, other=float("-inf")))
            past = _max_axis(acc, 0)
        else:  # the latest entry; (count - 1) mod N kept non-negative (Triton's % truncates)
            past = tl.load(ring_ptr + (count + N - 1) % N)
        tl.store(out_ptr, tl.where(count > 0, past, amax))
        tl.debug_barrier()  # every lane has read the ring before one writes its slot
        tl.store(ring_ptr + count % N, amax)
        tl.store(count_ptr, count + 1)

    @triton.jit
    def _add_rows_kernel(buf_ptr, upd_ptr, row, R, C, stride_b, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
        r = tl.arange(0, BLOCK_R)[:, None]
        c = tl.arange(0, BLOCK_C)[None, :]
        m = (r < R) & (c < C)
        dst = buf_ptr + (row + r) * stride_b + c
        tl.store(dst, tl.load(dst, mask=m) + tl.load(upd_ptr + r * C + c, mask=m), mask=m)

    @triton.jit
    def _set_level_kernel(levels_ptr, steps_ptr, slot, level_ptr):
        tl.store(levels_ptr + slot, tl.load(level_ptr))
        tl.store(steps_ptr + slot, tl.load(steps_ptr + slot) + 1)

    @triton.jit
    def _take_count_kernel(count_ptr, out_ptr, ADVANCE: tl.constexpr):
        count = tl.load(count_ptr)
        tl.store(out_ptr, count)
        if ADVANCE:
            tl.store(count_ptr, count + 1)

    _JIT_FNS = (_delayed_step_kernel, _max_axis)


def interpreter_active() -> bool:
    """True if the kernels (and the helper they call) were built for the Triton interpreter."""
    return bool(_JIT_FNS) and _c.is_interpreted(*_JIT_FNS)


def triton_available(device=None) -> bool:
    """Whether the kernels can run on ``device`` (default: CUDA if present, else CPU)."""
    return triton is not None and _c.available(interpreter_active(), device)


def cuda_ready() -> bool:
    """Whether the kernels run on CUDA here (a constant of the process for Dynamo:
    ``lowprec.kernels.runs_on``)."""
    from . import runs_on
    return runs_on("buffer_updates", "cuda")


def takes_kernel(t: torch.Tensor) -> bool:
    """Whether an update of the buffer ``t`` runs on these kernels (its ``triton_op``): a CUDA
    buffer where they run; elsewhere the torch operator."""
    return t.is_cuda and cuda_ready()


def _require(t: torch.Tensor, fallback: str) -> None:
    _c.require_triton("lowprec.kernels.buffer_updates", fallback, _TRITON_IMPORT_ERROR, _JIT_FNS, t.device)


def delayed_step(ring: torch.Tensor, count: torch.Tensor, amax: torch.Tensor, use_max: bool, out: torch.Tensor,
                 launcher=None) -> None:
    """``out`` = the history's max (``use_max``) or latest entry, or ``amax`` while the history is
    empty; then ring[count % len(ring)] = amax and count += 1. ring: 1-D fp32; count: 0-d int64;
    amax, out: 1-element fp32, on ring's device."""
    _require(ring, "lowprec.numerics.scaling.delayed_step_")
    if ring.dim() != 1 or ring.dtype != torch.float32 or not ring.is_contiguous() or ring.numel() == 0:
        raise ValueError(f"ring must be a non-empty contiguous 1-D float32 tensor, got {ring.dtype} "
                         f"{tuple(ring.shape)}")
    if count.numel() != 1 or count.dtype != torch.int64:
        raise ValueError(f"count must be a single int64, got {count.dtype} {tuple(count.shape)}")
    for name, t in (("amax", amax), ("out", out)):
        if t.numel() != 1 or t.dtype != torch.float32:
            raise ValueError(f"{name} must be a single float32, got {t.dtype} {tuple(t.shape)}")
    n = ring.numel()
    launch = _c.launch(_delayed_step_kernel, launcher)
    launch[(1,)](ring, count, amax, out, n, USE_MAX=bool(use_max), BLOCK=min(_next_pow2(n), _RING_STEP),
                 num_warps=4)


def add_rows(buffer: torch.Tensor, row: int, update: torch.Tensor, launcher=None) -> None:
    """buffer[row:row + R, :C] += update for a 2-D (R, C) update of a 2-D buffer, or
    buffer[row:row + R] += update for 1-D ones; update in the buffer's dtype."""
    _require(buffer, "lowprec.methods.layer_buffers.add_rows_")
    if (update.dtype != buffer.dtype or update.dim() != buffer.dim() or buffer.dim() not in (1, 2)
            or buffer.stride(-1) != 1):
        raise ValueError(f"update {update.dtype} {tuple(update.shape)} must be a 1-D or 2-D tensor of the "
                         f"buffer's dtype and rank, the buffer's last dimension contiguous "
                         f"({buffer.dtype} {tuple(buffer.shape)})")
    R, C = update.shape[0], (update.shape[1] if update.dim() == 2 else 1)
    cols = buffer.shape[1] if buffer.dim() == 2 else 1
    if not 0 <= row <= buffer.shape[0] - R or C > cols:
        raise ValueError(f"rows {row}..{row + R} x {C} columns outside the buffer {tuple(buffer.shape)}")
    if update.numel() > _MAX_UPDATE:
        raise ValueError(f"update of {update.numel()} elements: at most {_MAX_UPDATE}")
    if update.numel() == 0:
        return
    stride = buffer.stride(0)
    launch = _c.launch(_add_rows_kernel, launcher)
    launch[(1,)](buffer, update.contiguous(), row, R, C, stride, BLOCK_R=_next_pow2(R), BLOCK_C=_next_pow2(C),
                 num_warps=1)


def set_level(levels: torch.Tensor, steps: torch.Tensor, slot: int, level: torch.Tensor, launcher=None) -> None:
    """levels[slot] = level (a 1-element float32 tensor); steps[slot] += 1. levels: 1-D float32,
    steps: 1-D int64 of the same length."""
    _require(levels, "lowprec.methods.int8_fallback_state.set_level_")
    if (levels.dim() != 1 or levels.dtype != torch.float32 or steps.shape != levels.shape
            or steps.dtype != torch.int64 or not levels.is_contiguous() or not steps.is_contiguous()):
        raise ValueError(f"levels ({levels.dtype} {tuple(levels.shape)}) and steps ({steps.dtype} "
                         f"{tuple(steps.shape)}) must be contiguous 1-D float32 and int64 of one length")
    if not 0 <= slot < levels.numel():
        raise ValueError(f"slot {slot} outside the {levels.numel()} slots")
    if level.numel() != 1 or level.dtype != torch.float32:
        raise ValueError(f"level must be a single float32, got {level.dtype} {tuple(level.shape)}")
    _c.launch(_set_level_kernel, launcher)[(1,)](levels, steps, slot, level, num_warps=1)


def take_count(count: torch.Tensor, out: torch.Tensor, advance: bool, launcher=None) -> None:
    """out = the counter's value; then count += 1 if ``advance``. count, out: one int64 each, on one
    device."""
    _require(count, "lowprec.numerics.rounding_stream.take_count_")
    for name, t in (("count", count), ("out", out)):
        if t.numel() != 1 or t.dtype != torch.int64:
            raise ValueError(f"{name} must be a single int64, got {t.dtype} {tuple(t.shape)}")
    launch = _c.launch(_take_count_kernel, launcher)
    launch[(1,)](count, out, ADVANCE=bool(advance), num_warps=1)
