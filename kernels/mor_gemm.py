"""Triton GEMM for tensor-level MoR operands (``lowprec.methods.mor``): fp32 ``A @ B.T`` where each operand
is E4M3 or BF16 as its relative error decided, the decision read on the device, never by the host.

API::

    MoROperand(hp, codes, scales, block, rel_error, threshold)   # one operand, reduction dim last
    mor_gemm(a, b, out_dtype=torch.float32, fp8_accum="precise", backend="auto", config=None, info=None)
        -> (M, N) tensor
    bf16_fixup(a, b, out, info=None, counts=None, count_row=0)
        # the fix-up mode alone, over an FP8 product made elsewhere; adds the call and choices to counts
    fp32_threshold(threshold) -> float
    supported(block_a, block_b, k=None) -> bool, scaled_mm_applies(a, b) -> kind or None
    triton_available(device=None), interpreter_active()

Operands. ``hp`` is the original operand (fp32 or bf16, any strides), ``codes`` its E4M3 codes
(float8_e4m3fn, same shape, any strides), ``scales`` the fp32 ENCODE-scale grid (x ~= code /
scale) over (R, C) blocks (``block``; tensor scaling is one block of the whole operand, channel
scaling (1, K)), ``rel_error`` the 0-d fp32 device tensor that ``lowprec.kernels.mor_quant``
returns, ``threshold`` the MoR threshold. E4M3 is chosen iff rel_error <= threshold, as
``lowprec.methods.mor`` decides (in fp64 there; here in fp32 against ``fp32_threshold``, the largest fp32
not above the threshold, which is the same test for an fp32 error). A NaN error is BF16.

Kernel. Every program loads the two errors and takes one of the main loops (branches uniform over
the whole grid):
  FP8   both operands E4M3: ``tl.dot`` of the E4M3 codes on FP8 tensor cores;
  BF16  otherwise: a BF16 ``tl.dot`` in which each operand is its codes converted to bf16 (exact:
        E4M3 is a subset of bf16) if it chose E4M3, else its hp operand rounded to bf16 (exactly
        the emulation's BF16 value); one loop per pair of choices, each loading one tensor per
        operand (two bf16 hp operands: a plain BF16 GEMM loop).
Backends. "triton" runs the kernel as above. "scaled_mm" computes the FP8 product with
torch._scaled_mm (cuBLAS / CUTLASS: per-tensor, per-row, or 1x128 x 128x128 block scales) without
knowing the decision, then launches the kernel in its fix-up mode, a persistent grid of two
programs per SM: every program returns at once when both operands chose E4M3 (a few
microseconds; one program per tile took about 22 us at the 1 B shapes), else the programs walk the
tiles and the BF16 loop overwrites the output. The
common case then costs what FP8 current scaling's GEMM costs; a BF16 choice pays both GEMMs.
"auto" (default) takes scaled_mm where torch has the scaling and the output dtype (per-row and
block scales give bf16 only), else triton.
Scales. The dequantized value code / s factors out of the dot: an operand whose scale is constant
along K (tensor, channel, or blocks as wide as K) is divided out per output row / column after the
loop; with several K-blocks (block partition), each K-step's partial product is multiplied by the
outer product of the rows' 1 / s before it joins the fp32 accumulator, so BLOCK_K divides the
block width (``supported``: a multiple of 32). GAM block scales are s_g * 2^k, so those factors
are exact powers of two apart; the fp32 and e8 rules work the same way.
FP8 accumulation: "precise" promotes the tensor cores' partial sums into the fp32 accumulator every
K-step of 128 (``max_num_imprecise_acc``; Hopper's FP8 MMA accumulates with ~14 bits otherwise,
what cuBLAS calls fast accumulation), as torch._scaled_mm does by default; "fast" does not. Block
scales promote every K-step by construction. Tiles: 128 x 128 (ptxas spills a promoted 128 x 256
accumulator pair), 128 x 256 for fast accumulation with scales constant along K.

Exactness. Every product of two chosen values is exact in fp32 (E4M3 x E4M3: 8 significant bits;
bf16 x E4M3: 12), so the result differs from a float64 GEMM of the emulation's values only by fp32
accumulation (order and, for FP8, the promotion interval) and the roundings of the scale factors
(a few ulps): tests hold it to float64 references at an SQNR floor.

``info`` (optional int32 tensor of 3): program 0 writes (A chose E4M3, B chose E4M3, what
multiplied: 1 the FP8 loop, 2 the BF16 loop, 3 torch._scaled_mm, 4 the BF16 loop on TMA loads), the
evidence tests use that the FP8 path (or the TMA loop) really ran.

Two BF16 choices of bf16 operands (the fast path's ``bf16_choice``) make a plain BF16 GEMM, which
on Hopper runs on TMA loads (``_tma_product``; the launch configuration's ``tma``), traced or not:
the descriptors are made on the device, since a traced launch cannot carry host-made ones, and only
once the decision has found a BF16 choice (``_tma_descs``: the common case returns before). At
8192^3 on the H100 the fix-up ran so at 0.86-0.88x of torch's BF16 GEMM
(``results/mor/fixup_h100_device_desc.csv``), against 0.35-0.40x on pointer loads
(``fixup_h100_pointer_sweep.csv``). One E4M3 choice beside a BF16 one takes TMA loads too: the
codes are loaded by TMA and decoded in registers as the dot's first operand, block scales that
change along K applied to each K-step's product (not yet timed on a GPU; on pointer loads those
pairs ran at 0.46-0.53x).

E4M3 codes reach the BF16 loop through the hardware conversion (on sm_90 Triton 3.6 emits
``cvt.rn.f16x2.e4m3x2`` then ``cvt.bf16.f16``: exact, E4M3 is a subset of both; a K-step of a mixed
pair took 575-620 instructions with the written-out integer decode, 151-175 with the conversion,
against 82 for two bf16 operands: ``results/bench/mor_gemm_sass_sm90*.csv``). The decoded codes
are always the dot's first operand, which the tensor cores read from registers (A's hp with B's
codes runs as the transposed product), and the hp operands are best bf16: a tile converted in
registers as the second operand goes back to shared memory every K-step and each MMA then waits for
the last (the table's ``mma_in_flight``; an fp32 hp operand still does, so the fast path hands the
kernel bf16 copies, ``lowprec.methods.mor_fast.bf16_choice``).
Interpreter: the codes and bf16 values are fed to ``tl.dot`` as fp32 (numpy has neither type) and
fp32 -> bf16 rounding is written out (the interpreter's cast truncates); only Triton builtins are
used (no ``tl.zeros``: triton.language's own jit helpers break the interpreter, see
``lowprec.kernels._common``); as for the other kernel modules, set TRITON_INTERPRET=1 before this
module is first imported, or reload it (``_common.reload_for_interpreter``).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np
import torch

from lowprec.numerics.checks import block_shape as _check_block
from lowprec.numerics.checks import one_of
from lowprec.numerics.scaled_mm import fp8_mm

from . import _common as _c
from ._common import _cdiv, tma_readable

triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()

__all__ = ["MoROperand", "mor_gemm", "bf16_fixup", "fp32_threshold", "supported",
           "scaled_mm_applies", "GemmConfig", "triton_available", "interpreter_active", "FP8_ACCUM", "BACKENDS"]

FP8_ACCUM = ("precise", "fast")
_HP_DTYPES = (torch.float32, torch.bfloat16)
_OUT_DTYPES = (torch.float32, torch.bfloat16)
_GROUP_M = 8
_MIN_BLOCK_K = 32  # FP8 MMA's K on Hopper
_FP32_MAX = float(np.finfo(np.float32).max)
_JIT_FNS: tuple = ()


class MoROperand(NamedTuple):
    hp: torch.Tensor          # (rows, K) fp32 or bf16: what a BF16 choice multiplies (rounded to bf16)
    codes: torch.Tensor       # (rows, K) float8_e4m3fn: what an E4M3 choice multiplies (over scales)
    scales: torch.Tensor      # fp32 encode-scale grid over `block`-sized blocks of (rows, K)
    block: tuple              # (R, C)
    rel_error: torch.Tensor   # 0-d fp32 on the device
    threshold: float


class GemmConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k8: int     # K-step of the FP8 loop
    block_k16: int    # K-step of the BF16 loop
    num_warps: int
    num_stages: int
    # the fix-up's launch only: a register cap (ptxas fits every loop in 128 with no spill, against
    # 255 uncapped, so that two 8-warp programs share an SM; measured slower, 0.30-0.35x of torch's
    # BF16 GEMM against 0.35-0.40x, ``results/mor/fixup_h100_pointer_sweep.csv``) and its persistent
    # programs an SM (no more than fit on one at once: ``_config``)
    maxnreg: Optional[int] = None
    programs_per_sm: int = 2
    # BF16 choices of bf16 operands (and one E4M3 choice's codes) through TMA descriptors
    # (``_tma_layout``), where they take one
    tma: bool = True


if triton is not None:
    from ._common import _e4m3_to_f32, _grouped_tile, _round_bf16

    from triton.runtime.errors import OutOfResources as _OutOfResources

    @triton.jit
    def _codes_value(c, FP8_DOT: tl.constexpr, INTERP: tl.constexpr):
        """uint8 E4M3 bit patterns -> the dot's operand: the fp8 bits as they are for the FP8
        loop, else their value in bf16 (exact: E4M3 is a subset of bf16; fp32 in the
        interpreter, which has neither type)."""
        if INTERP:
            return _e4m3_to_f32(c)
        elif FP8_DOT:
            return c.to(tl.float8e4nv, bitcast=True)
        else:
            return c.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16)

    @triton.jit
    def _hp_value(h, INTERP: tl.constexpr):
        """The hp operand rounded to bf16 (RNE, as torch's .to(torch.bfloat16))."""
        if INTERP:
            return _round_bf16(h.to(tl.float32))
        else:
            return h.to(tl.bfloat16)

    @triton.jit
    def _tile(c_rows, h_rows, kk, mask, s_ck, s_hk,
              FP8_DOT: tl.constexpr, CODES: tl.constexpr, EVEN: tl.constexpr, INTERP: tl.constexpr):
        """An operand's [rows, K-step] tile as the dot consumes it (c_rows, h_rows: the rows' base
        pointers): with ``CODES`` (the FP8 loop, or an operand that chose E4M3) its codes as the dot
        takes them (``_codes_value``), else its hp values rounded to bf16. The source is fixed at
        compile time, so that each loop loads one tensor per operand and, where no conversion stands
        between memory and the dot, pipelines its loads."""
        if CODES and FP8_DOT and EVEN and not INTERP:
            # loaded as fp8, not as bits cast in registers: a register cast puts the tile back into
            # shared memory before the MMA, every K-step, which then waits for the one before it
            fp8_rows = c_rows.to(tl.pointer_type(tl.float8e4nv), bitcast=True)
            return tl.load(fp8_rows + kk[None, :] * s_ck)
        elif CODES:
            return _codes_value(_load_k(c_rows + kk[None, :] * s_ck, mask, 0, EVEN), FP8_DOT, INTERP)
        else:
            return _hp_value(_load_k(h_rows + kk[None, :] * s_hk, mask, 0.0, EVEN), INTERP)

    @triton.jit
    def _load_k(ptrs, mask, other, EVEN: tl.constexpr):
        """A K-step's tile, masked along K unless every K-step is whole."""
        if EVEN:
            return tl.load(ptrs)
        else:
            return tl.load(ptrs, mask=mask, other=other)

    @triton.jit
    def _inv_scale(s_ptr, srow, kb, s_sc, ok, e4):
        """1 / s of each row's block at K-block kb for an E4M3 operand; 1 for a BF16 one."""
        s = tl.load(s_ptr + srow + kb * s_sc, mask=tl.where(e4, ok, False), other=1.0)
        return tl.where(e4, tl.math.div_rn(tl.full(s.shape, 1.0, tl.float32), s), 1.0)

    @triton.jit
    def _dot(a, b, acc, FP8_DOT: tl.constexpr, PROMOTE: tl.constexpr, INTERP: tl.constexpr):
        if INTERP:
            return tl.dot(a, tl.trans(b), acc, input_precision="ieee")
        elif FP8_DOT:
            return tl.dot(a, tl.trans(b), acc, max_num_imprecise_acc=PROMOTE)
        else:
            return tl.dot(a, tl.trans(b), acc)

    @triton.jit
    def _mainloop(ac_ptr, ah_ptr, as_ptr, bc_ptr, bh_ptr, bs_ptr, e4a, e4b, rm, rn, m_ok, n_ok, a_srow, b_srow,
                  M, N, K, s_acm, s_ack, s_ahm, s_ahk, s_asc, a_bc, s_bcn, s_bck, s_bhn, s_bhk, s_bsc, b_bc,
                  FP8_DOT: tl.constexpr, A_CODES: tl.constexpr, B_CODES: tl.constexpr,
                  A_KSTEP: tl.constexpr, B_KSTEP: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  PROMOTE: tl.constexpr, EVEN: tl.constexpr, WHOLE_MN: tl.constexpr, INTERP: tl.constexpr):
        acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
        rk = tl.arange(0, BLOCK_K)
        # rows past the end read the last row instead of being masked (their results are not
        # stored): only K is ever masked, which keeps the loads vectorized and the registers free.
        # Where every tile is whole there is nothing to clamp, and a clamp would hide from Triton
        # that the rows are contiguous: an operand read through a transposed view (the backward's
        # hp operands, rows at unit stride) then loads element by element, without the async copy
        # (sm_90: 349-461 instructions a 64-deep K-step against 82-175; kernel_sass)
        if WHOLE_MN:
            rm_ld = rm
            rn_ld = rn
        else:
            rm_ld = tl.minimum(rm, M - 1)
            rn_ld = tl.minimum(rn, N - 1)
        a_c = ac_ptr + rm_ld[:, None] * s_acm
        a_h = ah_ptr + rm_ld[:, None] * s_ahm
        b_c = bc_ptr + rn_ld[:, None] * s_bcn
        b_h = bh_ptr + rn_ld[:, None] * s_bhn
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + rk
            k_ok = (kk < K)[None, :]
            a = _tile(a_c, a_h, kk, k_ok, s_ack, s_ahk, FP8_DOT, A_CODES, EVEN, INTERP)
            b = _tile(b_c, b_h, kk, k_ok, s_bck, s_bhk, FP8_DOT, B_CODES, EVEN, INTERP)
            if A_KSTEP or B_KSTEP:
                # block scales change along K: this K-step's partial product is scaled, then added
                # (an fp32 promotion every K-step already: no partial accumulator inside the dot)
                p = _dot(a, b, tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32), FP8_DOT, None, INTERP)
                if A_KSTEP:
                    p = p * _inv_scale(as_ptr, a_srow, k0 // a_bc, s_asc, m_ok, e4a)[:, None]
                if B_KSTEP:
                    p = p * _inv_scale(bs_ptr, b_srow, k0 // b_bc, s_bsc, n_ok, e4b)[None, :]
                acc += p
            else:
                acc = _dot(a, b, acc, FP8_DOT, PROMOTE, INTERP)
        return acc

    @triton.jit
    def _bf16_product(ac_ptr, ah_ptr, as_ptr, bc_ptr, bh_ptr, bs_ptr, e4a, e4b, rm, rn, m_ok, n_ok, a_srow, b_srow,
                      M, N, K, s_acm, s_ack, s_ahm, s_ahk, s_asc, a_bc, s_bcn, s_bck, s_bhn, s_bhk, s_bsc, b_bc,
                      A_KSTEP: tl.constexpr, B_KSTEP: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      EVEN: tl.constexpr, WHOLE_MN: tl.constexpr, INTERP: tl.constexpr):
        """The BF16 loop where at least one operand chose BF16: one loop per pair of sources,
        chosen by a branch uniform over the grid. With both sources in one loop, selected per
        element, every K-step decoded the codes and converted the hp values of both operands, from
        registers into shared memory: about 36 TFLOP/s at 8192^3 on the H200
        (``results/mor/linear_h200.csv``, threshold 0)."""
        if e4a:
            acc = _mainloop(ac_ptr, ah_ptr, as_ptr, bc_ptr, bh_ptr, bs_ptr, e4a, e4b, rm, rn, m_ok, n_ok,
                            a_srow, b_srow, M, N, K, s_acm, s_ack, s_ahm, s_ahk, s_asc, a_bc,
                            s_bcn, s_bck, s_bhn, s_bhk, s_bsc, b_bc, False, True, False, A_KSTEP, B_KSTEP,
                            BLOCK_M, BLOCK_N, BLOCK_K, None, EVEN, WHOLE_MN, INTERP)
        elif e4b:
            # the transposed product B @ A.T, so that the decoded codes are the dot's first operand,
            # which the tensor cores read from registers: as its second operand they went back to
            # shared memory every K-step, and each product waited for the last (sm_90: ``pendings =
            # 0``, against 3 here, as in the loop above)
            acc = tl.trans(_mainloop(bc_ptr, bh_ptr, bs_ptr, ac_ptr, ah_ptr, as_ptr, e4b, e4a, rn, rm, n_ok, m_ok,
                                     b_srow, a_srow, N, M, K, s_bcn, s_bck, s_bhn, s_bhk, s_bsc, b_bc,
                                     s_acm, s_ack, s_ahm, s_ahk, s_asc, a_bc, False, True, False, B_KSTEP, A_KSTEP,
                                     BLOCK_N, BLOCK_M, BLOCK_K, None, EVEN, WHOLE_MN, INTERP))
        else:
            acc = _mainloop(ac_ptr, ah_ptr, as_ptr, bc_ptr, bh_ptr, bs_ptr, e4a, e4b, rm, rn, m_ok, n_ok,
                            a_srow, b_srow, M, N, K, s_acm, s_ack, s_ahm, s_ahk, s_asc, a_bc,
                            s_bcn, s_bck, s_bhn, s_bhk, s_bsc, b_bc, False, False, False, A_KSTEP, B_KSTEP,
                            BLOCK_M, BLOCK_N, BLOCK_K, None, EVEN, WHOLE_MN, INTERP)
        return acc

    @triton.jit
    def _epilogue(acc, c_ptr, rm, rn, m_ok, n_ok, N, as_ptr, a_srow, s_asc, e4a, bs_ptr, b_srow, s_bsc, e4b,
                  A_KSTEP: tl.constexpr, B_KSTEP: tl.constexpr, OUT_BF16: tl.constexpr):
        # scales constant along K leave after the loop
        if not A_KSTEP:
            acc = acc * _inv_scale(as_ptr, a_srow, 0, s_asc, m_ok, e4a)[:, None]
        if not B_KSTEP:
            acc = acc * _inv_scale(bs_ptr, b_srow, 0, s_bsc, n_ok, e4b)[None, :]
        c_ptrs = c_ptr + rm[:, None] * N + rn[None, :]
        if OUT_BF16:
            tl.store(c_ptrs, acc.to(tl.bfloat16), mask=m_ok[:, None] & n_ok[None, :])
        else:
            tl.store(c_ptrs, acc, mask=m_ok[:, None] & n_ok[None, :])

    @triton.jit
    def _tile_rows(t, M, N, s_asr, a_br, s_bsr, b_br,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
        """Output tile t's rows and columns, their masks, and each one's offset in its scale grid."""
        pid_m, pid_n = _grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rm = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
        return rm, rn, rm < M, rn < N, (rm // a_br) * s_asr, (rn // b_br) * s_bsr

    @triton.jit
    def _tma_desc(ptr, rows, K, s_rows, s_k, T: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
        """A descriptor over a (rows, K) operand's row-major base (``T``: the operand is its base's
        transpose, the backward's views), made here on the device: a traced launch cannot carry
        descriptors made on the host (torch's ``wrap_triton`` records no TMA metadata for them, and
        Inductor's compile fails on them)."""
        if T:
            return tl.make_tensor_descriptor(ptr, shape=[K, rows], strides=[s_k, 1], block_shape=[BLOCK_K, BLOCK_R])
        else:
            return tl.make_tensor_descriptor(ptr, shape=[rows, K], strides=[s_rows, 1], block_shape=[BLOCK_R, BLOCK_K])

    @triton.jit
    def _tma_descs(ah_ptr, bh_ptr, ac_ptr, bc_ptr, M, N, K, s_ahm, s_ahk, s_bhn, s_bhk, s_acm, s_ack, s_bcn, s_bck,
                   TMA: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr, TMA_CODES: tl.constexpr,
                   AC_T: tl.constexpr, BC_T: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        """The operands' descriptors (the pointers themselves where the TMA loop is compiled out).
        Made only where a BF16 choice has work: each one costs every program a 128-byte write to
        global memory, a fence and a barrier, which the fix-up's common case, two E4M3 choices and
        nothing to do, paid in full before returning (sm_90 machine code)."""
        ah_desc, bh_desc, ac_desc, bc_desc = ah_ptr, bh_ptr, ac_ptr, bc_ptr
        if TMA:
            ah_desc = _tma_desc(ah_ptr, M, K, s_ahm, s_ahk, A_T, BLOCK_M, BLOCK_K)
            bh_desc = _tma_desc(bh_ptr, N, K, s_bhn, s_bhk, B_T, BLOCK_N, BLOCK_K)
        if TMA_CODES:
            ac_desc = _tma_desc(ac_ptr, M, K, s_acm, s_ack, AC_T, BLOCK_M, BLOCK_K)
            bc_desc = _tma_desc(bc_ptr, N, K, s_bcn, s_bck, BC_T, BLOCK_N, BLOCK_K)
        return ah_desc, bh_desc, ac_desc, bc_desc

    @triton.jit
    def _tma_loop(x_desc, y_desc, off_x, off_y, K, s_ptr, srow, s_sc, x_bc, x_ok,
                  X_T: tl.constexpr, Y_T: tl.constexpr, X_CODES: tl.constexpr, X_KSTEP: tl.constexpr,
                  BLOCK_X: tl.constexpr, BLOCK_Y: tl.constexpr, BLOCK_K: tl.constexpr, INTERP: tl.constexpr):
        """X @ Y^T of one tile, both loaded by the TMA unit (zero-filled past the edges), Y's bf16
        values as they are, X's too or, with ``X_CODES``, its E4M3 codes decoded to bf16 in
        registers (exact), where the dot's first operand is read from. ``X_KSTEP``: X's block
        scales change along K (GAM blocks), so each K-step's product is scaled by its rows' inverse
        scales (``s_ptr``, ``srow``, ``s_sc``, blocks ``x_bc`` wide) before it is added, as in the
        pointer loop; else the epilogue scales the sum."""
        acc = tl.full((BLOCK_X, BLOCK_Y), 0.0, tl.float32)
        for k0 in range(0, K, BLOCK_K):
            if X_T:
                x = tl.trans(x_desc.load([k0, off_x]))
            else:
                x = x_desc.load([off_x, k0])
            if X_CODES:
                x = _codes_value(x, False, INTERP)
            if Y_T:
                y = tl.trans(y_desc.load([k0, off_y]))
            else:
                y = y_desc.load([off_y, k0])
            if X_KSTEP:
                p = _dot(x, y, tl.full((BLOCK_X, BLOCK_Y), 0.0, tl.float32), False, None, INTERP)
                acc += p * _inv_scale(s_ptr, srow, k0 // x_bc, s_sc, x_ok, True)[:, None]
            else:
                acc = _dot(x, y, acc, False, None, INTERP)
        return acc

    @triton.jit
    def _tma_runs(e4a, e4b, TMA_CODES: tl.constexpr):
        """Whether the TMA loop multiplies this pair of choices (one at least BF16): two BF16
        choices always, one E4M3 choice where its codes are TMA-readable (``TMA_CODES``)."""
        runs = not (e4a | e4b)
        if TMA_CODES:
            runs = runs | (e4a != e4b)
        return runs

    @triton.jit
    def _tma_product(ah_desc, bh_desc, ac_desc, bc_desc, e4a, e4b, t, M, N, K,
                     as_ptr, a_srow, s_asc, a_bc, m_ok, bs_ptr, b_srow, s_bsc, b_bc, n_ok,
                     A_KSTEP: tl.constexpr, B_KSTEP: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
                     AC_T: tl.constexpr, BC_T: tl.constexpr, TMA_CODES: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                     INTERP: tl.constexpr):
        """Tile t's product on TMA loads (``_tma_runs``): a plain BF16 GEMM of the hp operands, or
        one operand's decoded codes times the other's hp values; B's codes as the transposed
        product B @ A^T, so that the decoded tile is the dot's first operand, as in
        ``_bf16_product`` (the module docstring has the speed against the pointer loads')."""
        pid_m, pid_n = _grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        if TMA_CODES and e4a:
            acc = _tma_loop(ac_desc, bh_desc, off_m, off_n, K, as_ptr, a_srow, s_asc, a_bc, m_ok,
                            AC_T, B_T, True, A_KSTEP, BLOCK_M, BLOCK_N, BLOCK_K, INTERP)
        elif TMA_CODES and e4b:
            acc = tl.trans(_tma_loop(bc_desc, ah_desc, off_n, off_m, K, bs_ptr, b_srow, s_bsc, b_bc, n_ok,
                                     BC_T, A_T, True, B_KSTEP, BLOCK_N, BLOCK_M, BLOCK_K, INTERP))
        else:  # two BF16 choices
            acc = _tma_loop(ah_desc, bh_desc, off_m, off_n, K, as_ptr, a_srow, s_asc, a_bc, m_ok,
                            A_T, B_T, False, False, BLOCK_M, BLOCK_N, BLOCK_K, INTERP)
        return acc

    @triton.jit
    def _mor_gemm_kernel(ac_ptr, ah_ptr, as_ptr, ae_ptr, bc_ptr, bh_ptr, bs_ptr, be_ptr, c_ptr, info_ptr,
                         cnt_ptr, cnt_row, s_cnt, M, N, K, thr_a, thr_b,
                         s_acm, s_ack, s_ahm, s_ahk, s_asr, s_asc, a_br, a_bc,
                         s_bcn, s_bck, s_bhn, s_bhk, s_bsr, s_bsc, b_br, b_bc,
                         A_KSTEP: tl.constexpr, B_KSTEP: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K8: tl.constexpr,
                         BLOCK_K16: tl.constexpr, GROUP_M: tl.constexpr, PROMOTE: tl.constexpr,
                         EVEN: tl.constexpr, EVEN16: tl.constexpr, WHOLE_MN: tl.constexpr, OUT_BF16: tl.constexpr,
                         FIXUP: tl.constexpr, TMA: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
                         TMA_CODES: tl.constexpr, AC_T: tl.constexpr, BC_T: tl.constexpr,
                         COUNT: tl.constexpr, INTERP: tl.constexpr):
        if not INTERP:
            # fp8 codes are read as their bits (uint8 in the interpreter already): the BF16 loop
            # decodes them, and a masked load's fill must be an integer
            ac_ptr = ac_ptr.to(tl.pointer_type(tl.uint8), bitcast=True)
            bc_ptr = bc_ptr.to(tl.pointer_type(tl.uint8), bitcast=True)
        pid = tl.program_id(0)
        # the decision, on the device: E4M3 iff error <= threshold (NaN: BF16)
        e4a = tl.load(ae_ptr) <= thr_a
        e4b = tl.load(be_ptr) <= thr_b
        first = pid == 0
        tl.store(info_ptr, e4a.to(tl.int32), mask=first)
        tl.store(info_ptr + 1, e4b.to(tl.int32), mask=first)
        if COUNT:
            # one call and each operand's choice added to the GEMM's two rows of (calls, E4M3
            # choices), by program 0: where a launch of its own per GEMM did it, 21 more per block
            ca = cnt_ptr + cnt_row * s_cnt
            cb = ca + s_cnt
            ty = cnt_ptr.dtype.element_ty
            tl.store(ca, tl.load(ca, mask=first, other=0) + 1, mask=first)
            tl.store(ca + 1, tl.load(ca + 1, mask=first, other=0) + e4a.to(ty), mask=first)
            tl.store(cb, tl.load(cb, mask=first, other=0) + 1, mask=first)
            tl.store(cb + 1, tl.load(cb + 1, mask=first, other=0) + e4b.to(ty), mask=first)
        if FIXUP:
            # torch._scaled_mm already wrote the FP8 product: only a BF16 choice has work to do. A
            # persistent grid (``_fixup_programs``) walks the tiles, so that the common case, where
            # every program returns at once, costs a few programs instead of one per tile
            if e4a & e4b:
                tl.store(info_ptr + 2, 3, mask=first)
            else:
                ah_desc, bh_desc, ac_desc, bc_desc = _tma_descs(
                    ah_ptr, bh_ptr, ac_ptr, bc_ptr, M, N, K, s_ahm, s_ahk, s_bhn, s_bhk, s_acm, s_ack, s_bcn, s_bck,
                    TMA, A_T, B_T, TMA_CODES, AC_T, BC_T, BLOCK_M, BLOCK_N, BLOCK_K16)
                n_tiles = ((M + BLOCK_M - 1) // BLOCK_M) * ((N + BLOCK_N - 1) // BLOCK_N)  # (tl.cdiv: a jit helper, which breaks the interpreter)
                for t in range(pid, n_tiles, tl.num_programs(0)):
                    rm, rn, m_ok, n_ok, a_srow, b_srow = _tile_rows(t, M, N, s_asr, a_br, s_bsr, b_br,
                                                                    BLOCK_M, BLOCK_N, GROUP_M)
                    if TMA and _tma_runs(e4a, e4b, TMA_CODES):
                        acc = _tma_product(ah_desc, bh_desc, ac_desc, bc_desc, e4a, e4b, t, M, N, K,
                                           as_ptr, a_srow, s_asc, a_bc, m_ok, bs_ptr, b_srow, s_bsc, b_bc, n_ok,
                                           A_KSTEP, B_KSTEP, A_T, B_T, AC_T, BC_T, TMA_CODES,
                                           BLOCK_M, BLOCK_N, BLOCK_K16, GROUP_M, INTERP)
                    else:
                        acc = _bf16_product(ac_ptr, ah_ptr, as_ptr, bc_ptr, bh_ptr, bs_ptr, e4a, e4b, rm, rn, m_ok,
                                            n_ok, a_srow, b_srow, M, N, K, s_acm, s_ack, s_ahm, s_ahk, s_asc, a_bc,
                                            s_bcn, s_bck, s_bhn, s_bhk, s_bsc, b_bc, A_KSTEP, B_KSTEP,
                                            BLOCK_M, BLOCK_N, BLOCK_K16, EVEN16, WHOLE_MN, INTERP)
                    _epilogue(acc, c_ptr, rm, rn, m_ok, n_ok, N, as_ptr, a_srow, s_asc, e4a, bs_ptr, b_srow,
                              s_bsc, e4b, A_KSTEP, B_KSTEP, OUT_BF16)
                if TMA and _tma_runs(e4a, e4b, TMA_CODES):
                    tl.store(info_ptr + 2, 4, mask=first)
                else:
                    tl.store(info_ptr + 2, 2, mask=first)
        else:
            rm, rn, m_ok, n_ok, a_srow, b_srow = _tile_rows(pid, M, N, s_asr, a_br, s_bsr, b_br,
                                                            BLOCK_M, BLOCK_N, GROUP_M)
            if e4a & e4b:
                acc = _mainloop(ac_ptr, ah_ptr, as_ptr, bc_ptr, bh_ptr, bs_ptr, e4a, e4b, rm, rn, m_ok, n_ok,
                                a_srow, b_srow, M, N, K, s_acm, s_ack, s_ahm, s_ahk, s_asc, a_bc,
                                s_bcn, s_bck, s_bhn, s_bhk, s_bsc, b_bc, True, True, True, A_KSTEP, B_KSTEP,
                                BLOCK_M, BLOCK_N, BLOCK_K8, PROMOTE, EVEN, WHOLE_MN, INTERP)
                tl.store(info_ptr + 2, 1, mask=first)
            elif TMA and _tma_runs(e4a, e4b, TMA_CODES):
                ah_desc, bh_desc, ac_desc, bc_desc = _tma_descs(
                    ah_ptr, bh_ptr, ac_ptr, bc_ptr, M, N, K, s_ahm, s_ahk, s_bhn, s_bhk, s_acm, s_ack, s_bcn, s_bck,
                    TMA, A_T, B_T, TMA_CODES, AC_T, BC_T, BLOCK_M, BLOCK_N, BLOCK_K16)
                acc = _tma_product(ah_desc, bh_desc, ac_desc, bc_desc, e4a, e4b, pid, M, N, K,
                                   as_ptr, a_srow, s_asc, a_bc, m_ok, bs_ptr, b_srow, s_bsc, b_bc, n_ok,
                                   A_KSTEP, B_KSTEP, A_T, B_T, AC_T, BC_T, TMA_CODES,
                                   BLOCK_M, BLOCK_N, BLOCK_K16, GROUP_M, INTERP)
                tl.store(info_ptr + 2, 4, mask=first)
            else:
                acc = _bf16_product(ac_ptr, ah_ptr, as_ptr, bc_ptr, bh_ptr, bs_ptr, e4a, e4b, rm, rn, m_ok, n_ok,
                                    a_srow, b_srow, M, N, K, s_acm, s_ack, s_ahm, s_ahk, s_asc, a_bc,
                                    s_bcn, s_bck, s_bhn, s_bhk, s_bsc, b_bc, A_KSTEP, B_KSTEP,
                                    BLOCK_M, BLOCK_N, BLOCK_K16, EVEN16, WHOLE_MN, INTERP)
                tl.store(info_ptr + 2, 2, mask=first)
            _epilogue(acc, c_ptr, rm, rn, m_ok, n_ok, N, as_ptr, a_srow, s_asc, e4a, bs_ptr, b_srow, s_bsc, e4b,
                      A_KSTEP, B_KSTEP, OUT_BF16)

    _JIT_FNS = (_mor_gemm_kernel, _grouped_tile, _e4m3_to_f32, _round_bf16)


# ----------------------------------------------------------------------------------------------
# Availability


def interpreter_active() -> bool:
    """True when the kernel was built for the Triton interpreter (TRITON_INTERPRET=1 at import)."""
    return bool(_JIT_FNS) and _c.is_interpreted(*_JIT_FNS)


def triton_available(device=None) -> bool:
    return triton is not None and _c.available(interpreter_active(), device)


def _require_triton(t: torch.Tensor) -> None:
    _c.require_triton("lowprec.kernels.mor_gemm", "lowprec.methods.mor (emulated GEMM)", _TRITON_IMPORT_ERROR,
                      _JIT_FNS, t.device)


# ----------------------------------------------------------------------------------------------
# Host side


def fp32_threshold(threshold: float) -> float:
    """The largest fp32 value <= threshold: for an fp32 error e, ``e <= result`` in fp32 is
    exactly ``float64(e) <= threshold``, the test ``lowprec.methods.mor`` makes."""
    threshold = float(threshold)
    if math.isnan(threshold) or math.isinf(threshold):
        return threshold
    if threshold >= _FP32_MAX:
        return _FP32_MAX
    t = np.float32(threshold)
    if float(t) > threshold:
        t = np.nextafter(t, np.float32(-np.inf))
    return float(t)


def supported(block_a, block_b, k: Optional[int] = None) -> bool:
    """Whether the kernel multiplies operands scaled over these (R, C) blocks: each operand whose
    scale changes along K (C < K) needs C to be a multiple of 32 (the K-step must divide it)."""
    for br, bc in (_check_block(block_a), _check_block(block_b)):
        if (k is None or bc < k) and bc % _MIN_BLOCK_K:
            return False
    return True


def _largest_pow2_divisor(n: int, cap: int) -> int:
    d = 1
    while d < cap and n % (2 * d) == 0:
        d *= 2
    return d


def _config(M: int, N: int, K: int, k_widths: list, hp_fp32: bool, precise: bool, fixup: bool,
            tma: bool = False) -> GemmConfig:
    """Tiles for this shape. k_widths: the block widths that each K-step must divide; tma: two bf16
    operands whose BF16 choices the TMA loop may multiply."""
    cap8 = 128
    for w in k_widths:
        cap8 = min(cap8, _largest_pow2_divisor(w, 128))
    if interpreter_active():
        return GemmConfig(32, 32, min(cap8, 32), min(cap8, 32), 4, 1)
    # FP8 K-step 128 (48 KB of codes per stage at 128 x 256); the BF16 loop keeps about that
    # footprint with a K-step of 64 (32 where an fp32 operand is loaded before its cast). 128 x 256
    # tiles only for a plain FP8 loop with fast accumulation: a promoted or per-K-step scaled
    # product needs a second accumulator, and the BF16 loop's converted tiles need registers too
    # (ptxas spills at 128 x 256 with 8 warps otherwise).
    if N >= 256 * 16 and not k_widths and not precise and not fixup:
        return GemmConfig(128, 256, cap8, min(cap8, 32), 8, 3)
    if fixup and tma and not k_widths:
        # the fix-up's TMA loop: four stages, one persistent program an SM (their 128 KB of shared
        # memory leave no room for a second). At 8192^3 on the H100 it ran at 0.81-0.97x of torch's
        # BF16 GEMM with these tiles against 0.64-0.79x with three stages and two programs, and
        # 0.80-1.03x at 128 x 256, whose mixed loops ptxas spills with Triton 3.6 (B's codes) and which
        # ran them slower (``results/mor/fixup_h100_tma_sweep.csv``, ``fixup_h100_tma_pairs_128x256.csv``)
        return GemmConfig(128, 128, cap8, 64, 8, 4, programs_per_sm=1)
    # the fix-up's pointer loops: one persistent program an SM. Uncapped, ptxas gives every one
    # 250-255 registers (sm_90), so one 8-warp program fills an SM's 64K and a second only queued
    # behind it: a second wave, which the common case (two E4M3 choices: each program reads the
    # decision and returns) paid as launch latency, and the BF16 product no faster for it
    return GemmConfig(128, 128, cap8, min(cap8, 32 if hp_fp32 else 64), 8, 3, programs_per_sm=1 if fixup else 2)


def _fallback_configs(cfg: GemmConfig):
    """Smaller configurations to try if a compile runs out of shared memory."""
    yield cfg._replace(num_stages=2)
    yield cfg._replace(block_n=128, num_stages=3)
    yield cfg._replace(block_n=128, num_stages=2)
    yield GemmConfig(64, 128, min(cfg.block_k8, 64), 32, 4, 2)


_CONFIG_CACHE: dict = {}
_SCALED_MM_REFUSED: set = set()  # shapes / scalings torch._scaled_mm raised for: the Triton loop runs them


def _check_operand(op: MoROperand, name: str) -> None:
    if not isinstance(op, MoROperand):
        raise TypeError(f"{name} must be a MoROperand, got {type(op).__name__}")
    if op.hp.dim() != 2 or op.codes.shape != op.hp.shape:
        raise ValueError(f"{name}: hp and codes must be 2-D of one shape, got {tuple(op.hp.shape)} and "
                         f"{tuple(op.codes.shape)}")
    if op.hp.dtype not in _HP_DTYPES:
        raise TypeError(f"{name}.hp must be float32 or bfloat16, got {op.hp.dtype}")
    if op.codes.dtype != torch.float8_e4m3fn:
        raise TypeError(f"{name}.codes must be float8_e4m3fn, got {op.codes.dtype}")
    rows, k = op.hp.shape
    br, bc = _check_block(op.block)
    want = (_cdiv(rows, br), _cdiv(k, bc))
    if op.scales.dtype != torch.float32 or tuple(op.scales.shape) != want:
        raise ValueError(f"{name}.scales: an fp32 grid of shape {want} for {(br, bc)} blocks, got "
                         f"{op.scales.dtype} {tuple(op.scales.shape)}")
    if op.rel_error.numel() != 1 or op.rel_error.dtype != torch.float32:
        raise ValueError(f"{name}.rel_error must be a one-element float32 tensor")
    devs = {t.device for t in (op.hp, op.codes, op.scales, op.rel_error)}
    if len(devs) != 1:
        raise ValueError(f"{name}: tensors on several devices {sorted(map(str, devs))}")


def _check_pair(a: MoROperand, b: MoROperand) -> tuple:
    """(M, N, K) of two operands the kernel can multiply, else an error naming the problem."""
    _check_operand(a, "a")
    _check_operand(b, "b")
    _require_triton(a.hp)
    if b.hp.device != a.hp.device:
        raise ValueError(f"a and b on different devices: {a.hp.device} and {b.hp.device}")
    M, K = a.hp.shape
    N, kb = b.hp.shape
    if kb != K:
        raise ValueError(f"reduction dimensions differ: a {tuple(a.hp.shape)}, b {tuple(b.hp.shape)}")
    if not supported(a.block, b.block, K):
        raise ValueError(f"blocks {a.block} and {b.block}: a block narrower than K must have a width "
                         f"that is a multiple of {_MIN_BLOCK_K}")
    return M, N, K


def bf16_fixup(a: MoROperand, b: MoROperand, out: torch.Tensor, info: Optional[torch.Tensor] = None,
               counts: Optional[torch.Tensor] = None, count_row: int = 0, launcher=None,
               config: Optional[GemmConfig] = None) -> None:
    """The fix-up mode on its own, for an FP8 product computed elsewhere (``lowprec.methods.mor_fast``): ``out``
    (M, N, row-major fp32 or bf16) is left as it is when both operands chose E4M3 (decided on the
    device; every program returns at once), else overwritten with the BF16 loop's product. info as
    in ``mor_gemm`` (3 when both chose E4M3, 2 for the BF16 loop). ``counts``: a 2-D integer buffer
    (a layer's MoR decision counts) to which the kernel adds this call and each operand's choice:
    ``counts[count_row + i, :2] += (1, operand i chose E4M3)`` for a, b (an empty product counts
    too). launcher: see ``_launch``; config: a launch configuration instead of the shape's default."""
    M, N, K = _check_pair(a, b)
    if tuple(out.shape) != (M, N) or out.dtype not in _OUT_DTYPES or not out.is_contiguous() \
            or out.device != a.hp.device:
        raise ValueError(f"out must be a row-major float32 or bfloat16 ({M}, {N}) tensor on {a.hp.device}, got "
                         f"{out.dtype} {tuple(out.shape)} on {out.device}")
    if counts is not None:
        _check_counts(counts, count_row, out.device)
    if info is None:
        info = torch.empty(3, dtype=torch.int32, device=out.device)
    if (M and N and K) or counts is not None:
        _launch(a, b, out, info, "precise", config, fixup=True, launcher=launcher, counts=counts,
                count_row=count_row)


def _check_counts(counts: torch.Tensor, row: int, device: torch.device) -> None:
    if (counts.dim() != 2 or counts.shape[1] < 2 or counts.stride(-1) != 1 or counts.dtype.is_floating_point
            or counts.dtype == torch.bool or counts.device != device):
        raise ValueError(f"counts must be a 2-D integer tensor of at least 2 columns on {device}, the last "
                         f"contiguous, got {counts.dtype} {tuple(counts.shape)} on {counts.device}")
    if not 0 <= row <= counts.shape[0] - 2:
        raise ValueError(f"count_row {row}: rows {row} and {row + 1} outside counts {tuple(counts.shape)}")


def mor_gemm(a: MoROperand, b: MoROperand, out_dtype: torch.dtype = torch.float32, fp8_accum: str = "precise",
             backend: str = "auto", config: Optional[GemmConfig] = None,
             info: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``A @ B.T`` (out_dtype, (rows of A, rows of B)) of two MoR operands, each E4M3 or BF16 as its
    error decides on the device; see the module docstring. backend: "triton" (the FP8 loop of this
    kernel), "scaled_mm" (the FP8 product from torch._scaled_mm, then this kernel in its fix-up
    mode, which returns at once when both chose E4M3 and otherwise overwrites the output with the
    BF16 loop; row- and blockwise scales give a bf16 product, converted to an fp32 out_dtype), or
    "auto" (scaled_mm where ``scaled_mm_applies`` and out_dtype is what it gives, else triton;
    torch refusing a shape also sends it to triton, remembered). info: an int32
    tensor of 3 that receives (A chose E4M3, B chose E4M3, what multiplied: 1 the FP8 loop, 2 the
    BF16 loop, 3 torch._scaled_mm, 4 the BF16 loop on TMA loads, 0 nothing for an empty product)."""
    M, N, K = _check_pair(a, b)
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be float32 or bfloat16, got {out_dtype}")
    one_of("fp8_accum", fp8_accum, FP8_ACCUM)
    one_of("backend", backend, BACKENDS)
    dev = a.hp.device
    if info is None:
        info = torch.empty(3, dtype=torch.int32, device=dev)
    elif info.dtype != torch.int32 or info.numel() < 3 or info.device != dev:
        raise ValueError("info must be an int32 tensor of at least 3 elements on the operands' device")
    if M == 0 or N == 0 or K == 0:  # nothing to multiply; the decisions still go to info
        for i, op in enumerate((a, b)):
            info[i] = op.rel_error.reshape(()) <= fp32_threshold(op.threshold)
        info[2] = 0
        return torch.zeros((M, N), dtype=out_dtype, device=dev)
    kind = scaled_mm_applies(a, b) if backend != "triton" else None
    if backend == "scaled_mm" and kind is None:
        raise ValueError(f"backend 'scaled_mm': torch._scaled_mm does not take these operands ({(M, N, K)}, "
                         f"blocks {a.block} and {b.block}, {a.hp.device})")
    if backend == "auto" and kind in ("rowwise", "blockwise") and out_dtype != torch.bfloat16:
        kind = None  # their bf16 output would round an fp32 result: the Triton loop instead
    out = _scaled_mm(a, b, kind, out_dtype, fp8_accum) if kind is not None else None
    fp8_done = out is not None
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype, device=dev)
    _launch(a, b, out, info, fp8_accum, config, fixup=fp8_done)
    return out if out.dtype == out_dtype else out.to(out_dtype)


BACKENDS = ("auto", "triton", "scaled_mm")


def _launch(a: MoROperand, b: MoROperand, out: torch.Tensor, info: torch.Tensor, fp8_accum: str,
            config: Optional[GemmConfig], fixup: bool, launcher=None, counts: Optional[torch.Tensor] = None,
            count_row: int = 0) -> None:
    """launcher: None to launch the kernel here, or ``torch.library.wrap_triton`` inside a
    ``triton_op`` that a compiled graph traces (the launch then happens in Inductor's code, with
    the shape's first configuration: the smaller ones tried after a compile out of shared memory
    need a launch to find out). counts, count_row: ``bf16_fixup``'s (fix-up mode only); an empty
    product then launches with no tile (M = N = 0), so that it decides and counts."""
    M, K = a.hp.shape
    N = b.hp.shape[0]
    if not (M and N and K):
        M = N = 0
    a_kstep, b_kstep = a.block[1] < K, b.block[1] < K
    widths = [w for w, ks in ((a.block[1], a_kstep), (b.block[1], b_kstep)) if ks]
    hp_fp32 = torch.float32 in (a.hp.dtype, b.hp.dtype)
    precise = fp8_accum == "precise"
    traced = launcher is not None
    bf16_pair = (a.hp.dtype == b.hp.dtype == torch.bfloat16 and M > 0
                 and _c.tma_device(out.device, interpreter_active()))
    key = (M, N, K, tuple(widths), hp_fp32, precise, fixup, bf16_pair, str(out.device))
    cfg = config or _CONFIG_CACHE.get(key) or _config(M, N, K, widths, hp_fp32, precise, fixup, bf16_pair)
    for w in widths:
        if w % cfg.block_k8 or w % cfg.block_k16:
            raise ValueError(f"config {cfg}: K-steps must divide the block width {w}")
    ah, bh = _hp_arg(a.hp), _hp_arg(b.hp)
    codes_a, codes_b = _codes_arg(a.codes), _codes_arg(b.codes)
    args = (codes_a, ah, a.scales, a.rel_error, codes_b, bh,
            b.scales, b.rel_error, out, info, info if counts is None else counts, count_row,
            0 if counts is None else counts.stride(0), M, N, K, fp32_threshold(a.threshold), fp32_threshold(b.threshold),
            *a.codes.stride(), *ah.stride(), *a.scales.stride(), a.block[0], a.block[1],
            *b.codes.stride(), *bh.stride(), *b.scales.stride(), b.block[0], b.block[1])
    tried = [cfg] if traced or config is not None or key in _CONFIG_CACHE else [cfg, *_fallback_configs(cfg)]
    kernel = launcher(_mor_gemm_kernel) if traced else _mor_gemm_kernel
    for i, c in enumerate(tried):
        even = K % c.block_k8 == 0
        a_t, b_t = (_tma_layout(ah), _tma_layout(bh)) if c.tma and bf16_pair else (None, None)
        tma = a_t is not None and b_t is not None
        # one E4M3 choice on TMA loads too (block scales along K applied per K-step, as the pointer loop does)
        ac_t, bc_t = (_tma_layout(codes_a), _tma_layout(codes_b)) if tma else (None, None)
        tma_codes = ac_t is not None and bc_t is not None
        if tma and not interpreter_active():
            _c.set_scratch_allocator()
        try:
            tiles = _cdiv(M, c.block_m) * _cdiv(N, c.block_n)
            launch_opts = {} if c.maxnreg is None else {"maxnreg": c.maxnreg}
            kernel[(max(1, min(tiles, _fixup_programs(out.device, c.programs_per_sm))) if fixup else tiles,)](
                *args, A_KSTEP=a_kstep, B_KSTEP=b_kstep, BLOCK_M=c.block_m, BLOCK_N=c.block_n,
                BLOCK_K8=c.block_k8, BLOCK_K16=c.block_k16, GROUP_M=_GROUP_M,
                PROMOTE=c.block_k8 if precise and not widths else None, EVEN=even, EVEN16=K % c.block_k16 == 0,
                WHOLE_MN=M % c.block_m == 0 and N % c.block_n == 0,
                OUT_BF16=out.dtype == torch.bfloat16,
                FIXUP=fixup, TMA=tma, A_T=bool(a_t), B_T=bool(b_t), TMA_CODES=tma_codes, AC_T=bool(ac_t),
                BC_T=bool(bc_t),
                COUNT=counts is not None, INTERP=interpreter_active(), num_warps=c.num_warps,
                num_stages=c.num_stages, **launch_opts)
        except _OutOfResources:
            if i + 1 == len(tried):
                raise
            continue
        if config is None and not traced:
            _CONFIG_CACHE[key] = c
        break


# ----------------------------------------------------------------------------------------------
# torch._scaled_mm for the FP8 product


def scaled_mm_applies(a: MoROperand, b: MoROperand) -> Optional[str]:
    """How torch._scaled_mm takes the FP8 product of these operands, or None: "tensorwise" (both
    per-tensor), "rowwise" (per-tensor or per-row scales on each side; bf16 output), "blockwise"
    (both in 128 x 128 blocks over dimensions that are multiples of 128, K of 512; bf16 output).
    Needs CUDA (not the interpreter), K-contiguous codes for A and B, and dimensions that are
    multiples of 16."""
    if not _scaled_mm_device(a.hp.device):
        return None
    M, K = a.hp.shape
    N = b.hp.shape[0]
    if M % 16 or N % 16 or K % 16 or a.codes.stride(1) != 1 or b.codes.stride(1) != 1:
        return None
    grids = (tuple(a.scales.shape), tuple(b.scales.shape))
    if grids == ((1, 1), (1, 1)):
        kind = "tensorwise"
    elif all(g[1] == 1 for g in grids) and a.block[0] in (1, M) and b.block[0] in (1, N):
        kind = "rowwise"
    elif (a.block == b.block == (128, 128) and M % 128 == 0 and N % 128 == 0 and K % 512 == 0):
        kind = "blockwise"
    else:
        return None
    return None if (kind, M, N, K) in _SCALED_MM_REFUSED else kind


def _scaled_mm_device(device) -> bool:
    return not interpreter_active() and device.type == "cuda" and hasattr(torch, "_scaled_mm")


def _scaled_mm(a: MoROperand, b: MoROperand, kind: str, out_dtype: torch.dtype, fp8_accum: str):
    """The FP8 product by torch._scaled_mm (``lowprec.numerics.scaled_mm.fp8_mm``) in out_dtype (bf16 for row- and
    blockwise scales), or None if torch refuses it (remembered: the Triton loop runs that case from
    then on). Codes are read in place (B column-major = K-major)."""
    M, K = a.hp.shape
    N = b.hp.shape[0]
    if kind == "blockwise":
        kinds = ("128x128", "128x128")
    else:  # one scale ("tensor") or one per row: fp8_mm pairs a tensor scale with row scales
        kinds = tuple("tensor" if op.scales.numel() == 1 else "row" for op in (a, b))
    try:
        return fp8_mm(a.codes, a.scales, kinds[0], b.codes, b.scales, kinds[1],
                      out_dtype if kind == "tensorwise" else torch.bfloat16, fast_accum=fp8_accum == "fast")
    except (RuntimeError, ValueError):
        _SCALED_MM_REFUSED.add((kind, M, N, K))
        return None


def _fixup_programs(device: torch.device, per_sm: int = 2) -> int:
    """The fix-up's persistent grid: ``per_sm`` programs per SM (enough to fill the GPU when a BF16
    choice makes them work); 2 in the interpreter, so that tests walk several tiles per program."""
    if interpreter_active() or device.type != "cuda":
        return 2
    return per_sm * torch.cuda.get_device_properties(device).multi_processor_count


def _tma_layout(hp: torch.Tensor) -> Optional[bool]:
    """How the TMA loop reads this (rows, K) operand: as the transpose of its row-major base (True:
    rows contiguous, the backward's views, loaded [K-step, rows] and transposed in shared memory), as
    it is (False: K contiguous), or not at all (None: another layout, or a base off 16-byte
    boundaries)."""
    transposed = hp.stride(1) != 1
    return transposed if tma_readable(hp.t() if transposed else hp) else None


def _codes_arg(codes: torch.Tensor) -> torch.Tensor:
    # the interpreter has no fp8: its bits as uint8 there (the kernel reads either as uint8 bits)
    return codes.view(torch.uint8) if interpreter_active() else codes


def _hp_arg(t: torch.Tensor) -> torch.Tensor:
    # the interpreter has no bf16: widen there (the values are bf16, the kernel rounds nothing)
    if t.dtype == torch.bfloat16 and interpreter_active():
        return t.float()
    return t
