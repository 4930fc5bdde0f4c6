"""Triton kernels for INT8 training with block-level fallback (``lowprec.int8_fallback``).

API::

    block_stats_int8(x, block) -> (amax, rel_err)             # per-block grids, for the rules
    quantize_fallback_int8(x, block, *, mask=None, threshold=None, noise=None)
        -> (q1, s1, q2, s2, flags)                            # one pass
    quantize_fallback_rule(x, block, rule, **rule_kw, noise=None) -> same   # two passes
    int8_fallback_gemm(qa, da, qb, db, block_a, block_b, ra=None, dra=None, fa=None,
                       rb=None, drb=None, fb=None) -> fp32 (M, N) = A @ B.T
    gemm_fallback_qtensors(fqa, fqb) -> fp32                  # from two FallbackQTensors
    triton_available(device=None), interpreter_active()

Quantize. ``quantize_fallback_int8`` reads x once per block and writes the first INT8 part q1
(int8, x's 2-D shape), its ENCODE scales s1 (the ``lowprec.numerics`` convention, x ~= q1 / s1), the
residual part q2 (int8, 0 outside fallback blocks), its encode scales s2 (1 outside) and the flags
(int8 grid). Which blocks fall back: ``mask`` (a bool grid computed beforehand: topk, error, or the
current-median absmax rule, which all need the whole tensor's block statistics first: that is the
second pass, ``block_stats_int8``), or ``threshold`` (a 1-element tensor: block amax > threshold,
decided inside the kernel: the dynamic rule, whose threshold comes from past calls, needs no second
pass), or neither (nothing falls back). Bit-exact with ``lowprec.int8_fallback.fallback_quantize``
(scales by a correctly rounded division, RNE or stochastic rounding with the same uniforms).

GEMM. A (M, K) and B (N, K), both int8 with K contiguous (B "column-major" as cuBLAS and
``torch._int_mm`` want it), per-block DECODE scales (x ~= q * d) on grids (ceil(M/BM), ceil(K/G))
and (ceil(N/BN), ceil(K/G)), with G the K-group of both operands. One program computes a
BLOCK_M x BLOCK_N output tile; each K-step is one K-group: an int32 ``tl.dot`` of the int8 tiles,
converted to fp32 and multiplied by the outer product of the row and column scale vectors, added to
an fp32 accumulator. Blocks of A (or B) with a second part carry a flag; a tile whose rows hold at
least one flagged block at this K-step issues the extra int8 product (uniform branch per program),
with the scales of unflagged rows zeroed, so the result does not depend on the tiling. Terms in
order q1a.q1b, q2a.q1b, q1a.q2b, q2a.q2b, the order of ``int8_block_gemm_reference``.

Cost model. A tile issues the extra product when any of its BLOCK_M / BM row-blocks falls back at
that K-step (BLOCK_M = 128 on CUDA: 4 row-blocks of Jetfire's 32), so the issued share of extra
products (the bench's ``tile_ratio``) can exceed the block fallback ratio when fallback blocks are
scattered; whole hot token rows cost only their own share. The residual is stored densely (an int8
tensor of A's shape, zero outside fallback blocks): simple addressing, twice A's INT8 memory; a
compact layout indexed by fallback block would save that memory.

Non-finite values. An INT8 code cannot hold NaN or Inf, so a block holding one gets a NaN first-part
scale s1 (so q1 = 0; its residual is then NaN: q2 = 0, s2 = 1), as
``lowprec.numerics`` and ``fallback_quantize`` do: its decode scale is NaN, and so is every GEMM
output row (column) that the block enters. Which blocks fall back is decided on the finite values.
Empty tensors are refused, as in the torch reference.

Exactness. int8 ``tl.dot`` into int32 is exact (interpreter: checked; GPUs: integer MMA). The
int32 -> fp32 conversion is exact while G * 127^2 < 2^24, i.e. G <= 1040. With the same fp32
multiply/add sequence, the interpreter (numpy) equals the torch reference bit for bit. A GPU
compiler may contract ``acc + p * s`` into an FMA (one rounding instead of two), so on CUDA the
result agrees to about 1e-6 relative per K-group instead of bitwise.

Interpreter: as for ``lowprec.kernels.quantize`` (whose jit helpers these kernels call, with those of
``lowprec.kernels._common``), set TRITON_INTERPRET=1 before the three modules are first imported, or
reload them (_common, quantize, then this one: ``_common.reload_for_interpreter``).
"""

from __future__ import annotations

from typing import Optional

import torch

from lowprec.numerics.checks import nonempty, number

from . import _common as _c
from . import quantize as _kq
from ._common import _cdiv, _check_block, _next_pow2

triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()

__all__ = [
    "triton_available",
    "interpreter_active",
    "block_stats_int8",
    "quantize_fallback_int8",
    "quantize_fallback_rule",
    "int8_fallback_gemm",
    "gemm_fallback_qtensors",
]

