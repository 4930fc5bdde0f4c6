"""Triton kernels for MoR's tensor-level decision (lowprec.methods.mor): E4M3 codes, scales and the
relative error of a 2-D tensor in two passes, without writing the dequantized tensor.

API::

    mor_quantize_e4m3(x, partition="block", block=(128, 128), scale="gam", fp8_cast="auto")
        -> (codes float8_e4m3fn in x's shape, scales fp32 grid, rel_error fp32 0-d tensor)
    mor_decide(x, threshold=0.045, **same) -> (codes, scales, rel_error, "e4m3" | "bf16")
    mor_cast_error(x2d, scale, block, layouts="rows", fp8_cast="auto", scale_t=None, block_t=None)
        -> (codes, codes of x2d.T, error sums, non-zero counts, x2d.T's error sums)  # the fast path's pass
    triton_available(device=None), interpreter_active()

Equal to the torch reference ``lowprec.methods.mor.quantize_e4m3`` / ``mor_relative_error`` for the same
partition and scale rule: codes and scales bit for bit (NaN compared by position), the relative
error up to fp32 summation order (see below); an empty x is an error in both. Partitions are the
reference's: "tensor" (one scale), "block" ((R, C) tiles), "channel" (one scale per row of the 2-D
view); scale rules "gam" (closed form of ``lowprec.numerics.gam_block_scales``), "e8" (power of
two), "fp32" (448 / amax).

Passes. The scale grid is cut into tiles of at most ``_TILE`` elements that never straddle a
scale block, so a program always knows its one scale:
  1. per tile: amax of |x| (NaN/Inf left out), merged into the block-amax grid and the tensor
     amax by atomic max on their bit patterns (exact in any order: deterministic);
  2. per tile: the block's scale (GAM from block and tensor amax), codes, and the partial sum
     of |dequant(code) - x| / |x| over non-zero x with their count; the first tile of a block
     writes its scale;
  3. one program sums the partials in fp64 in a fixed order and divides.
Everything stays on the device (no host sync), in four launches (the amax buffer's zeroing too).
A transposed view is read through its strides, in tiles along its contiguous columns.
The dequantized value lives only in registers.

Error tolerance: every term is computed exactly as the reference forms it (fp32 multiply,
correctly rounded divisions ``div_rn``), so only the order of summation differs: the kernel adds
up to ``_TILE`` = 8192 non-negative fp32 terms per tile in a tree, then fp64 across tiles; the
reference adds all terms in fp64. The tree's relative error is at most about log2(8192) * 2^-24
~ 8e-7; tests allow 1e-5 relative.

The fast path's pass (``mor_cast_error``, ``lowprec.methods.mor_fast``): the scales come from the
compiled graph, and one pass over the operand writes its codes, in its own layout, transposed or both, with
the sums of the fast path's error terms |code - y| / |y| (y = x * scale; ``mor_fast.operand_error``)
and their non-zero counts per row of the operand and tile of columns, so the graph's own reduction of
those partial sums gives the statistic. Each program takes a 32 x 128 tile whose columns share one
scale column (or whose rows share one scale row: a per-column grid), one scale load per row (column)
instead of a gather per element; the transposed layout is stored through the tile's transpose
(coalesced both ways). The codes are the hardware cast's (stored as fp8 and widened in registers:
bit for bit torch's on the H200, unlike the uint8 bitcast of ``_e4m3``'s native form) or the
written-out encoder's. Why a kernel was tried in place of Inductor's fusion of the same torch ops:
Inductor's reduction over whole rows gathers a scale per element through shared memory and runs at
the launch configuration of its heuristics (the cast of a 16384 x 5632 operand at 1 B on the H200:
353 us in the step, 173 us at the best configuration of a sweep; ``results/bench/inductor_kernel_h200/``).
Tuned (``CAST_TILE``, the approximate division on the fast path) it is faster in the 1 B step than
the fusion it replaces for per-tensor and per-block MoR, and their default on CUDA
(``lowprec.methods.mor_fast.CAST_KERNEL``; ``LOWPREC_MOR_CAST_KERNEL=0`` turns it off); per-channel
MoR keeps the fusion either way. The codes' values for the error come from fp32 adds
(``_common._fp8_value``), not from the hardware cast (see the kernel).

Interpreter notes (as in ``lowprec.kernels.quantize``): bf16 is read as raw 16-bit words and
widened with a shift, the E4M3 rounding is written out (the interpreter's fp32->fp8 cast rounds
ties away and truncates subnormals), and only Triton builtins plus this module's own helpers are
used inside kernels, so ``TRITON_INTERPRET=1`` has to be set before this module (and
``lowprec.kernels._common``, whose jit helpers it calls) is first imported, or both reloaded after
(``_common.reload_for_interpreter``). On CUDA with FP8 conversion instructions (capability >= 8.9)
``fp8_cast="native"`` uses the hardware RNE cast for the codes instead, their values from fp32 adds
(``_common._fp8_value``); "auto" keeps the written-out encoder, because on Hopper with Triton 3.6
the stored codes of the hardware cast came out wrong once the cast value had a second use in
registers (tests/test_gpu.py::test_triton_hardware_fp8_cast_reproducer: a cast whose bits are only
stored matches torch's; converted to fp32 in registers too, about one stored code of each pair is
wrong, on some runs), which the integer decode of its bits (``_common._e4m3_to_f32``) was here
before. The cause is ptxas's, not Triton's: the ptxas of CUDA 12.8 that Triton 3.6 assembles sm_90
code with stores half of such codes from the stack-pointer register; CUDA 13.4's does not
(``lowprec.kernels.fp8_roundtrip``). With the values from fp32 adds the cast's one use is its store, and the native path's GPU
tests hold (H100 at afb7ce6, in the run where the reproducer's register-decode cases failed). "auto"
still keeps the encoder: the native path is correct but not measured faster (in the fast path's pass
the hardware cast made the tile 120-128 instructions longer, ``lowprec.bench.kernel_sass``).
"""

