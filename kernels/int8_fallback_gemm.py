"""Triton kernels for INT8 training with block-level fallback (``lowprec.methods.int8_fallback``).

API::

    block_stats_int8(x, block) -> (amax, rel_err)             # per-block grids, for the rules
    quantize_fallback_int8(x, block, *, mask=None, threshold=None, noise=None)
        -> (q1, s1, q2, s2, flags)                            # one pass
    quantize_fallback_rule(x, block, rule, **rule_kw, noise=None) -> same   # two passes
    int8_fallback_gemm(qa, da, qb, db, block_a, block_b, ra=None, dra=None, fa=None,
                       rb=None, drb=None, fb=None, *, fallback="sparse", config=None)
        -> fp32 (M, N) = A @ B.T
    gemm_fallback_qtensors(fqa, fqb) -> fp32                  # from two FallbackQTensors
    triton_available(device=None), interpreter_active()

Quantize. ``quantize_fallback_int8`` reads x once per block and writes the first INT8 part q1
(int8, x's 2-D shape), its ENCODE scales s1 (the ``lowprec.numerics`` convention, x ~= q1 / s1), the
residual part q2 (int8, 0 outside fallback blocks), its encode scales s2 (1 outside) and the flags
(int8 grid). Which blocks fall back: ``mask`` (a bool grid computed beforehand: topk, error, or the
current-median absmax rule, which all need the whole tensor's block statistics first: that is the
second pass, ``block_stats_int8``), or ``threshold`` (a 1-element tensor: block amax > threshold,
decided inside the kernel: the dynamic rule, whose threshold comes from past calls, needs no second
pass), or neither (nothing falls back). Bit-exact with ``lowprec.methods.int8_fallback.fallback_quantize``
(scales by a correctly rounded division, RNE or stochastic rounding with the same uniforms).

GEMM. A (M, K) and B (N, K), both int8 with K contiguous (B "column-major" as cuBLAS and
``torch._int_mm`` want it), per-block DECODE scales (x ~= q * d) on grids (ceil(M/BM), ceil(K/G))
and (ceil(N/BN), ceil(K/G)), with G the K-group of both operands. One program computes a
BLOCK_M x BLOCK_N output tile; per K-group an int32 ``tl.dot`` of the int8 tiles, converted to fp32
and multiplied by the outer product of the row and column scale vectors, added to an fp32
accumulator. A loop iteration takes ``k_groups`` K-groups (each its own dot and rescale) so that
small groups still load wide tiles; tiles come by pointer loads or, where the operands allow it, by
tensor descriptors (TMA on Hopper). The int32 -> fp32 conversion is an integer add into the
mantissa of 1.5 * 2^23 and a float subtract where that is exact (G <= 259): the rescale, not the
INT8 MMA, bounds the kernel at small groups, and the conversion instruction issues at a quarter of
the FP32 rate. Launch configurations (``GemmConfig``) are tuned once per shape class on CUDA
(M, N, K rounded up to powers of two, the group, the scale blocks; ``candidate_configs``,
``tuned_configs``, ``tuning_log``); GEMMs under ``TUNE_MIN_MACS`` and the interpreter take
``default_config``.

The second parts (blocks of A or B with a flag), ``fallback=``:

* "sparse" (default): the main kernel multiplies the first parts only; then one pass per operand
  with a second part, whose programs each own BLOCK_R (32) rows of it, find the K-groups where those
  rows hold a flagged block in the flag grid (on the device, in increasing order) and multiply only
  those, adding to C. Work follows the fallback ratio (at 32-row granularity), and with no flag set
  a pass costs a launch whose programs read their flags and return, so operands are passed without
  asking the host whether any flag is set. Order of the fp32 sums: C = (M1 + RA) + RB, with M1 the
  sum over K-groups of q1a.q1b, RA that of q2a.q1b, RB that of q1a.q2b then q2a.q2b per K-group;
  each of the three is an ``int8_block_gemm_reference`` (of the first parts; of (q2a, dra) against
  B's first part; of A's two parts against (q2b, drb)).
* "fused": inside the main loop, a tile whose rows hold at least one flagged block at this K-group
  issues the extra product (uniform branch per program), with the scales of unflagged rows zeroed:
  terms in order q1a.q1b, q2a.q1b, q1a.q2b, q2a.q2b per K-group, the order of
  ``int8_block_gemm_reference`` itself. A tile issues the extra product when any of its
  BLOCK_M / BM row-blocks falls back at that K-group, so the issued share (the bench's
  ``tile_ratio``) can exceed the block fallback ratio when fallback blocks are scattered.

The residual is stored densely (an int8 tensor of A's shape, zero outside fallback blocks): simple
addressing, twice A's INT8 memory; a compact layout indexed by fallback block would save that memory.

Non-finite values. An INT8 code cannot hold NaN or Inf, so a block holding one gets a NaN first-part
scale s1 (so q1 = 0; its residual is then NaN: q2 = 0, s2 = 1), as
``lowprec.numerics`` and ``fallback_quantize`` do: its decode scale is NaN, and so is every GEMM
output row (column) that the block enters. Which blocks fall back is decided on the finite values.
Empty tensors are refused, as in the torch reference.

Exactness. int8 ``tl.dot`` into int32 is exact (interpreter: checked; GPUs: integer MMA). The
int32 -> fp32 conversion is exact while G * 127^2 < 2^24, i.e. G <= 1040 (the add trick: G <= 259).
With the same fp32 multiply/add sequence, the interpreter (numpy) equals the torch reference bit for
bit, whatever the configuration. A GPU compiler may contract ``acc + p * s`` into an FMA (one
rounding instead of two), so on CUDA the result agrees to about 1e-6 relative per K-group instead
of bitwise.

Interpreter: as for ``lowprec.kernels.quantize`` (whose jit helpers these kernels call, with those of
``lowprec.kernels._common``), set TRITON_INTERPRET=1 before the three modules are first imported, or
reload them (_common, quantize, then this one: ``_common.reload_for_interpreter``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from typing import Optional

import torch

from lowprec.numerics.checks import nonempty, number

from . import _common as _c
from . import quantize as _kq
from ._common import _cdiv, _check_block, _next_pow2

triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()
try:  # host-side tensor descriptors (TMA loads on Hopper), Triton >= 3.3
    from triton.tools.tensor_descriptor import TensorDescriptor as _TensorDescriptor
    _HAS_TENSOR_DESCRIPTOR = True
except Exception:  # noqa: BLE001 - no Triton, or one without descriptors: pointer loads
    _TensorDescriptor, _HAS_TENSOR_DESCRIPTOR = None, False

__all__ = [
    "triton_available",
    "interpreter_active",
    "block_stats_int8",
    "quantize_fallback_int8",
    "quantize_fallback_rule",
    "int8_fallback_gemm",
    "gemm_fallback_qtensors",
    "GemmConfig",
    "ResidualConfig",
    "default_config",
    "candidate_configs",
    "selected_config",
    "tuned_configs",
    "tuning_log",
]

_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Largest block one quantize program holds (elements); (128, 128) fits.
_MAX_BLOCK_ELEMS = 16384
# Elements a quantize program aims for when blocks are small ((1, 128): 32 block-rows at once).
_QUANT_TILE = 4096
_JIT_FNS: tuple = ()  # this module's kernel and the helpers it calls from quantize and _common (mode checks)

if triton is not None and _kq.triton is not None:
    from ._common import _finite_abs, _grouped_tile, _load_fp32, _max_axis, _sum_axis
    from .quantize import _encode, _nonfinite, _scale_from_amax

    @triton.jit
    def _block_view(M, N, n_brow, BR: tl.constexpr, BC: tl.constexpr, RP: tl.constexpr, CP: tl.constexpr,
                    G: tl.constexpr):
        """This program's (pid_r, pid_c) and the offsets and mask of its G vertically stacked
        (BR, BC) blocks held as a [G, RP, CP] tile (programs run down block-columns)."""
        pid = tl.program_id(0)
        n_rgrp = (n_brow + G - 1) // G
        pid_c = pid // n_rgrp
        pid_r = pid % n_rgrp
        g = tl.arange(0, G)[:, None, None]
        r = tl.arange(0, RP)[None, :, None]
        c = tl.arange(0, CP)[None, None, :]
        brow = pid_r * G + g
        row = brow * BR + r
        col = pid_c * BC + c
        mask = (r < BR) & (c < BC) & (brow < n_brow) & (row < M) & (col < N)
        return pid_r, pid_c, row.to(tl.int64) * N + col, mask

    @triton.jit
    def _block_max(v):
        return _max_axis(_max_axis(v, 2), 1)

    @triton.jit
    def _block_sum(v):
        return _sum_axis(_sum_axis(v, 2), 1)

    @triton.jit
    def _stats_kernel(x_ptr, amax_ptr, err_ptr, M, N, n_brow, n_bcol,
                      BR: tl.constexpr, BC: tl.constexpr, RP: tl.constexpr, CP: tl.constexpr,
                      G: tl.constexpr, IN_KIND: tl.constexpr):
        pid_r, pid_c, offs, mask = _block_view(M, N, n_brow, BR, BC, RP, CP, G)
        x = _load_fp32(x_ptr, offs, mask, IN_KIND)
        x = tl.where(tl.abs(x) < float("inf"), x, 0.0)  # NaN and Inf count as 0, as in the reference
        amax = _block_max(tl.abs(x))
        s = _scale_from_amax(amax, 127.0, 1.0, False)
        q = _encode(x * s[:, None, None], 0.0, 127.0, True, 0, 0, 0, False, False, tl.int8)
        d = x - tl.math.div_rn(q.to(tl.float32), s[:, None, None])
        err2 = _block_sum(d * d)
        ref2 = _block_sum(x * x)
        ok = ref2 > 0.0
        rel = tl.where(ok, tl.sqrt_rn(tl.math.div_rn(err2, tl.where(ok, ref2, 1.0))), 0.0)
        gi = pid_r * G + tl.arange(0, G)
        sidx = gi * n_bcol + pid_c
        tl.store(amax_ptr + sidx, amax, mask=gi < n_brow)
        tl.store(err_ptr + sidx, rel, mask=gi < n_brow)

    @triton.jit
    def _fallback_quant_kernel(x_ptr, u1_ptr, u2_ptr, q1_ptr, s1_ptr, q2_ptr, s2_ptr, flag_ptr, mask_ptr,
                               thr_ptr, M, N, n_brow, n_bcol,
                               BR: tl.constexpr, BC: tl.constexpr, RP: tl.constexpr, CP: tl.constexpr,
                               G: tl.constexpr, IN_KIND: tl.constexpr, STOCHASTIC: tl.constexpr,
                               MODE: tl.constexpr):
        """MODE 0: flags from mask_ptr; 1: amax > *thr_ptr; 2: no fallback."""
        pid_r, pid_c, offs, mask = _block_view(M, N, n_brow, BR, BC, RP, CP, G)
        x = _load_fp32(x_ptr, offs, mask, IN_KIND)
        amax = _block_max(_finite_abs(x))
        s1 = _scale_from_amax(amax, 127.0, 1.0, False)
        # a block holding NaN/Inf: NaN scale, so q1 = 0 and the residual is NaN (amax 0: q2 = 0,
        # s2 = 1), exactly as in the reference
        s1 = tl.where(_block_max(_nonfinite(x)) > 0.0, float("nan"), s1)
        u1 = 0.0
        u2 = 0.0
        if STOCHASTIC:
            u1 = tl.load(u1_ptr + offs, mask=mask, other=0.0)
            u2 = tl.load(u2_ptr + offs, mask=mask, other=0.0)
        q1 = _encode(x * s1[:, None, None], u1, 127.0, True, 0, 0, 0, STOCHASTIC, False, tl.int8)
        tl.store(q1_ptr + offs, q1, mask=mask)

        gi = pid_r * G + tl.arange(0, G)
        gmask = gi < n_brow
        sidx = gi * n_bcol + pid_c
        tl.store(s1_ptr + sidx, s1, mask=gmask)
        if MODE == 0:
            flag = tl.load(mask_ptr + sidx, mask=gmask, other=0) != 0
        elif MODE == 1:
            flag = amax > tl.load(thr_ptr)
        else:
            flag = amax < 0.0
        # the residual against the value the GEMM will see for q1 (a correctly rounded q1 / s1)
        r = x - tl.math.div_rn(q1.to(tl.float32), s1[:, None, None])
        amax_r = tl.where(flag, _block_max(_finite_abs(r)), 0.0)
        s2 = _scale_from_amax(amax_r, 127.0, 1.0, False)
        q2 = _encode(r * s2[:, None, None], u2, 127.0, True, 0, 0, 0, STOCHASTIC, False, tl.int8)
        q2 = tl.where(flag[:, None, None], q2, 0).to(tl.int8)
        tl.store(q2_ptr + offs, q2, mask=mask)
        tl.store(s2_ptr + sidx, s2, mask=gmask)
        tl.store(flag_ptr + sidx, flag.to(tl.int8), mask=gmask)

    @triton.jit
    def _exact_f32(p, MAGIC: tl.constexpr):
        """An int32 tile as fp32, exact for |p| < 2^22 either way. MAGIC: write p into the mantissa of
        1.5 * 2^23 with an integer add, then subtract 1.5 * 2^23 (one integer and one float add, both
        full rate, where the int-to-float conversion instruction issues at a quarter of it)."""
        if MAGIC:
            return (p + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0
        else:
            return p.to(tl.float32)

    @triton.jit
    def _rows_tile(ptr, rows_off, kb, offs_k, K, GK: tl.constexpr, EVEN_K: tl.constexpr):
        """[R, BLOCK_K] int8 tile of K-group kb of a K-contiguous operand (rows_off: row * K)."""
        kk = kb * GK + offs_k
        if EVEN_K:
            return tl.load(ptr + rows_off[:, None] + kk[None, :])
        else:
            k_ok = (offs_k < GK) & (kk < K)
            return tl.load(ptr + rows_off[:, None] + kk[None, :], mask=k_ok[None, :], other=0)

    @triton.jit
    def _cols_tile(ptr, cols_off, kb, offs_k, K, GK: tl.constexpr, EVEN_K: tl.constexpr):
        """The same as a [BLOCK_K, C] tile (the right-hand operand of tl.dot)."""
        kk = kb * GK + offs_k
        if EVEN_K:
            return tl.load(ptr + cols_off[None, :] + kk[:, None])
        else:
            k_ok = (offs_k < GK) & (kk < K)
            return tl.load(ptr + cols_off[None, :] + kk[:, None], mask=k_ok[:, None], other=0)

    @triton.jit(do_not_specialize=["n_kb"])  # only a loop bound and a scale-row stride
    def _gemm_kernel(a_ptr, a_desc, da_ptr, b_ptr, b_desc, db_ptr, c_ptr,
                     ra_ptr, dra_ptr, fa_ptr, rb_ptr, drb_ptr, fb_ptr,
                     M, N, K, n_kb,
                     BMS: tl.constexpr, BNS: tl.constexpr, GK: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     KG: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, MAGIC: tl.constexpr,
                     USE_TMA: tl.constexpr, HAS_RA: tl.constexpr, HAS_RB: tl.constexpr, WS: tl.constexpr):
        """One BLOCK_M x BLOCK_N tile of C = A @ B.T; KG K-groups per loop iteration (n_kb % KG == 0),
        each its own int32 dot and fp32 rescale. HAS_RA / HAS_RB: the fused second parts (a
        uniform branch per K-group where a row-block of the tile is flagged)."""
        pid = tl.program_id(0)
        pid_m, pid_n = _grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        # rows past the edge read a valid row (their results are not stored): no masks along M, N
        rm = offs_m % M
        rn = offs_n % N
        offs_k = tl.arange(0, BLOCK_K)
        a_rows = rm.to(tl.int64) * K
        b_cols = rn.to(tl.int64) * K
        sa_idx = (rm // BMS) * n_kb
        sb_idx = (rn // BNS) * n_kb

        acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
        for it in tl.range(0, n_kb // KG, warp_specialize=WS):
            for j in tl.static_range(KG):
                kb = it * KG + j
                # scales first: their loads are in flight during the dot
                da = tl.load(da_ptr + sa_idx + kb)
                db = tl.load(db_ptr + sb_idx + kb)
                if USE_TMA:
                    a = a_desc.load([pid_m * BLOCK_M, kb * GK])
                    b = tl.trans(b_desc.load([pid_n * BLOCK_N, kb * GK]))
                else:
                    a = _rows_tile(a_ptr, a_rows, kb, offs_k, K, GK, EVEN_K)
                    b = _cols_tile(b_ptr, b_cols, kb, offs_k, K, GK, EVEN_K)
                p = tl.dot(a, b, out_dtype=tl.int32)
                acc = acc + _exact_f32(p, MAGIC) * (da[:, None] * db[None, :])
                if HAS_RA:
                    fa = tl.load(fa_ptr + sa_idx + kb).to(tl.int32)
                    dra = tl.where(fa != 0, tl.load(dra_ptr + sa_idx + kb), 0.0)
                    any_a = _max_axis(fa, 0) > 0
                    if any_a:
                        a2 = _rows_tile(ra_ptr, a_rows, kb, offs_k, K, GK, EVEN_K)
                        p2 = tl.dot(a2, b, out_dtype=tl.int32)
                        acc = acc + _exact_f32(p2, MAGIC) * (dra[:, None] * db[None, :])
                if HAS_RB:
                    fb = tl.load(fb_ptr + sb_idx + kb).to(tl.int32)
                    drb = tl.where(fb != 0, tl.load(drb_ptr + sb_idx + kb), 0.0)
                    if _max_axis(fb, 0) > 0:
                        b2 = _cols_tile(rb_ptr, b_cols, kb, offs_k, K, GK, EVEN_K)
                        p3 = tl.dot(a, b2, out_dtype=tl.int32)
                        acc = acc + _exact_f32(p3, MAGIC) * (da[:, None] * drb[None, :])
                        if HAS_RA:
                            if any_a:
                                a2b = _rows_tile(ra_ptr, a_rows, kb, offs_k, K, GK, EVEN_K)
                                p4 = tl.dot(a2b, b2, out_dtype=tl.int32)
                                acc = acc + _exact_f32(p4, MAGIC) * (dra[:, None] * drb[None, :])
        c_offs = offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(c_ptr + c_offs, acc, mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])

    @triton.jit
    def _min_combine(a, b):
        return tl.minimum(a, b)

    @triton.jit
    def _flag_chunk(fr_ptr, rbs, rb_ok, c0, kc, n_kb):
        """[KCHUNK] bool: K-groups c0 + kc where one of the row-blocks rbs is flagged."""
        f = tl.load(fr_ptr + rbs[:, None] * n_kb + (c0 + kc)[None, :],
                    mask=rb_ok[:, None] & ((c0 + kc) < n_kb)[None, :], other=0)
        return _max_axis(f.to(tl.int32), 0) != 0

    @triton.jit(do_not_specialize=["n_kb", "n_ysplit"])
    def _residual_kernel(r_ptr, dr_ptr, fr_ptr, y_ptr, dy_ptr, yr_ptr, dyr_ptr, fy_ptr, c_ptr,
                         R, Y, K, n_kb, stride_cr, stride_cy, n_ysplit,
                         RBS: tl.constexpr, YBS: tl.constexpr, GK: tl.constexpr,
                         BLOCK_R: tl.constexpr, BLOCK_Y: tl.constexpr, BLOCK_K: tl.constexpr,
                         NRB: tl.constexpr, KCHUNK: tl.constexpr, EVEN_K: tl.constexpr, MAGIC: tl.constexpr,
                         HAS_CROSS: tl.constexpr):
        """The second part of one operand (R: codes r, decode scales dr, flags fr) against the first
        part of the other (Y), added to C[r, y] (strides stride_cr, stride_cy); HAS_CROSS adds Y's
        second part against R's in the same K-group. A program owns BLOCK_R rows of R and every
        n_ysplit-th BLOCK_Y tile of Y, and visits only the K-groups where its rows hold a flagged
        block (found in registers from the flag grid, in increasing order); a program without any
        returns after reading its flags."""
        pid = tl.program_id(0)
        pid_r = pid // n_ysplit
        pid_y0 = pid % n_ysplit
        offs_r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
        r_ok = offs_r < R
        rr = offs_r % R
        r_rows = rr.to(tl.int64) * K
        sr_idx = (rr // RBS) * n_kb
        first_rb = (pid_r * BLOCK_R) // RBS
        last_rb = (tl.minimum(pid_r * BLOCK_R + BLOCK_R, R) - 1) // RBS
        rbs = first_rb + tl.arange(0, NRB)
        rb_ok = rbs <= last_rb
        kc = tl.arange(0, KCHUNK)
        offs_k = tl.arange(0, BLOCK_K)

        total = 0
        for c0 in range(0, n_kb, KCHUNK):
            total += _sum_axis(_flag_chunk(fr_ptr, rbs, rb_ok, c0, kc, n_kb).to(tl.int32), 0)
        if total > 0:
            for yt in range(pid_y0, (Y + BLOCK_Y - 1) // BLOCK_Y, n_ysplit):
                offs_y = yt * BLOCK_Y + tl.arange(0, BLOCK_Y)
                ry = offs_y % Y
                y_cols = ry.to(tl.int64) * K
                sy_idx = (ry // YBS) * n_kb
                acc = tl.full([BLOCK_R, BLOCK_Y], 0.0, tl.float32)
                for c0 in range(0, n_kb, KCHUNK):
                    rem = _flag_chunk(fr_ptr, rbs, rb_ok, c0, kc, n_kb)
                    for i in range(0, _sum_axis(rem.to(tl.int32), 0)):
                        kl = tl.reduce(tl.where(rem, kc, KCHUNK), 0, _min_combine)
                        rem = rem & (kc != kl)
                        kb = c0 + kl
                        dr = tl.where(tl.load(fr_ptr + sr_idx + kb) != 0, tl.load(dr_ptr + sr_idx + kb), 0.0)
                        dy = tl.load(dy_ptr + sy_idx + kb)
                        r = _rows_tile(r_ptr, r_rows, kb, offs_k, K, GK, EVEN_K)
                        yv = _cols_tile(y_ptr, y_cols, kb, offs_k, K, GK, EVEN_K)
                        p = tl.dot(r, yv, out_dtype=tl.int32)
                        acc = acc + _exact_f32(p, MAGIC) * (dr[:, None] * dy[None, :])
                        if HAS_CROSS:
                            fy = tl.load(fy_ptr + sy_idx + kb).to(tl.int32)
                            if _max_axis(fy, 0) > 0:
                                dyr = tl.where(fy != 0, tl.load(dyr_ptr + sy_idx + kb), 0.0)
                                y2 = _cols_tile(yr_ptr, y_cols, kb, offs_k, K, GK, EVEN_K)
                                p2 = tl.dot(r, y2, out_dtype=tl.int32)
                                acc = acc + _exact_f32(p2, MAGIC) * (dr[:, None] * dyr[None, :])
                c_offs = offs_r.to(tl.int64)[:, None] * stride_cr + offs_y.to(tl.int64)[None, :] * stride_cy
                c_mask = r_ok[:, None] & (offs_y < Y)[None, :]
                c = tl.load(c_ptr + c_offs, mask=c_mask, other=0.0)
                tl.store(c_ptr + c_offs, c + acc, mask=c_mask)

    _JIT_FNS = (_gemm_kernel, _encode, _load_fp32, _grouped_tile)


# ----------------------------------------------------------------------------------------------
# Availability


def interpreter_active() -> bool:
    """True when these kernels (and the quantize and _common helpers they call) run under the
    interpreter."""
    return bool(_JIT_FNS) and _c.is_interpreted(*_JIT_FNS)


def triton_available(device=None) -> bool:
    return triton is not None and _kq.triton is not None and _c.available(interpreter_active(), device)


def _require_triton(t: torch.Tensor) -> None:
    _c.require_triton("lowprec.kernels.int8_fallback_gemm", "lowprec.methods.int8_fallback", _TRITON_IMPORT_ERROR,
                      _JIT_FNS, t.device)


# ----------------------------------------------------------------------------------------------
# Quantize


def _prep_x(x: torch.Tensor, block):
    nonempty(x)
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"x must be float32, bfloat16 or float16, got {x.dtype}")
    _require_triton(x)
    br, bc = _check_block(block)
    rp, cp = _next_pow2(br), _next_pow2(bc)
    if rp * cp > _MAX_BLOCK_ELEMS:
        raise ValueError(f"block {block}: at most {_MAX_BLOCK_ELEMS} elements (padded to powers of two)")
    x2d = (x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x).contiguous()
    M, N = x2d.shape
    n_brow, n_bcol = _cdiv(M, br), _cdiv(N, bc)
    g = min(_next_pow2(n_brow), max(_QUANT_TILE // (rp * cp), 1))
    kind, arg = _c._in_kind(x2d)
    t = dict(BR=br, BC=bc, RP=rp, CP=cp, G=g, IN_KIND=kind)
    return x2d, arg, M, N, n_brow, n_bcol, t, (_cdiv(n_brow, g) * n_bcol,)


def _warps(t) -> int:
    return 8 if t["G"] * t["RP"] * t["CP"] >= 4096 else 4


def block_stats_int8(x: torch.Tensor, block=(32, 32)):
    """(amax, rel_err) per block: the block amax (NaN/Inf ignored) and the relative L2 error of
    nearest-rounding INT8, as ``block_amax`` and ``lowprec.methods.int8_fallback.block_int8_error``
    compute them (amax bit-exact; rel_err to fp32 summation order)."""
    x2d, arg, M, N, n_brow, n_bcol, t, grid = _prep_x(x, block)
    amax = torch.empty((n_brow, n_bcol), dtype=torch.float32, device=x.device)
    err = torch.empty_like(amax)
    _stats_kernel[grid](arg, amax, err, M, N, n_brow, n_bcol, num_warps=_warps(t), **t)
    return amax, err


def quantize_fallback_int8(x: torch.Tensor, block=(32, 32), *, mask: Optional[torch.Tensor] = None,
                           threshold: Optional[torch.Tensor] = None, noise: Optional[tuple] = None):
    """One pass: (q1, s1, q2, s2, flags); see the module docstring. noise=(u1, u2), each x's 2-D
    shape of U[0, 1) floats, switches both parts to stochastic rounding. threshold: a number
    >= 0 (checked), or a 1-element tensor used as it is (the dynamic rule's level, computed on the
    device; Inf there means "no level yet": nothing falls back)."""
    if mask is not None and threshold is not None:
        raise ValueError("give mask= or threshold=, not both")
    if threshold is not None and not isinstance(threshold, torch.Tensor):
        threshold = number("threshold", threshold, low=0.0)
    x2d, arg, M, N, n_brow, n_bcol, t, grid = _prep_x(x, block)
    dev = x.device
    q1 = torch.empty((M, N), dtype=torch.int8, device=dev)
    q2 = torch.empty_like(q1)
    s1 = torch.empty((n_brow, n_bcol), dtype=torch.float32, device=dev)
    s2 = torch.empty_like(s1)
    flags = torch.empty((n_brow, n_bcol), dtype=torch.int8, device=dev)
    mode, mask_arg, thr_arg = 2, flags, s1
    if mask is not None:
        if tuple(mask.shape) != (n_brow, n_bcol):
            raise ValueError(f"mask grid {tuple(mask.shape)} != block grid {(n_brow, n_bcol)}")
        mode, mask_arg = 0, mask.to(device=dev, dtype=torch.int8).contiguous()
    elif threshold is not None:
        thr = torch.as_tensor(threshold, dtype=torch.float32, device=dev)
        if thr.numel() != 1:
            raise ValueError("threshold must be a single number")
        mode, thr_arg = 1, thr.reshape(1).contiguous()
    stochastic = noise is not None
    u1 = u2 = arg  # never read unless STOCHASTIC
    if stochastic:
        u1, u2 = (u.to(device=dev, dtype=torch.float32).reshape(M, N).contiguous() for u in noise)
    _fallback_quant_kernel[grid](arg, u1, u2, q1, s1, q2, s2, flags, mask_arg, thr_arg, M, N, n_brow,
                                 n_bcol, STOCHASTIC=stochastic, MODE=mode, num_warps=_warps(t), **t)
    return q1, s1, q2, s2, flags


def quantize_fallback_rule(x: torch.Tensor, block=(32, 32), rule: str = "absmax", *, tau: float = 8.0,
                           rho: float = 0.02, error_threshold: float = 0.02, noise: Optional[tuple] = None):
    """Two passes: block statistics, the rule on the grid (torch, no host sync), then the quantize
    pass with the resulting mask. Same rules as ``lowprec.methods.int8_fallback_rules.select_blocks`` (the
    dynamic rule's threshold is known beforehand: call ``quantize_fallback_int8(threshold=...)``)."""
    from lowprec.methods.int8_fallback_rules import check_rule_params, select_blocks

    if rule == "dynamic":
        raise ValueError("rule 'dynamic': pass its threshold to quantize_fallback_int8(threshold=...)")
    check_rule_params(rule, tau=tau, rho=rho, error_threshold=error_threshold)
    if rule == "none":
        return quantize_fallback_int8(x, block, noise=noise)
    amax, err = block_stats_int8(x, block)
    mask, _ = select_blocks(x, block, rule, tau=tau, rho=rho, error_threshold=error_threshold, amax=amax,
                            error=err)
    return quantize_fallback_int8(x, block, mask=mask, noise=noise)


# ----------------------------------------------------------------------------------------------
# GEMM: launch configurations


@dataclass(frozen=True)
class GemmConfig:
    """A launch configuration of the GEMM kernel (its results do not depend on it)."""

    block_m: int = 128
    block_n: int = 128
    k_groups: int = 1        # K-groups per loop iteration (each its own dot and rescale)
    num_warps: int = 8
    num_stages: int = 3
    group_m: int = 8         # tile rows whose programs run together (L2 reuse of B)
    magic: bool = True       # int32 -> fp32 by the add trick where exact (group <= 259), else by conversion
    tma: bool = False        # tensor-descriptor (TMA) loads where the operands allow them
    warp_specialize: bool = False
    fp_fusion: bool = True   # False: no FMA contraction, so CUDA equals the torch reference bit for bit

    def label(self) -> str:
        return (f"{self.block_m}x{self.block_n}_kg{self.k_groups}_w{self.num_warps}_s{self.num_stages}"
                f"_gm{self.group_m}{'' if self.magic else '_cvt'}{'_tma' if self.tma else ''}"
                f"{'_ws' if self.warp_specialize else ''}{'' if self.fp_fusion else '_nofma'}")


@dataclass(frozen=True)
class ResidualConfig:
    """Launch configuration of the second-part pass (``fallback="sparse"``)."""

    block_r: int = 32        # rows of the operand with the second part per program (>= 16)
    block_y: int = 128       # rows of the other operand per tile
    num_warps: int = 4
    num_stages: int = 2
    programs: int = 4096     # about this many programs: each takes every n-th tile of the other operand
    k_chunk: int = 1024      # K-groups whose flags a program holds in registers at once
    fp_fusion: bool = True

    def label(self) -> str:
        return (f"r{self.block_r}x{self.block_y}_w{self.num_warps}_s{self.num_stages}_p{self.programs}"
                f"_kc{self.k_chunk}{'' if self.fp_fusion else '_nofma'}")


# GEMMs below this many multiply-adds take the default configuration: tuning would cost more than it saves
TUNE_MIN_MACS = 1 << 33
# the exponent trick needs |partial product| < 2^22
_MAGIC_MAX_GROUP = (1 << 22) // (127 * 127)
# shared memory a configuration may plan for its pipeline (bytes; the H100/H200 limit is 227 KB)
_SMEM_BUDGET = 200 * 1024

_TUNED: dict = {}      # shape class -> (GemmConfig, ms)
_TUNE_LOG: list = []   # every configuration timed: dicts for tuning_log()


def _bucket(n: int) -> int:
    return _next_pow2(max(n, 16))


def _k_groups(want: int, n_kb: int) -> int:
    """The largest power of two <= want that divides n_kb (the loop takes whole iterations)."""
    kg = max(1, _next_pow2(want + 1) // 2)
    while kg > 1 and n_kb % kg:
        kg //= 2
    return kg


def _default_k_groups(gk: int) -> int:
    # about 128 bytes of K per iteration: 16-byte vector loads, few loop iterations
    return max(1, 128 // _next_pow2(gk))


def _smem(cfg: GemmConfig, gk: int) -> int:
    return cfg.num_stages * (cfg.block_m + cfg.block_n) * _next_pow2(gk) * cfg.k_groups


def _tma_usable(qa: torch.Tensor, qb: torch.Tensor, gk: int) -> bool:
    """Descriptor loads need a power-of-two group of >= 16 bytes and 16-byte aligned rows and bases."""
    if not _HAS_TENSOR_DESCRIPTOR or gk < 16 or gk & (gk - 1):
        return False
    return qa.shape[1] % 16 == 0 and qa.data_ptr() % 16 == 0 and qb.data_ptr() % 16 == 0


def default_config(gk: int, M: int = 1 << 12, N: int = 1 << 12) -> GemmConfig:
    """The configuration used without tuning: small tiles one program at a time under the
    interpreter; on CUDA 128 x 128 tiles of 8 warps, about 128 bytes of K per iteration."""
    if interpreter_active():
        return GemmConfig(block_m=max(16, min(64, _next_pow2(M))), block_n=max(16, min(64, _next_pow2(N))),
                          k_groups=1, num_warps=4, num_stages=1)
    kg = _default_k_groups(gk)
    return GemmConfig(k_groups=kg, num_stages=3 if _next_pow2(gk) * kg <= 128 else 2)


def candidate_configs(gk: int, tma: bool = True) -> list:
    """The configurations tuning tries for K-group gk on Hopper-class GPUs (H100/H200): 128-256
    tiles with 8 warps and 64-128 tiles with 4, 3-4 stages, about 128 bytes of K per iteration
    (also 64 / 256 bytes for small groups), tensor-descriptor loads for two tiles."""
    kg = _default_k_groups(gk)
    out = []
    for bm, bn, w, st in ((128, 128, 8, 3), (128, 128, 8, 4), (128, 256, 8, 3), (256, 128, 8, 3),
                          (128, 64, 4, 4), (64, 128, 4, 4)):
        out.append(GemmConfig(bm, bn, kg, w, st))
    if gk <= 64:
        out += [GemmConfig(128, 128, kg // 2, 8, 4), GemmConfig(128, 128, kg * 2, 8, 3)]
    if tma:
        out += [GemmConfig(128, 128, kg, 8, 3, tma=True), GemmConfig(128, 256, kg, 8, 3, tma=True)]
    fitted = []
    for cfg in out:
        while _smem(cfg, gk) > _SMEM_BUDGET and cfg.num_stages > 2:
            cfg = replace(cfg, num_stages=cfg.num_stages - 1)
        if cfg.k_groups >= 1 and _smem(cfg, gk) <= _SMEM_BUDGET and cfg not in fitted:
            fitted.append(cfg)
    return fitted


def _autotune_enabled() -> bool:
    return os.environ.get("LOWPREC_INT8_GEMM_AUTOTUNE", "1") != "0"


def tuned_configs() -> list:
    """One dict per shape class tuned in this process: the class, the chosen configuration and
    its median time."""
    return [{**dict(zip(_KEY_FIELDS, key)), "config": cfg.label(), "ms": ms, **asdict(cfg)}
            for key, (cfg, ms) in _TUNED.items()]


def tuning_log() -> list:
    """Every configuration timed by the tuner in this process (shape class, configuration, median
    ms or the error that ruled it out, registers and spills per thread, shared memory)."""
    return list(_TUNE_LOG)


# ----------------------------------------------------------------------------------------------
# GEMM


_KEY_FIELDS = ("kernel", "M_class", "N_class", "K_class", "group", "block_rows_a", "block_rows_b", "even_k",
               "tma_usable")


class _Gemm:
    """Checked operands of one call and the launches of its kernels."""

    def __init__(self, qa, da, qb, db, block_a, block_b, ra, dra, fa, rb, drb, fb):
        for name, q in (("qa", qa), ("qb", qb)):
            if q.dtype != torch.int8 or q.dim() != 2:
                raise TypeError(f"{name} must be a 2-D int8 tensor, got {q.dtype} {tuple(q.shape)}")
            nonempty(q, name)
        M, K = qa.shape
        N = qb.shape[0]
        if qb.shape[1] != K:
            raise ValueError(f"K differs: {tuple(qa.shape)} vs {tuple(qb.shape)}")
        bms, gk = _check_block(block_a, "block_a")
        bns, gk_b = _check_block(block_b, "block_b")
        if gk != gk_b:
            raise ValueError(f"A and B must share the K-group: {block_a} vs {block_b}")
        if gk * 127 * 127 >= 2**31:
            raise ValueError(f"K-group {gk} could overflow the int32 partial products")
        self.M, self.N, self.K, self.gk, self.bms, self.bns = M, N, K, gk, bms, bns
        self.n_kb = _cdiv(K, gk)
        self.dev = qa.device
        self.da = self._scales(da, _cdiv(M, bms), "da")
        self.db = self._scales(db, _cdiv(N, bns), "db")
        self.ra, self.dra, self.fa = self._second_part(ra, dra, fa, qa, _cdiv(M, bms), "a")
        self.rb, self.drb, self.fb = self._second_part(rb, drb, fb, qb, _cdiv(N, bns), "b")
        self.qa, self.qb = qa.contiguous(), qb.contiguous()
        self.even_k = K % gk == 0 and _next_pow2(gk) == gk
        self.tma_usable = _tma_usable(self.qa, self.qb, gk)

    def _scales(self, d, rows, what):
        d = d.to(device=self.dev, dtype=torch.float32).contiguous()
        if tuple(d.shape) != (rows, self.n_kb):
            raise ValueError(f"{what}: scale grid {tuple(d.shape)} != {(rows, self.n_kb)}")
        return d

    def _second_part(self, r, dr, f, q, rows, name):
        """An operand's optional second part (codes, decode scales, flags), checked and laid out."""
        if r is None:
            return None, None, None
        if dr is None or f is None or r.shape != q.shape or r.dtype != torch.int8:
            raise ValueError(f"r{name} needs int8 codes of q{name}'s shape, dr{name} and f{name}")
        f = f.to(device=self.dev, dtype=torch.int8).contiguous()
        if tuple(f.shape) != (rows, self.n_kb):
            raise ValueError(f"f{name}: flag grid {tuple(f.shape)} != {(rows, self.n_kb)}")
        return r.contiguous(), self._scales(dr, rows, f"dr{name}"), f

    def key(self) -> tuple:
        return ("main", _bucket(self.M), _bucket(self.N), _bucket(self.K), self.gk, self.bms, self.bns,
                self.even_k, self.tma_usable)

    # -- the main kernel
    def launch_main(self, c, cfg: GemmConfig, fused_a=False, fused_b=False, warmup=False):
        kg = _k_groups(cfg.k_groups, self.n_kb)
        bk = _next_pow2(self.gk)
        tma = cfg.tma and self.tma_usable
        a_desc, b_desc = self.qa, self.qb  # placeholders, never read unless USE_TMA
        if tma:
            a_desc = _TensorDescriptor.from_tensor(self.qa, [cfg.block_m, bk])
            b_desc = _TensorDescriptor.from_tensor(self.qb, [cfg.block_n, bk])
        grid = (_cdiv(self.M, cfg.block_m) * _cdiv(self.N, cfg.block_n),)
        args = (self.qa, a_desc, self.da, self.qb, b_desc, self.db, c,
                self.ra if fused_a else self.qa, self.dra if fused_a else self.da, self.fa if fused_a else self.qa,
                self.rb if fused_b else self.qb, self.drb if fused_b else self.db, self.fb if fused_b else self.qb,
                self.M, self.N, self.K, self.n_kb)
        meta = dict(BMS=self.bms, BNS=self.bns, GK=self.gk, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=bk,
                    KG=kg, GROUP_M=cfg.group_m, EVEN_K=self.even_k,
                    MAGIC=cfg.magic and self.gk <= _MAGIC_MAX_GROUP, USE_TMA=tma, HAS_RA=fused_a, HAS_RB=fused_b,
                    WS=cfg.warp_specialize, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                    enable_fp_fusion=cfg.fp_fusion)
        if warmup:
            return _gemm_kernel.warmup(*args, grid=grid, **meta)
        _gemm_kernel[grid](*args, **meta)

    def config(self) -> GemmConfig:
        """The tuned configuration of this shape class (tuning it now if it is new), or the default.
        Tuned on the first parts alone; the fused second parts run in the same configuration."""
        if (interpreter_active() or not _autotune_enabled()
                or self.M * self.N * self.K < TUNE_MIN_MACS):
            return default_config(self.gk, self.M, self.N)
        key = self.key()
        if key not in _TUNED:
            _TUNED[key] = self._tune(key)
        return _TUNED[key][0]

    def _tune(self, key):
        import triton.testing

        cands = candidate_configs(self.gk, tma=self.tma_usable)
        c = torch.empty((self.M, self.N), dtype=torch.float32, device=self.dev)
        _precompile(lambda cfg: self.launch_main(c, cfg, warmup=True), cands)
        best = None
        for cfg in cands:
            row = {**dict(zip(_KEY_FIELDS, key)), "config": cfg.label()}
            try:
                fn = lambda: self.launch_main(c, cfg)  # noqa: E731
                fn()
                torch.cuda.synchronize(self.dev)
                ms = float(triton.testing.do_bench(fn, warmup=5, rep=30, return_mode="median"))
            except Exception as exc:  # a configuration the device or compiler refuses: tried, ruled out
                first = str(exc).splitlines()[0][:200] if str(exc) else ""
                _TUNE_LOG.append({**row, "ms": "", "error": f"{type(exc).__name__}: {first}"})
                continue
            _TUNE_LOG.append({**row, "ms": ms, "error": "", **_resources(self.launch_main(c, cfg, warmup=True))})
            if best is None or ms < best[1]:
                best = (cfg, ms)
        if best is None:
            raise RuntimeError(f"int8_fallback_gemm: no configuration of {cands[0].label()} and "
                               f"{len(cands) - 1} others ran for shape class {key}; see tuning_log()")
        return best

    # -- the second-part pass
    def launch_residual(self, c, side: str, rcfg: ResidualConfig, cross: bool, warmup=False):
        if side == "a":  # C[m, n] += (q2a . q1b) * dra * db
            r, dr, fr, rbs, R = self.ra, self.dra, self.fa, self.bms, self.M
            y, dy, ybs, Y, stride_cr, stride_cy = self.qb, self.db, self.bns, self.N, self.N, 1
            yr, dyr, fy = self.qb, self.db, self.fa
        else:  # C[m, n] += (q1a . q2b) * da * drb (+ (q2a . q2b) * dra * drb with cross)
            r, dr, fr, rbs, R = self.rb, self.drb, self.fb, self.bns, self.N
            y, dy, ybs, Y, stride_cr, stride_cy = self.qa, self.da, self.bms, self.M, 1, self.N
            yr, dyr, fy = (self.ra, self.dra, self.fa) if cross else (self.qa, self.da, self.fb)
        n_rt = _cdiv(R, rcfg.block_r)
        n_ysplit = max(1, min(_cdiv(Y, rcfg.block_y), _cdiv(rcfg.programs, n_rt)))
        nrb = _next_pow2(_cdiv(rcfg.block_r - 1, rbs) + 1)
        kchunk = min(_next_pow2(self.n_kb), _next_pow2(rcfg.k_chunk), max(16, 8192 // nrb))
        grid = (n_rt * n_ysplit,)
        args = (r, dr, fr, y, dy, yr, dyr, fy, c, R, Y, self.K, self.n_kb, stride_cr, stride_cy, n_ysplit)
        meta = dict(RBS=rbs, YBS=ybs, GK=self.gk, BLOCK_R=rcfg.block_r, BLOCK_Y=rcfg.block_y,
                    BLOCK_K=_next_pow2(self.gk), NRB=nrb, KCHUNK=kchunk, EVEN_K=self.even_k,
                    MAGIC=self.gk <= _MAGIC_MAX_GROUP, HAS_CROSS=cross, num_warps=rcfg.num_warps,
                    num_stages=rcfg.num_stages, enable_fp_fusion=rcfg.fp_fusion)
        if warmup:
            return _residual_kernel.warmup(*args, grid=grid, **meta)
        _residual_kernel[grid](*args, **meta)


def _resources(kernel) -> dict:
    """Registers and spills per thread and shared memory of a compiled kernel (for the tuning log;
    empty where this Triton does not say)."""
    out = {}
    for key, get in (("regs", lambda k: k.n_regs), ("spills", lambda k: k.n_spills),
                     ("shared", lambda k: k.metadata.shared)):
        try:
            out[key] = int(get(kernel))
        except Exception:  # noqa: BLE001 - an attribute this Triton version lacks
            out[key] = ""
    return out


def _precompile(warm, cands) -> None:
    """Compile warm(c) for each candidate c (a launch with warmup=True) in parallel threads where
    this Triton can (its compile futures), else not at all; failures are left for the launches,
    which report them."""
    try:
        from concurrent.futures import ThreadPoolExecutor

        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        with AsyncCompileMode(pool, ignore_errors=True):
            for cfg in cands:
                try:
                    warm(cfg)
                except Exception:  # noqa: BLE001 - recorded when the loop launches it
                    pass


def default_residual_config(block_rows: int) -> ResidualConfig:
    if interpreter_active():
        return ResidualConfig(block_r=16, block_y=32, num_stages=1, programs=4)
    return ResidualConfig()


FALLBACK_IMPLS = ("sparse", "fused")


def int8_fallback_gemm(qa, da, qb, db, block_a=(32, 32), block_b=(32, 32), ra=None, dra=None, fa=None,
                       rb=None, drb=None, fb=None, *, fallback: str = "sparse",
                       config: Optional[GemmConfig] = None, residual: Optional[ResidualConfig] = None,
                       block_m: Optional[int] = None, block_n: Optional[int] = None,
                       num_warps: Optional[int] = None, num_stages: Optional[int] = None) -> torch.Tensor:
    """fp32 ``A @ B.T`` from block-scaled INT8 operands (DECODE scales), with optional second
    parts; the argument meanings are those of ``lowprec.methods.int8_fallback.int8_block_gemm_reference``.

    fallback: "sparse" (the first parts in the main kernel, then one pass per operand with a second
    part over its flagged K-groups only) or "fused" (the second parts inside the main loop).
    config: a GemmConfig; block_m, block_n, num_warps, num_stages override fields of it (or of the
    default). Without any of them the configuration is tuned once per shape class on CUDA
    (``tuned_configs()``; LOWPREC_INT8_GEMM_AUTOTUNE=0 turns tuning off)."""
    _require_triton(qa)
    if fallback not in FALLBACK_IMPLS:
        raise ValueError(f"fallback must be one of {FALLBACK_IMPLS}, got {fallback!r}")
    g = _Gemm(qa, da, qb, db, block_a, block_b, ra, dra, fa, rb, drb, fb)
    c = torch.empty((g.M, g.N), dtype=torch.float32, device=g.dev)
    if g.M == 0 or g.N == 0:
        return c
    if g.K == 0:
        return c.zero_()
    has_ra, has_rb = g.ra is not None, g.rb is not None
    fused = fallback == "fused"
    fused_a, fused_b = fused and has_ra, fused and has_rb
    over = {k: v for k, v in (("block_m", block_m), ("block_n", block_n), ("num_warps", num_warps),
                              ("num_stages", num_stages)) if v is not None}
    if config is None and not over:
        cfg = g.config()
    else:
        cfg = replace(config or default_config(g.gk, g.M, g.N), **over)
    g.launch_main(c, cfg, fused_a, fused_b)
    if not fused:
        rcfg = residual or default_residual_config(g.bms)
        if has_ra:
            g.launch_residual(c, "a", rcfg, cross=False)
        if has_rb:
            g.launch_residual(c, "b", rcfg, cross=has_ra)
    return c


def selected_config(qa, qb, block_a=(32, 32), block_b=(32, 32)) -> GemmConfig:
    """The configuration ``int8_fallback_gemm`` uses for these operands without explicit tuning
    arguments (tuning the shape class first if it is new): for benchmarks to record."""
    n_kb = _cdiv(qa.shape[1], _check_block(block_a)[1])
    da = torch.ones((_cdiv(qa.shape[0], block_a[0]), n_kb), device=qa.device)
    db = torch.ones((_cdiv(qb.shape[0], block_b[0]), _cdiv(qb.shape[1], _check_block(block_b)[1])),
                    device=qb.device)
    return _Gemm(qa, da, qb, db, block_a, block_b, None, None, None, None, None, None).config()


def gemm_fallback_qtensors(fqa, fqb, **kw) -> torch.Tensor:
    """``A @ B.T`` from two ``lowprec.methods.int8_fallback.FallbackQTensor`` (reduction dimension last, as
    QLinear passes operands). With the sparse second-part pass (the default) an operand that may
    have fallback blocks passes its second part as it is: the pass reads the flags on the device
    and costs next to nothing where none is set. The fused kernel would pay a branch per K-group
    for it, so there a second part is passed only where a flag is set (a host sync per operand)."""
    qa, da, ra, dra, fa = fqa.gemm_operands()
    qb, db, rb, drb, fb = fqb.gemm_operands()
    if kw.get("fallback", "sparse") == "fused":
        use_a = fqa.maybe_fallback and bool(fqa.mask.any())
        use_b = fqb.maybe_fallback and bool(fqb.mask.any())
    else:
        use_a, use_b = fqa.maybe_fallback, fqb.maybe_fallback
    return int8_fallback_gemm(qa, da, qb, db, fqa.block, fqb.block,
                              *((ra, dra, fa) if use_a else (None, None, None)),
                              *((rb, drb, fb) if use_b else (None, None, None)), **kw)
