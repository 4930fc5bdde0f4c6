"""Triton kernel for MoR's relative error of E4M3 codes that already exist: the row sums of
``lowprec.methods.mor_fast.operand_error``'s terms, read from the operand, its codes and its
encode-scale grid, in one pass that stores nothing but one sum and one count per row.

API::

    error_rows(base, codes, scale, block, launcher=None) -> (sums fp32 (rows,), counts int32 (rows,))
    triton_available(device=None), cuda_ready(), interpreter_active()

``base`` is the (rows, cols) tensor the terms run over (fp32 or bf16, any strides); ``codes`` and
``scale`` are the E4M3 codes and the encode-scale grid *over base's layout* (views: a transposed
operand passes its codes and grid transposed, and the kernel reads them through their strides),
``block`` the (R, C) block each scale covers. Per element, as ``operand_error`` forms it:
y = x * scale, the term |code - y| / |y| (1 where y underflowed to 0), left out where x == 0; NaN and
Inf give NaN. ``sums[r]`` adds row r's terms in fp32, ``counts[r]`` its non-zero elements.

Why a kernel. Inductor computed ``operand_error`` inside the kernel that casts the codes, which also
writes their transposed copy for the backward's GEMM; being a row reduction, that kernel stores the
transposed codes one byte per row apart, at about a quarter of the bandwidth its traffic needs
(per-block MoR at 1 B on the H200: 295 us for one 16384 x 5632 operand, profile
``llama_1b_mor_block_e6882e4``). As a ``triton_op`` the error is a kernel of its own, which leaves the
cast a pointwise kernel that Inductor tiles for the transposed store, as it does for FP8 current
scaling.

Arithmetic: the product x * scale may be contracted into the subtraction (FMA) and the division is
Triton's fast one (within 2 ulp), so a term can differ from the torch form's by a few fp32 roundings;
the sums add in another order. Both stay within ``operand_error``'s ``ERROR_ATOL``. The codes are
decoded in integer ops (``_common._e4m3_to_f32``), never by Triton's fp8 conversion (see
``lowprec.kernels.mor_quant`` on the Triton 3.6 bug), which also runs in the interpreter.
"""

from __future__ import annotations

import torch

from . import _common as _c
from ._common import _cdiv

triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()

__all__ = ["error_rows", "triton_available", "cuda_ready", "interpreter_active"]

_BLOCK_R = 32   # rows a program sums
_BLOCK_C = 128  # columns a loop step reads (one 128-wide scale block of the block partitions)
_JIT_FNS: tuple = ()


if triton is not None:
    from ._common import _e4m3_to_f32, _load_fp32, _sum_axis

    @triton.jit
    def _error_rows_kernel(x_ptr, codes_ptr, scale_ptr, sums_ptr, counts_ptr, R, C,
                           sx_r, sx_c, sq_r, sq_c, ss_r, ss_c, BR, BC,
                           IN_KIND: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        r = rows[:, None]
        # tl.full, not tl.zeros: triton.language's own @jit helpers are fixed when triton is first
        # imported, and may then not run in the interpreter
        acc = tl.full([BLOCK_R, BLOCK_C], 0.0, tl.float32)
        cnt = tl.full([BLOCK_R, BLOCK_C], 0, tl.int32)
        for c0 in range(0, C, BLOCK_C):
            c = c0 + tl.arange(0, BLOCK_C)[None, :]
            m = (r < R) & (c < C)
            x = _load_fp32(x_ptr, r * sx_r + c * sx_c, m, IN_KIND)
            s = tl.load(scale_ptr + (r // BR) * ss_r + (c // BC) * ss_c, mask=m, other=1.0)
            code = _e4m3_to_f32(tl.load(codes_ptr + r * sq_r + c * sq_c, mask=m, other=0))
            y = x * s
            ratio = tl.where(y == 0, 1.0, tl.abs(code - y) / tl.abs(y))
            nz = m & (x != 0)
            acc += tl.where(nz, ratio, 0.0)
            cnt += nz.to(tl.int32)
        keep = rows < R
        tl.store(sums_ptr + rows, _sum_axis(acc, 1), mask=keep)
        tl.store(counts_ptr + rows, _sum_axis(cnt, 1), mask=keep)

    _JIT_FNS = (_error_rows_kernel, _load_fp32, _e4m3_to_f32, _sum_axis)


def interpreter_active() -> bool:
    """True if the kernel (and the helpers it calls) were built for the Triton interpreter."""
    return bool(_JIT_FNS) and _c.is_interpreted(*_JIT_FNS)


def triton_available(device=None) -> bool:
    """Whether the kernel can run on ``device`` (default: CUDA if present, else CPU)."""
    return triton is not None and _c.available(interpreter_active(), device)


def cuda_ready() -> bool:
    """Whether the kernel runs on CUDA here (a constant of the process for Dynamo)."""
    from . import runs_on
    return runs_on("mor_error", "cuda")


def error_rows(base: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor, block, launcher=None) -> tuple:
    """(fp32 sums, int32 counts) per row of ``base`` (module docstring). ``launcher``: None to launch
    here, or ``torch.library.wrap_triton`` inside a ``triton_op``."""
    _c.require_triton("lowprec.kernels.mor_error", "lowprec.methods.mor_fast.operand_error", _TRITON_IMPORT_ERROR,
                      _JIT_FNS, base.device)
    if base.dim() != 2 or codes.shape != base.shape:
        raise ValueError(f"error_rows: base and codes must be 2-D of one shape, got {tuple(base.shape)} "
                         f"and {tuple(codes.shape)}")
    if codes.dtype != torch.float8_e4m3fn:
        raise ValueError(f"error_rows: codes must be float8_e4m3fn, got {codes.dtype}")
    if base.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"error_rows: base must be float32 or bfloat16, got {base.dtype}")
    rows, cols = base.shape
    br, bc = (int(b) for b in block)
    if tuple(scale.shape) != (_cdiv(rows, br), _cdiv(cols, bc)) or scale.dtype != torch.float32:
        raise ValueError(f"error_rows: the scale grid of {tuple(base.shape)} in {br}x{bc} blocks is fp32 "
                         f"{(_cdiv(rows, br), _cdiv(cols, bc))}, got {scale.dtype} {tuple(scale.shape)}")
    kind, x = _c._in_kind(base)
    bits = codes.view(torch.uint8)
    sums = torch.empty(rows, dtype=torch.float32, device=base.device)
    counts = torch.empty(rows, dtype=torch.int32, device=base.device)
    _c.launch(_error_rows_kernel, launcher)[(_cdiv(rows, _BLOCK_R),)](
        x, bits, scale, sums, counts, rows, cols, x.stride(0), x.stride(1), bits.stride(0), bits.stride(1),
        scale.stride(0), scale.stride(1), br, bc, IN_KIND=kind, BLOCK_R=_BLOCK_R, BLOCK_C=_BLOCK_C, num_warps=4)
    return sums, counts
