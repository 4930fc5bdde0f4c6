"""INT8 training with dynamic block-level fallback (Zhang et al., arXiv 2503.08040), emulated.

What the paper confirms (abstract, one figure caption): block-level INT8 quantization as in Jetfire,
and a mixed-precision GEMM that "dynamically falls back 8-bit to 16-bit for activation blocks
containing outliers". The paper body could not be read here (see
``shared/papers/int8_fallback.md``), so the following are our reconstruction, each marked where it
is a choice the paper may make differently:

Representation. Every operand is quantized per block to symmetric INT8 exactly like the
``int8_block`` recipe (``lowprec.numerics.quantize``, encode scale 127 / block amax, so with no
block falling back this module reproduces Jetfire bit for bit). A fallback block is held in 16 bits
as two INT8 parts (our reading of "16-bit" that keeps the GEMM on INT8 units)::

    x ~= q1 / S1 + q2 / S2        S1 = 127 / amax(x_b),  r = x - q1 / S1,  S2 = 127 / amax(r_b)

|r| <= 1 / (2 S1) with nearest rounding, so S2 >= 254 S1 and the pair resolves about 15 bits
relative to the block amax. A fallback block costs one extra INT8 product in the GEMM.

Rules (which blocks fall back; block amaxes over the operand in its GEMM orientation):
  absmax   amax_b > tau * (median block amax of the tensor)                 [default; tau ours]
  topk     the round(rho * n_blocks) blocks of largest amax, ties by position (a fixed budget)
  error    the block's nearest-INT8 relative L2 error ||x_b - deq(q1_b)|| / ||x_b|| > threshold
  dynamic  amax_b > tau * L, L an EMA over this layer/GEMM/operand's past calls of the
           ``quantile`` of its block amaxes; the level from *before* the call is used (delayed,
           like delayed scaling), so a kernel knows the threshold before reading the tensor and
           quantizes in one pass. The first call uses its own level.
  none     nothing falls back (Jetfire through the same code path, for ablations)
Zero blocks (padding, dead units) are left out of medians and quantiles, so a mostly-zero tensor
does not send every non-zero block to 16 bits.

Coverage (our default, following the abstract's "activation blocks"): X in fprop and in wgrad.
``fallback_gemms`` / ``fallback_operands`` widen it to dY and W for ablations. Gradients (dY) are
stochastically rounded by default, as in Jetfire; a fallback dY block rounds both parts
stochastically with independent draws, which keeps E[q1/S1 + q2/S2] = x.

Defaults that are ours (the paper is silent or unread): tau = 8 (a block whose amax is 8x the
typical one loses 18 dB, 3 bits, of SQNR to its outlier), rho = 0.02, error_threshold = 0.02
(a Gaussian 32x32 block's INT8 error is about 0.0075), ema = 0.9, quantile = 0.5, and the
median-of-non-zero-blocks reference level.

Non-finite values (NaN, +-Inf) are propagated, not routed to the fallback path: a block that holds
one gets a NaN first-part scale (``lowprec.numerics.scaling``'s INT8 rule), so its dequantized
values and every GEMM output row it enters are NaN and a diverging run ends as ``diverged``. Routing
the block to the fallback instead would not keep it visible: the fallback is two INT8 parts, which
hold NaN or Inf no better than one; the plain INT8 recipes have no fallback at all; and the
fallback ratio would then count divergence as outliers. The rules decide on the finite values only
(amaxes and errors leave NaN/Inf out), so a NaN block falls back exactly when its finite values
say so.

Stochastic rounding draws from ``lowprec.numerics.rounding_stream`` with the call's key
(``OperandCall.seed``): the first part's uniforms are those of the key itself, so with nothing
falling back the codes are the ``int8_block`` recipe's, and the residual's come from part 1.

Per-layer state lives in the layer's buffers (``lowprec.methods.int8_fallback_state``): the dynamic
rule's level per GEMM and operand, and the calls, blocks and fallback blocks of every training call
(``fallback_counts()``; telemetry rows carry a slot's totals as ``n_blocks_total`` and
``n_fallback_total``). A compiled step and an eager one update the same tensors. ``state_dict()`` /
``load_state_dict()`` cover every layer's levels and ``state_for_layer()`` / ``load_state_for_layer()``
one layer's share, for ``QLinear`` extra state; a call from something that is not an attached layer
keeps its state here, keyed by the layer's name.

The fast path (``lowprec.methods.int8_fast``) runs ``FallbackInt8Quantizer.quantize`` inside a compiled
graph and multiplies on the Triton INT8 GEMM on CUDA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional

import torch

from ..numerics import block_amax, cast, quantize, scale_from_amax
from ..numerics import rounding_stream as _stream
from ..numerics.checks import block_shape, nonempty, number, one_of
from ..numerics.scaling import apply_blocks, expand_blocks
from .int8_fallback_rules import (DEFAULTS, QMAX, RULES, SECOND_PARTS, _as_2d, _int8_spec,  # noqa: F401
                                  _positive_quantile, block_int8_error, check_rule_params, select_blocks)
from .int8_fallback_state import FallbackBuffers, count_call, set_level
from ..recipes import GEMMS, OPERANDS, SLOTS, Gemm, LazyStats, Method, OperandCall, OperandQuantizer, Recipe

__all__ = [
    "RULES",
    "DEFAULTS",
    "FallbackQTensor",
    "FallbackInt8Quantizer",
    "block_int8_error",
    "select_blocks",
    "fallback_quantize",
    "int8_block_gemm_reference",
    "int8_fallback_recipe",
    "INT8_FALLBACK",
    "METHODS",
    "block_absmax_stats",
    "check_rule_params",
]



# ----------------------------------------------------------------------------------------------
# Representation



def _block_mask(values2d: torch.Tensor, mask: torch.Tensor, block) -> torch.Tensor:
    return apply_blocks(values2d, mask, block, lambda v, m: torch.where(m, v, torch.zeros_like(v)))


@dataclass
class FallbackQTensor:
    """A 2-D operand in block INT8 with fallback blocks in two INT8 parts.

    codes / residual: fp32 tensors holding integers in [-127, 127] (x's 2-D shape); residual is 0
    outside fallback blocks. scale / residual_scale: ENCODE scales per block (the
    ``lowprec.numerics`` convention, x ~= codes / scale), grid (ceil(rows/R), ceil(cols/C));
    residual_scale is 1 outside fallback blocks. mask: bool grid, True where the block fell back."""

    codes: torch.Tensor
    scale: torch.Tensor
    residual: torch.Tensor
    residual_scale: torch.Tensor
    mask: torch.Tensor
    block: tuple
    # False when it is known without looking that no block fell back (no mask was given)
    maybe_fallback: bool = True
    # the row-major transposes of codes / residual where the quantize kernel wrote them (for a
    # backward GEMM that takes the operand transposed); None: transpose on use
    codes_t: Optional[torch.Tensor] = None
    residual_t: Optional[torch.Tensor] = None

    def first_part(self) -> torch.Tensor:
        """q1 / S1: what plain block INT8 (Jetfire) would multiply."""
        return apply_blocks(self.codes, self.scale, self.block, torch.div)

    def dequantize(self) -> torch.Tensor:
        first = self.first_part()
        if not self.maybe_fallback or _none_set(self.mask):
            return first
        return first + apply_blocks(self.residual, self.residual_scale, self.block, torch.div)

    @property
    def fallback_ratio(self) -> torch.Tensor:
        return self.mask.float().mean() if self.mask.numel() else torch.zeros(())

    def gemm_operands(self):
        """(q1 int8, d1, q2 int8, d2, flags int8) for the integer GEMM: DECODE scales (x ~= q * d),
        d2 = 0 outside fallback blocks."""
        d2 = torch.where(self.mask, torch.div(torch.ones_like(self.residual_scale), self.residual_scale),
                         torch.zeros_like(self.residual_scale))
        return (*self.first_operands(), self.residual.to(torch.int8), d2, self.mask.to(torch.int8))

    def first_operands(self):
        """(q1 int8, d1): the first part as the integer GEMM takes it."""
        return self.codes.to(torch.int8), torch.div(torch.ones_like(self.scale), self.scale)


def _none_set(mask: torch.Tensor) -> bool:
    """True when no block falls back, asked only where the answer is free: on CUDA it would wait
    for the device, and under torch.compile break the graph; the all-zero residual is cheap to
    carry along instead (the same values either way)."""
    return not mask.is_cuda and not torch.compiler.is_compiling() and not bool(mask.any())



def fallback_quantize(x: torch.Tensor, block=(32, 32), mask: Optional[torch.Tensor] = None,
                      rounding: str = "nearest", generator: Optional[torch.Generator] = None,
                      noise: Optional[tuple] = None) -> FallbackQTensor:
    """Block INT8 of the 2-D view of x, with the blocks of ``mask`` (bool grid) in two parts.

    Stochastic rounding draws the first part's uniforms, then the residual's, from ``generator``
    (or takes them as ``noise=(u1, u2)``, each x's 2-D shape), so the first part equals what
    ``quantize(x, int8 block spec, generator)`` gives for the same generator state. A block
    holding NaN/Inf has a NaN scale (the module docstring), a zero residual and residual scale 1."""
    x2d = _as_2d(nonempty(x)).to(torch.float32)
    block = tuple(block)
    u1 = u2 = None
    if noise is not None:
        u1, u2 = noise
    q = quantize(x2d, _int8_spec(block, rounding), generator=generator if u1 is None else None, noise=u1)
    grid = q.scale.shape
    given = mask is not None
    if not given:
        mask = torch.zeros(grid, dtype=torch.bool, device=x2d.device)
    if tuple(mask.shape) != tuple(grid):
        raise ValueError(f"mask grid {tuple(mask.shape)} != block grid {tuple(grid)}")
    codes = q.codes.reshape(x2d.shape)
    if not given or _none_set(mask):
        return FallbackQTensor(codes, q.scale, torch.zeros_like(codes), torch.ones_like(q.scale),
                               mask.to(torch.bool), block, maybe_fallback=given)
    if rounding == "stochastic" and u2 is None:
        u2 = torch.rand(x2d.shape, generator=generator, dtype=torch.float32, device=x2d.device)
    r = x2d - apply_blocks(codes, q.scale, block, torch.div)
    amax_r = torch.where(mask, block_amax(r, block), torch.zeros_like(q.scale))
    s2 = scale_from_amax(amax_r, QMAX)  # 1 where amax_r is 0: outside the mask, or an exact block
    q2 = cast(apply_blocks(r, s2, block, torch.mul), "int8", rounding, noise=u2)
    q2 = _block_mask(q2, mask, block)
    return FallbackQTensor(codes, q.scale, q2, s2, mask.to(torch.bool), block)


# ----------------------------------------------------------------------------------------------
# Exact integer GEMM (the kernel's reference)


def _rows(grid: torch.Tensor, rows_per: int, n: int) -> torch.Tensor:
    return grid.repeat_interleave(rows_per, dim=0)[:n]


def int8_block_gemm_reference(qa, da, qb, db, block_a, block_b, ra=None, dra=None, fa=None,
                              rb=None, drb=None, fb=None, order: str = "k") -> torch.Tensor:
    """``A @ B.T`` in fp32 from block-scaled INT8 operands, the way the kernel computes it.

    qa (M, K), qb (N, K): integer codes (any integer or integer-valued dtype). da, db: DECODE scales
    per block, grids (ceil(M/BM), ceil(K/BK)) and (ceil(N/BN), ceil(K/BK)); block_a = (BM, BK),
    block_b = (BN, BK) with the same BK (the K-group). ra/dra/fa, rb/drb/fb: optional second INT8
    parts of A / B with their decode scales and per-block flags (residuals count only where the
    flag is set).

    Per K-group k, int32 partial products (computed in int64, checked to fit int32) are converted
    to fp32 and scaled by the fp32 outer product of the two scale vectors, then added to an fp32
    accumulator. ``order`` "k": per K-group q1a.q1b, q2a.q1b, q1a.q2b, q2a.q2b (the kernel's
    second parts in its main loop); "tail": q1a.q1b over all K-groups, then q2a.q1b over all,
    then per K-group q1a.q2b, q2a.q2b (its second parts after the main loop). The Triton kernel
    does the same fp32 operations in the same order, so the results are equal bit for bit (terms
    it skips for tiles without a flag are exact zeros here)."""
    nonempty(qa, "qa")
    nonempty(qb, "qb")
    M, K = qa.shape
    N = qb.shape[0]
    bm, bk = block_shape(block_a, "block_a")
    bn, bk_b = block_shape(block_b, "block_b")
    if bk != bk_b:
        raise ValueError(f"A and B must share the K-group: {block_a} vs {block_b}")
    if qb.shape[1] != K:
        raise ValueError(f"K differs: {tuple(qa.shape)} vs {tuple(qb.shape)}")
    nkb = -(-K // bk)

    def prep(q, d, r, dr, f, rows_per, n):
        d = _rows(d.to(torch.float32), rows_per, n)
        parts = [(q.to(torch.int64), d)]
        if r is not None:
            flags = _rows(f.to(torch.bool), rows_per, n)
            parts.append((r.to(torch.int64), torch.where(flags, _rows(dr.to(torch.float32), rows_per, n),
                                                         torch.zeros_like(d))))
        return parts

    one_of("order", order, ("k", "tail"))
    pa = prep(qa, da, ra, dra, fa, bm, M)
    pb = prep(qb, db, rb, drb, fb, bn, N)
    # (K-group, a part, b part) in the kernel's order of terms
    pairs = [(ia, ib) for ib in range(len(pb)) for ia in range(len(pa))]
    if order == "k":
        terms = [(kb, ia, ib) for kb in range(nkb) for ia, ib in pairs]
    else:
        terms = ([(kb, 0, 0) for kb in range(nkb)] + [(kb, 1, 0) for kb in range(nkb) if len(pa) > 1]
                 + [(kb, ia, 1) for kb in range(nkb) if len(pb) > 1 for ia in range(len(pa))])
    y = torch.zeros(M, N, dtype=torch.float32, device=qa.device)
    lim = 2**31 - 1
    for kb, ia, ib in terms:
        k0, k1 = kb * bk, min((kb + 1) * bk, K)
        (a, sa), (b, sb) = pa[ia], pb[ib]
        if a.is_cuda:
            # CUDA has no int64 matmul; float64 is exact here (integer terms, |sums| < 2^53)
            p = (a[:, k0:k1].double() @ b[:, k0:k1].double().t()).to(torch.int64)
        else:
            p = a[:, k0:k1] @ b[:, k0:k1].t()
        if p.numel() and int(p.abs().max()) > lim:
            raise OverflowError("int32 partial product overflows: K-group too large")
        scale = sa[:, kb][:, None] * sb[:, kb][None, :]
        y = y + p.to(torch.int32).to(torch.float32) * scale
    return y


# ----------------------------------------------------------------------------------------------
# The operand quantizer


_check_block = block_shape


class _Named:
    """A layer known by its name only (state loaded before, or without, a QLinear)."""

    def __init__(self, name: str):
        self.name = name


class FallbackInt8Quantizer(OperandQuantizer):
    """Block INT8 for every operand; blocks of the configured (GEMM, operand) slots that the rule
    flags fall back to two INT8 parts. One instance can serve all six operand slots of a recipe:
    the call says which slot it is."""

    name = "int8_fallback"

    def __init__(self, block=DEFAULTS["block"], rule: str = DEFAULTS["rule"], tau: float = DEFAULTS["tau"],
                 rho: float = DEFAULTS["rho"], error_threshold: float = DEFAULTS["error_threshold"],
                 ema: float = DEFAULTS["ema"], quantile: float = DEFAULTS["quantile"],
                 fallback_gemms: Iterable[str] = DEFAULTS["fallback_gemms"],
                 fallback_operands: Iterable[str] = DEFAULTS["fallback_operands"],
                 stochastic_gradients: bool = DEFAULTS["stochastic_gradients"], gemm: str = DEFAULTS["gemm"],
                 second_parts: str = DEFAULTS["second_parts"]):
        self.block = _check_block(block)
        p = check_rule_params(rule, tau=tau, rho=rho, error_threshold=error_threshold, ema=ema, quantile=quantile)
        self.rule = rule
        self.tau, self.rho, self.error_threshold = p["tau"], p["rho"], p["error_threshold"]
        self.ema, self.quantile = p["ema"], p["quantile"]
        self.fallback_gemms = tuple(fallback_gemms)
        self.fallback_operands = tuple(fallback_operands)
        bad_g = set(self.fallback_gemms) - set(GEMMS)
        bad_o = set(self.fallback_operands) - {"x", "w", "dy"}
        if bad_g or bad_o:
            raise ValueError(f"fallback_gemms must be within {GEMMS} and fallback_operands within "
                             f"('x', 'w', 'dy'); got unknown {sorted(bad_g | bad_o)}")
        if not isinstance(stochastic_gradients, bool):
            raise ValueError(f"stochastic_gradients: must be a bool, got {stochastic_gradients!r}")
        self.stochastic_gradients = stochastic_gradients
        if gemm not in ("emulated", "kernel"):
            raise ValueError(f"gemm: must be 'emulated' or 'kernel', got {gemm!r}")
        self.gemm = gemm
        if second_parts not in SECOND_PARTS:
            raise ValueError(f"second_parts: must be one of {SECOND_PARTS}, got {second_parts!r}")
        self.second_parts = second_parts
        # layer name -> the layer holding this quantizer's per-layer state (FallbackBuffers): a
        # QLinear (attach_layer), or for a call from anything else a FallbackBuffers kept here
        self._layers: dict = {}

    # -- which slots do what
    def falls_back(self, gemm: str, operand: str) -> bool:
        return self.rule != "none" and gemm in self.fallback_gemms and operand in self.fallback_operands

    def rounding(self, operand: str) -> str:
        return "stochastic" if (self.stochastic_gradients and operand == "dy") else "nearest"

    # -- per-layer state: the dynamic rule's level and the fallback counts, in the layer's buffers
    def attach_layer(self, layer) -> None:
        FallbackBuffers.register(layer)
        self._layers[str(layer.name)] = layer

    def _holder(self, layer, device):
        """What holds ``layer``'s state: the layer (``FallbackBuffers.register`` equipped it), else
        a FallbackBuffers kept here under its name."""
        if FallbackBuffers.passes(layer):
            return layer
        name = str(getattr(layer, "name", ""))
        if name not in self._layers:
            self._layers[name] = FallbackBuffers.new(device)
        return self._layers[name]

    def _buffers(self, layer, device, gemm: str) -> FallbackBuffers:
        """The buffers that GEMM ``gemm``'s slots of ``layer`` update."""
        return FallbackBuffers.of(self._holder(layer, device), gemm)

    def _dynamic_threshold(self, amax: torch.Tensor, bufs: FallbackBuffers, slot: int,
                           training: bool) -> torch.Tensor:
        # all tensor arithmetic, no host sync; an all-zero call has no level (Inf) and must not
        # enter the EMA; a slot without a level yet (+inf) takes the call's own
        level_now = _positive_quantile(amax, self.quantile)
        prev = bufs.levels[slot]
        prev_ok = torch.isfinite(prev)
        level = torch.where(prev_ok, prev, level_now)
        if training:
            blended = self.ema * level + (1.0 - self.ema) * level_now
            new = torch.where(prev_ok, torch.where(torch.isfinite(level_now), blended, level), level_now)
            set_level(bufs.levels, bufs.steps, slot, new.detach().to(torch.float32))
        return self.tau * level

    def state_dict(self) -> dict:
        """Every known layer's levels, keyed "layer:gemm.operand" (slots the rule has moved)."""
        return {f"{n}:{k}": v for n in self._layers for k, v in self.state_for_layer(n).items()}

    def load_state_dict(self, state: dict) -> None:
        for n in self._layers:
            self.load_state_for_layer(n, {})
        by_layer: dict = {}
        for k, v in (state or {}).items():
            name, _, slot = k.rpartition(":")
            by_layer.setdefault(name, {})[slot] = v
        for name, layer_state in by_layer.items():
            self.load_state_for_layer(name, layer_state)

    def state_for_layer(self, name: str) -> dict:
        """This layer's share of the state, keyed "gemm.operand" (for QLinear.get_extra_state)."""
        layer = self._layers.get(name)
        if layer is None:
            return {}
        return {f"{r['gemm']}.{r['operand']}": {"level": r["level"].clone(), "steps": r["steps"]}
                for r in FallbackBuffers.merged(layer).slot_rows() if r["steps"]}

    def load_state_for_layer(self, name: str, state: dict) -> None:
        holder = self._holder(self._layers.get(name, _Named(name)), None)
        for bufs in FallbackBuffers.passes(holder):
            bufs.reset_level()
        for key, v in (state or {}).items():
            g, _, o = key.partition(".")
            i = SLOTS.index((g, o))
            bufs = FallbackBuffers.of(holder, g)
            bufs.levels[i] = torch.as_tensor(v["level"], dtype=torch.float32)
            bufs.steps[i] = int(v["steps"])

    def fallback_counts(self) -> list[dict]:
        """Training calls, blocks and fallback blocks per layer, GEMM and operand since the layers
        were built (or ``reset_counts``): every call, where telemetry samples some; read from the
        device, so ask on telemetry steps or at the end."""
        return [{"layer": n, "gemm": r["gemm"], "operand": r["operand"], "calls": r["calls"], "blocks": r["blocks"],
                 "fallback_blocks": r["fallback_blocks"]}
                for n, layer in sorted(self._layers.items()) for r in FallbackBuffers.merged(layer).slot_rows()
                if r["calls"]]

    def reset_counts(self) -> None:
        for layer in self._layers.values():
            for bufs in FallbackBuffers.passes(layer):
                bufs.counts.zero_()

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["block"] = list(self.block)
        d["fallback_gemms"] = list(self.fallback_gemms)
        d["fallback_operands"] = list(self.fallback_operands)
        return d

    # -- quantization
    def quantize(self, t: torch.Tensor, call: OperandCall, transposed: bool = False):
        """(FallbackQTensor of t's 2-D view, fallback threshold): what ``quantize_operand`` gives,
        without telemetry numbers, in ops that ``torch.compile`` traces whole (the fast path,
        ``lowprec.methods.int8_fast``). Training calls update the slot's level and counts.
        ``transposed``: the codes' transposes too, where the quantize kernel writes them."""
        from . import int8_ops  # its operators' references are this module's functions
        t2d = _as_2d(t)
        kernels = int8_ops.quantizes_on_kernels(t2d.device)
        if not kernels:  # the kernel reads bf16 itself; a copy in fp32 would be one more pass
            t2d = t2d.to(torch.float32)
        rounding = self.rounding(call.operand)
        active = self.falls_back(call.gemm, call.operand)
        slot = SLOTS.index((call.gemm, call.operand))
        bufs = self._buffers(call.layer, t2d.device, call.gemm)
        mask, thr = None, math.nan
        if active:
            amax = block_amax(t2d, self.block)
            if self.rule == "dynamic":
                thr = self._dynamic_threshold(amax, bufs, slot, call.training)
                mask, thr = select_blocks(t2d, self.block, "dynamic", threshold=thr, amax=amax)
            else:
                mask, thr = select_blocks(t2d, self.block, self.rule, tau=self.tau, rho=self.rho,
                                          error_threshold=self.error_threshold, amax=amax)
        if kernels:
            keys = int8_ops.stream_keys(call.seed, t2d.device) if rounding == "stochastic" else None
            fq = int8_ops.quantize_operand(t2d, self.block, mask, keys, transposed)
        else:
            # the two parts draw independent uniforms (fallback_quantize's docstring)
            noise = None
            if rounding == "stochastic":
                noise = tuple(_stream.uniforms(_stream.part_key(call.seed, p), t2d.shape, device=t2d.device)
                              if p == 0 or active else None for p in range(2))
            fq = fallback_quantize(t2d, self.block, mask, rounding, noise=noise)
        self.count(fq, call)
        return fq, thr

    def count(self, fq: FallbackQTensor, call: OperandCall) -> None:
        """Counts one call of ``call``'s slot with ``fq``'s blocks (training calls only), as
        ``quantize`` does; the fast path calls it for an operand it took, transposed, from another
        slot instead of quantizing it (``lowprec.gemm.FastPlan.reused``)."""
        if call.training:
            bufs = self._buffers(call.layer, fq.mask.device, call.gemm)
            count_call(bufs.counts, SLOTS.index((call.gemm, call.operand)), fq.mask)

    def quantize_operand(self, t: torch.Tensor, call: OperandCall):
        """(FallbackQTensor of t's 2-D view, stats): ``quantize`` with the telemetry numbers of the
        call, and the slot's counts over every training call so far (``fallback_counts``), read
        only when telemetry records them. The GPU path feeds the result to
        ``lowprec.kernels.int8_fallback_gemm.gemm_fallback_qtensors``."""
        fq, thr = self.quantize(t, call)
        counts = self._buffers(call.layer, fq.codes.device, call.gemm).counts[SLOTS.index((call.gemm, call.operand))]
        active = self.falls_back(call.gemm, call.operand)
        stats = LazyStats(format="int8", rule=self.rule if active else "none",
                          fallback_ratio=lambda: fq.fallback_ratio, n_blocks=int(fq.mask.numel()),
                          n_fallback=lambda: fq.mask.sum(), fallback_threshold=thr,
                          n_blocks_total=lambda: counts[1], n_fallback_total=lambda: counts[2])
        return fq, stats

    def __call__(self, t: torch.Tensor, call: OperandCall):
        fq, stats = self.quantize_operand(t, call)
        return fq.dequantize().reshape(t.shape), stats

    def fused_gemm(self, other, a, b, call_a, call_b):
        """The Triton block-scaled INT8 GEMM (``lowprec.kernels.int8_fallback_gemm``) on CUDA: the
        same codes and scales as the emulation, an extra INT8 product for fallback blocks only."""
        if self.gemm != "kernel" or other is not self or not a.is_cuda:
            return None
        from ..kernels import int8_fallback_gemm as kf
        if not kf.triton_available(a.device):
            return None
        fqa, _ = self.quantize_operand(a, call_a)
        fqb, _ = self.quantize_operand(b, call_b)
        return kf.gemm_fallback_qtensors(fqa, fqb)


# ----------------------------------------------------------------------------------------------
# Recipe


def _build(own: dict) -> Recipe:
    c = {**DEFAULTS, **own}
    for key in ("fallback_gemms", "fallback_operands"):
        if isinstance(c[key], str):
            raise ValueError(f"{key}: must be a list, got the string {c[key]!r}")
    try:
        block = _check_block(tuple(c["block"]) if isinstance(c["block"], list) else c["block"])
        quant = FallbackInt8Quantizer(block=block, rule=c["rule"], tau=c["tau"], rho=c["rho"],
                                      error_threshold=c["error_threshold"], ema=c["ema"],
                                      quantile=c["quantile"], fallback_gemms=c["fallback_gemms"],
                                      fallback_operands=c["fallback_operands"],
                                      stochastic_gradients=c["stochastic_gradients"], gemm=c["gemm"],
                                      second_parts=c["second_parts"])
    except ValueError as e:
        raise ValueError(f"method (int8_fallback): {e}") from e
    slots = ", ".join(f"{g}.{o}" for g in GEMMS for o in OPERANDS[g] if quant.falls_back(g, o)) or "none"
    if quant.rule == "absmax":
        what = f"absmax > {quant.tau:g} x median block amax"
    elif quant.rule == "topk":
        what = f"top {quant.rho:g} of blocks by amax"
    elif quant.rule == "error":
        what = f"INT8 relative error > {quant.error_threshold:g}"
    elif quant.rule == "dynamic":
        what = f"absmax > {quant.tau:g} x EMA({quant.ema:g}) of the q{quant.quantile:g} block amax"
    else:
        what = "no fallback"
    desc = (f"INT8 per {block[0]}x{block[1]} block; fallback blocks as two INT8 parts ({what}) in {slots}; "
            f"gradients {'stochastically rounded' if quant.stochastic_gradients else 'rounded to nearest'}")
    return Recipe("int8_fallback", Gemm(quant, quant), Gemm(quant, quant), Gemm(quant, quant), description=desc)


INT8_FALLBACK = Method("int8_fallback", DEFAULTS, _build)
METHODS = (INT8_FALLBACK,)


def int8_fallback_recipe(method_cfg: Optional[dict] = None) -> Recipe:
    """The recipe from a method config (its own keys: DEFAULTS); all six operands INT8 in blocks,
    fallback only in the configured slots."""
    return INT8_FALLBACK.recipe_for(method_cfg)


# ----------------------------------------------------------------------------------------------
# Outlier analysis (for the figures)


def block_absmax_stats(x: torch.Tensor, block=(32, 32), taus=(4.0, 8.0, 16.0)) -> dict:
    """Outlier structure of a layer input (its 2-D view: tokens x channels).

    Returns floats: n_blocks, median_block_amax, max_over_median, p90/p99/p999 of the block amax
    over the median, kurtosis (Pearson, of the elements: 3 for a Gaussian), and for each tau the
    share of blocks above tau x median (``share_above_<tau>``) and how those hot blocks are laid
    out: ``rowwise_<tau>`` (share of hot blocks in a block-row that is at least half hot:
    token-wise outliers), ``colwise_<tau>`` (same for block-columns: channel-wise), ``isolated_<tau>``
    (the rest); plus ``ratios``, the sorted block amax / median as a CPU tensor, for histograms.
    The median is over non-zero blocks, as in the fallback rules."""
    block = _check_block(tuple(block))
    taus = [number("taus", t, low=0.0, low_open=True) for t in taus]
    x2d = _as_2d(nonempty(x).detach()).to(torch.float32)
    amax = block_amax(x2d, block)
    med = float(_positive_quantile(amax, 0.5))
    ratios = (amax / med) if math.isfinite(med) and med > 0 else torch.zeros_like(amax)
    flat = torch.sort(ratios.flatten().double().cpu()).values
    x64 = x2d.double()
    x64 = x64[torch.isfinite(x64)]
    var = float(x64.var(unbiased=False)) if x64.numel() else 0.0
    kurt = float(((x64 - x64.mean()) ** 4).mean() / var**2) if var > 0 else math.nan

    def q(p):
        return float(torch.quantile(flat, p)) if flat.numel() else math.nan

    out = {"n_blocks": int(amax.numel()), "median_block_amax": med,
           "max_over_median": float(flat[-1]) if flat.numel() else math.nan,
           "p90_over_median": q(0.90), "p99_over_median": q(0.99), "p999_over_median": q(0.999),
           "kurtosis": kurt}
    for tau in taus:
        hot = (ratios > tau).cpu()
        n_hot = int(hot.sum())
        tag = f"{tau:g}"
        out[f"share_above_{tag}"] = n_hot / max(hot.numel(), 1)
        hot_rows = hot.float().mean(dim=1) >= 0.5
        hot_cols = hot.float().mean(dim=0) >= 0.5
        in_row = hot & hot_rows[:, None]
        in_col = hot & hot_cols[None, :] & ~in_row
        den = max(n_hot, 1)
        out[f"rowwise_{tag}"] = int(in_row.sum()) / den
        out[f"colwise_{tag}"] = int(in_col.sum()) / den
        out[f"isolated_{tag}"] = (n_hot - int(in_row.sum()) - int(in_col.sum())) / den if n_hot else 0.0
    out["ratios"] = flat.float()
    return out


def expand_mask(mask: torch.Tensor, shape2d, block) -> torch.Tensor:
    """The block mask broadcast to elements (for plots and tests)."""
    return expand_blocks(mask, shape2d, block)
