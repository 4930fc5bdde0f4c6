"""Quantization error metrics, as Python floats for telemetry.

All reductions run in float64 so that a metric never carries the error of the format it measures.
NaN handling: an element where x or q is NaN is left out of every metric (a NaN in one activation
should show up as its own telemetry signal, not turn every number for the tensor into NaN).
Infinities are kept and follow IEEE arithmetic (an overflow to Inf gives sqnr -inf, amax inf).
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from typing import Union

import torch

from ..errors import error_text
from .formats import Format, get_format

__all__ = [
    "sqnr_db",
    "relative_error",
    "amax",
    "flush_fraction",
    "saturation_fraction",
    "tensor_stats",
    "tensor_sums",
    "stats_from_sums",
]


def _masked_pair(x: torch.Tensor, q: torch.Tensor):
    """x and q flat in float64, a NaN pair made 0, 0 (it adds 0 to every sum and is no non-zero
    element) without asking whether one is there: no wait for a device, and traceable."""
    x, q = x.to(torch.float64).flatten(), q.to(torch.float64).flatten()
    keep = ~(torch.isnan(x) | torch.isnan(q))
    return torch.where(keep, x, 0.0), torch.where(keep, q, 0.0)


def _pair(x: torch.Tensor, q: torch.Tensor):
    """x and q flat in float64 without their NaN pairs: removed on the CPU (the sums' order of the
    committed runs' telemetry), masked on CUDA (``_masked_pair``)."""
    if x.is_cuda:
        return _masked_pair(x, q)
    x, q = x.to(torch.float64).flatten(), q.to(torch.float64).flatten()
    keep = ~(torch.isnan(x) | torch.isnan(q))
    if bool(keep.all()):  # the usual case: no copy
        return x, q
    return x[keep], q[keep]


def sqnr_db(x: torch.Tensor, q: torch.Tensor) -> float:
    """10 log10(sum x^2 / sum (x - q)^2). +inf when q == x (also for an all-zero x);
    -inf when x is all zero but q is not."""
    return tensor_stats(x, q)["sqnr_db"]


def relative_error(x: torch.Tensor, q: torch.Tensor) -> float:
    """MoR's metric: mean over non-zero x of |q - x| / |x|. A value flushed to 0 contributes 1.0.
    0.0 when x has no non-zero (non-NaN) element."""
    return tensor_stats(x, q)["relative_error"]


def amax(x: torch.Tensor) -> float:
    """max |x| ignoring NaN (Inf is reported: it is what telemetry must see); 0.0 if nothing left."""
    return float(_amax_tensor(x))


def _amax_tensor(x: torch.Tensor) -> torch.Tensor:
    # in x's own dtype: |x| and a maximum are exact in any float format
    a = x.detach().abs().flatten()
    return torch.where(torch.isnan(a), torch.zeros_like(a), a).max() if a.numel() else a.new_zeros(())


def flush_fraction(x: torch.Tensor, q: torch.Tensor) -> float:
    """Share of non-zero x whose quantized value is exactly 0 (underflow)."""
    return tensor_stats(x, q)["flush_fraction"]


def _clip_threshold(fmt) -> float:
    """Largest |value| that a round-to-nearest cast still maps onto +-fmax rather than beyond it:
    fmax plus half the spacing of the top binade (448 + 8 for E4M3, 127.5 for INT8). A value in
    (fmax, threshold] rounds to fmax anyway, so it is not clipped."""
    f = get_format(fmt)
    if hasattr(f, "man_bits"):
        return f.fmax + 2.0 ** (f.emax - f.man_bits - 1)
    return f.fmax + 0.5


def saturation_fraction(x: torch.Tensor, scale: Union[float, torch.Tensor],
                        fmt: Union[str, Format]) -> float:
    """Share of (non-NaN) elements that a saturating cast clips: |x * scale| beyond what rounds to
    fmax (see _clip_threshold). The product is formed in fp32, as the quantizer forms it, so a
    current-scaled amax that lands a rounding error above fmax does not count. `scale` must
    broadcast to x: a number, or a QTensor's expanded_scale()."""
    clipped, n = (float(t) for t in _saturation_counts(x, scale, fmt))
    return clipped / n if n else 0.0


def _saturation_counts(x: torch.Tensor, scale, fmt) -> tuple[torch.Tensor, torch.Tensor]:
    """(elements clipped, non-NaN elements) of ``saturation_fraction``, on x's device."""
    return _clip_counts(x.detach(), _scale_tensor(scale, x.device), _clip_threshold(fmt))


def _scale_tensor(scale, device) -> torch.Tensor:
    return (scale if isinstance(scale, torch.Tensor) else torch.tensor(float(scale))).to(device)


def _clip_counts(x: torch.Tensor, s: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    # the product in fp32, as the quantizer forms it; flat, as every other sum (one loop when fused).
    # NaN compares False with the threshold: it is left out of both counts without a copy
    y = (x.to(torch.float32) * s.to(torch.float32)).flatten()
    return (y.abs() > clip).sum(), (~torch.isnan(y)).sum()


# the sums tensor_stats is made of, in the order stats_from_sums reads them
SUMS = ("signal", "noise", "relative_error_sum", "nonzero", "flushed", "amax", "clipped", "finite")
STATS = ("sqnr_db", "relative_error", "amax", "flush_fraction", "saturation_fraction")


# Where tensor_sums reads its operands once (``_one_pass_sums``, compiled): "cuda" (CUDA tensors;
# the default), "always" (the CPU too), "never". Eager, the float64 sums take some twenty passes
# over each operand and its float64 copies: a medium telemetry step (every operand of every GEMM,
# ~11 G elements at 12 x 768) moves terabytes that way. The CPU keeps the eager form by default,
# whose sums the committed runs' telemetry was written with.
FUSED_METRICS = os.environ.get("LOWPREC_FUSED_METRICS", "cuda")
# Compiled variants the one-pass sums may hold (Dynamo's limit, 8 by default, counts every dtype pair,
# scale layout and presence of a clip): a telemetry step of a model whose operands differ in these
# went past 8, after which every sum ran eagerly, in float64 copies (a medium MoR run's telemetry
# then needed 42 GB and failed for memory beside another run on an 80 GB GPU, 230dd0b).
FUSED_VARIANTS = 64
# Telemetry steps run the compiled blocks eagerly (``torch.compiler.set_stance("force_eager")``,
# lowprec.linear.compiled.eager), a stance that held for these sums too: every compiled run's
# telemetry summed eagerly, in float64 copies of each operand. They take the default stance here.


def _sums(x: torch.Tensor, q: torch.Tensor, s, clip, pair):
    """``tensor_sums``' arithmetic, once for both forms: ``pair`` makes the float64 pairs (``_pair``
    eager, ``_masked_pair`` compiled, where every reduction then runs over the same n elements and
    Inductor reads each operand once); ``s``/``clip`` (the scale broadcast to x, the format's clip
    threshold) or None."""
    xp, qp = pair(x, q)
    nz = xp != 0
    d = qp - xp
    out = {"signal": (xp * xp).sum(), "noise": (d * d).sum(),
           "relative_error_sum": torch.where(nz, d.abs() / torch.where(nz, xp.abs(), 1.0), 0.0).sum(),
           "nonzero": nz.sum(), "flushed": (nz & (qp == 0)).sum(), "amax": _amax_tensor(x)}
    if clip is not None:
        out["clipped"], out["finite"] = _clip_counts(x, s, clip)
    return out


def _sums_one_pass(x: torch.Tensor, q: torch.Tensor, s, clip):
    return _sums(x, q, s, clip, _masked_pair)


@functools.lru_cache(maxsize=None)
def _one_pass_sums():
    return torch.compile(_sums_one_pass, dynamic=True, fullgraph=True)


def _fused(x: torch.Tensor) -> bool:
    return x.numel() > 0 and (FUSED_METRICS == "always" or (FUSED_METRICS == "cuda" and x.is_cuda))


def tensor_sums(x: torch.Tensor, q: torch.Tensor, scale=None, fmt=None) -> dict:
    """``tensor_stats``' sums and counts (``SUMS``) as 0-d tensors on x's device, computed without
    waiting for it, for ``stats_from_sums`` to finish once they are read: a telemetry step reads the
    sums of every operand of every GEMM in one conversion (``lowprec.telemetry``). Float64 as the
    single metrics; on CUDA in one compiled pass over the operands (``FUSED_METRICS``). A NaN pair
    adds 0 to every sum and is no non-zero element; on CUDA it is masked rather than removed, so the
    float64 sums of a tensor with one are summed in another order than on the CPU."""
    global FUSED_METRICS
    x, q = x.detach(), q.detach()
    if x.numel() != q.numel():
        raise ValueError(f"x and q differ in size: {x.numel()} vs {q.numel()}")
    with_scale = scale is not None and fmt is not None
    s, clip = (_scale_tensor(scale, x.device), _clip_threshold(fmt)) if with_scale else (None, None)
    if _fused(x):
        # the clip threshold as a device scalar: one compiled variant for every format's threshold
        clip_t = None if clip is None else x.new_full((), clip, dtype=torch.float32)
        try:
            # the limit's name before torch 2.6: cache_size_limit
            limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
            with torch.compiler.set_stance("default"), torch._dynamo.config.patch(**{limit: FUSED_VARIANTS}):
                return _one_pass_sums()(x, q, s, clip_t)
        except (torch._dynamo.exc.TorchDynamoException, getattr(torch._inductor.exc, "InductorError", ())) as e:
            # a slower path, the same numbers: the run goes on, and says why
            warnings.warn(f"tensor_sums: the compiled one-pass sums failed ({error_text(e, 300)}); eager from now on")
            FUSED_METRICS = "never"
    return _sums(x, q, s, clip, _pair)


def stats_from_sums(v: dict) -> dict:
    """``tensor_stats`` from its sums read as numbers (``tensor_sums``; without clipped and finite,
    saturation_fraction is NaN)."""
    signal, noise, n = v["signal"], v["noise"], v["nonzero"]
    if noise == 0.0:
        sqnr = math.inf
    elif signal == 0.0:
        sqnr = -math.inf
    else:
        sqnr = 10.0 * math.log10(signal / noise)
    sat = (v["clipped"] / v["finite"] if v["finite"] else 0.0) if "clipped" in v else math.nan
    return {"sqnr_db": sqnr, "relative_error": v["relative_error_sum"] / n if n else 0.0, "amax": float(v["amax"]),
            "flush_fraction": v["flushed"] / n if n else 0.0, "saturation_fraction": sat}


def tensor_stats(x: torch.Tensor, q: torch.Tensor, scale=None, fmt=None) -> dict:
    """All metrics as floats with a fixed set of keys (``STATS``; saturation_fraction is NaN unless
    both scale and fmt are given), so telemetry tables keep one schema: the same float64 arithmetic
    as the single metrics (``tensor_sums``), read with one wait for the device."""
    sums = tensor_sums(x, q, scale, fmt)
    return stats_from_sums(dict(zip(sums, torch.stack([t.to(torch.float64) for t in sums.values()]).tolist())))
