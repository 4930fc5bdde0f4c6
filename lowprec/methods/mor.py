"""MoR, Mixture of Representations (Su, Dykas, Chrzanowski, Chhugani; arXiv 2512.22804).

Each GEMM operand is quantized to FP8 E4M3 under some partition of scales, its *relative error*
(mean over non-zero elements of |q(x) - x| / |x|) is measured, and the operand is kept in E4M3 only
if that error is at most a threshold (4.5 %); otherwise it stays BF16 for this GEMM. Everything is
decided afresh on every call: no history. Reconstructed from the brief
``/work/shared/papers/mor.md`` (sections 2.3-2.8, from the first author's public reference code);
this module is our own implementation.

Tensor level (``MoRQuantizer``), partitions of the scale grid over the reduction-last 2-D view:

    tensor    one scale, 448 / amax ("current scaling")
    block     (R, C) tiles, default (128, 128); scale rule gam (default) | e8 | fp32
    channel   one scale per row (per token for X in fprop, per output channel for W), GAM over
              the tensor by default

Scale rules (``scale``): ``gam`` = tensor scale's mantissa with a per-block power-of-two exponent
(``lowprec.numerics.gam_block_scales``, exact closed form); ``e8`` = power-of-two scales (the
authors' "E8", RZ, never saturates); ``fp32`` = plain 448 / amax_block. Every rule maps a block's
amax to at most 448, so nothing saturates and an underflow is the only way to lose a value.

Sub-tensor level (``SubTensorMoRQuantizer``), per (128, 128) block with dynamic range
DR = amax / (smallest non-zero |x|) (1 for an all-zero block), the brief's section 2.8 rule:

    DR <= 4 * 448 * 2^6 = 114 688   -> E4M3   (E4M3's normal range plus two binades of subnormals)
    DR <= 57344 * 2^14              -> E4M3 if its block error <= E5M2's, else
                                       E5M2 (three_way) or BF16 (two_way)
    larger                          -> BF16

A block that holds a NaN or +-Inf has DR = Inf and so goes to BF16, which keeps the value as it is
(E4M3 would saturate an Inf to 448 / scale), as tensor-level MoR does with such a tensor (its
relative error is NaN, which no threshold accepts).

A block-mixed operand cannot feed one FP8 GEMM: the returned values are the per-block dequantized
values (emulation) and the stats say the GEMM runs in BF16 unless every block is E4M3.

GEMMs: on CUDA, a GEMM whose two operands are tensor-level MoR runs on hardware through
``MoRQuantizer.fused_gemm`` (``lowprec.kernels.mor_gemm``): the same codes and decisions as the
emulation, the decision read by the kernel on the device, FP8 tensor cores when both operands chose
E4M3 and BF16 ones otherwise. Sub-tensor MoR's GEMMs multiply the values (fp32 GEMMs) in the
emulation, and each block's codes on the block-scaled Triton GEMM on the fast path
(``lowprec.methods.mor_subtensor_fast``).

``mor_recipe(method_cfg)`` builds a ``Recipe`` whose selected operand slots use one MoR quantizer
and whose other slots stay BF16. On telemetry steps both quantizers also report the operand's E4M3
error under every partition (``telemetry_stats``), the numbers of the paper's heat maps.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F

from ..config import env_switch
from ..numerics import QuantSpec, cast, get_format
from ..numerics.checks import block_shape, nonempty
from ..numerics.scaling import (
    QTensor,
    _block_amax,
    _resolve_block,
    apply_blocks,
    as_2d as _as_2d,
    expand_blocks,
    gam_block_scales,
    quantize,
    scale_from_amax,
)
from .mor_rules import DEFAULT_THRESHOLD, check_threshold, decide
from ..recipes import (GEMMS, OPERANDS, SLOTS, Choice, Gemm, LazyStats, Method, OperandCall, OperandQuantizer,
                       Recipe)
from .layer_buffers import add_rows, merged_slots, pass_buffer, pass_buffers, register_pass_buffers

__all__ = [
    "E4M3_MAX", "E5M2_MAX", "E4M3_DYNAMIC_RANGE", "E5M2_DYNAMIC_RANGE", "SUBTENSOR_E4M3_RANGE",
    "DEFAULT_THRESHOLD", "DEFAULT_BLOCK", "PARTITIONS", "SCALE_RULES", "SUBTENSOR_MODES",
    "ALL_OPERAND_SLOTS", "MOR_KEYS", "MOR", "METHODS",
    "e4m3_spec", "quantize_e4m3", "mor_relative_error", "decide", "mor_tensor", "MoRResult",
    "subtensor_mor", "SubTensorResult", "subtensor_parts", "subtensor_error_blocks", "SubTensorParts",
    "relative_error_by_partition",
    "MoRQuantizer", "SubTensorMoRQuantizer", "mor_recipe", "recipe_coverage",
]

E4M3_MAX = get_format("e4m3").fmax          # 448
E5M2_MAX = get_format("e5m2").fmax          # 57344
# max normal / min normal: the range a format holds at full precision
E4M3_DYNAMIC_RANGE = E4M3_MAX / get_format("e4m3").min_normal    # 28672
E5M2_DYNAMIC_RANGE = E5M2_MAX / get_format("e5m2").min_normal    # 939524096
# The authors' CUDA budget for "E4M3 without looking": two more binades, into the subnormals, whose
# coarser steps cost little while only a few elements live there (brief 2.8; their Python
# reference's 28762 is a typo for 28672).
SUBTENSOR_E4M3_RANGE = 4 * E4M3_DYNAMIC_RANGE                  # 114688

DEFAULT_BLOCK = (128, 128)
PARTITIONS = ("tensor", "block", "channel")
SCALE_RULES = ("gam", "e8", "fp32")
SUBTENSOR_MODES = ("three_way", "two_way")
DEQUANT = ("fp32", "bf16")

# Block choice codes in SubTensorResult.choice
E4M3, E5M2, BF16 = 0, 1, 2
_CHOICE_NAMES = ("e4m3", "e5m2", "bf16")


_check_block = block_shape


def _choose(name: str, value, options) -> str:
    if value not in options:
        raise ValueError(f"{name}: must be one of {options}, got {value!r}")
    return value


# ----------------------------------------------------------------------------------------------
# Tensor level


def e4m3_spec(partition: str = "block", block=DEFAULT_BLOCK, scale: str = "gam", cols: int = 1) -> QuantSpec:
    """The E4M3 QuantSpec that a partition and scale rule stand for on a 2-D view with ``cols``
    columns (channel+GAM is a GAM grid of (1, cols) blocks)."""
    _choose("partition", partition, PARTITIONS)
    _choose("scale", scale, SCALE_RULES)
    pow2 = scale == "e8"
    if partition == "tensor":
        # With one block GAM is current scaling exactly, so gam and fp32 coincide here.
        return QuantSpec("e4m3", "tensor", pow2=pow2)
    if partition == "block":
        block = _check_block(block)
        if scale == "gam":
            return QuantSpec("e4m3", "gam", block=block)
        return QuantSpec("e4m3", "block", block=block, pow2=pow2)
    if scale == "gam":
        return QuantSpec("e4m3", "gam", block=(1, max(int(cols), 1)))
    return QuantSpec("e4m3", "channel", axis=-1, pow2=pow2)


def quantize_e4m3(x: torch.Tensor, partition: str = "block", block=DEFAULT_BLOCK, scale: str = "gam") -> QTensor:
    """E4M3 codes and scales of x's 2-D view (rows = leading dims) under a MoR partition."""
    x2d = _as_2d(nonempty(x)).to(torch.float32)
    return quantize(x2d, e4m3_spec(partition, block, scale, cols=x2d.shape[1]))


