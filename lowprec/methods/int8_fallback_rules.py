"""The block-fallback rules of INT8 training with dynamic block-level fallback (``lowprec.methods.
int8_fallback``): which blocks of an operand fall back to 16 bits, and the defaults of the method's
keys. The fallback kernel (``lowprec.kernels.int8_fallback_gemm``) applies the same rules: nothing
here imports a kernel, so both sides import this module."""

from __future__ import annotations

import math
from typing import Optional

import torch

from ..numerics import QuantSpec, block_amax, quantize
from ..numerics.checks import block_shape, nonempty, number
from ..numerics.scaling import _blocks_view
from ..numerics.scaling import as_2d as _as_2d

RULES = ("absmax", "topk", "error", "dynamic", "none")
QMAX = 127.0

DEFAULTS = {
    "block": (32, 32),
    "rule": "absmax",
    "tau": 8.0,
    "rho": 0.02,
    "error_threshold": 0.02,
    "ema": 0.9,
    "quantile": 0.5,
    "fallback_gemms": ("fprop", "wgrad"),
    "fallback_operands": ("x",),
    "stochastic_gradients": True,
    # "kernel": on CUDA the GEMMs run on the Triton block-scaled INT8 kernel, which finds the
    # fallback blocks on the device (no host sync per GEMM), eagerly and in compiled steps
    # (lowprec.methods.int8_fast); "emulated": fp32 GEMMs of the dequantized values, the same numerics
    # up to accumulation order.
    "gemm": "kernel",
    # where the kernel adds the fallback blocks' second parts: "tail", in the GEMM kernel after its
    # main loop, over each tile's flagged K-groups (C written once, in the layer's dtype); "sparse",
    # in passes of their own over the flagged K-groups that add into an fp32 C
    # (lowprec.kernels.int8_fallback_gemm)
    "second_parts": "tail",
}
SECOND_PARTS = ("tail", "sparse")


def _int8_spec(block, rounding: str) -> QuantSpec:
    return QuantSpec(fmt="int8", scaling="block", block=tuple(block), rounding=rounding)



# ----------------------------------------------------------------------------------------------
# Rules


def block_int8_error(x: torch.Tensor, block) -> torch.Tensor:
    """Per-block relative L2 error of nearest-rounding block INT8: ||x_b - deq_b|| / ||x_b||
    (0 for an all-zero block; NaN/Inf elements count as 0)."""
    x2d = _as_2d(nonempty(x)).to(torch.float32)
    x2d = torch.where(torch.isfinite(x2d), x2d, torch.zeros_like(x2d))
    deq = quantize(x2d, _int8_spec(block, "nearest")).dequantize()
    err = _block_sum(((x2d - deq) ** 2), block)
    ref = _block_sum(x2d * x2d, block)
    return torch.where(ref > 0, torch.sqrt(err / torch.where(ref > 0, ref, torch.ones_like(ref))),
                       torch.zeros_like(ref))


def _block_sum(v2d: torch.Tensor, block) -> torch.Tensor:
    return _blocks_view(v2d, block).sum(dim=(1, 3))


def _positive_quantile(a: torch.Tensor, q: float) -> torch.Tensor:
    """The lower q-quantile of the positive entries of a (Inf if none), without a host sync:
    zeros sort first, so the wanted entry sits at an index computed on the device."""
    s, _ = torch.sort(a.flatten())
    n = s.numel()
    zeros = (s <= 0).sum()
    npos = n - zeros
    idx = zeros + torch.floor(q * (npos - 1).clamp(min=0).to(torch.float64)).to(torch.int64)
    # index_select, not s[idx]: a tensor subscript reads the index on the host
    val = s.index_select(0, idx.clamp(max=n - 1).reshape(1)).reshape(()) if n else torch.zeros((), device=a.device)
    return torch.where(npos > 0, val, torch.full_like(val, math.inf))


def _topk_mask(amax: torch.Tensor, rho: float) -> torch.Tensor:
    n = amax.numel()
    k = min(n, int(math.floor(rho * n + 0.5)))
    order = torch.sort(amax.flatten(), descending=True, stable=True).indices
    mask = torch.zeros(n, dtype=torch.bool, device=amax.device)
    mask.index_fill_(0, order[:k], True)  # a Python True assigned by indexing waits for the device
    return mask.reshape(amax.shape)


def check_rule_params(rule: str, *, tau: float = DEFAULTS["tau"], rho: float = DEFAULTS["rho"],
                      error_threshold: float = DEFAULTS["error_threshold"], ema: float = DEFAULTS["ema"],
                      quantile: float = DEFAULTS["quantile"]) -> dict:
    """The rule's parameters as floats, or a ValueError that names the bad one. tau must be > 0 (a
    factor over the median; tau <= 0 would send every non-zero block to the fallback), rho and
    quantile in [0, 1], error_threshold >= 0, ema in [0, 1) (1 would never move the level); all
    finite."""
    if rule not in RULES:
        raise ValueError(f"rule: must be one of {RULES}, got {rule!r}")
    return {"tau": number("tau", tau, low=0.0, low_open=True), "rho": number("rho", rho, low=0.0, high=1.0),
            "error_threshold": number("error_threshold", error_threshold, low=0.0),
            "ema": number("ema", ema, low=0.0, high=1.0, high_open=True),
            "quantile": number("quantile", quantile, low=0.0, high=1.0)}


def select_blocks(x: torch.Tensor, block, rule: str, *, tau: float = DEFAULTS["tau"],
                  rho: float = DEFAULTS["rho"], error_threshold: float = DEFAULTS["error_threshold"],
                  threshold: Optional[torch.Tensor] = None, amax: Optional[torch.Tensor] = None,
                  error: Optional[torch.Tensor] = None):
    """(mask, threshold) for a stateless rule; ``dynamic`` takes its amax ``threshold`` from the
    caller (``FallbackInt8Quantizer`` keeps the EMA). threshold is a 0-d tensor (NaN for rules
    without one). ``amax`` / ``error``: the block grids if already known (the GPU kernel's block
    statistics), else computed from x. Parameters are checked as ``check_rule_params`` does
    (host values only; a ``threshold`` tensor is taken as it is)."""
    p = check_rule_params(rule, tau=tau, rho=rho, error_threshold=error_threshold)
    tau, rho, error_threshold = p["tau"], p["rho"], p["error_threshold"]
    block = block_shape(block)
    x2d = _as_2d(nonempty(x))
    if amax is None:
        amax = block_amax(x2d, block)
    nan = torch.full((), math.nan, device=amax.device)
    if rule == "none":
        return torch.zeros_like(amax, dtype=torch.bool), nan
    if rule == "absmax":
        thr = tau * _positive_quantile(amax, 0.5)
        return amax > thr, thr
    if rule == "topk":
        return _topk_mask(amax, rho), nan
    if rule == "error":
        thr = torch.full((), float(error_threshold), device=amax.device)
        return (block_int8_error(x2d, block) if error is None else error) > thr, thr
    if threshold is None:
        raise ValueError("rule 'dynamic' needs threshold= (FallbackInt8Quantizer keeps it)")
    return amax > threshold, threshold