_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Largest block one quantize program holds (elements); (128, 128) fits.
_MAX_BLOCK_ELEMS = 16384
# Elements a quantize program aims for when blocks are small ((1, 128): 32 block-rows at once).
_QUANT_TILE = 4096
_GROUP_M = 8
_JIT_FNS: tuple = ()  # this module's kernel and the helpers it calls from quantize and _common (mode checks)

if triton is not None and _kq.triton is not None:
    from ._common import _finite_abs, _load_fp32, _max_axis, _sum_axis
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
    def _gemm_kernel(a_ptr, da_ptr, ra_ptr, dra_ptr, fa_ptr, b_ptr, db_ptr, rb_ptr, drb_ptr, fb_ptr, c_ptr,
                     M, N, K, n_kb,
                     BMS: tl.constexpr, BNS: tl.constexpr, GK: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr, HAS_RA: tl.constexpr, HAS_RB: tl.constexpr,
                     EVEN: tl.constexpr):
        pid = tl.program_id(0)
        n_pm = (M + BLOCK_M - 1) // BLOCK_M
        n_pn = (N + BLOCK_N - 1) // BLOCK_N
        # programs that share B tiles run together (L2 reuse)
        per_group = GROUP_M * n_pn
        first_m = (pid // per_group) * GROUP_M
        group_rows = tl.minimum(n_pm - first_m, GROUP_M)
        pid_m = first_m + (pid % per_group) % group_rows
        pid_n = (pid % per_group) // group_rows

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        m_ok = offs_m < M
        n_ok = offs_n < N
        a_rows = offs_m.to(tl.int64)[:, None] * K
        b_cols = offs_n.to(tl.int64)[None, :] * K
        sa_idx = (offs_m // BMS) * n_kb
        sb_idx = (offs_n // BNS) * n_kb

        acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
        for kb in range(0, n_kb):
            kk = kb * GK + offs_k
            k_ok = (offs_k < GK) & (kk < K)
            a_mask = m_ok[:, None] & k_ok[None, :]
            b_mask = k_ok[:, None] & n_ok[None, :]
            if EVEN:  # no masks: the loads vectorize and pipeline (masks along K defeat both)
                a = tl.load(a_ptr + a_rows + kk[None, :])
                b = tl.load(b_ptr + b_cols + kk[:, None])
            else:
                a = tl.load(a_ptr + a_rows + kk[None, :], mask=a_mask, other=0)
                b = tl.load(b_ptr + b_cols + kk[:, None], mask=b_mask, other=0)
            da = tl.load(da_ptr + sa_idx + kb, mask=m_ok, other=0.0)
            db = tl.load(db_ptr + sb_idx + kb, mask=n_ok, other=0.0)
            p = tl.dot(a, b, out_dtype=tl.int32)
            acc = acc + p.to(tl.float32) * (da[:, None] * db[None, :])
            if HAS_RA:
                fa = tl.load(fa_ptr + sa_idx + kb, mask=m_ok, other=0).to(tl.int32)
                dra = tl.where(fa != 0, tl.load(dra_ptr + sa_idx + kb, mask=m_ok, other=0.0), 0.0)
                any_a = _max_axis(fa, 0) > 0
                if any_a:
                    a2 = tl.load(ra_ptr + a_rows + kk[None, :], mask=a_mask, other=0)
                    p2 = tl.dot(a2, b, out_dtype=tl.int32)
                    acc = acc + p2.to(tl.float32) * (dra[:, None] * db[None, :])
            if HAS_RB:
                fb = tl.load(fb_ptr + sb_idx + kb, mask=n_ok, other=0).to(tl.int32)
                drb = tl.where(fb != 0, tl.load(drb_ptr + sb_idx + kb, mask=n_ok, other=0.0), 0.0)
                if _max_axis(fb, 0) > 0:
                    b2 = tl.load(rb_ptr + b_cols + kk[:, None], mask=b_mask, other=0)
                    p3 = tl.dot(a, b2, out_dtype=tl.int32)
                    acc = acc + p3.to(tl.float32) * (da[:, None] * drb[None, :])
                    if HAS_RA:
                        if any_a:
                            a2b = tl.load(ra_ptr + a_rows + kk[None, :], mask=a_mask, other=0)
                            p4 = tl.dot(a2b, b2, out_dtype=tl.int32)
                            acc = acc + p4.to(tl.float32) * (dra[:, None] * drb[None, :])
        c_offs = offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(c_ptr + c_offs, acc, mask=m_ok[:, None] & n_ok[None, :])

    _JIT_FNS = (_gemm_kernel, _encode, _load_fp32)


# ----------------------------------------------------------------------------------------------
# Availability


def interpreter_active() -> bool:
    """True when these kernels (and the quantize and _common helpers they call) run under the
    interpreter."""
    return bool(_JIT_FNS) and _c.is_interpreted(*_JIT_FNS)


def triton_available(device=None) -> bool:
    return triton is not None and _kq.triton is not None and _c.available(interpreter_active(), device)


def _require_triton(t: torch.Tensor) -> None:
    _c.require_triton("lowprec.kernels.int8_fallback_gemm", "lowprec.int8_fallback", _TRITON_IMPORT_ERROR,
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
    nearest-rounding INT8, as ``block_amax`` and ``lowprec.int8_fallback.block_int8_error``
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
    pass with the resulting mask. Same rules as ``lowprec.int8_fallback.select_blocks`` (the
    dynamic rule's threshold is known beforehand: call ``quantize_fallback_int8(threshold=...)``)."""
    from lowprec.int8_fallback import check_rule_params, select_blocks

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
# GEMM


def _gemm_config(M: int, N: int, gk: int, block_m, block_n, num_warps, num_stages):
    if interpreter_active():
        # the interpreter runs programs one at a time: few, moderately sized tiles
        bm = block_m or max(16, min(64, _next_pow2(M)))
        bn = block_n or max(16, min(64, _next_pow2(N)))
        return bm, bn, num_warps or 4, num_stages or 1
    bm = block_m or 128
    bn = block_n or 128
    return bm, bn, num_warps or 8, num_stages or (3 if gk <= 128 else 2)


def int8_fallback_gemm(qa, da, qb, db, block_a=(32, 32), block_b=(32, 32), ra=None, dra=None, fa=None,
                       rb=None, drb=None, fb=None, *, block_m: Optional[int] = None,
                       block_n: Optional[int] = None, num_warps: Optional[int] = None,
                       num_stages: Optional[int] = None) -> torch.Tensor:
    """fp32 ``A @ B.T`` from block-scaled INT8 operands (DECODE scales), with optional second
    parts; the argument meanings are those of ``lowprec.int8_fallback.int8_block_gemm_reference``."""
    _require_triton(qa)
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
    n_kb = _cdiv(K, gk)
    dev = qa.device

    def scales(d, rows, what):
        d = d.to(device=dev, dtype=torch.float32).contiguous()
        if tuple(d.shape) != (rows, n_kb):
            raise ValueError(f"{what}: scale grid {tuple(d.shape)} != {(rows, n_kb)}")
        return d

    da = scales(da, _cdiv(M, bms), "da")
    db = scales(db, _cdiv(N, bns), "db")
    def second_part(r, dr, f, q, rows, name):
        """An operand's optional second part (codes, decode scales, flags), checked and laid out."""
        if r is None:
            return None, None, None
        if dr is None or f is None or r.shape != q.shape or r.dtype != torch.int8:
            raise ValueError(f"r{name} needs int8 codes of q{name}'s shape, dr{name} and f{name}")
        return r.contiguous(), scales(dr, rows, f"dr{name}"), f.to(device=dev, dtype=torch.int8).contiguous()

    has_ra, has_rb = ra is not None, rb is not None
    ra, dra, fa = second_part(ra, dra, fa, qa, _cdiv(M, bms), "a")
    rb, drb, fb = second_part(rb, drb, fb, qb, _cdiv(N, bns), "b")
    qa, qb = qa.contiguous(), qb.contiguous()
    c = torch.empty((M, N), dtype=torch.float32, device=dev)
    bm, bn, nw, ns = _gemm_config(M, N, gk, block_m, block_n, num_warps, num_stages)
    grid = (_cdiv(M, bm) * _cdiv(N, bn),)
    _gemm_kernel[grid](
        qa, da, ra if has_ra else qa, dra if has_ra else da, fa if has_ra else qa,
        qb, db, rb if has_rb else qb, drb if has_rb else db, fb if has_rb else qb, c,
        M, N, K, n_kb, BMS=bms, BNS=bns, GK=gk, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=_next_pow2(gk),
        GROUP_M=_GROUP_M, HAS_RA=has_ra, HAS_RB=has_rb,
        EVEN=(M % bm == 0 and N % bn == 0 and K % gk == 0 and _next_pow2(gk) == gk),
        num_warps=nw, num_stages=ns,
    )
    return c


def gemm_fallback_qtensors(fqa, fqb, **kw) -> torch.Tensor:
    """``A @ B.T`` from two ``lowprec.int8_fallback.FallbackQTensor`` (reduction dimension last, as
    QLinear passes operands). A second part is passed only for an operand that has fallback blocks
    (a host sync per operand; a fused path would keep the flags on the device)."""
    qa, da, ra, dra, fa = fqa.gemm_operands()
    qb, db, rb, drb, fb = fqb.gemm_operands()
    use_a = fqa.maybe_fallback and bool(fqa.mask.any())
    use_b = fqb.maybe_fallback and bool(fqb.mask.any())
    return int8_fallback_gemm(qa, da, qb, db, fqa.block, fqb.block,
                              *((ra, dra, fa) if use_a else (None, None, None)),
                              *((rb, drb, fb) if use_b else (None, None, None)), **kw)