def _ratio_terms(x: torch.Tensor, q: torch.Tensor):
    """|q - x| / |x| in fp32 (0 where x == 0) and the non-zero mask; NaN in x stays NaN."""
    nz = x != 0
    # |(q - x) / x| equals |q - x| / |x| bit for bit (IEEE division is correctly rounded and
    # symmetric in sign); in place it makes one temporary instead of four, the emulation's hot spot.
    terms = (q - x).div_(x).abs_()
    return terms.masked_fill_(~nz, 0.0), nz


def mor_relative_error(x: torch.Tensor, q: torch.Tensor) -> float:
    """MoR's statistic: sum over non-zero x of |q - x| / |x|, divided by their count (a flushed value
    contributes 1.0; 0.0 if x has no non-zero element). Terms in fp32 as the authors' kernels form
    them, summed in fp64 so that the decision does not depend on the summation order. A NaN or Inf
    in x makes the result NaN, which ``decide`` sends to BF16."""
    return float(_relative_error(x, q))


def _relative_error(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``mor_relative_error`` as a 0-d fp64 tensor on x's device (no wait for the device)."""
    terms, nz = _ratio_terms(x.to(torch.float32), q.to(torch.float32))
    return mean_over_nonzero(terms.sum(dtype=torch.float64), nz.sum())


def mean_over_nonzero(total: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """The statistic from its sum over the ``n`` non-zero elements: ``total / n``, 0 when ``n`` is 0."""
    return torch.where(n > 0, total / n.clamp_min(1), torch.zeros_like(total))


# On CUDA, the E4M3 codes, scales and relative error come from lowprec.kernels.mor_quant (two passes
# that never write the dequantized tensor): codes and scales bit for bit those of quantize_e4m3, the
# error equal up to fp32 summation order (relative 1e-6), so only an error within that distance of
# the threshold could decide differently. Off with LOWPREC_MOR_KERNEL=0.
USE_KERNEL = env_switch("LOWPREC_MOR_KERNEL")


def _e4m3_with_error(x2d: torch.Tensor, partition: str, block, scale: str) -> tuple:
    """(QTensor of the E4M3 quantization, MoR relative error as a 0-d tensor) of a 2-D fp32 tensor."""
    # under torch.compile the torch ops below, which the compiler fuses (Dynamo cannot trace the
    # kernel's launcher: 45 graph breaks in a compiled model with 64x64 blocks on the H200)
    if x2d.is_cuda and USE_KERNEL and not torch.compiler.is_compiling():
        from ..kernels import mor_quant as km  # Triton: loaded on first use
        if km.triton_available(x2d.device):
            codes, scales, rel = km.mor_quantize_e4m3(x2d, partition, block, scale)
            spec = e4m3_spec(partition, block, scale, cols=x2d.shape[1])
            qt = QTensor(codes.float(), scales, spec, tuple(_resolve_block(spec, x2d.shape)), torch.float32)
            return qt, rel
    qt = quantize_e4m3(x2d, partition, block, scale)
    return qt, _relative_error(x2d, qt.dequantize())


def _choose_e4m3(err: torch.Tensor, threshold: float) -> torch.Tensor:
    """``decide`` on the device: a 0-d bool, True for E4M3. In fp64, so that an fp32 error is
    compared with the threshold as given, not with its fp32 rounding."""
    return err.to(torch.float64) <= threshold


class MoRResult(NamedTuple):
    values: torch.Tensor      # fp32, x's 2-D view: what the GEMM multiplies
    format: str               # "e4m3" | "bf16"
    rel_error: float          # E4M3 relative error that decided it
    qtensor: QTensor          # the E4M3 quantization (codes, scales), also when BF16 was chosen


def _bf16(x2d: torch.Tensor) -> torch.Tensor:
    return x2d.to(torch.bfloat16).to(torch.float32)


def mor_tensor(x: torch.Tensor, partition: str = "block", block=DEFAULT_BLOCK, scale: str = "gam",
               threshold: float = DEFAULT_THRESHOLD, dequant: str = "fp32") -> MoRResult:
    """Tensor-level MoR on x's 2-D view. dequant="bf16" rounds the E4M3 values to BF16 as the
    authors' fake quantization does (their GEMMs are BF16); the default keeps the exact fp32
    dequantized values, which is what an FP8 GEMM multiplies. threshold: a finite number >= 0."""
    values, e4, err, qt = _mor_on_device(x, partition, block, scale, check_threshold(threshold), dequant)
    return MoRResult(values, "e4m3" if bool(e4) else "bf16", float(err), qt)


def _mor_on_device(x: torch.Tensor, partition: str, block, scale: str, threshold: float, dequant: str):
    """``mor_tensor`` with the decision left on the device: (values, E4M3 chosen as a 0-d bool,
    error as a 0-d tensor, QTensor). Both candidates are formed and one is selected, so training
    never waits for the device to learn which format won. threshold: already checked."""
    _choose("dequant", dequant, DEQUANT)
    x2d = _as_2d(nonempty(x)).to(torch.float32)
    qt, err = _e4m3_with_error(x2d, partition, block, scale)
    deq = qt.dequantize()
    e4 = _choose_e4m3(err, threshold)
    values = torch.where(e4, _bf16(deq) if dequant == "bf16" else deq, _bf16(x2d))
    return values, e4, err, qt


def relative_error_by_partition(x: torch.Tensor, block=DEFAULT_BLOCK, scale: str = "gam",
                                partitions=PARTITIONS) -> dict:
    """{partition: E4M3 relative error} for one tensor (heat maps of error per tensor per step). On
    CUDA from the quantization kernel, as training decides (never writing the dequantized tensor), and
    with one wait for the device for all partitions."""
    errs = _errors_by_partition(x, block, scale, partitions)
    return dict(zip(partitions, torch.stack(list(errs.values())).tolist()))


def _errors_by_partition(x: torch.Tensor, block, scale: str, partitions) -> dict:
    """``relative_error_by_partition`` as 0-d fp64 tensors on x's device (no wait for it)."""
    x2d = _as_2d(nonempty(x)).to(torch.float32)
    return {p: _e4m3_with_error(x2d, p, block, scale)[1].to(torch.float64) for p in partitions}


# ----------------------------------------------------------------------------------------------
# Sub-tensor level


def _block_view(x2d: torch.Tensor, block, fill: float) -> torch.Tensor:
    """(nr, R, nc, C) view of x2d padded with ``fill`` to whole blocks."""
    br, bc = block
    rows, cols = x2d.shape
    nr, nc = -(-rows // br), -(-cols // bc)
    if nr * br != rows or nc * bc != cols:
        x2d = F.pad(x2d, (0, nc * bc - cols, 0, nr * br - rows), value=fill)
    return x2d.reshape(nr, br, nc, bc)


def _block_sum(t2d: torch.Tensor, block) -> torch.Tensor:
    return _block_view(t2d, block, 0.0).sum(dim=(1, 3), dtype=torch.float64)


def block_dynamic_range(x2d: torch.Tensor, block=DEFAULT_BLOCK):
    """(amax, amin, DR) grids: amax and the smallest non-zero |x| per block (NaN/Inf left out, as
    in every amax here); DR = amax / amin, 1 for blocks without a non-zero finite element, and Inf
    for a block that holds a NaN or +-Inf (no format but BF16 keeps such a block as it is)."""
    block = _check_block(block)
    a = nonempty(x2d).to(torch.float32).abs()
    amax, bad = _block_amax(x2d, block, nonfinite=True)
    inf = torch.full_like(a, math.inf)
    amin = _block_view(torch.where((a > 0) & (a < math.inf), a, inf), block, math.inf).amin(dim=(1, 3))
    return amax, amin, dynamic_range(amax, amin, bad)


def dynamic_range(amax: torch.Tensor, amin: torch.Tensor, bad: torch.Tensor) -> torch.Tensor:
    """``block_dynamic_range``'s DR grid from its block statistics (``bad``: the block holds a NaN or
    +-Inf); shared with the sub-tensor quantization kernels, which compute the statistics."""
    has = amax > 0
    dr = torch.where(has, amax / torch.where(has, amin, torch.ones_like(amin)), torch.ones_like(amax))
    return torch.where(bad, torch.full_like(dr, math.inf), dr)


def _subtensor_scales(amax: torch.Tensor, fmax: float, scale: str) -> torch.Tensor:
    if scale == "gam":
        return gam_block_scales(amax, amax.max(), fmax)
    return scale_from_amax(amax, fmax, pow2=scale == "e8")


class SubTensorResult(NamedTuple):
    values: torch.Tensor          # fp32 2-D: per block E4M3 / E5M2 dequantized or BF16-rounded x
    choice: torch.Tensor          # int8 grid: 0 E4M3, 1 E5M2, 2 BF16
    dynamic_range: torch.Tensor   # fp32 grid
    e4m3_error: torch.Tensor      # fp64 grid: per-block sum of E4M3 relative errors
    e5m2_error: torch.Tensor      # fp64 grid: same for E5M2
    scales: dict                  # {"e4m3": grid, "e5m2": grid} encode scales

    @property
    def gemm_format(self) -> str:
        """The GEMM runs in E4M3 only if every block is E4M3; mixed operands are upcast to BF16."""
        return "e4m3" if bool((self.choice == E4M3).all()) else "bf16"

    def shares(self) -> dict:
        n = max(self.choice.numel(), 1)
        return {f"{name}_share": float((self.choice == code).sum()) / n for code, name in enumerate(_CHOICE_NAMES)}


def subtensor_mor(x: torch.Tensor, block=DEFAULT_BLOCK, mode: str = "two_way", scale: str = "fp32",
                  dequant: str = "fp32") -> SubTensorResult:
    """Sub-tensor MoR on x's 2-D view (see the module docstring for the rule). Ties between the
    E4M3 and E5M2 errors go to E4M3, the format that gives the faster GEMM; a block holding NaN or
    +-Inf goes to BF16."""
    _choose("dequant", dequant, DEQUANT)
    x2d = _as_2d(nonempty(x)).to(torch.float32)
    p = subtensor_parts(x2d, block, mode, scale)
    per_elem = expand_blocks(p.choice, tuple(x2d.shape), p.block)
    e4, e5 = (apply_blocks(p.codes[f], p.scales[f], p.block, torch.div) for f in ("e4m3", "e5m2"))
    if dequant == "bf16":
        e4, e5 = _bf16(e4), _bf16(e5)
    values = torch.where(per_elem == E4M3, e4, torch.where(per_elem == E5M2, e5, _bf16(x2d)))
    return SubTensorResult(values, p.choice, p.dynamic_range, p.errors["e4m3"], p.errors["e5m2"], p.scales)


class SubTensorParts(NamedTuple):
    block: tuple
    choice: torch.Tensor          # int8 grid: 0 E4M3, 1 E5M2, 2 BF16
    dynamic_range: torch.Tensor   # fp32 grid
    codes: dict                   # {"e4m3": fp32 values on the format's grid (x * scale, rounded), "e5m2": ...}
    scales: dict                  # {"e4m3": grid, "e5m2": grid} encode scales
    errors: dict                  # {"e4m3": fp64 grid of per-block sums of relative errors, "e5m2": ...}


def subtensor_parts(x2d: torch.Tensor, block=DEFAULT_BLOCK, mode: str = "two_way",
                    scale: str = "fp32") -> SubTensorParts:
    """The sub-tensor rule on an fp32 2-D tensor: both formats' codes, scales and block errors, and
    each block's choice; what ``subtensor_mor`` dequantizes and the fast path
    (``lowprec.methods.mor_subtensor_fast``) multiplies as codes."""
    _choose("mode", mode, SUBTENSOR_MODES)
    _choose("scale", scale, SCALE_RULES)
    block = _check_block(block)
    amax, _, dr = block_dynamic_range(x2d, block)
    codes, errs, scales = {}, {}, subtensor_scales(amax, scale)
    for fmt in ("e4m3", "e5m2"):
        s = scales[fmt]
        q = cast(apply_blocks(x2d, s, block, torch.mul), fmt)
        terms, _ = _ratio_terms(x2d, apply_blocks(q, s, block, torch.div))
        codes[fmt], errs[fmt] = q, _block_sum(terms, block)
    choice = subtensor_choice(dr, errs["e4m3"], errs["e5m2"], mode)
    return SubTensorParts(block, choice, dr, codes, scales, errs)


def subtensor_scales(amax: torch.Tensor, scale: str) -> dict:
    """Both formats' encode-scale grids from the block-amax grid: {"e4m3": grid, "e5m2": grid}."""
    return {fmt: _subtensor_scales(amax, fmax, scale) for fmt, fmax in (("e4m3", E4M3_MAX), ("e5m2", E5M2_MAX))}


def subtensor_choice(dr: torch.Tensor, e4m3_error: torch.Tensor, e5m2_error: torch.Tensor, mode: str) -> torch.Tensor:
    """Each block's format (int8 grid of E4M3, E5M2, BF16) from its dynamic range and the two formats'
    error sums: E4M3 when its range holds the block, or when E5M2's does and E4M3 is no worse; else
    the wide choice (E5M2 three-way, BF16 two-way) when E5M2's range holds it; else BF16. The error
    sums are read only where ``subtensor_error_blocks`` is True (any value elsewhere)."""
    fits_e4, fits_e5 = _subtensor_fits(dr)
    e4_no_worse = e4m3_error <= e5m2_error
    wide = torch.full_like(dr, E5M2 if mode == "three_way" else BF16, dtype=torch.int8)
    return torch.where(fits_e4 | (fits_e5 & e4_no_worse), torch.full_like(wide, E4M3),
                       torch.where(fits_e5, wide, torch.full_like(wide, BF16)))


def _subtensor_fits(dr: torch.Tensor) -> tuple:
    """(E4M3's range holds the block, E5M2's does): bool grids of the sub-tensor rule."""
    return dr <= SUBTENSOR_E4M3_RANGE, dr <= E5M2_DYNAMIC_RANGE


def subtensor_error_blocks(dr: torch.Tensor) -> torch.Tensor:
    """The blocks whose choice reads the two error sums (bool grid): those that E5M2's range holds and
    E4M3's does not. Elsewhere the range alone decides, so the quantization kernels skip the sums
    there (``lowprec.kernels.mor_subtensor_quant.block_errors``'s ``need``)."""
    fits_e4, fits_e5 = _subtensor_fits(dr)
    return ~fits_e4 & fits_e5


# ----------------------------------------------------------------------------------------------
# Operand quantizers


# The columns of a layer's MoR decision counts (the ``mor_counts`` buffer, one row per slot of
# ``lowprec.recipes.SLOTS``): training calls, calls whose operand went to E4M3 whole, and sub-tensor
# MoR's blocks by format. A quantizer keeps a prefix of them (``_Coverage.columns``).
COUNT_COLUMNS = ("calls", "e4m3", "blocks", "e4m3_blocks", "e5m2_blocks", "bf16_blocks")


def block_counts(choice: torch.Tensor) -> dict:
    """Sub-tensor MoR's counts of one operand's choice grid (``COUNT_COLUMNS`` after ``calls``), as
    0-d int64 device tensors: whether every block chose E4M3, the blocks, and the blocks per format."""
    by_format = {f"{name}_blocks": (choice == code).sum() for code, name in enumerate(_CHOICE_NAMES)}
    blocks = torch.full_like(by_format["e4m3_blocks"], choice.numel())
    return {"e4m3": (by_format["e4m3_blocks"] == blocks).to(blocks.dtype), "blocks": blocks, **by_format}


def counts_buffer(device=None) -> torch.Tensor:
    """A layer's zeroed decision counts: (len(SLOTS), len(COUNT_COLUMNS)) int64."""
    return torch.zeros(len(SLOTS), len(COUNT_COLUMNS), dtype=torch.int64, device=device)


# the name of a layer's decision counts (its forward GEMM's tensor; the backward's has a suffix)
COUNTS_BUFFER = "mor_counts"


def layer_counts(layer) -> Optional[torch.Tensor]:
    """A layer's decision counts as one (len(SLOTS), len(COUNT_COLUMNS)) tensor (a copy), or None
    for a layer without MoR."""
    buffers = pass_buffers(layer, COUNTS_BUFFER)
    return None if buffers is None else merged_slots(*buffers)


class _Coverage:
    """Counts decisions per (layer, GEMM, operand) over training calls, for the paper's headline
    "share of tensors in FP8", which telemetry (sampled every N steps) only estimates.

    The counts live in buffers of each layer (``mor_counts`` for the forward's GEMM and
    ``mor_counts_backward`` for the backward's, registered by ``attach_layer``:
    ``lowprec.methods.layer_buffers.register_pass_buffers`` says why two; ``layer_counts`` reads
    them as one) and grow through operators that mutate them: the emulation's ``add_rows``, the
    fast path's GEMM fix-up (``lowprec.methods.mor_fast.mor_mm``); a compiled step of either counts
    into the same tensors, inside the graph and without waiting for the device. Not saved in
    checkpoints: a resumed run counts from the resume on."""

    columns = COUNT_COLUMNS[:2]

    def attach_layer(self, layer) -> None:
        register_pass_buffers(layer, COUNTS_BUFFER, counts_buffer(layer.weight.device))
        slots = [SLOTS.index((g, op)) for g in GEMMS for op, q in zip(OPERANDS[g], layer.recipe.gemm(g)) if q is self]
        self._layers[str(layer.name)] = (layer, slots)

    def _buffer(self, layer, device, gemm: str) -> torch.Tensor:
        counts = pass_buffer(layer, COUNTS_BUFFER, gemm)
        if counts is not None:
            return counts
        # a call from outside a QLinear (a quantizer used on its own): counts of its own, by layer name
        name = str(getattr(layer, "name", ""))
        if name not in self._layers:
            self._layers[name] = (counts_buffer(device), None)
        return self._layers[name][0]

    def _count(self, call: OperandCall, **counts) -> None:
        """Adds one training call's ``columns`` (ints or 0-d device tensors) to its slot's row."""
        if not call.training:
            return
        values = [counts[c] for c in self.columns]
        like = next(v for v in values if isinstance(v, torch.Tensor))
        row = torch.stack([v.to(torch.int64) if isinstance(v, torch.Tensor) else torch.full_like(like, v, dtype=torch.int64)
                           for v in values])
        add_rows(self._buffer(call.layer, like.device, call.gemm), SLOTS.index((call.gemm, call.operand)),
                 row.reshape(1, -1))

    def _rows(self):
        """(layer name, the tensors its counts live in, the slots this quantizer counts)."""
        for name, (holder, slots) in self._layers.items():
            if isinstance(holder, torch.nn.Module):
                yield name, pass_buffers(holder, COUNTS_BUFFER), slots
            else:
                yield name, (holder,), range(len(SLOTS))

    def coverage(self) -> list[dict]:
        """One row per (layer, GEMM, operand) that counted a training call: layer, gemm, operand and
        ``columns`` (read on the host)."""
        rows = []
        for name, buffers, slots in self._rows():
            host = merged_slots(*buffers).detach().cpu()
            for i in slots:
                if host[i, 0]:
                    rows.append({"layer": name, "gemm": SLOTS[i][0], "operand": SLOTS[i][1],
                                 **{c: int(host[i, j]) for j, c in enumerate(self.columns)}})
        return sorted(rows, key=lambda r: (r["layer"], r["gemm"], r["operand"]))

    def reset_coverage(self) -> None:
        for _, buffers, slots in self._rows():
            for counts in buffers:
                counts[list(slots)] = 0


class _ErrorByPartition:
    """``telemetry_stats``: the operand's E4M3 relative error under every partition (with this
    quantizer's block and scale rule), the numbers of the paper's heat maps. Three extra
    quantizations, so ``QLinear`` asks for them only on telemetry steps."""

    def telemetry_stats(self, t: torch.Tensor) -> dict:
        errs = _errors_by_partition(t, self.block, self.scale, PARTITIONS)  # read with the step's rows
        return {f"rel_error_{p}": e for p, e in errs.items()}


class MoRQuantizer(_ErrorByPartition, _Coverage, OperandQuantizer):
    """Tensor-level MoR for one GEMM operand: E4M3 under ``partition`` if its relative error is at
    most ``threshold``, else BF16. Stateless apart from the coverage counters; deterministic."""

    name = "mor"
    draws = False

    def __init__(self, partition: str = "block", block=DEFAULT_BLOCK, scale: str = "gam",
                 threshold: float = DEFAULT_THRESHOLD, dequant: str = "fp32", gemm: str = "emulated"):
        self.partition = _choose("partition", partition, PARTITIONS)
        self.block = _check_block(block)
        self.scale = _choose("scale", scale, SCALE_RULES)
        self.threshold = check_threshold(threshold)
        self.dequant = _choose("dequant", dequant, DEQUANT)
        # "kernel": the GEMMs on lowprec.kernels.mor_gemm on CUDA (fused_gemm); opt-in, like the
        # INT8-fallback kernel, until its GPU measurement is committed
        self.gemm = _choose("gemm", gemm, GEMM_PATHS)
        self._layers: dict = {}  # layer name -> (the layer, its slots) or (counts, None): _Coverage

    def __call__(self, t: torch.Tensor, call: OperandCall):
        values, e4, err, _ = _mor_on_device(t, self.partition, self.block, self.scale, self.threshold,
                                            self.dequant)
        self._count(call, calls=1, e4m3=e4.to(torch.int64))
        stats = LazyStats(format=Choice(e4, "e4m3", "bf16"), mor_rel_error=err,
                          e4m3_share=lambda: e4.double(), partition=self.partition)
        return values.reshape(t.shape), stats

    def fused_gemm(self, other, a, b, call_a, call_b):
        """fp32 ``a @ b.T`` on the MoR GEMM kernel (``lowprec.kernels.mor_gemm``) when ``other`` is
        tensor-level MoR too and both dequantize exactly (``dequant="fp32"``): each operand is
        quantized by the kernel ``__call__`` uses on CUDA (same codes, scales, error), the kernel
        reads the two decisions on the device and runs an FP8 GEMM if both chose E4M3, else a BF16
        GEMM of the codes and/or the operands rounded to bf16. No host sync. None (the emulated
        GEMM) for sub-tensor MoR, dequant="bf16", LOWPREC_MOR_KERNEL=0, blocks the kernel does not
        take, or without Triton; CPU tensors take it only under the Triton interpreter."""
        if not (isinstance(other, MoRQuantizer) and self.gemm == other.gemm == "kernel" and USE_KERNEL
                and self.dequant == other.dequant == "fp32") or torch.compiler.is_compiling():
            return None  # compiled: the emulated GEMM (Dynamo cannot trace the kernels' launchers)
        from ..kernels import mor_gemm as kg
        from ..kernels import mor_quant as km
        if not (kg.triton_available(a.device) and km.triton_available(a.device)):
            return None
        a2d, b2d = (_as_2d(t) if t.dtype in (torch.float32, torch.bfloat16) else _as_2d(t).float() for t in (a, b))
        blocks = (self._grid_block(a2d), other._grid_block(b2d))
        if not kg.supported(*blocks, a2d.shape[1]):
            return None
        info = torch.empty(3, dtype=torch.int32, device=a.device)
        out = kg.mor_gemm(self.gemm_operand(a2d), other.gemm_operand(b2d), info=info)
        self._count(call_a, calls=1, e4m3=info[0])  # the decisions, as the kernel read them
        other._count(call_b, calls=1, e4m3=info[1])
        return out

    def gemm_operand(self, x2d: torch.Tensor):
        """``lowprec.kernels.mor_gemm.MoROperand`` of a 2-D fp32/bf16 operand (reduction dimension
        last, any strides): its E4M3 codes, scales and error from ``lowprec.kernels.mor_quant``
        (the kernel ``__call__`` uses on CUDA), and this quantizer's threshold."""
        from ..kernels import mor_gemm as kg
        from ..kernels import mor_quant as km
        codes, scales, err = km.mor_quantize_e4m3(x2d, self.partition, self.block, self.scale)
        return kg.MoROperand(x2d, codes, scales, self._grid_block(x2d), err, self.threshold)

    def _grid_block(self, x2d: torch.Tensor) -> tuple:
        """The (R, C) block one scale covers in x2d: the whole of it, one row, or ``block``."""
        from ..kernels import mor_quant as km
        return km._scale_block(self.partition, self.block, *x2d.shape)

    def to_dict(self) -> dict:
        return {"quantizer": self.name, "partition": self.partition,
                "block": list(self.block) if self.partition == "block" else None, "scale": self.scale,
                "threshold": self.threshold, "dequant": self.dequant, "gemm": self.gemm}


class SubTensorMoRQuantizer(_ErrorByPartition, _Coverage, OperandQuantizer):
    """Sub-tensor MoR: a format per (128, 128) block. ``format`` in the stats is the GEMM's:
    "e4m3" only when every block is E4M3, else "bf16" (mixed blocks are upcast)."""

    name = "mor_subtensor"
    columns = COUNT_COLUMNS
    draws = False

    def __init__(self, block=DEFAULT_BLOCK, mode: str = "two_way", scale: str = "fp32", dequant: str = "fp32",
                 quantize: str = "auto"):
        self.block = _check_block(block)
        self.mode = _choose("subtensor_mode", mode, SUBTENSOR_MODES)
        self.scale = _choose("scale", scale, SCALE_RULES)
        self.dequant = _choose("dequant", dequant, DEQUANT)
        # the fast path's quantization: "torch" ops that Inductor fuses, "kernel", the Triton passes
        # of lowprec.kernels.mor_subtensor_quant where Triton runs, or "auto", the kernels on CUDA
        # (faster end to end on the H200: results/bench/e2e_h200.csv, mor_sub_two_way against
        # mor_sub_two_way_torch) and the torch ops elsewhere (the CPU's kernels are the interpreter)
        self.quantize = _choose("quantize", quantize, QUANTIZE_PATHS)
        self._layers: dict = {}  # as MoRQuantizer's

    def __call__(self, t: torch.Tensor, call: OperandCall):
        x2d = _as_2d(t).to(torch.float32)
        r = subtensor_mor(x2d, self.block, self.mode, self.scale, self.dequant)
        # counts stay device tensors and stats are read lazily, as for tensor-level MoR: a training
        # step never waits for the device
        self._count(call, calls=1, **block_counts(r.choice))

        def max_block_dynamic_range():
            finite_dr = r.dynamic_range[torch.isfinite(r.dynamic_range)]
            return float(finite_dr.max()) if finite_dr.numel() else math.nan

        memo: dict = {}   # one computation for the three share entries (read on telemetry steps)

        def share(name):
            if not memo:
                memo.update(r.shares())
            return memo[f"{name}_share"]

        shares = {f"{name}_share": (lambda name=name: share(name)) for name in _CHOICE_NAMES}
        stats = LazyStats(format=lambda: r.gemm_format, mor_rel_error=lambda: _relative_error(x2d, r.values),
                          **shares, partition="subtensor", subtensor_mode=self.mode,
                          max_block_dynamic_range=max_block_dynamic_range)
        return r.values.reshape(t.shape), stats

    def to_dict(self) -> dict:
        return {"quantizer": self.name, "partition": "subtensor", "block": list(self.block),
                "subtensor_mode": self.mode, "scale": self.scale, "dequant": self.dequant, "quantize": self.quantize}


# ----------------------------------------------------------------------------------------------
# Recipe

ALL_OPERAND_SLOTS = tuple(f"{g}.{op}" for g in GEMMS for op in OPERANDS[g])
# MoR's keys and defaults (None: by partition: scale is fp32 for subtensor, gam otherwise; operands
# None: all six slots)
MOR_KEYS = {"partition": "block", "block": list(DEFAULT_BLOCK), "scale": None, "threshold": DEFAULT_THRESHOLD,
            "subtensor_mode": "two_way", "operands": None, "dequant": "fp32", "gemm": "emulated", "quantize": "auto"}
GEMM_PATHS = ("emulated", "kernel")
QUANTIZE_PATHS = ("auto", "torch", "kernel")
_ROLE_SLOTS = {role: tuple(s for s in ALL_OPERAND_SLOTS if s.endswith("." + role)) for role in ("x", "w", "dy")}


def _operand_slots(spec) -> tuple:
    """Slots from a list of "gemm.operand" names and/or roles ("x", "w", "dy": every GEMM the
    tensor enters), or "all"."""
    if spec is None or spec == "all":
        return ALL_OPERAND_SLOTS
    if isinstance(spec, str) or not isinstance(spec, (list, tuple)):
        raise ValueError(f"operands: a list of slots {list(ALL_OPERAND_SLOTS)} or roles x/w/dy, or 'all'; "
                         f"got {spec!r}")
    chosen = set()
    for item in spec:
        if item in _ROLE_SLOTS:
            chosen.update(_ROLE_SLOTS[item])
        elif item in ALL_OPERAND_SLOTS:
            chosen.add(item)
        else:
            raise ValueError(f"operands: unknown slot {item!r}; known: {list(ALL_OPERAND_SLOTS)} and roles x, w, dy")
    if not chosen:
        raise ValueError("operands: empty; leave it out for all six slots")
    return tuple(s for s in ALL_OPERAND_SLOTS if s in chosen)


def _build(own: dict) -> Recipe:
    partition = _choose("partition", own.get("partition", MOR_KEYS["partition"]), PARTITIONS + ("subtensor",))
    sub = partition == "subtensor"
    unused = {"tensor": {"block", "subtensor_mode", "quantize"}, "channel": {"block", "subtensor_mode", "quantize"},
              "block": {"subtensor_mode", "quantize"}, "subtensor": {"threshold", "gemm"}}[partition]
    given = sorted(unused & set(own))
    if given:
        raise ValueError(f"method (mor): {given} not used with partition {partition!r}")
    block = _check_block(own.get("block", DEFAULT_BLOCK))
    scale = own.get("scale", "fp32" if sub else "gam")
    dequant = own.get("dequant", MOR_KEYS["dequant"])
    if sub:
        mode = own.get("subtensor_mode", MOR_KEYS["subtensor_mode"])
        quant: OperandQuantizer = SubTensorMoRQuantizer(block, mode, scale, dequant,
                                                        own.get("quantize", MOR_KEYS["quantize"]))
        detail = f"{mode}, {block[0]}x{block[1]} blocks, {scale} scales"
    else:
        threshold = own.get("threshold", DEFAULT_THRESHOLD)
        quant = MoRQuantizer(partition, block, scale, threshold, dequant, own.get("gemm", MOR_KEYS["gemm"]))
        where = f"{block[0]}x{block[1]} blocks, " if partition == "block" else ""
        detail = f"{where}{scale} scales, E4M3 if relative error <= {quant.threshold:g} else BF16"
    slots = _operand_slots(own.get("operands"))
    gemms = {g: Gemm(*(quant if f"{g}.{op}" in slots else None for op in OPERANDS[g])) for g in GEMMS}
    return Recipe(f"mor_{partition}", gemms["fprop"], gemms["dgrad"], gemms["wgrad"],
                  description=f"MoR {partition} ({detail}); MoR operands: {', '.join(slots)}")


MOR = Method("mor", MOR_KEYS, _build)
METHODS = (MOR,)


def mor_recipe(method_cfg: Optional[dict] = None) -> Recipe:
    """A Recipe with MoR on the selected operand slots and BF16 (``high_precision``) elsewhere.

    Keys (defaults): partition (block) tensor|block|channel|subtensor; block ([128, 128]) for block
    and subtensor; scale (gam; fp32 for subtensor) gam|e8|fp32; threshold (0.045) for the tensor
    level; subtensor_mode (two_way) three_way|two_way; operands (all six slots) e.g.
    ["fprop.x", "fprop.w"] or roles ["x", "w"]; dequant (fp32) fp32|bf16; gemm (emulated) emulated|kernel
    for the tensor level (kernel: the GEMMs on the MoR GEMM kernel on CUDA); quantize (auto)
    auto|torch|kernel for subtensor (kernel: its fast path quantizes with the Triton passes of
    lowprec.kernels.mor_subtensor_quant where Triton runs; torch: with torch ops that Inductor
    fuses; auto: the kernels on CUDA, torch ops elsewhere; the same operands bit for bit). The generic method keys
    are accepted and ignored here; high_precision sets the dtype of the non-MoR operands. A key
    that the chosen partition does not use is an error, so a config never silently means less
    than it says.
    """
    return MOR.recipe_for(method_cfg)


def recipe_coverage(recipe: Recipe) -> list[dict]:
    """Decision counts of every MoR quantizer in ``recipe`` (one row per layer, GEMM and operand:
    training calls, calls that chose E4M3 and, for sub-tensor MoR, blocks per format)."""
    seen, rows = set(), []
    for g in GEMMS:
        for q in recipe.gemm(g):
            if isinstance(q, _Coverage) and id(q) not in seen:
                seen.add(id(q))
                rows.extend(q.coverage())
    return rows
