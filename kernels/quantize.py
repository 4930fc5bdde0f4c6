"""Triton kernels that quantize a 2-D tensor to FP8 (E4M3, E5M2) or INT8 codes, bit-exact with the
torch reference in ``lowprec.numerics``.

API (all return ``(codes, scale)``; codes in the native dtype and x's shape, scale fp32 with the
layout ``lowprec.numerics.compute_scale`` returns for the equivalent ``QuantSpec``)::

    quantize_fp8(x, fmt="e4m3", scaling="tensor", block=None, scale=None, margin=0, pow2=False,
                 fp8_cast="auto")
    quantize_fp8_with_transpose(x, fmt="e4m3", block=128, margin=0, pow2=False, fp8_cast="auto")
        -> (codes, scale, codes_t, scale_t): (1, block) blocks of x and of x.t() from one read
    quantize_int8(x, scaling="tensor", block=None, scale=None, noise=None, margin=0, pow2=False)
    quantize_spec(x, spec, scale=None, noise=None, fp8_cast="auto")   # from a QuantSpec
    triton_available(device=None) -> bool                   # else use the torch path

scaling:
    "tensor"   scale given (1 element) or, if None, current scaling from x's amax  -> scale (1, 1)
    "delayed"  like "tensor", scale required (the caller owns the amax history)    -> scale (1, 1)
    "channel"  one scale per row (reference: QuantSpec(scaling="channel", axis=-1)) -> scale (M, 1)
    "block"    one scale per (BR, BC) block, default (1, 128)       -> scale (ceil(M/BR), ceil(N/BC))
The scale is the ENCODE multiplier (codes = cast(x * scale), x ~= codes / scale). INT8 rounds to
nearest even, or stochastically when ``noise`` (x's shape, U[0, 1) floats) is given; the same noise
in ``lowprec.numerics.quantize(..., noise=noise)`` gives the same codes.

Semantics are the reference's (saturate=True, the only mode native codes allow):
* amax ignores NaN and +-Inf; an amax of 0 gives scale 1; fmax / amax is a correctly rounded
  division (``tl.math.div_rn``). Triton's plain ``/`` is not: with Triton 3.6 on an H200, 448 / a
  differed from torch.div in 5.1M of 2^24 random a, div_rn in none. Scales are clamped to
  [2^-126, 2^127]; margin and pow2 act as in ``scale_from_amax`` (only for scales the kernels
  compute; a given scale is used as is).
* N-D inputs use the reference's 2-D view (rows = prod(leading dims)). Block and channel scaling
  read it through its strides (a transposed view is not copied; codes are written row-major);
  tensor and delayed scaling copy a non-contiguous input first.
* Blocks that overhang the tensor are masked; masked lanes count as zeros, which is the
  reference's zero padding.
* FP8: x*scale is clamped to +-fmax (so +-Inf -> +-fmax), NaN stays NaN. NaN bits: 0x7F, with the
  sign of the scaled value on the written-out path; the reference's sign follows the platform's
  multiply (CUDA returns a positive canonical NaN), so compare NaN positions, not NaN bits.
* INT8: NaN -> 0, clamp to +-127, -0 -> 0; a block (the whole tensor for tensor/delayed scaling,
  also with a given scale) holding a NaN or +-Inf gets a NaN scale, so its codes are 0, as in the
  reference.
* An empty x is an error, as in the reference.

Why the rounding is written out instead of a ``.to(tl.float8e4nv)`` cast: the Triton 3.9
interpreter's fp32->fp8 conversion rounds ties away from zero (1.0625 -> 1.125, 400 -> 416),
truncates subnormals and turns NaN into 384, and its bf16->fp32 conversion garbles subnormals. The
kernels therefore (a) read bf16 as raw 16-bit words and widen them with a shift, and (b) build FP8
codes from the reference's own formula: e = clamp(floor(log2|y|), emin, emax),
r = round_half_even(|y| / 2^(e - man)), and the code magnitude is (e - emin) * 2^man + r, which is
the encoding for normals, subnormals and the carry into the next binade alike. That path is integer
and fp32 arithmetic only, so it is also exact on GPUs without FP8 hardware. On CUDA devices with
FP8 conversion instructions (compute capability >= 8.9) the default is the hardware
``cvt.rn.satfinite`` cast instead (``fp8_cast="native"``, RNE with subnormals, applied to the
already clamped value); ``fp8_cast="emulated"`` forces the written-out path everywhere. Both are
bit-exact with the reference on an H200 (every bf16 value, random tensors); the hardware cast is
faster (2^26 bf16 elements: per-tensor 0.97x vs 0.73x the bandwidth of x.clone()).

Interpreter: Triton decides at ``@triton.jit`` time whether a kernel is interpreted, so
``TRITON_INTERPRET=1`` must be set before this module is first imported for CPU tensors to work
(reloading it after setting the variable also works, after ``lowprec.kernels._common``, whose jit
helpers the kernels call: ``_common.reload_for_interpreter`` does both). Whether ``triton`` itself
was imported earlier does not matter, because the kernels use only Triton builtins and the helpers
of this package. FP8 stochastic rounding is not implemented (INT8 only).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

import torch

from lowprec.kernels import _common as _c
from lowprec.kernels._common import _cdiv, _in_kind, _next_pow2
from lowprec.numerics.checks import as_2d, block_shape, nonempty, one_of
from lowprec.numerics.formats import FloatFormat, IntFormat, get_format, to_torch_dtype

if TYPE_CHECKING:  # a type only: lowprec.numerics.scaling calls this module, not the other way round
    from lowprec.numerics.scaling import QuantSpec

# the torch emulation in lowprec.numerics never needs Triton; only this module does
triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()

__all__ = [
    "triton_available",
    "interpreter_active",
    "quantize_fp8",
    "quantize_fp8_with_transpose",
    "quantize_int8",
    "quantize_spec",
    "SCALINGS",
]

SCALINGS = ("tensor", "delayed", "channel", "block")
_FP8_FORMATS = ("e4m3", "e5m2")
_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_DEFAULT_BLOCK = (1, 128)
_FP8_CASTS = ("auto", "native", "emulated")

# Elements one program holds in registers at once. Blocks bigger than this are processed in
# chunks: a first sweep for the amax, a second that re-reads the block (from L2) to quantize.
_TILE = 8192
# Contiguous columns a program should cover per row when blocks are narrow, so that loads of
# (1, 32) or (1, 128) blocks still coalesce into long row segments.
_MIN_ROW_SPAN = 512
_ELEMWISE_BLOCK = 4096
_NUM_WARPS: Optional[int] = None  # tuning override for the block kernel; None: by tile size
_AMAX_BLOCK = 8192
# tuning of quantize_fp8_with_transpose (lowprec.bench.quantize_kernel --num-warps, --strip)
# (H200, 16384 x 8192 bf16, results/bench/quantize_block_t_h200/: 4 warps 0.265 ms, 8 warps 0.319, 16 warps
# 0.432; transposing x.T's codes in registers before the store measured no faster, 0.326 at 8 warps, and
# was dropped). STRIP: the column strips of a tile (None: the whole tile at once; strips of 32 / 64 measured
# 0.33-0.34 ms, lost with their run). A persistent pass (a program per SM fraction, each loading its next
# tile while it encodes the current) measured slower and was dropped: 0.47-0.49 ms at 4 warps, 0.29 at 8
# warps, against 0.27 for a program per tile (f7fcae1, quantize_block_t_h200/persistent/)
_ROWS_COLS_WARPS: Optional[int] = None  # None: 4
_ROWS_COLS_STRIP: Optional[int] = None

_SCALE_MIN = 2.0**-126
_SCALE_MAX = 2.0**127


# ----------------------------------------------------------------------------------------------
# Kernels

_JIT_FNS: tuple = ()  # this module's kernel and the _common helper it calls (mode checks)

if triton is not None:
    # Only Triton builtins and the @triton.jit helpers of this package are used inside kernels: the
    # jit-defined helpers of triton.language (tl.max, tl.cdiv, tl.zeros, ...) are fixed as compiled
    # or interpreted when triton is imported, so they break the interpreter whenever triton was
    # imported before TRITON_INTERPRET=1 was set, even if this module is (re)imported after.
    from lowprec.kernels._common import _block_grid, _fp8_round, _load_fp32, _max_axis, _strided

    @triton.jit
    def _scale_from_amax(amax, FMAX: tl.constexpr, MARGIN_MUL: tl.constexpr, POW2: tl.constexpr):
        ok = amax > 0.0
        # div_rn: a correctly rounded quotient like the reference's torch.div (one rounding).
        s = tl.math.div_rn(tl.where(ok, FMAX, 1.0), tl.where(ok, amax, 1.0))
        if MARGIN_MUL != 1.0:
            s = s * MARGIN_MUL  # a power of two: exact unless it underflows, which the clamp fixes
        s = tl.minimum(tl.maximum(s, 1.1754943508222875e-38), 1.7014118346046923e38)  # 2^-126, 2^127
        if POW2:
            # s is a positive normal here, so dropping the mantissa bits is floor to a power of two.
            s = (s.to(tl.int32, bitcast=True) & 0x7F800000).to(tl.float32, bitcast=True)
        return tl.where(ok, s, 1.0)

    @triton.jit
    def _encode(y, u, FMAX: tl.constexpr, IS_INT: tl.constexpr, MAN: tl.constexpr,
                EMIN: tl.constexpr, EMAX: tl.constexpr, STOCHASTIC: tl.constexpr,
                NATIVE: tl.constexpr, FP8_TY: tl.constexpr):
        """Codes for y = x * scale (fp32): int8 values, or FP8 bit patterns as uint8."""
        if IS_INT:
            y = tl.where(y != y, 0.0, y)
            y = tl.minimum(tl.maximum(y, -FMAX), FMAX)
            if STOCHASTIC:
                r = tl.floor(tl.abs(y) + u)
                # |y| + u can round up to 128.0 in fp32 when |y| is just below 127.
                r = tl.minimum(r, FMAX)
                # y's sign bit on r (>= +0): -r where y < 0, and -0.0 for y = -0.0, whose code is
                # 0 all the same. A select on y < 0 kept each element's flag live across the
                # floor, and ptxas spilled the flags to registers (sm_90, the INT8 fallback's
                # quantize pass on stream draws, 128x128 blocks, first part: 13 P2R a chunk, 33.2
                # -> 30.3 instructions an element)
                r = (r.to(tl.int32, bitcast=True) | (y.to(tl.int32, bitcast=True) & -2147483648)).to(
                    tl.float32, bitcast=True)
            else:
                # Adding 1.5 * 2^23 puts |y| <= 127 in the binade whose ulp is 1, so the fp32 add
                # itself rounds half to even; no rint needed (the interpreter has none).
                r = (y + 12582912.0) - 12582912.0
            return r.to(tl.int8)
        else:
            # where, not minimum/maximum: NaN must pass through to be encoded as NaN below.
            y = tl.where(y > FMAX, FMAX, y)
            y = tl.where(y < -FMAX, -FMAX, y)
            if NATIVE:
                # cvt.rn.satfinite: RNE with subnormals, NaN -> 0x7F (the sign of a NaN is not
                # meaningful after a CUDA multiply anyway).
                return y.to(FP8_TY, fp_downcast_rounding="rtne").to(tl.uint8, bitcast=True)
            else:
                code, _ = _fp8_round(y, FMAX, MAN, EMIN, EMAX)
                return code

    @triton.jit
    def _nonfinite(x):
        # 1.0 where x is NaN or +-Inf (NaN compares false), else 0.0; a max over it flags a block
        return tl.where(tl.abs(x) < float("inf"), 0.0, 1.0)

    @triton.jit
    def _amax_operand(x, FLAG: tl.constexpr):
        """|x| for an amax with NaN/Inf left out (as 0); with FLAG (INT8) counted as +Inf instead, so
        that the one reduction also says whether the block holds one: such a block's INT8 scale is
        NaN whatever its finite amax."""
        a = tl.abs(x)
        if FLAG:
            return tl.where(a < float("inf"), a, float("inf"))
        else:
            return tl.where(a < float("inf"), a, 0.0)

    @triton.jit
    def _quant_scalar_scale_kernel(
        x_ptr, noise_ptr, codes_ptr, scale_ptr, numel,
        BLOCK: tl.constexpr, IN_KIND: tl.constexpr, FMAX: tl.constexpr, IS_INT: tl.constexpr,
        MAN: tl.constexpr, EMIN: tl.constexpr, EMAX: tl.constexpr, STOCHASTIC: tl.constexpr,
        NATIVE: tl.constexpr, FP8_TY: tl.constexpr,
    ):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < numel
        x = _load_fp32(x_ptr, offs, mask, IN_KIND)
        s = tl.load(scale_ptr)
        u = 0.0
        if STOCHASTIC:
            u = tl.load(noise_ptr + offs, mask=mask, other=0.0)
        codes = _encode(x * s, u, FMAX, IS_INT, MAN, EMIN, EMAX, STOCHASTIC, NATIVE, FP8_TY)
        tl.store(codes_ptr + offs, codes, mask=mask)

    @triton.jit
    def _amax_partial_kernel(x_ptr, out_ptr, numel, BLOCK: tl.constexpr, IN_KIND: tl.constexpr,
                             FLAG: tl.constexpr):
        """Per program: the amax of its share (with FLAG, +Inf when the share holds a NaN/Inf)."""
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < numel
        x = _load_fp32(x_ptr, offs, mask, IN_KIND)
        tl.store(out_ptr + pid, _max_axis(_amax_operand(x, FLAG), 0))

    @triton.jit
    def _tensor_scale_kernel(partial_ptr, scale_ptr, n, BLOCK: tl.constexpr, FMAX: tl.constexpr,
                             MARGIN_MUL: tl.constexpr, POW2: tl.constexpr, FLAG: tl.constexpr):
        # One program: the max of the partial amaxes and the scale, on the device, so current
        # scaling costs three launches and no host round trip or chain of small torch ops. FLAG
        # (INT8): a NaN/Inf anywhere (an Inf partial) makes the scale NaN (the tensor is one block).
        acc = tl.full([BLOCK], 0.0, tl.float32)
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc = tl.maximum(acc, tl.load(partial_ptr + offs, mask=offs < n, other=0.0))
        amax = _max_axis(acc, 0)
        s = _scale_from_amax(amax, FMAX, MARGIN_MUL, POW2)
        if FLAG:
            s = tl.where(amax == float("inf"), float("nan"), s)
        tl.store(scale_ptr, s)

    @triton.jit
    def _chunk(i, r, c, brow, bcol, M, N, sx0, sx1, BR: tl.constexpr, BC: tl.constexpr, RP: tl.constexpr,
               CP: tl.constexpr, NCH_C: tl.constexpr, X_LAYOUT: tl.constexpr):
        """Element offsets in x (strides sx0, sx1) and in the row-major codes, and the mask, of
        chunk i of a program's blocks (chunk 0 is the whole block when it fits the tile)."""
        rr = (i // NCH_C) * RP + r
        cc = (i % NCH_C) * CP + c
        row = (brow * BR + rr).to(tl.int64)
        col = bcol * BC + cc
        mask = (rr < BR) & (row < M) & (cc < BC) & (col < N)
        return _strided(row, col, sx0, sx1, X_LAYOUT), row * N + col, mask

    @triton.jit
    def _quant_block_kernel(
        x_ptr, noise_ptr, codes_ptr, scale_ptr, M, N, n_brow, n_bcol, sx0, sx1,
        BR: tl.constexpr, BC: tl.constexpr, RP: tl.constexpr, CP: tl.constexpr,
        G: tl.constexpr, K: tl.constexpr, NCH_R: tl.constexpr, NCH_C: tl.constexpr,
        IN_KIND: tl.constexpr, FMAX: tl.constexpr, MARGIN_MUL: tl.constexpr, POW2: tl.constexpr,
        IS_INT: tl.constexpr, MAN: tl.constexpr, EMIN: tl.constexpr, EMAX: tl.constexpr,
        STOCHASTIC: tl.constexpr, NATIVE: tl.constexpr, FP8_TY: tl.constexpr, X_LAYOUT: tl.constexpr,
    ):
        """One program: G block-rows x K block-columns of (BR, BC) blocks, held as a 4-D tile
        [G, RP, K, CP] (RP, CP: BR, BC padded to powers of two, or a chunk of them when a block
        is bigger than the tile; then NCH_R x NCH_C chunks are swept twice)."""
        pid_r, pid_c, r, c, brow, bcol = _block_grid(n_bcol, G, RP, K, CP)

        # IS_INT: an amax of +Inf flags a block holding NaN/Inf (_amax_operand)
        if NCH_R * NCH_C == 1:
            xoffs, offs, mask = _chunk(0, r, c, brow, bcol, M, N, sx0, sx1, BR, BC, RP, CP, NCH_C, X_LAYOUT)
            x = _load_fp32(x_ptr, xoffs, mask, IN_KIND)
            amax = _max_axis(_max_axis(_amax_operand(x, IS_INT), 3), 1)
        else:
            acc = tl.full([G, RP, K, CP], 0.0, tl.float32)
            for i in range(NCH_R * NCH_C):
                xoffs, offs, mask = _chunk(i, r, c, brow, bcol, M, N, sx0, sx1, BR, BC, RP, CP, NCH_C, X_LAYOUT)
                acc = tl.maximum(acc, _amax_operand(_load_fp32(x_ptr, xoffs, mask, IN_KIND), IS_INT))
            amax = _max_axis(_max_axis(acc, 3), 1)

        scale = _scale_from_amax(amax, FMAX, MARGIN_MUL, POW2)  # [G, K]
        if IS_INT:
            # a block holding NaN/Inf: NaN scale, hence codes 0, as in the reference
            scale = tl.where(amax == float("inf"), float("nan"), scale)
        sb_row = pid_r * G + tl.arange(0, G)[:, None]
        sb_col = pid_c * K + tl.arange(0, K)[None, :]
        tl.store(scale_ptr + sb_row * n_bcol + sb_col, scale, mask=(sb_row < n_brow) & (sb_col < n_bcol))
        s4 = scale[:, None, :, None]

        if NCH_R * NCH_C == 1:
            u = 0.0
            if STOCHASTIC:
                u = tl.load(noise_ptr + offs, mask=mask, other=0.0)
            codes = _encode(x * s4, u, FMAX, IS_INT, MAN, EMIN, EMAX, STOCHASTIC, NATIVE, FP8_TY)
            tl.store(codes_ptr + offs, codes, mask=mask)
        else:
            for i in range(NCH_R * NCH_C):
                xoffs, offs, mask = _chunk(i, r, c, brow, bcol, M, N, sx0, sx1, BR, BC, RP, CP, NCH_C, X_LAYOUT)
                x = _load_fp32(x_ptr, xoffs, mask, IN_KIND)
                u = 0.0
                if STOCHASTIC:
                    u = tl.load(noise_ptr + offs, mask=mask, other=0.0)
                codes = _encode(x * s4, u, FMAX, IS_INT, MAN, EMIN, EMAX, STOCHASTIC, NATIVE, FP8_TY)
                tl.store(codes_ptr + offs, codes, mask=mask)

    @triton.jit
    def _quant_rows_cols_kernel(
        x_ptr, codes_ptr, scale_ptr, codes_t_ptr, scale_t_ptr, M, N, n_bcol, n_brow, sx0, sx1,
        B: tl.constexpr, IN_KIND: tl.constexpr, FMAX: tl.constexpr, MARGIN_MUL: tl.constexpr,
        POW2: tl.constexpr, MAN: tl.constexpr, EMIN: tl.constexpr, EMAX: tl.constexpr,
        NATIVE: tl.constexpr, FP8_TY: tl.constexpr, EVEN: tl.constexpr, STRIP: tl.constexpr,
        X_LAYOUT: tl.constexpr,
    ):
        """One program: a (B, B) tile of x. Its rows give the (1, B) blocks of x, its columns
        those of x's transpose (the rows of x.T); both codes are written row-major. EVEN: B divides
        both dimensions (no masks, so stores vectorize). STRIP < B: the tile is swept in (B, STRIP)
        column strips, each strip's columns complete (x.T's codes written at once) while the rows'
        amax accumulates, then swept again (from cache) for x's codes: a quarter of the registers
        at STRIP = B / 4, for one more read from L1/L2."""
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        r = pid_m * B + tl.arange(0, B)
        rows = r.to(tl.int64)[:, None]
        if STRIP == B:
            c = pid_n * B + tl.arange(0, B)
            cols = c.to(tl.int64)[None, :]
            mask = None if EVEN else (rows < M) & (cols < N)
            x = _load_fp32(x_ptr, _strided(rows, cols, sx0, sx1, X_LAYOUT), mask, IN_KIND)
            a = _amax_operand(x, False)
            s_col = _scale_from_amax(_max_axis(a, 0), FMAX, MARGIN_MUL, POW2)  # [B]: x.T's blocks
            tl.store(scale_t_ptr + c.to(tl.int64) * n_brow + pid_m, s_col, mask=c < N)
            codes_t = _encode(x * s_col[None, :], 0.0, FMAX, False, MAN, EMIN, EMAX, False, NATIVE, FP8_TY)
            tl.store(codes_t_ptr + cols * M + rows, codes_t, mask=mask)
            s_row = _scale_from_amax(_max_axis(a, 1), FMAX, MARGIN_MUL, POW2)  # [B]: x's blocks
            codes = _encode(x * s_row[:, None], 0.0, FMAX, False, MAN, EMIN, EMAX, False, NATIVE, FP8_TY)
            tl.store(codes_ptr + rows * N + cols, codes, mask=mask)
        else:
            row_amax = tl.full([B], 0.0, tl.float32)
            for j in range(B // STRIP):
                c = pid_n * B + j * STRIP + tl.arange(0, STRIP)
                cols = c.to(tl.int64)[None, :]
                mask = None if EVEN else (rows < M) & (cols < N)
                x = _load_fp32(x_ptr, _strided(rows, cols, sx0, sx1, X_LAYOUT), mask, IN_KIND)
                a = _amax_operand(x, False)
                row_amax = tl.maximum(row_amax, _max_axis(a, 1))
                s_col = _scale_from_amax(_max_axis(a, 0), FMAX, MARGIN_MUL, POW2)
                tl.store(scale_t_ptr + c.to(tl.int64) * n_brow + pid_m, s_col, mask=c < N)
                codes_t = _encode(x * s_col[None, :], 0.0, FMAX, False, MAN, EMIN, EMAX, False, NATIVE, FP8_TY)
                tl.store(codes_t_ptr + cols * M + rows, codes_t, mask=mask)
            s_row = _scale_from_amax(row_amax, FMAX, MARGIN_MUL, POW2)
            for j in range(B // STRIP):
                c = pid_n * B + j * STRIP + tl.arange(0, STRIP)
                cols = c.to(tl.int64)[None, :]
                mask = None if EVEN else (rows < M) & (cols < N)
                x = _load_fp32(x_ptr, _strided(rows, cols, sx0, sx1, X_LAYOUT), mask, IN_KIND)
                codes = _encode(x * s_row[:, None], 0.0, FMAX, False, MAN, EMIN, EMAX, False, NATIVE, FP8_TY)
                tl.store(codes_ptr + rows * N + cols, codes, mask=mask)
        tl.store(scale_ptr + r.to(tl.int64) * n_bcol + pid_n, s_row, mask=r < M)

    _JIT_FNS = (_quant_block_kernel, _quant_rows_cols_kernel, _load_fp32)


# ----------------------------------------------------------------------------------------------
# Availability


def interpreter_active() -> bool:
    """True if this module's kernels (and the helpers they call) were built for the Triton
    interpreter (TRITON_INTERPRET=1 was set when the modules were imported), so they run on CPU
    tensors."""
    return bool(_JIT_FNS) and _c.is_interpreted(*_JIT_FNS)


def triton_available(device=None) -> bool:
    """Whether the kernels can run on `device` (default: CUDA if present, else CPU): Triton imports
    and either the device is CUDA (compiled) or the interpreter is active (any device)."""
    return triton is not None and _c.available(interpreter_active(), device)


def _require_triton(x: torch.Tensor) -> None:
    _c.require_triton("lowprec.kernels.quantize", "lowprec.numerics.quantize", _TRITON_IMPORT_ERROR, _JIT_FNS,
                      x.device)


# ----------------------------------------------------------------------------------------------
# Host side


def _tiling(br: int, bc: int, n_brow: int, n_bcol: int) -> dict:
    cp = min(_next_pow2(bc), _TILE)
    rp = min(_next_pow2(br), max(_TILE // cp, 1))
    nch_c, nch_r = _cdiv(bc, cp), _cdiv(br, rp)
    k = g = 1
    if nch_r * nch_c == 1:
        # Several narrow blocks side by side (long coalesced row segments), then several block-rows
        # until the tile is full; never more than the grid has.
        k = min(_next_pow2(n_bcol), max(_MIN_ROW_SPAN // cp, 1), max(_TILE // (rp * cp), 1))
        g = min(_next_pow2(n_brow), max(_TILE // (rp * k * cp), 1))
    return dict(RP=rp, CP=cp, K=k, G=g, NCH_R=nch_r, NCH_C=nch_c)


def _num_warps(tile_elems: int) -> int:
    if _NUM_WARPS is not None:
        return _NUM_WARPS
    return 8 if tile_elems >= 4096 else 4


def _use_native_cast(x: torch.Tensor, fp8_cast: str) -> bool:
    one_of("fp8_cast", fp8_cast, _FP8_CASTS)
    if fp8_cast == "emulated" or interpreter_active():
        if fp8_cast == "native":
            raise ValueError("fp8_cast='native' is not available under the Triton interpreter")
        return False
    hw = x.device.type == "cuda" and torch.cuda.get_device_capability(x.device) >= (8, 9)
    if fp8_cast == "native" and not hw:
        raise ValueError("fp8_cast='native' needs a CUDA device of compute capability >= 8.9")
    return hw


def _check_input(x: torch.Tensor, margin) -> None:
    """What every kernel entry asks of its input and margin."""
    nonempty(x)
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"x must be float32, bfloat16 or float16, got {x.dtype}")
    if not isinstance(margin, int) or isinstance(margin, bool) or margin < 0:
        raise ValueError(f"margin must be an int >= 0, got {margin!r}")


def _quantize(x, fmt_name, scaling, block, scale, noise, margin, pow2, fp8_cast, launcher=None):
    _check_input(x, margin)
    one_of("scaling", scaling, SCALINGS)
    if block is not None and scaling != "block":
        raise ValueError(f"block is only used with scaling='block', not {scaling!r}")
    if scale is not None and scaling not in ("tensor", "delayed"):
        raise ValueError(f"scale= is only taken by tensor/delayed scaling; {scaling!r} computes its own")
    if scaling == "delayed" and scale is None:
        raise ValueError("scaling='delayed' needs scale= (from a DelayedScaler)")
    if (margin or pow2) and scale is not None:
        raise ValueError("margin/pow2 shape computed scales; a given scale is used as is")
    _require_triton(x)

    fmt = get_format(fmt_name)
    is_int = isinstance(fmt, IntFormat)
    out_dtype = to_torch_dtype(fmt)
    stochastic = noise is not None
    if stochastic and not is_int:
        raise ValueError(f"{fmt_name}: stochastic rounding in the kernel is int8 only; use "
                         "lowprec.numerics.quantize for FP8 stochastic rounding")

    x2d = as_2d(x)
    if scaling in ("tensor", "delayed"):
        x2d = x2d.contiguous()  # one flat offset per element
    M, N = x2d.shape
    if noise is not None:
        if tuple(noise.shape) != tuple(x.shape):
            raise ValueError(f"noise shape {tuple(noise.shape)} != input shape {tuple(x.shape)}")
        noise = noise.to(device=x.device, dtype=torch.float32).reshape(M, N).contiguous()

    if scaling == "channel":
        block = (1, max(N, 1))
    elif scaling == "block":
        block = _DEFAULT_BLOCK if block is None else block_shape(block)

    codes = torch.empty((M, N), dtype=out_dtype, device=x.device)
    codes_arg = codes if is_int else codes.view(torch.uint8)
    in_kind, x_arg = _in_kind(x2d)
    if is_int:
        enc = dict(IS_INT=True, MAN=0, EMIN=0, EMAX=0, NATIVE=False, FP8_TY=tl.int8)
    else:
        assert isinstance(fmt, FloatFormat)
        enc = dict(IS_INT=False, MAN=fmt.man_bits, EMIN=fmt.emin, EMAX=fmt.emax,
                   NATIVE=_use_native_cast(x, fp8_cast),
                   FP8_TY=tl.float8e4nv if fmt.name == "e4m3" else tl.float8e5)
    fmax = float(fmt.fmax)
    noise_arg = noise if stochastic else x_arg  # never read unless STOCHASTIC

    if scaling in ("tensor", "delayed"):
        if scale is not None:
            if not isinstance(scale, torch.Tensor) or scale.numel() != 1:
                raise ValueError("scale must be a 1-element tensor")
            scale = scale.to(device=x.device, dtype=torch.float32).reshape(1, 1).contiguous()
            if is_int:  # a NaN/Inf anywhere: the one block's scale is NaN (on the device, no sync)
                flagged = _partials(x_arg, in_kind, M * N, True).amax()
                scale = torch.where(flagged == math.inf, torch.full_like(scale, float("nan")), scale)
        else:
            scale = _tensor_scale(x_arg, in_kind, M * N, fmax, margin, pow2, is_int)
        _quant_scalar_scale_kernel[(_cdiv(M * N, _ELEMWISE_BLOCK),)](
            x_arg, noise_arg, codes_arg, scale, M * N,
            BLOCK=_ELEMWISE_BLOCK, IN_KIND=in_kind, FMAX=fmax, STOCHASTIC=stochastic,
            num_warps=8, **enc,
        )
        return codes.reshape(x.shape), scale

    br, bc = block
    n_brow, n_bcol = _cdiv(M, br), _cdiv(N, bc)
    scales = torch.empty((n_brow, n_bcol), dtype=torch.float32, device=x.device)
    t = _tiling(br, bc, n_brow, n_bcol)
    grid = (_cdiv(n_brow, t["G"]) * _cdiv(n_bcol, t["K"]),)
    _c.launch(_quant_block_kernel, launcher)[grid](
        x_arg, noise_arg, codes_arg, scales, M, N, n_brow, n_bcol, *x2d.stride(),
        BR=br, BC=bc, IN_KIND=in_kind, FMAX=fmax, MARGIN_MUL=2.0**-margin, POW2=bool(pow2),
        STOCHASTIC=stochastic, X_LAYOUT=_c.stride_layout(x2d),
        num_warps=_num_warps(t["G"] * t["RP"] * t["K"] * t["CP"]),
        **t, **enc,
    )
    return codes.reshape(x.shape), scales


def _partials(x_arg, in_kind, numel, flag) -> torch.Tensor:
    """Per-program amaxes of x; with flag, +Inf for a program whose share holds a NaN/Inf."""
    n_prog = _cdiv(numel, _AMAX_BLOCK)
    partial = torch.empty(n_prog, dtype=torch.float32, device=x_arg.device)
    _amax_partial_kernel[(n_prog,)](x_arg, partial, numel, BLOCK=_AMAX_BLOCK, IN_KIND=in_kind, FLAG=flag,
                                    num_warps=8)
    return partial


def _tensor_scale(x_arg, in_kind, numel, fmax, margin, pow2, flag) -> torch.Tensor:
    """Current scaling: per-program amaxes, then one program reduces them and applies the same
    scale rule as the block kernel (max is order-independent, so this is exact). flag (INT8): NaN
    when x holds a NaN/Inf."""
    partial = _partials(x_arg, in_kind, numel, flag)
    scale = torch.empty((1, 1), dtype=torch.float32, device=x_arg.device)
    _tensor_scale_kernel[(1,)](partial, scale, partial.numel(), BLOCK=1024, FMAX=fmax,
                               MARGIN_MUL=2.0**-margin, POW2=bool(pow2), FLAG=flag, num_warps=4)
    return scale


def quantize_fp8(
    x: torch.Tensor,
    fmt: str = "e4m3",
    scaling: str = "tensor",
    block: Optional[tuple] = None,
    scale: Optional[torch.Tensor] = None,
    *,
    margin: int = 0,
    pow2: bool = False,
    fp8_cast: str = "auto",
    launcher=None,
):
    """FP8 codes (torch.float8_e4m3fn / float8_e5m2) and fp32 encode scales; see the module
    docstring for scaling modes and layout. fp8_cast: "auto" (hardware cast on CUDA with FP8
    support, else the written-out RNE), "native" or "emulated". ``launcher`` (block scaling):
    ``torch.library.wrap_triton`` inside a ``triton_op`` (``lowprec.gemm``), else None."""
    name = get_format(fmt).name
    if name not in _FP8_FORMATS:
        raise ValueError(f"fmt must be one of {_FP8_FORMATS}, got {fmt!r}")
    if launcher is not None and scaling != "block":
        raise ValueError("launcher= is for block scaling (one launch); other scalings launch here")
    return _quantize(x, name, scaling, block, scale, None, margin, pow2, fp8_cast, launcher)


def quantize_fp8_with_transpose(
    x: torch.Tensor,
    fmt: str = "e4m3",
    block: int = 128,
    *,
    margin: int = 0,
    pow2: bool = False,
    fp8_cast: str = "auto",
    launcher=None,
):
    """``(codes, scale, codes_t, scale_t)``: the (1, ``block``) block scaling of a 2-D ``x`` and
    that of ``x.t()``, from one read of x (a (block, block) tile per program), bit for bit
    ``quantize_fp8(x, fmt, "block", (1, block))`` and the same of ``x.t()``; both codes row-major.
    A training step needs both layouts of an activation and of its gradient (the weight gradient
    reduces over tokens): the two separate passes read x twice, the second through a transposed
    view. ``block``: a power of two from 16 to 128 (the tile is held in registers)."""
    name = get_format(fmt).name
    if name not in _FP8_FORMATS:
        raise ValueError(f"fmt must be one of {_FP8_FORMATS}, got {fmt!r}")
    _check_input(x, margin)
    if x.dim() != 2:
        raise ValueError(f"quantize_fp8_with_transpose: x must be 2-D, got shape {tuple(x.shape)}")
    if not isinstance(block, int) or isinstance(block, bool) or block not in (16, 32, 64, 128):
        raise ValueError(f"block must be 16, 32, 64 or 128 (a power of two the tile holds), got {block!r}")
    strip = min(_ROWS_COLS_STRIP or block, block)
    if strip < 1 or strip & (strip - 1):
        raise ValueError(f"_ROWS_COLS_STRIP must be a power of two (the columns of a strip), got {_ROWS_COLS_STRIP!r}")
    _require_triton(x)
    f = get_format(name)
    M, N = x.shape
    n_brow, n_bcol = _cdiv(M, block), _cdiv(N, block)
    codes = torch.empty((M, N), dtype=to_torch_dtype(f), device=x.device)
    codes_t = torch.empty((N, M), dtype=codes.dtype, device=x.device)
    scale = torch.empty((M, n_bcol), dtype=torch.float32, device=x.device)
    scale_t = torch.empty((N, n_brow), dtype=torch.float32, device=x.device)
    in_kind, x_arg = _in_kind(x)
    _c.launch(_quant_rows_cols_kernel, launcher)[(n_brow, n_bcol)](
        x_arg, codes.view(torch.uint8), scale, codes_t.view(torch.uint8), scale_t, M, N, n_bcol, n_brow,
        *x.stride(), B=block, IN_KIND=in_kind, FMAX=float(f.fmax), MARGIN_MUL=2.0**-margin, POW2=bool(pow2),
        MAN=f.man_bits, EMIN=f.emin, EMAX=f.emax, NATIVE=_use_native_cast(x, fp8_cast),
        FP8_TY=tl.float8e4nv if name == "e4m3" else tl.float8e5, EVEN=M % block == 0 and N % block == 0,
        STRIP=strip, X_LAYOUT=_c.stride_layout(x), num_warps=_ROWS_COLS_WARPS or 4,
    )
    return codes, scale, codes_t, scale_t


def quantize_int8(
    x: torch.Tensor,
    scaling: str = "tensor",
    block: Optional[tuple] = None,
    scale: Optional[torch.Tensor] = None,
    noise: Optional[torch.Tensor] = None,
    *,
    margin: int = 0,
    pow2: bool = False,
):
    """Symmetric INT8 codes in [-127, 127] and fp32 encode scales. noise (x's shape, U[0, 1))
    switches from round-to-nearest-even to stochastic rounding."""
    return _quantize(x, "int8", scaling, block, scale, noise, margin, pow2, "auto")


def quantize_spec(
    x: torch.Tensor,
    spec: QuantSpec,
    scale: Optional[torch.Tensor] = None,
    noise: Optional[torch.Tensor] = None,
    fp8_cast: str = "auto",
):
    """The kernel equivalent of lowprec.numerics.quantize(x, spec, noise=noise) for the specs the
    kernels cover (fmt e4m3/e5m2/int8; scaling tensor/delayed/channel with axis=-1/block;
    saturate=True). For delayed scaling pass scale=scale_from_amax(history amax) (or
    DelayedScaler.scale()); spec.margin/pow2 then do nothing, the given scale is used as is.
    Stochastic rounding (int8) needs noise."""
    if spec.fmt not in _FP8_FORMATS + ("int8",):
        raise ValueError(f"no kernel for fmt={spec.fmt!r}")
    if spec.scaling not in SCALINGS:
        raise ValueError(f"no kernel for scaling={spec.scaling!r}")
    if spec.scaling == "channel" and spec.axis != -1:
        raise ValueError("the kernels scale per row only (channel, axis=-1)")
    if not spec.saturate:
        raise ValueError("native codes are always saturated; saturate=False has no kernel")
    if spec.rounding == "stochastic" and noise is None:
        raise ValueError("rounding='stochastic' needs noise= (uniforms with x's shape)")
    if spec.rounding == "nearest" and noise is not None:
        raise ValueError("noise= given but spec.rounding is 'nearest'")
    block = spec.block if spec.scaling == "block" else None
    margin, pow2 = (spec.margin, spec.pow2) if scale is None else (0, False)
    return _quantize(x, spec.fmt, spec.scaling, block, scale, noise, margin, pow2, fp8_cast)
