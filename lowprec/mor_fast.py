"""Tensor-level MoR on the fast path: the decision on the device, the GEMM on cuBLAS, no host wait
in the graph that ``torch.compile`` traces.

Per operand (``mor_operand``), in torch ops that Inductor fuses: the E4M3 codes and scales of the
quantizer's partition (``lowprec.gemm.quantize_fp8``: the emulation's codes and scales bit for bit,
GAM included), the MoR relative error (``lowprec.mor``'s statistic, summed in fp64) and the choice
``error <= threshold``, a 0-d bool on the device. Per GEMM (``mor_mm``), ``torch.cond`` on "both
operands chose E4M3": an FP8 GEMM on ``_scaled_mm`` (tensor, row or 128x128-block scales), else a
BF16 GEMM (fp32 accumulation) of each operand's chosen values, the E4M3-chosen one dequantized and
rounded to BF16. Inductor runs the branch the predicate picks (it reads the predicate on the host:
one wait per GEMM; run eagerly, the host reads the predicate itself).

Where this differs from the emulation (``MoRQuantizer.__call__``, fp32 GEMMs of the values): the
GEMMs' accumulation order; an operand that chose E4M3 in a GEMM whose other operand chose BF16 is
multiplied after rounding its dequantized values to BF16; and a backward GEMM whose operand is the
transpose of a forward one with the same scales (per-tensor and 128x128 blocks) reuses that
operand's codes, scales and decision, whose error differs from the transpose's own only in fp64
summation order.

Decisions are counted for the coverage table (``MoRQuantizer.coverage``) in a per-layer buffer
(``DecisionCounts``) by ``count_decisions_``, an operator that mutates the buffer and so stays in
the compiled graph, forward and backward.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from .gemm import FP8Operand, operand_mm, scale_kind
from .mor import MoRQuantizer, _as_2d, _choose_e4m3, _relative_error, e4m3_spec
from .numerics.scaling import apply_blocks
from .recipes import GEMMS, OPERANDS


def fast_mor_quantizer(q) -> bool:
    """Whether an operand quantizer runs on this fast path: tensor-level MoR whose values are the
    exact dequantized E4M3 ones (``dequant="fp32"``) per tensor or in 128x128 blocks, the GEMM not
    routed to the Triton MoR kernel. Per-channel MoR stays emulated: its backward quantizes
    transposed views, and Inductor (torch 2.13) hands ``torch.cond`` such codes in a column-major
    layout its branches do not expect (a wrong-stride assertion at run time)."""
    if type(q) is not MoRQuantizer or q.dequant != "fp32" or q.gemm != "emulated":
        return False
    return q.partition == "tensor" or (q.partition == "block" and tuple(q.block) == (128, 128))


def _kind(spec) -> str:
    if spec.scaling == "gam":  # GAM: (1, cols) rows or 128x128 blocks
        return "row" if spec.block[0] == 1 else "128x128"
    return scale_kind(spec)


class MoROperand(NamedTuple):
    """An operand after the MoR decision: an E4M3 quantization (``fp8``, of the operand or, with
    ``fp8_t``, of its transpose), the choice (0-d bool, True for E4M3), and the high-precision
    tensor the BF16 choice multiplies, stored row-major (``hp``; with ``hp_t`` the operand is its
    transpose). Transposes stay flags until a branch of ``mor_mm`` needs them: the FP8 branch makes
    the transposed copy of the codes, the BF16 one never copies, and ``torch.cond`` only ever sees
    row-major operands."""
    fp8: FP8Operand
    e4m3: torch.Tensor
    hp: torch.Tensor
    fp8_t: bool = False
    hp_t: bool = False

    def t(self) -> "MoROperand":
        """The transposed tensor's operand (per-tensor and 128x128-block scales)."""
        return self._replace(fp8_t=not self.fp8_t, hp_t=not self.hp_t)

    def fp8_operand(self) -> FP8Operand:
        return self.fp8.t() if self.fp8_t else self.fp8

    def values_bf16(self) -> torch.Tensor:
        """What the BF16 GEMM multiplies: the dequantized E4M3 values if E4M3 was chosen, else the
        tensor, in BF16."""
        deq = _dequantized(self.fp8)
        deq = deq.t() if self.fp8_t else deq
        hp = self.hp.t() if self.hp_t else self.hp
        return torch.where(self.e4m3, deq, hp.float()).to(torch.bfloat16)