from __future__ import annotations

from typing import Optional

import torch

from lowprec.numerics.checks import block_shape as _check_block, nonempty, one_of

from . import _common as _c
from ._common import _cdiv, _next_pow2

# lowprec.methods.mor never needs Triton; only this module does
triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()

__all__ = ["mor_quantize_e4m3", "mor_decide", "mor_cast_error", "triton_available", "interpreter_active",
           "PARTITIONS", "SCALE_RULES"]

PARTITIONS = ("tensor", "block", "channel")
SCALE_RULES = ("gam", "e8", "fp32")
_SCALE_RULE_ID = {"gam": 0, "e8": 1, "fp32": 2}
_INPUT_DTYPES = (torch.float32, torch.bfloat16)
_FP8_CASTS = ("auto", "native", "emulated")
_E4M3_MAX = 448.0
# Elements per tile (a power of two); tests shrink it to put several tiles in one block.
_TILE = 8192
_JIT_FNS: tuple = ()  # this module's kernel and the _common helper it calls (mode checks)


if triton is not None:
    from triton.language.extra import libdevice
    from ._common import _finite_abs, _fp8_round, _fp8_value, _load_fp32, _max_axis, _strided, _sum_axis

    @triton.jit
    def _tile(pid, M, N, SBR, SBC, n_bcol, TPB_R, TPB_C, TR: tl.constexpr, TC: tl.constexpr):
        """Program pid -> tile (ti, tj) of scale block (bi, bj); programs are laid out as the
        (n_brow, TPB_R, n_bcol, TPB_C) partial grid, row-major. Rows and columns as int64."""
        tj = pid % TPB_C
        q = pid // TPB_C
        bj = q % n_bcol
        q = q // n_bcol
        ti = q % TPB_R
        bi = q // TPB_R
        rr = ti * TR + tl.arange(0, TR)[:, None]   # row within the block
        cc = tj * TC + tl.arange(0, TC)[None, :]
        row = bi * SBR + rr
        col = bj * SBC + cc
        mask = (rr < SBR) & (row < M) & (cc < SBC) & (col < N)
        return row.to(tl.int64), col.to(tl.int64), mask, bi, bj, ti, tj

    @triton.jit
    def _amax_kernel(x_ptr, amax_ptr, M, N, sxr, sxc, SBR, SBC, n_bcol, TPB_R, TPB_C,
                     TR: tl.constexpr, TC: tl.constexpr, IN_KIND: tl.constexpr, X_LAYOUT: tl.constexpr):
        """Block amaxes and the tensor amax (last cell) as int32 bit patterns, by atomic max:
        non-negative floats order like their bits, and max does not depend on the order."""
        pid = tl.program_id(0)
        row, col, mask, bi, bj, ti, tj = _tile(pid, M, N, SBR, SBC, n_bcol, TPB_R, TPB_C, TR, TC)
        a = _finite_abs(_load_fp32(x_ptr, _strided(row, col, sxr, sxc, X_LAYOUT), mask, IN_KIND))  # NaN, Inf left out
        bits = _max_axis(_max_axis(a, 1), 0).to(tl.int32, bitcast=True)
        tl.atomic_max(amax_ptr + bi * n_bcol + bj, bits)
        tl.atomic_max(amax_ptr + (M + SBR - 1) // SBR * n_bcol, bits)

    @triton.jit
    def _plain_scale(amax, POW2: tl.constexpr):
        ok = amax > 0.0
        s = tl.math.div_rn(tl.where(ok, 448.0, 1.0), tl.where(ok, amax, 1.0))
        s = tl.minimum(tl.maximum(s, 1.1754943508222875e-38), 1.7014118346046923e38)  # 2^-126, 2^127
        if POW2:
            s = (s.to(tl.int32, bitcast=True) & 0x7F800000).to(tl.float32, bitcast=True)
        return tl.where(ok, s, 1.0)

    @triton.jit
    def _exp_mant(a):
        """Unbiased exponent and 23-bit mantissa of a positive finite fp32, subnormals normalised
        (the frexp parts the reference's GAM compares)."""
        sub = a < 1.1754943508222875e-38
        bits = tl.where(sub, a * 16777216.0, a).to(tl.int32, bitcast=True)
        e = ((bits >> 23) & 0xFF) - 127 - tl.where(sub, 24, 0)
        return e, bits & 0x7FFFFF

    @triton.jit
    def _gam_scale(ab, ag):
        """s_g * 2^floor(log2(ag / ab)) with s_g = 448 / ag, k from the amaxes' exponent and
        mantissa bits (no rounded quotient), clamped so the scale stays a finite normal."""
        s_g = _plain_scale(ag, False)
        ok = (ab > 0.0) & (ag > 0.0)
        eg, mg = _exp_mant(tl.where(ok, ag, 1.0))
        eb, mb = _exp_mant(tl.where(ok, ab, 1.0))
        k = eg - eb - (mg < mb).to(tl.int32)
        sg_bits = s_g.to(tl.int32, bitcast=True)
        e_sg = ((sg_bits >> 23) & 0xFF) - 127
        k = tl.maximum(k, -126 - e_sg)
        k = tl.minimum(k, 127 - e_sg - ((sg_bits & 0x7FFFFF) > 0).to(tl.int32))
        scaled = (sg_bits + k * 8388608).to(tl.float32, bitcast=True)  # k added to the exponent field
        return tl.where(ok, scaled, s_g)

    @triton.jit
    def _e4m3(y, NATIVE: tl.constexpr):
        """(code bits as uint8, fp32 value of the code) for y = x * scale, saturating at 448."""
        if NATIVE:
            y = tl.where(y > 448.0, 448.0, y)  # where, not min/max: NaN must reach the cast
            y = tl.where(y < -448.0, -448.0, y)
            # the hardware's RNE cast for the codes, their values from fp32 adds: decoded from the
            # cast's bits in registers (a second use of the cast), the stored bits came out wrong on
            # Hopper with Triton 3.6's ptxas (lowprec.kernels.fp8_roundtrip)
            bits = y.to(tl.float8e4nv, fp_downcast_rounding="rtne").to(tl.uint8, bitcast=True)
            return bits, _fp8_value(y, 3, -6)
        else:
            return _fp8_round(y, 448.0, 3, -6, 8)

    @triton.jit
    def _quant_error_kernel(x_ptr, bamax_ptr, tamax_ptr, codes_ptr, scale_ptr, err_ptr, nz_ptr,
                            M, N, sxr, sxc, SBR, SBC, n_bcol, TPB_R, TPB_C,
                            TR: tl.constexpr, TC: tl.constexpr, IN_KIND: tl.constexpr,
                            RULE: tl.constexpr, NATIVE: tl.constexpr, X_LAYOUT: tl.constexpr):
        pid = tl.program_id(0)
        row, col, mask, bi, bj, ti, tj = _tile(pid, M, N, SBR, SBC, n_bcol, TPB_R, TPB_C, TR, TC)
        ab = tl.load(bamax_ptr + bi * n_bcol + bj)
        if RULE == 0:
            s = _gam_scale(ab, tl.load(tamax_ptr))
        else:
            s = _plain_scale(ab, RULE == 1)
        tl.store(scale_ptr + bi * n_bcol + bj, s, mask=(ti == 0) & (tj == 0))
        x = _load_fp32(x_ptr, _strided(row, col, sxr, sxc, X_LAYOUT), mask, IN_KIND)
        code, q = _e4m3(x * s, NATIVE)
        tl.store(codes_ptr + row * N + col, code, mask=mask)  # codes always row-major
        deq = tl.math.div_rn(q, s)
        nz = (x != 0.0) & mask
        ratio = tl.math.div_rn(tl.abs(deq - x), tl.where(nz, tl.abs(x), 1.0))
        ratio = tl.where(nz, ratio, 0.0)
        tl.store(err_ptr + pid, _sum_axis(_sum_axis(ratio, 1), 0))
        tl.store(nz_ptr + pid, _sum_axis(_sum_axis(nz.to(tl.int32), 1), 0))

    @triton.jit
    def _error_kernel(err_ptr, nz_ptr, rel_ptr, n, CHUNK: tl.constexpr):
        """One program: the tiles' error sums added in fp64 and their non-zero counts in int64, in
        a fixed order (deterministic), and the mean error as fp32 (0 without a non-zero)."""
        total = tl.cast(0.0, tl.float64)
        count = tl.cast(0, tl.int64)
        for start in range(0, n, CHUNK):
            i = start + tl.arange(0, CHUNK)
            ok = i < n
            total += _sum_axis(tl.load(err_ptr + i, mask=ok, other=0.0).to(tl.float64), 0)
            count += _sum_axis(tl.load(nz_ptr + i, mask=ok, other=0).to(tl.int64), 0)
        rel = tl.where(count > 0, total / tl.maximum(count, 1).to(tl.float64), 0.0)
        tl.store(rel_ptr, rel.to(tl.float32))

    @triton.jit
    def _tile_scale(s_ptr, ssr, ssc, SBR, SBC, rows, cols, pid_m, pid_n, r_ok, c_ok,
                    BM: tl.constexpr, BN: tl.constexpr, BY_ROW: tl.constexpr, EVEN: tl.constexpr):
        """A tile's scales, broadcast over it: one load per row where the tile's columns lie in one
        scale column (BY_ROW), else one per column (the tile's rows in one scale row)."""
        if BY_ROW:
            s_offs = (rows // SBR) * ssr + (pid_n * BN // SBC) * ssc
            s_ok = r_ok
        else:
            s_offs = (pid_m * BM // SBR) * ssr + (cols // SBC) * ssc
            s_ok = c_ok
        if EVEN:
            s = tl.load(s_ptr + s_offs)
        else:
            s = tl.load(s_ptr + s_offs, mask=s_ok, other=1.0)
        if BY_ROW:
            return s[:, None]
        else:
            return s[None, :]

    @triton.jit
    def _code_and_term(x, s, nzf, NATIVE: tl.constexpr, DIV: tl.constexpr):
        """The E4M3 code of x * s (saturated at +-448) and its error term |code - y| / |y| where x
        is non-zero (``nzf``: 1.0 there, 0.0 elsewhere; a value whose code is 0, y == 0, counts 1:
        it underflowed; NaN and Inf make the term NaN). ``DIV``: the division, an index into
        ``_DIVISIONS``."""
        y = x * s
        if NATIVE:
            # the hardware cast saturates (satfinite: +-448 beyond, Inf included; NaN stays NaN), so
            # the codes are torch's cast of the clamped product with no clamp here (the GPU tests
            # compare the stored bits with torch's)
            code = y.to(tl.float8e4nv, fp_downcast_rounding="rtne")
        else:
            yc = tl.where(y > 448.0, 448.0, y)  # where, not min/max: NaN must reach the encoder
            yc = tl.where(yc < -448.0, -448.0, yc)
            code, _ = _fp8_round(yc, 448.0, 3, -6, 8)
        # The term in magnitudes: the code's value is odd in y (round half to even is symmetric), so
        # |code - y| = |q - a| with a = |y| and q the value of min(a, 448)'s code, from fp32 adds
        # (_fp8_value), never the cast's value widened in registers: on Hopper with Triton 3.6 a
        # hardware cast whose value is also widened in registers stored wrong codes in about half
        # the pairs, on some runs (tests/test_gpu.py::test_triton_hardware_fp8_cast_reproducer), and
        # this pass, widening it, summed errors 10^4-10^5 times the reference's on row-major tiles
        # (H200 at 1ebcc97 and 32c1b28, H100 at 14b5a5f). Here the cast has one use, its store.
        # NaN: a stays NaN, so the term does, whatever the minimum makes of it.
        a = tl.abs(y)
        q = _fp8_value(tl.minimum(a, 448.0), 3, -6)
        if DIV != 0:
            # every |y| <= 2^-10 (half E4M3's least subnormal) has the code 0 and the term 1
            # exactly: taken as 1 / 1, the fast division only ever sees |y| > 2^-10, inside the
            # range where it is within 2 ulp ([2^-126, 2^126]; Inf gives NaN, as it must). The
            # interpreter's division ('/') takes the same rule, so the CPU tests check it
            flushed = a <= 0.0009765625
        else:
            flushed = a == 0.0
        # a flushed y's term as nzf / 1 (exact in every division): 1 where x underflowed, 0 where x
        # is zero (y is then zero too, so every zero x is flushed and no select after the division
        # is needed), selected before the division: selected after it, every element's predicate
        # outlived the division and ptxas kept them in registers (P2R, LOP3 sets and tests)
        num = tl.where(flushed, nzf, tl.abs(q - a))
        den = tl.where(flushed, 1.0, a)
        if DIV == 2:  # a reciprocal and a product (div.approx)
            term = libdevice.fast_dividef(num, den)
        elif DIV == 1:  # Triton's fp32 '/': div.full on CUDA, within 2 ulp; exact in the interpreter
            term = num / den
        else:
            term = tl.math.div_rn(num, den)
        return code, term

    @triton.jit
    def _cast_error_kernel(x_ptr, sxr, sxc, s_ptr, ssr, ssc, codes_ptr, err_ptr, nz_ptr, M, N, SBR, SBC, n_tc,
                           codes_t_ptr, st_ptr, sstr, sstc, SBR_T, SBC_T, err_t_ptr,
                           BM: tl.constexpr, BN: tl.constexpr, SCALE_BY_ROW: tl.constexpr,
                           ROWS: tl.constexpr, TRANSPOSED: tl.constexpr, OWN_T: tl.constexpr,
                           SCALE_T_BY_ROW: tl.constexpr, IN_KIND: tl.constexpr,
                           NATIVE: tl.constexpr, DIV: tl.constexpr, WIDE: tl.constexpr,
                           X_LAYOUT: tl.constexpr, EVEN: tl.constexpr):
        """One BM x BN tile: E4M3 codes of x * scale, row-major (ROWS) and / or in the transpose's
        row-major layout (TRANSPOSED), and per row the sum of the error terms over the tile's
        non-zero x and their count (column pid_n of the partial grids, n_tc wide). OWN_T: the
        transposed codes take a grid of their own (st_ptr, over x's layout; per channel, x's
        columns), with their error sums in err_t_ptr."""
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rows = pid_m * BM + tl.arange(0, BM)
        cols = pid_n * BN + tl.arange(0, BN)
        if EVEN:  # whole tiles: no masks, so that loads and stores vectorize
            r_ok = None
            c_ok = None
            mask = None
        else:
            r_ok = rows < M
            c_ok = cols < N
            mask = r_ok[:, None] & c_ok[None, :]
        if WIDE:  # offsets past 2^31 - 1: 64-bit index arithmetic, else 32-bit (half the instructions)
            rows = rows.to(tl.int64)
            cols = cols.to(tl.int64)
        x = _load_fp32(x_ptr, _strided(rows[:, None], cols[None, :], sxr, sxc, X_LAYOUT), mask, IN_KIND)
        # non-zero x as 1.0 / 0.0 (NaN counts, +-0 does not): the terms' numerator where y is
        # flushed, and summed for the counts (exact: at most BN per row) with no predicate to hold
        nz = x != 0.0
        if not EVEN:
            nz = nz & mask
        nzf = tl.where(nz, 1.0, 0.0)
        s = _tile_scale(s_ptr, ssr, ssc, SBR, SBC, rows, cols, pid_m, pid_n, r_ok, c_ok, BM, BN,
                        SCALE_BY_ROW, EVEN)
        code, term = _code_and_term(x, s, nzf, NATIVE, DIV)
        tl.store(err_ptr + rows * n_tc + pid_n, _sum_axis(term, 1), mask=r_ok)
        tl.store(nz_ptr + rows * n_tc + pid_n, _sum_axis(nzf, 1).to(tl.int32), mask=r_ok)
        if ROWS:
            tl.store(codes_ptr + rows[:, None] * N + cols[None, :], code, mask=mask)
        if TRANSPOSED:
            if OWN_T:
                s_t = _tile_scale(st_ptr, sstr, sstc, SBR_T, SBC_T, rows, cols, pid_m, pid_n, r_ok, c_ok,
                                  BM, BN, SCALE_T_BY_ROW, EVEN)
                code, term = _code_and_term(x, s_t, nzf, NATIVE, DIV)
                tl.store(err_t_ptr + rows * n_tc + pid_n, _sum_axis(term, 1), mask=r_ok)
            elif ROWS:
                # the transpose from the program's own row-major codes, read back after a barrier
                # (its global stores are then visible to the whole program): Triton converts those
                # bytes to the transposed store's layout. Stored from `code` itself, its layout pass
                # computes the encoder a second time in that layout from a converted x instead (sm_90,
                # Triton 3.6, 32x128 bf16 tiles: 84 -> 57 instructions an element; kernel_sass)
                tl.debug_barrier()
                code = tl.load(codes_ptr + rows[:, None] * N + cols[None, :], mask=mask)
            tl.store(codes_t_ptr + cols[None, :] * M + rows[:, None], code, mask=mask)

    _JIT_FNS = (_quant_error_kernel, _load_fp32)


def interpreter_active() -> bool:
    """True if the kernels (and the helpers they call) were built for the Triton interpreter
    (TRITON_INTERPRET=1 at import)."""
    return bool(_JIT_FNS) and _c.is_interpreted(*_JIT_FNS)


def triton_available(device=None) -> bool:
    return triton is not None and _c.available(interpreter_active(), device)


def _require_triton(x: torch.Tensor) -> None:
    _c.require_triton("lowprec.kernels.mor_quant", "lowprec.methods.mor", _TRITON_IMPORT_ERROR, _JIT_FNS, x.device)


def _use_native(x: torch.Tensor, fp8_cast: str) -> bool:
    one_of("fp8_cast", fp8_cast, _FP8_CASTS)
    hw = _hw_fp8(x)
    if fp8_cast == "native" and not hw:
        raise ValueError("fp8_cast='native' needs a compiled kernel on CUDA with capability >= 8.9")
    # "auto" takes the written-out encoder (module docstring: Triton 3.6's cast on the H200)
    return hw and fp8_cast == "native"


def _scale_block(partition: str, block, M: int, N: int) -> tuple:
    if partition == "tensor":
        return (max(M, 1), max(N, 1))
    if partition == "channel":
        return (1, max(N, 1))
    return _check_block(block)


def mor_quantize_e4m3(x: torch.Tensor, partition: str = "block", block=(128, 128), scale: str = "gam",
                      fp8_cast: str = "auto"):
    """E4M3 codes (x's shape, torch.float8_e4m3fn), encode scales (fp32 grid over the 2-D view:
    (1, 1) for tensor, (M, 1) for channel, (ceil(M/R), ceil(N/C)) for block) and the MoR relative
    error (fp32 0-d tensor, on x's device). x: fp32 or bf16, any shape (2-D view: rows = leading
    dims). A 2-D x is read through its strides when its rows or its columns are contiguous (a
    transposed view costs no copy; channel scaling needs contiguous rows); otherwise it is copied.
    Four launches: a zeroed amax buffer, the amax pass, the quantize/error pass and the one-program
    reduction of the error sums. An empty x is an error naming it."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    nonempty(x)
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"x must be float32 or bfloat16, got {x.dtype}")
    one_of("partition", partition, PARTITIONS)
    one_of("scale", scale, SCALE_RULES)
    _require_triton(x)
    x2d = x.reshape(1, 1) if x.dim() == 0 else x.reshape(-1, x.shape[-1])
    M, N = x2d.shape
    sbr, sbc = _scale_block(partition, block, M, N)
    n_brow, n_bcol = _cdiv(M, sbr), _cdiv(N, sbc)
    codes = torch.empty((M, N), dtype=torch.float8_e4m3fn, device=x.device)
    tr, tc, x2d = _tiles(x2d, partition, sbr, sbc)
    tpb_r, tpb_c = _cdiv(sbr, tr), _cdiv(sbc, tc)
    n_prog = n_brow * tpb_r * n_bcol * tpb_c
    in_kind, x_arg = _c._in_kind(x2d)
    geom = (M, N, x2d.stride(0), x2d.stride(1), sbr, sbc, n_bcol, tpb_r, tpb_c)
    num_warps = 8 if tr * tc >= 4096 else 4

    amax = torch.zeros(n_brow * n_bcol + 1, dtype=torch.int32, device=x.device)
    layout = _c.stride_layout(x2d)
    _amax_kernel[(n_prog,)](x_arg, amax, *geom, TR=tr, TC=tc, IN_KIND=in_kind, X_LAYOUT=layout, num_warps=num_warps)
    amax = amax.view(torch.float32)

    scales = torch.empty((n_brow, n_bcol), dtype=torch.float32, device=x.device)
    err = torch.empty(n_prog, dtype=torch.float32, device=x.device)
    nz = torch.empty(n_prog, dtype=torch.int32, device=x.device)
    _quant_error_kernel[(n_prog,)](
        x_arg, amax, amax[n_brow * n_bcol:], codes.view(torch.uint8), scales, err, nz, *geom,
        TR=tr, TC=tc, IN_KIND=in_kind, RULE=_SCALE_RULE_ID[scale], NATIVE=_use_native(x, fp8_cast),
        X_LAYOUT=layout, num_warps=num_warps,
    )
    rel = torch.empty((), dtype=torch.float32, device=x.device)
    _error_kernel[(1,)](err, nz, rel, n_prog, CHUNK=min(_next_pow2(n_prog), 1024), num_warps=4)
    return codes.reshape(x.shape), scales, rel


# the fast path's tile: 32 rows x 128 columns (a 128-column GAM block holds whole tiles), 4 warps:
# the fastest launch of lowprec.bench.mor_cast_kernel on the H200 (16384 x 5632 bf16, both layouts:
# 0.268 ms, 0.206 with the approximate division, against 0.339 / 0.220 for 64 x 128 tiles and
# 0.417 for Inductor's fusion; results/bench/mor_cast_kernel_h200.csv)
CAST_TILE = (32, 128)


# the layouts the pass writes the codes in: x2d's row-major one, x2d.T's, both
CAST_LAYOUTS = ("rows", "transposed", "both")


def mor_cast_error(x2d: torch.Tensor, scale: torch.Tensor, block, layouts: str = "rows",
                   fp8_cast: str = "auto", launcher=None, tile=None, num_warps: int = 4,
                   approx_div: bool = False, scale_t: Optional[torch.Tensor] = None, block_t=None) -> tuple:
    """The fast path's pass over a 2-D operand (fp32 or bf16, any strides) whose encode-scale grid
    ``scale`` (fp32, (ceil(M / R), ceil(N / C)) for ``block`` (R, C), any strides) is given:
    ``(codes, codes_t, err, nz, err_t)``: the E4M3 codes of x * scale, (M, N) row-major, and those
    of x.T, (N, M) row-major, each where ``layouts`` asks for it (else an empty tensor); per row of
    x and tile's columns (M, ceil(N / columns)), the fp32 sum of the error terms over its non-zero x
    and their count (int32). Codes bit for bit torch's cast of the clamped product; each term as
    ``lowprec.methods.mor_fast.operand_error`` forms it.
    ``scale_t``, ``block_t``: where x.T's scales are not x's transposed (per channel: x's rows
    scale x, its columns scale x.T), the grid of x.T's codes, given over x's layout as ``scale`` is
    (per channel: (1, N) for blocks (M, 1)); x.T's codes then take it, and ``err_t`` holds their
    error sums as ``err`` holds x's (else ``err_t`` is empty). Only with a layout that writes x.T.
    A grid that varies across a tile both ways (neither the tile's columns nor its rows in one scale
    block) is refused. ``fp8_cast``: "native" (the hardware cast), "emulated" (the written-out
    encoder), "auto" (native on CUDA with FP8 instructions, emulated elsewhere). Launch: ``tile``
    (rows, columns: powers of two; ``CAST_TILE`` on CUDA), ``num_warps``; ``approx_div`` divides
    the terms approximately (within 2 ulp on CUDA; ``_division``) in place of the correctly
    rounded division (their speed: ``lowprec.bench.mor_cast_kernel``)."""
    nonempty(x2d)
    if x2d.dim() != 2:
        raise ValueError(f"mor_cast_error: x2d must be 2-D, got shape {tuple(x2d.shape)}")
    if x2d.dtype not in _INPUT_DTYPES:
        raise TypeError(f"mor_cast_error: x2d must be float32 or bfloat16, got {x2d.dtype}")
    _require_triton(x2d)
    M, N = x2d.shape
    one_of("layouts", layouts, CAST_LAYOUTS)
    # unlike the two-pass kernels, "auto" takes the hardware cast: stored as fp8, it is exact
    native = _use_native(x2d, fp8_cast) or (fp8_cast == "auto" and _hw_fp8(x2d))
    bm, bn = tile or ((16, 32) if interpreter_active() else CAST_TILE)
    if min(bm, bn) < 1 or bm & (bm - 1) or bn & (bn - 1):
        raise ValueError(f"mor_cast_error: tile must be two powers of two, got {(bm, bn)}")
    sbr, sbc, by_row = _cast_grid("scale", scale, block, M, N, bm, bn)
    rows, trans = layouts != "transposed", layouts != "rows"
    own_t = scale_t is not None
    if own_t and not trans:
        raise ValueError("mor_cast_error: scale_t scales x.T's codes, which layouts='rows' does not write")
    if own_t and block_t is None:
        raise ValueError("mor_cast_error: scale_t needs its blocks, block_t")
    if own_t:
        sbr_t, sbc_t, by_row_t = _cast_grid("scale_t", scale_t, block_t, M, N, bm, bn)
    else:
        scale_t, sbr_t, sbc_t, by_row_t = scale, sbr, sbc, by_row  # unread
    n_tc = _cdiv(N, bn)
    dev = x2d.device
    codes = torch.empty((M, N) if rows else (0,), dtype=torch.float8_e4m3fn, device=dev)
    codes_t = torch.empty((N, M) if trans else (0,), dtype=torch.float8_e4m3fn, device=dev)
    err = torch.empty((M, n_tc), dtype=torch.float32, device=dev)
    nz = torch.empty((M, n_tc), dtype=torch.int32, device=dev)
    err_t = torch.empty((M, n_tc) if own_t else (0,), dtype=torch.float32, device=dev)
    in_kind, x_arg = _c._in_kind(x2d)
    _c.launch(_cast_error_kernel, launcher)[(_cdiv(M, bm), n_tc)](
        x_arg, x2d.stride(0), x2d.stride(1), scale, scale.stride(0), scale.stride(1),
        codes if native else codes.view(torch.uint8), err, nz, M, N, sbr, sbc, n_tc,
        codes_t if native else codes_t.view(torch.uint8),
        scale_t, scale_t.stride(0), scale_t.stride(1), sbr_t, sbc_t, err_t,
        BM=bm, BN=bn, SCALE_BY_ROW=by_row, ROWS=rows, TRANSPOSED=trans, OWN_T=own_t, SCALE_T_BY_ROW=by_row_t,
        IN_KIND=in_kind, NATIVE=native, DIV=_division(approx_div, x2d.is_cuda and not interpreter_active()),
        WIDE=_needs_int64(x2d, M, N),
        X_LAYOUT=_c.stride_layout(x2d), EVEN=M % bm == 0 and N % bn == 0,
        num_warps=num_warps)
    return codes, codes_t, err, nz, err_t


# the cast pass's divisions of an error term (its DIV): correctly rounded, Triton's fp32 '/'
# (div.full on CUDA), the fast division (div.approx: a reciprocal and a product; CUDA only)
_DIVISIONS = ("rn", "full", "fast")


def _division(approx: bool, compiled_for_cuda: bool) -> int:
    """The pass's DIV: correctly rounded unless ``approx``; approximate, the fast division where the
    pass is compiled for CUDA, else Triton's '/' (the interpreter has no libdevice; exact there)."""
    if not approx:
        return _DIVISIONS.index("rn")
    return _DIVISIONS.index("fast" if compiled_for_cuda else "full")


def _cast_grid(name: str, scale: torch.Tensor, block, M: int, N: int, bm: int, bn: int) -> tuple:
    """(block rows, block columns, whether the grid varies by rows within a tile) of an encode-scale
    grid over an M x N operand cut in bm x bn tiles; an error naming ``name`` where the grid is not
    fp32 of the block's shape, or varies across a tile both ways."""
    sbr, sbc = (int(b) for b in block)
    grid_shape = (_cdiv(M, sbr), _cdiv(N, sbc))
    if scale.dtype != torch.float32 or tuple(scale.shape) != grid_shape:
        raise ValueError(f"mor_cast_error: {name} must be a float32 grid of shape {grid_shape} for x of shape "
                         f"{(M, N)} in blocks {(sbr, sbc)}, got {scale.dtype} {tuple(scale.shape)}")
    if sbc % bn == 0 or grid_shape[1] == 1:
        return sbr, sbc, True
    if sbr % bm == 0 or grid_shape[0] == 1:
        return sbr, sbc, False
    raise ValueError(f"mor_cast_error: {name}'s blocks {(sbr, sbc)} cut the {bm} x {bn} tiles both ways")


def _needs_int64(x2d: torch.Tensor, M: int, N: int) -> bool:
    """Whether an element offset of x2d or of its codes can pass 2^31 - 1."""
    reach = (M - 1) * abs(x2d.stride(0)) + (N - 1) * abs(x2d.stride(1))
    return max(reach, M * N) >= 2 ** 31 - 1


def _hw_fp8(x: torch.Tensor) -> bool:
    return (not interpreter_active() and x.device.type == "cuda"
            and torch.cuda.get_device_capability(x.device) >= (8, 9))


def _tiles(x2d: torch.Tensor, partition: str, sbr: int, sbc: int) -> tuple:
    """(tile rows, tile columns, the 2-D tensor to read). Tiles never straddle a scale block and
    run along the contiguous dimension: whole block rows for row-major x, up to 128 block rows
    of a narrower width for column-major x (a transposed view)."""
    M, N = x2d.shape
    if x2d.stride(1) != 1 and N > 1 and (x2d.stride(0) != 1 or partition == "channel"):
        x2d = x2d.contiguous()  # channel tiles are one row wide: reading down columns would not coalesce
    if x2d.stride(1) == 1 or N == 1:
        tc = min(_next_pow2(sbc), _TILE)
        return min(_next_pow2(sbr), max(_TILE // tc, 1)), tc, x2d
    tr = min(_next_pow2(sbr), 128, _TILE)
    return tr, min(_next_pow2(sbc), max(_TILE // tr, 1)), x2d


def mor_decide(x: torch.Tensor, threshold: float = 0.045, partition: str = "block", block=(128, 128),
               scale: str = "gam", fp8_cast: str = "auto"):
    """mor_quantize_e4m3 plus the decision, which needs the error on the host (one sync): it picks
    the GEMM that runs next. NaN error -> "bf16", as in lowprec.methods.mor_rules.decide. threshold: a finite
    number >= 0, checked before the kernels run."""
    from lowprec.methods.mor_rules import check_threshold, decide

    check_threshold(threshold)
    codes, scales, rel = mor_quantize_e4m3(x, partition, block, scale, fp8_cast)
    return codes, scales, rel, decide(float(rel), threshold)
