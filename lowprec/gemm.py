"""GPU fast path for FP8 GEMMs: ``torch._scaled_mm`` where the recipe's scales allow it.

Applies when both operands are FP8 (not both E5M2) with per-tensor (current or delayed) or per-row
(``channel``, axis=-1, i.e. per row of the reduction-last view) scales, the tensors are on CUDA, and
the shape meets cuBLASLt's rules (reduction and output columns multiples of 16).  Everything else
returns None and runs the emulation, which has the same meaning: the codes are the same, only the
accumulation order differs.
"""

from __future__ import annotations

import torch

from .numerics import QuantSpec, to_torch_dtype

_FP8 = ("e4m3", "e5m2")


def _eligible(spec) -> bool:
    return isinstance(spec, QuantSpec) and spec.fmt in _FP8 and (
        spec.scaling in ("tensor", "delayed") or (spec.scaling == "channel" and spec.axis == -1))


def fast_path_applies(a: torch.Tensor, b: torch.Tensor, spec_a, spec_b) -> bool:
    return (a.is_cuda and hasattr(torch, "_scaled_mm") and _eligible(spec_a) and _eligible(spec_b)
            and not (spec_a.fmt == spec_b.fmt == "e5m2")
            and a.shape[1] % 16 == 0 and b.shape[0] % 16 == 0 and a.shape[0] > 0)


def scaled_mm(qa, qb) -> torch.Tensor:
    """fp32 ``dequant(qa) @ dequant(qb).T`` on FP8 tensor cores from two QTensors."""
    a8 = qa.codes.to(to_torch_dtype(qa.spec.fmt))           # exact: codes are on the grid
    b8 = qb.codes.to(to_torch_dtype(qb.spec.fmt))
    inv_a = (1.0 / qa.scale.float()).reshape(-1, 1) if qa.scale.numel() > 1 else (1.0 / qa.scale.float()).reshape(())
    inv_b = (1.0 / qb.scale.float()).reshape(1, -1) if qb.scale.numel() > 1 else (1.0 / qb.scale.float()).reshape(())
    rowwise = inv_a.dim() == 2 or inv_b.dim() == 2
    if rowwise:  # cuBLASLt row-wise scaling wants both scales as vectors and a bf16 output
        inv_a = inv_a.expand(a8.shape[0], 1).contiguous() if inv_a.dim() == 0 else inv_a.contiguous()
        inv_b = inv_b.expand(1, b8.shape[0]).contiguous() if inv_b.dim() == 0 else inv_b.contiguous()
    out = torch._scaled_mm(a8.contiguous(), b8.contiguous().t(), scale_a=inv_a, scale_b=inv_b,
                           out_dtype=torch.bfloat16 if rowwise else torch.float32)
    return out.float()