def mor_operand(q: MoRQuantizer, t: torch.Tensor) -> MoROperand:
    """E4M3 quantization, relative error and choice of one 2-D operand (reduction last)."""
    x2d = _as_2d(t)
    spec = e4m3_spec(q.partition, q.block, q.scale, cols=x2d.shape[1])
    fp8 = FP8Operand.of(x2d, spec, _kind(spec))
    err = _relative_error(x2d.float(), _dequantized(fp8))
    # a transposed view (the backward's W^T, dY^T, X^T) travels as its row-major base
    hp_t = not x2d.is_contiguous() and x2d.t().is_contiguous()
    return MoROperand(fp8, _choose_e4m3(err, q.threshold), x2d.t() if hp_t else x2d.contiguous(), False, hp_t)


def _dequantized(f: FP8Operand) -> torch.Tensor:
    rows, cols = f.codes.shape
    block = {"tensor": (rows, cols), "row": (1, cols), "128x128": (128, 128)}[f.kind]
    return apply_blocks(f.codes.float(), f.scale, block, torch.div)


def mor_mm(a: MoROperand, b: MoROperand, out_dtype: torch.dtype) -> torch.Tensor:
    """``a @ b.T``: FP8 if both operands chose E4M3, else BF16 (module docstring)."""
    # the branches close over constants only (specs, kinds, dtype): tensors enter as operands
    meta_a, meta_b = (a.fp8.spec, a.fp8.kind), (b.fp8.spec, b.fp8.kind)
    flags_a, flags_b = (a.fp8_t, a.hp_t), (b.fp8_t, b.hp_t)

    def operands(a8, sa, b8, sb, ha, hb, ea, eb):
        return (MoROperand(FP8Operand(a8, sa, *meta_a), ea, ha, *flags_a),
                MoROperand(FP8Operand(b8, sb, *meta_b), eb, hb, *flags_b))

    def fp8(*args):
        oa, ob = operands(*args)
        return operand_mm(oa.fp8_operand(), ob.fp8_operand(), out_dtype)

    def bf16(*args):
        oa, ob = operands(*args)
        va, vb = oa.values_bf16(), ob.values_bf16()
        return torch.mm(va, vb.t()).to(out_dtype)

    args = (a.fp8.codes, a.fp8.scale, b.fp8.codes, b.fp8.scale, a.hp, b.hp, a.e4m3, b.e4m3)
    both = torch.logical_and(a.e4m3, b.e4m3)
    if not torch.compiler.is_compiling():  # eager: the host reads the decision (cond would trace)
        return (fp8 if bool(both) else bf16)(*args)
    return torch.cond(both, fp8, bf16, tuple(row_major(t) for t in args))


# Inductor (torch 2.13) lowers a cond's branches for row-major operands but may lay out a
# computed operand otherwise (the codes of a tensor whose producer reads it transposed), and Dynamo
# names two branch parameters alike when their tensors came from variables of one name: a copy
# through an opaque operator fixes both (its output is a row-major buffer and a fresh graph node).
@torch.library.custom_op("lowprec::row_major", mutates_args=())
def row_major(t: torch.Tensor) -> torch.Tensor:
    """A row-major copy of ``t``."""
    return t.clone(memory_format=torch.contiguous_format)


@row_major.register_fake
def _(t):
    return torch.empty_like(t, memory_format=torch.contiguous_format)


# ----------------------------------------------------------------------------------------------
# Decision counts


@torch.library.custom_op("lowprec::count_decisions_", mutates_args=("counts",))
def count_decisions_(counts: torch.Tensor, slot: int, e4m3: torch.Tensor) -> None:
    """counts[slot] += (1 call, e4m3 as 0 or 1)."""
    counts[slot, 0] += 1
    counts[slot, 1] += e4m3.to(counts.dtype)


@count_decisions_.register_fake
def _(counts, slot, e4m3):
    return None


class DecisionCounts:
    """The fast path's decision counts of one layer: (calls, E4M3 choices) per (GEMM, operand) slot
    in an int64 buffer on the layer's device, read by the quantizers' coverage tables."""

    SLOTS = tuple((g, op) for g in GEMMS for op in OPERANDS[g])

    @classmethod
    def slot(cls, gemm: str, op: str) -> int:
        return cls.SLOTS.index((gemm, op))

    @staticmethod
    def buffer(device: Optional[torch.device] = None) -> torch.Tensor:
        return torch.zeros(len(DecisionCounts.SLOTS), 2, dtype=torch.int64, device=device)
