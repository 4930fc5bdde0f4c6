"""Tensor-level MoR on the fast path: the decision on the device, the GEMM on cuBLAS, and nothing in
the step that waits for the device.

Per operand (``mor_operand``), in torch ops that Inductor fuses: the E4M3 codes and scales of the
quantizer's partition (``lowprec.gemm.quantize_fp8``: the emulation's codes and scales bit for bit,
GAM included), the MoR relative error (``operand_error``) and the choice ``error <= threshold``, a
0-d bool on the device (on CUDA, for bf16 operands of one scale or of 128x128 blocks, the codes and
the error come from one Triton pass instead, ``mor_cast_error_cuda``, measured faster there; see
``CAST_KERNEL`` and ``_cast_on_kernel``). Per
GEMM (``mor_mm``): the FP8 product of the two operands' codes on ``_scaled_mm`` (tensor, row or 128x128-block scales), always, then
``bf16_fixup_``, which reads the two choices on the device and, unless both are E4M3, overwrites the
output with the product of the chosen values (the BF16 operand rounded to BF16, the E4M3 one its
dequantized codes; fp32 accumulation): on CUDA the fix-up mode of the Triton MoR GEMM
(``lowprec.kernels.mor_gemm``), whose programs return at once when both chose E4M3. The common case
then costs what FP8 current scaling costs plus a launch; a BF16 choice pays both GEMMs.

Why not ``torch.cond``: Inductor lowers a cond by reading its predicate on the host (``.item()``), so
every GEMM waited for the device, and at the 1B shape the step took 3.4x its GPU time (profile in
``results/bench/profiles/``).

Where this differs from the emulation (``MoRQuantizer.__call__``, fp32 GEMMs of the values): the
GEMMs' accumulation order; the relative error, formed from the scaled values and summed per row in
fp32 (``operand_error``: within ``ERROR_ATOL`` = 2^-20 of the emulation's, so only an error that
close to the threshold can decide differently); and a backward GEMM whose operand is the transpose
of a forward one with the same scales (per-tensor and 128x128 blocks) reuses that operand's codes,
scales and decision, as per channel it takes the transpose's own codes, scales and decision that the
forward made with the operand (``CHANNEL_WITH_TRANSPOSE``).

Decisions are counted for the coverage table (``MoRQuantizer.coverage``) in the layer's buffer
(``mor_counts``, the emulation's too) by the fix-up itself (``mor_mm``'s ``counts``), which reads
the two choices anyway: an operator that mutates the buffer and so stays in the compiled graph,
forward and backward, with no launch of its own for the count.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from ..config import env_switch
from ..gemm import (TRANSPOSABLE, FP8Operand, dequantized, encode_scales, fp8_cast, kind_block, operand_mm,
                    scale_kind, triton_runs_on)
from .mor import MoRQuantizer, _as_2d, _choose_e4m3, e4m3_spec, mean_over_nonzero
from ..numerics.scaling import apply_blocks
from ..recipes import OPERANDS, SLOTS


def fast_mor_quantizer(q) -> bool:
    """Whether an operand quantizer runs on this fast path: tensor-level MoR whose values are the
    exact dequantized E4M3 ones (``dequant="fp32"``) per tensor, per channel or in 128x128 blocks
    (the scales ``_scaled_mm`` takes), the GEMM not routed to the Triton MoR kernel."""
    if type(q) is not MoRQuantizer or q.dequant != "fp32" or q.gemm != "emulated":
        return False
    return q.partition in ("tensor", "channel") or (q.partition == "block" and tuple(q.block) == (128, 128))


def _kind(spec) -> str:
    if spec.scaling == "gam":  # GAM: (1, cols) rows or 128x128 blocks
        return "row" if spec.block[0] == 1 else "128x128"
    return scale_kind(spec)


class MoROperand(NamedTuple):
    """An operand after the MoR decision: an E4M3 quantization (``fp8``, of the operand or, with
    ``fp8_t``, of its transpose), the choice of its codes (0-d bool, True for E4M3), and the values
    the BF16 choice multiplies, the tensor rounded to bf16 (``bf16_choice``), stored row-major
    (``hp``; with ``hp_t`` the operand is its transpose). Transposes stay flags until a GEMM needs
    them: the FP8 product makes the transposed copy of the codes cuBLAS wants, the BF16 fix-up reads
    either layout in place. Where the quantization wrote the transpose's codes with scales of their
    own (per channel: ``fp8.codes_t``, the columns' scales), ``e4m3_t`` is their choice: a choice
    belongs to the codes it was made from, not to an orientation."""
    fp8: FP8Operand
    e4m3: torch.Tensor
    hp: torch.Tensor
    fp8_t: bool = False
    hp_t: bool = False
    e4m3_t: Optional[torch.Tensor] = None

    def t(self) -> "MoROperand":
        """The transposed tensor's operand (per-tensor and 128x128-block scales, or codes of the
        transpose written with the tensor's)."""
        return self._replace(fp8_t=not self.fp8_t, hp_t=not self.hp_t)

    def kept(self) -> "MoROperand":
        """What the backward keeps of an operand whose transpose it multiplies: where the
        quantization wrote the transpose's codes too, those (with their choice), as the operand of
        the transpose with ``fp8_t`` flipped (so ``t().fp8_operand()`` takes them without a copy)."""
        f = self.fp8
        if f.codes_t is None:
            return self
        return self._replace(fp8=FP8Operand(f.codes_t, f.scale_t, f.spec, f.kind), fp8_t=not self.fp8_t,
                             e4m3=self._choice_t(), e4m3_t=None)

    def own(self) -> tuple:
        """(codes, scale, fp8_t, choice) of the codes this operand multiplies: the transpose's own
        codes where the quantization wrote them, else its codes and the flag."""
        f = self.fp8
        if self.fp8_t and f.codes_t is not None:
            return f.codes_t, f.scale_t, False, self._choice_t()
        return f.codes, f.scale, self.fp8_t, self.e4m3

    def _choice_t(self) -> torch.Tensor:
        # the choice of fp8.codes_t: their own where their scales are (per channel), else the codes'
        return self.e4m3 if self.e4m3_t is None else self.e4m3_t

    def fp8_operand(self) -> FP8Operand:
        return self.fp8.t() if self.fp8_t else self.fp8

    def values(self) -> torch.Tensor:
        """The fp32 values the emulation multiplies: the dequantized E4M3 codes if E4M3 was chosen,
        else the tensor rounded to BF16."""
        codes, scale, fp8_t, e4m3 = self.own()
        deq = dequantized(codes, scale, kind_block(self.fp8.kind, codes.shape))
        deq = deq.t() if fp8_t else deq
        hp = self.hp.t() if self.hp_t else self.hp
        return torch.where(e4m3, deq, hp.to(torch.bfloat16).float())


def mor_operand(q: MoRQuantizer, t: torch.Tensor, with_transpose: bool = False) -> MoROperand:
    """E4M3 quantization, relative error and choice of one 2-D operand (reduction last);
    ``with_transpose``: a backward GEMM takes the operand's transpose (``FastPlan.with_transpose``),
    whose codes the Triton pass then writes too (``FP8Operand.codes_t``), in place of a
    transposing copy of its codes (Inductor's, of the 1 B step's 16384 x 5632 codes: 0.54 ms); the
    torch path (the pass off) leaves that copy to Inductor, which fuses it into the cast. Per
    channel (``CHANNEL_WITH_TRANSPOSE``), the transpose's codes take scales of their own (the
    columns'), with their own error and choice (``MoROperand.e4m3_t``): on the pass, from the same
    read of the operand."""
    x2d = _as_2d(t)
    spec = e4m3_spec(q.partition, q.block, q.scale, cols=x2d.shape[1])
    kind = _kind(spec)
    # a transposed view (the backward's W^T, dY^T, X^T) travels as its row-major base
    hp_t = not x2d.is_contiguous() and x2d.t().is_contiguous()
    base = x2d.t() if hp_t else x2d
    hp = bf16_choice(base if hp_t else x2d.contiguous())
    if with_transpose and kind not in TRANSPOSABLE:
        return _with_own_transpose(q, x2d, spec, kind, base, hp_t, hp)
    if _cast_on_kernel(x2d, kind):
        scale = encode_scales(x2d, spec)
        grid, block = _base_grid(scale, kind_block(kind, tuple(x2d.shape)), hp_t)
        codes_b, codes_bt, err_sums, nz_counts, _ = mor_cast_error_cuda(
            base, grid, list(block), "both" if with_transpose else "transposed" if hp_t else "rows", None, None)
        codes, codes_t = (codes_bt, codes_b) if hp_t else (codes_b, codes_bt)
        fp8 = (FP8Operand(codes, scale, spec, kind, codes_t, scale.t().contiguous()) if with_transpose
               else FP8Operand(codes, scale, spec, kind))
        err = mean_over_nonzero(err_sums.sum(dtype=torch.float64), nz_counts.sum())
    else:
        fp8 = FP8Operand.of(x2d, spec, kind)
        err = operand_error(base, fp8, transposed=hp_t)
    return MoROperand(fp8, _choose_e4m3(err, q.threshold), hp, False, hp_t)


def own_transpose_grids(scale: torch.Tensor, scale_t: torch.Tensor, kind: str, shape: tuple, hp_t: bool) -> tuple:
    """(grid, block, grid_t, block_t) of the cast pass over the row-major base of a per-channel
    operand of ``shape`` (scales ``scale``, its transpose's ``scale_t``): the pass's rows' grid is the
    operand's, or its transpose's for a transposed view (``hp_t``)."""
    grid, block = _base_grid(scale, kind_block(kind, shape), hp_t)
    grid_t, block_t = _base_grid(scale_t, kind_block(kind, shape[::-1]), not hp_t)
    return (grid_t, block_t, grid, block) if hp_t else (grid, block, grid_t, block_t)


def _with_own_transpose(q: MoRQuantizer, x2d: torch.Tensor, spec, kind: str, base: torch.Tensor, hp_t: bool,
                        hp: torch.Tensor) -> MoROperand:
    """``mor_operand`` of a per-channel operand with its transpose's quantization (scales of x2d's
    columns): both codes, errors and choices, on CUDA from one pass over the operand."""
    spec_t = e4m3_spec(q.partition, q.block, q.scale, cols=x2d.shape[0])
    scale, scale_t = encode_scales(x2d, spec), encode_scales(x2d.t(), spec_t)
    if _cast_on_kernel(x2d, kind, kinds=("row",)):
        grid, block, grid_t, block_t = own_transpose_grids(scale, scale_t, kind, tuple(x2d.shape), hp_t)
        codes_b, codes_bt, err_b, nz_counts, err_bt = mor_cast_error_cuda(
            base, grid, list(block), "both", grid_t, list(block_t))
        codes, codes_t = (codes_bt, codes_b) if hp_t else (codes_b, codes_bt)
        err_x, err_xt = (err_bt, err_b) if hp_t else (err_b, err_bt)
        nz = nz_counts.sum()
        err = mean_over_nonzero(err_x.sum(dtype=torch.float64), nz)
        err_t = mean_over_nonzero(err_xt.sum(dtype=torch.float64), nz)
        fp8 = FP8Operand(codes, scale, spec, kind, codes_t, scale_t)
    else:
        own, own_t = FP8Operand.of(x2d, spec, kind), FP8Operand.of(x2d.t(), spec_t, kind)
        err = operand_error(base, own, transposed=hp_t)
        err_t = operand_error(base, own_t, transposed=not hp_t)
        # built whole, not by _replace: Dynamo (torch 2.11) cannot rebuild a tuple that _replace made
        # when the operand leaves a compiled region (the GPU test compiles mor_operand alone)
        fp8 = FP8Operand(own.codes, own.scale, spec, kind, own_t.codes, own_t.scale)
    return MoROperand(fp8, _choose_e4m3(err, q.threshold), hp, False, hp_t, _choose_e4m3(err_t, q.threshold))


def bf16_choice(hp: torch.Tensor) -> torch.Tensor:
    """The values a BF16 choice multiplies: ``hp`` rounded to BF16 (round to nearest even, as the
    MoR GEMM rounds it), here in the traced ops that Inductor fuses into the operand's cast, rather
    than inside the GEMM's K loop. There, an fp32 operand (the master weight, in the forward and in
    the input gradient) was converted in registers and stored back to shared memory every K-step,
    which left each tensor-core product waiting for the last (sm_90: ``pendings = 0``, against one
    product in flight for bf16 operands; 1 B step on the H200 at 32c1b28, everything BF16: 532 ms
    of MoR GEMMs, about 150 TFLOP/s, profile ``llama_1b_mor_tensor_all_bf16_32c1b28``)."""
    return hp.to(torch.bfloat16)  # a bf16 tensor comes back as itself


def _base_grid(scale: torch.Tensor, block: tuple, transposed: bool) -> tuple:
    """An operand's scale grid and block in the layout of the tensor its error is read from: the
    transposed ones where the operand is a transposed view of that tensor."""
    return (scale.t(), block[::-1]) if transposed else (scale, block)


# The Triton cast-and-error pass in place of Inductor's fusion of the same torch ops, for per-tensor
# and 128x128-block MoR: on by default (LOWPREC_MOR_CAST_KERNEL=0 turns it off). It was off while two
# of its GPU checks failed: with the approximate division its error sums on row-major whole tiles came
# out 10^4-10^5 times the reference's (codes right; H200 at 1ebcc97 and 32c1b28, H100 at 14b5a5f), and
# the MoR linear benchmark's layer check under bf16 autocast put the fast path 31.5 dB from the
# emulation in dx and dW for per-tensor and per-block MoR (the pass's only users). Both went away
# once the codes' values came from fp32 adds instead of the hardware cast widened in registers, a
# use of the cast that Triton 3.6 on Hopper mis-compiles on some runs (kernels.mor_quant.
# _cast_error_kernel): at 0997a7a every test of the pass and every layer check held (H100:
# tests/test_kernels_mor.py, 30/30 checks of lowprec.bench.mor_linear, 69 dB to exact). Speed, 1 B,
# against compiled BF16 of the same run: on the H200 at e9fb5eb (e2e_h200_mor_cast_tuned.csv) per
# block 1.065x and per tensor 1.131x against 1.024x and 1.122x with the fusion; on an H100 at
# afb7ce6, the pass and the fusion in one job (e2e_h100_mor_cast_ab_{pass,fusion}.csv): per block
# 1.067x against 1.004x, per tensor 1.153x against 1.097x.
# Per-channel MoR keeps the fusion: it measured 0.708x with the pass against 0.906x. Profiled at 48cad10: it
# quantizes each operand twice (row scales for one GEMM, column scales for the other: no transposed
# codes to reuse), and Inductor fuses both into one reduction whose column-scaled codes are stored
# transposed, element by element (0.2-0.5 ms per 1 B operand, 55 ms of the step against 59 ms of FP8
# GEMMs; profiles/llama_1b_mor_channel_48cad10). The pass alone is 3-4x faster per operand
# (results/bench/mor_cast_kernel_h200_channel.csv), but with it the step still spent about 60 ms in
# quantization and amax kernels and measured 0.889x against 0.909x (an uncommitted run at 6f637f6).
CAST_KERNEL = env_switch("LOWPREC_MOR_CAST_KERNEL")
# Per-channel MoR: an operand whose transpose a backward GEMM takes is quantized together with that
# transpose (the scales of its columns) in the forward, on the pass from one read of the operand (two
# scale grids, kernels.mor_quant.mor_cast_error's scale_t), and the backward takes the transposed
# codes and their choice (MoROperand.e4m3_t) as per-tensor MoR takes its transposed codes. Measured on
# an H100 at 236be2e against the backward quantizing each transpose again (Inductor's fusion), one run
# each with its own compiled-BF16 baseline: 1 B 0.910x against 0.889x of compiled BF16, 98 M with CUDA
# graphs 0.627x against 0.598x (results/bench/e2e_h100_mor_channel_with_transpose.csv,
# e2e_h100_100m_mor_channel_with_transpose.csv), for the transposed codes the backward keeps (1 B, by
# count: a byte per element of the layers' inputs and weights, about 5.5 GB; the run's peaks, 37.7
# against 28.7 GiB, also hold what the arms measured before left allocated: compiled BF16 peaked at
# 30.3 GiB first and 36.4 last); 0.962x at 1 B at 00db1fe, once the pass's flags stopped spilling to
# registers (results/bench/e2e_h100_mor_cast_flags.csv). On by default;
# LOWPREC_MOR_CHANNEL_WITH_TRANSPOSE=0 turns it off.
CHANNEL_WITH_TRANSPOSE_ENV = "LOWPREC_MOR_CHANNEL_WITH_TRANSPOSE"
CHANNEL_WITH_TRANSPOSE = env_switch(CHANNEL_WITH_TRANSPOSE_ENV)
# The pass divides each error term with the approximate fp32 division (within 2 ulp on CUDA, a few u
# more on a term that ERROR_ATOL's bound already allows 9 u): its correctly rounded division cost a
# quarter of the pass (16384 x 5632 on the H200: 0.206 ms against 0.268, the statistic 1.5e-9 and
# 6.9e-9 relative from operand_error's; results/bench/mor_cast_kernel_h200.csv). Codes unchanged.
# Since the H100 profile at d0c7170 (per channel's passes 34.6 ms of a 182 ms 1 B step, per block's
# 17.9) the approximate division is the fast one, a reciprocal and a product (div.approx, within 2
# ulp as div.full is, over |y| > 2^-10, where the pass now sends it: kernels.mor_quant._division):
# sm_90 instructions an element 67.2 -> 54.8 with the transpose's own grid, 34.2 -> 27.2 rows only
# (results/bench/mor_cast_sass_sm90_fast_div.csv); then 46.8 and 23.8 with the term formed in
# magnitudes (mor_quant._code_and_term; mor_cast_sass_sm90_magnitudes.csv). Timed with both on an
# H100 at 496c959: per-channel MoR at 1 B 1.020x of compiled BF16 (0.951x at d0c7170), its cast
# passes 21.8 ms of the step (34.6; results/bench/e2e_h100_496c959.csv and profiles/).
CAST_APPROX_DIV = True


def _cast_on_kernel(x2d: torch.Tensor, kind: str, kinds: tuple = ("tensor", "128x128")) -> bool:
    """Whether an operand's codes and error come from the Triton pass (``mor_cast_error_cuda``): with
    ``CAST_KERNEL``, on CUDA, for bf16 operands of a kind in ``kinds`` (one scale or 128x128 blocks;
    per channel, ``("row",)``, where the pass writes the transpose's codes from a grid of their own,
    ``_with_own_transpose``); else the torch ops (``operand_error``), which compute the same and which
    Inductor fuses into the cast (a per-channel operand alone: measured faster there, see
    ``CAST_KERNEL``).

    bf16 only: the configuration checked end to end (the activations and gradients of autocast
    training). fp32 operands (a master weight, a layer run without autocast) take the torch ops: on
    the H200 (70f82cf) the MoR linear benchmark's fp32 layer check had put the fast path 29-32 dB
    from the Triton MoR GEMM's path for per-tensor and per-block MoR, as the bf16 one was before the
    codes' values came from fp32 adds (``kernels.mor_quant._cast_error_kernel``); since then the
    pass's fp32 whole-tile tests hold on the GPU (H100, 0997a7a), but no fp32 layer has run through
    it there."""
    return (CAST_KERNEL and x2d.is_cuda and x2d.dtype == torch.bfloat16
            and kind in kinds and triton_runs_on("cuda"))


# operand_error against the emulation's statistic, absolute. Each form rounds a term (at most 1)
# a few times in fp32, so the two terms of one element differ by at most about 9 u (u = 2^-24, 5.4e-7)
# in the worst case (11 u with the pass's approximate division, CAST_APPROX_DIV); the fp32 row sums add
# a few u more. Measured: up to 1.2e-8 on the tests' data.
ERROR_ATOL = 2.0 ** -20


def operand_error(base: torch.Tensor, f: FP8Operand, transposed: bool = False) -> torch.Tensor:
    """MoR's relative error (``lowprec.methods.mor.mor_relative_error``) of the E4M3 operand ``f``
    as a 0-d fp64 tensor, read from the row-major ``base``: the operand's tensor, or with
    ``transposed`` the tensor whose transpose ``f`` quantizes.

    Each term is |code - y| / |y| of the scaled value y = x * scale that the codes are cast from
    (the product ``quantize_fp8`` forms too, so the compiled graph computes the codes and the error
    in one kernel), rather than |code / scale - x| / |x|: equal in exact arithmetic, one division
    instead of two and no dequantized value read back. Terms are summed per row of ``base`` in fp32
    and the rows in fp64, never through a transposed view (Inductor's reduction over transposed
    codes took 73 ms of a 1 B step for per-channel MoR, profile ``llama_1b_mor_channel_59d23ed``).
    The emulation's form, summed element by element in fp64, took 27 ms of per-block MoR's 172 ms of
    GPU kernels at 1 B (``llama_1b_mor_block_670e915``); this one runs inside the cast kernels
    (``llama_1b_*_e6882e4``). Both changes move the statistic by a few fp32 roundings of a term,
    within ``ERROR_ATOL`` absolute. A value that underflows (x != 0, y or its code 0) counts 1, as
    in the emulation; NaN and Inf make the error NaN (BF16).

    A Triton kernel of its own for the error (reading the operand, codes and scales again, so that
    the cast would be a pointwise kernel tiled for its transposed store) measured slower at 1 B on the
    H200 and was dropped: per tensor 0.964x of compiled BF16 against 1.122x, per block 0.923x against
    1.024x, per channel 0.720x against 0.906x (``results/bench/e2e_h200_mor_error_kernel.csv``)."""
    scale, block = _base_grid(f.scale, kind_block(f.kind, f.codes.shape), transposed)
    x = base.float()
    y = apply_blocks(x, scale, block, torch.mul)
    code = fp8_cast(y, f.spec).float()
    nz = x != 0
    terms = torch.where(nz, torch.where(y == 0, 1.0, (code - y).abs() / y.abs()), 0.0)
    total = terms.sum(dim=1).sum(dtype=torch.float64)
    return mean_over_nonzero(total, nz.sum(dim=1, dtype=torch.int32).sum())


# On CUDA: the cast and the error's partial sums in one Triton pass (lowprec.kernels.mor_quant), a
# triton_op whose launch Inductor traces and makes from its own code
@torch.library.triton_op("lowprec::mor_cast_error_cuda", mutates_args=())
def mor_cast_error_cuda(base: torch.Tensor, scale: torch.Tensor, block: list[int], layouts: str,
                        scale_t: Optional[torch.Tensor], block_t: Optional[list[int]]
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(E4M3 codes of ``base`` row-major, those of ``base.T`` row-major, each where ``layouts``
    asks for it, else empty; the error terms' sums and non-zero counts per row of ``base`` and
    128-column tile; with ``scale_t``, the sums of ``base.T``'s codes) for the scale grid ``scale``
    over ``block`` of ``base`` (and ``scale_t`` over ``block_t`` for ``base.T``'s codes, where
    their scales are their own: per channel) (``lowprec.kernels.mor_quant.mor_cast_error``)."""
    from ..kernels import mor_quant as kq
    return kq.mor_cast_error(base, scale, tuple(block), layouts, launcher=torch.library.wrap_triton,
                             approx_div=CAST_APPROX_DIV, scale_t=scale_t,
                             block_t=None if block_t is None else tuple(block_t))


def mor_mm(a: MoROperand, b: MoROperand, out_dtype: torch.dtype, fast_accum: bool = False,
           counts: Optional[torch.Tensor] = None, gemm: Optional[str] = None) -> torch.Tensor:
    """``a @ b.T``: the FP8 product, overwritten on the device by the product of the chosen values
    unless both operands chose E4M3 (module docstring). ``fast_accum`` as in ``operand_mm``.
    ``counts``: a layer's decision counts (``lowprec.methods.mor.COUNT_COLUMNS``), to which the
    fix-up adds one call and each operand's choice in GEMM ``gemm``'s two slots (``SLOTS``: one (2, 2)
    block of (calls, E4M3 choices) rows), without a host read."""
    if counts is not None and gemm not in OPERANDS:
        raise ValueError(f"mor_mm: counts need the GEMM they count, one of {tuple(OPERANDS)}; got gemm={gemm!r}")
    out = operand_mm(a.fp8_operand(), b.fp8_operand(), out_dtype, fast_accum=fast_accum)
    fixup = bf16_fixup_cuda_ if out.is_cuda and triton_runs_on("cuda") else bf16_fixup_
    row = 0 if counts is None else SLOTS.index((gemm, OPERANDS[gemm][0]))
    fixup(out, *_fixup_args(a), *_fixup_args(b), counts, row)
    return out


def _fixup_args(op: MoROperand) -> tuple:
    # the choice as the Triton kernel reads it, an error of 0 (E4M3) or +inf (BF16) against a
    # threshold of 0, made here in traced ops that Inductor fuses (inside the operator each would be
    # a launch of its own)
    codes, scale, fp8_t, e4m3 = op.own()
    error = torch.where(e4m3, 0.0, float("inf")).to(torch.float32)
    return codes, scale, op.hp, error, op.fp8.kind, fp8_t, op.hp_t


def _from_args(codes, scale, hp, kind, fp8_t, hp_t) -> MoROperand:
    # the fix-up needs codes, scales and their kind only (no spec); the choice travels as an error
    return MoROperand(FP8Operand(codes, scale, None, kind), None, hp, fp8_t, hp_t)


# Off CUDA (the CPU, or the Triton interpreter): an operator the compiled graph keeps as one opaque
# node, which Inductor neither traces into nor reads the choices of; the output is updated in place.
@torch.library.custom_op("lowprec::mor_bf16_fixup_", mutates_args=("out", "counts"))
def bf16_fixup_(out: torch.Tensor,
                a_codes: torch.Tensor, a_scale: torch.Tensor, a_hp: torch.Tensor, a_error: torch.Tensor,
                a_kind: str, a_fp8_t: bool, a_hp_t: bool,
                b_codes: torch.Tensor, b_scale: torch.Tensor, b_hp: torch.Tensor, b_error: torch.Tensor,
                b_kind: str, b_fp8_t: bool, b_hp_t: bool,
                counts: Optional[torch.Tensor], count_row: int) -> None:
    """Unless both operands chose E4M3, ``out = values(a) @ values(b).T`` (``MoROperand.values``,
    fp32 accumulation): on the Triton MoR GEMM's fix-up mode where Triton runs on ``out``'s device
    (the choice read there), else in torch (the host reads the choice). Then, with ``counts``,
    ``counts[count_row + i, :2] += (1, operand i chose E4M3)`` for a, b (``mor_mm``)."""
    from ..kernels import mor_gemm as kg
    a = _from_args(a_codes, a_scale, a_hp, a_kind, a_fp8_t, a_hp_t)
    b = _from_args(b_codes, b_scale, b_hp, b_kind, b_fp8_t, b_hp_t)
    if kg.triton_available(out.device):
        kg.bf16_fixup(_kernel_operand(a, a_error), _kernel_operand(b, b_error), out, counts=counts,
                      count_row=count_row)
        return
    e4m3 = torch.stack([a_error == 0, b_error == 0]).reshape(2)
    if not bool(e4m3.all()):
        out.copy_(a._replace(e4m3=e4m3[0]).values() @ b._replace(e4m3=e4m3[1]).values().t())
    if counts is not None:
        rows = counts.narrow(0, count_row, 2)
        rows[:, 0].add_(1)
        rows[:, 1].add_(e4m3.to(counts.dtype))


@bf16_fixup_.register_fake
def _(out, *args):
    return None


# On CUDA: the same as a triton_op, which Inductor traces at compile time down to the kernel launch
# and launches from its own code. As an opaque operator the launch cost about 300 us of Python per
# GEMM, and at the 1B shape that made the step wait on the host (profile in results/bench/profiles/).
@torch.library.triton_op("lowprec::mor_bf16_fixup_cuda_", mutates_args=("out", "counts"))
def bf16_fixup_cuda_(out: torch.Tensor,
                     a_codes: torch.Tensor, a_scale: torch.Tensor, a_hp: torch.Tensor, a_error: torch.Tensor,
                     a_kind: str, a_fp8_t: bool, a_hp_t: bool,
                     b_codes: torch.Tensor, b_scale: torch.Tensor, b_hp: torch.Tensor, b_error: torch.Tensor,
                     b_kind: str, b_fp8_t: bool, b_hp_t: bool,
                     counts: Optional[torch.Tensor], count_row: int) -> None:
    """``bf16_fixup_`` on a CUDA device where Triton runs."""
    from ..kernels import mor_gemm as kg
    a = _from_args(a_codes, a_scale, a_hp, a_kind, a_fp8_t, a_hp_t)
    b = _from_args(b_codes, b_scale, b_hp, b_kind, b_fp8_t, b_hp_t)
    kg.bf16_fixup(_kernel_operand(a, a_error), _kernel_operand(b, b_error), out, counts=counts,
                  count_row=count_row, launcher=torch.library.wrap_triton)


def _kernel_operand(op: MoROperand, error: torch.Tensor):
    """The Triton MoR GEMM's operand: views in the operand's orientation (the kernel reads any
    strides) and the choice as ``error`` against a threshold of 0 (``_fixup_args``)."""
    from ..kernels import mor_gemm as kg
    codes, scale = (op.fp8.codes.t(), op.fp8.scale.t()) if op.fp8_t else (op.fp8.codes, op.fp8.scale)
    hp = op.hp.t() if op.hp_t else op.hp
    return kg.MoROperand(hp, codes, scale, kind_block(op.fp8.kind, codes.shape), error, 0.0)
