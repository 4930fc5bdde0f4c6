"""Triton kernel: the row-major transpose of a 2-D tensor of one-byte elements (FP8 or INT8 codes).

API::

    transpose_bytes(x, launcher=None) -> x.t().contiguous(), bit for bit
    triton_available(device=None), cuda_ready(), interpreter_active()

Why a kernel. A backward GEMM on cuBLAS takes the transposed copy of codes quantized for the forward
(per tensor and in 128x128 blocks the scales carry over). Inside a compiled graph Inductor makes
that copy in the kernel that wrote the codes. For MoR that kernel is a row reduction (the relative
error sums along rows), and a row reduction stores the transposed codes one byte per row apart: at 1 B
on the H200 the kernel took 295 us for a 16384 x 5632 operand, about four times its traffic (profile
``llama_1b_mor_block_e6882e4``). As a kernel of its own the copy reads the codes row-major and writes
them through a (BLOCK, BLOCK) tile transposed in registers, so both sides coalesce, for one more
read of the codes.
"""

from __future__ import annotations

import torch

from . import _common as _c
from ._common import _cdiv

triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()

__all__ = ["transpose_bytes", "triton_available", "cuda_ready", "interpreter_active"]

_BLOCK = 64  # a (64, 64) byte tile: 32 bytes a thread at 4 warps
_ONE_BYTE = (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8, torch.uint8)
_JIT_FNS: tuple = ()


if triton is not None:

    @triton.jit
    def _transpose_kernel(x_ptr, out_ptr, R, C, sx_r, sx_c, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        r = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
        c = (tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
        if EVEN:
            tile = tl.load(x_ptr + r[:, None] * sx_r + c[None, :] * sx_c)
            tl.store(out_ptr + c[:, None] * R + r[None, :], tl.trans(tile))
        else:
            tile = tl.load(x_ptr + r[:, None] * sx_r + c[None, :] * sx_c,
                           mask=(r[:, None] < R) & (c[None, :] < C), other=0)
            tl.store(out_ptr + c[:, None] * R + r[None, :], tl.trans(tile),
                     mask=(c[:, None] < C) & (r[None, :] < R))

    _JIT_FNS = (_transpose_kernel,)


def interpreter_active() -> bool:
    """True if the kernel was built for the Triton interpreter."""
    return bool(_JIT_FNS) and _c.is_interpreted(*_JIT_FNS)


def triton_available(device=None) -> bool:
    """Whether the kernel can run on ``device`` (default: CUDA if present, else CPU)."""
    return triton is not None and _c.available(interpreter_active(), device)


def cuda_ready() -> bool:
    """Whether the kernel runs on CUDA here (a constant of the process for Dynamo)."""
    from . import runs_on
    return runs_on("transpose", "cuda")


def transpose_bytes(x: torch.Tensor, launcher=None) -> torch.Tensor:
    """``x.t().contiguous()`` of a 2-D tensor of one-byte elements (any strides), bit for bit.
    ``launcher``: None to launch here, or ``torch.library.wrap_triton`` inside a ``triton_op``."""
    _c.require_triton("lowprec.kernels.transpose", "x.t().contiguous()", _TRITON_IMPORT_ERROR, _JIT_FNS, x.device)
    if x.dim() != 2:
        raise ValueError(f"transpose_bytes: x must be 2-D, got shape {tuple(x.shape)}")
    if x.dtype not in _ONE_BYTE:
        raise ValueError(f"transpose_bytes: x must hold one-byte elements {_ONE_BYTE}, got {x.dtype}")
    rows, cols = x.shape
    out = torch.empty((cols, rows), dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return out
    bits, out_bits = x.view(torch.uint8), out.view(torch.uint8)
    _c.launch(_transpose_kernel, launcher)[(_cdiv(rows, _BLOCK), _cdiv(cols, _BLOCK))](
        bits, out_bits, rows, cols, bits.stride(0), bits.stride(1), BLOCK=_BLOCK,
        EVEN=rows % _BLOCK == 0 and cols % _BLOCK == 0, num_warps=4)
    return out
