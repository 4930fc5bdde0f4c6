"""Scaled quantization: how a tensor is mapped onto a format's range before the cast.

Convention (Transformer Engine's): a `scale` is the ENCODE multiplier.

    codes = cast(x * scale)        x ~= codes / scale        scale = fmax / amax

so a larger scale means finer resolution, and a block's amax lands on (or just below) fmax.

Layout. Every mode works on a 2-D view: an N-D tensor is flattened to rows = prod(leading dims),
cols = last dim (a 1-D tensor is one row). The view is tiled by blocks of (R, C) elements and each
block gets one scale. Scale grids have shape (ceil(rows / R), ceil(cols / C)); `expand_blocks`
broadcasts a grid back to the 2-D shape. Shapes not divisible by the block are zero-padded
internally (zeros never change an amax) and cropped. The modes are block shapes plus a rule:

    none     scale 1, cast only
    tensor   one block = the whole tensor, scale = fmax / amax ("current scaling")
    delayed  like tensor, but amax comes from a DelayedScaler's history (pass amax=)
    block    (R, C) blocks, scale = fmax / amax_block (e.g. (1, 128) groups, (128, 128) tiles)
    channel  axis=-1: one scale per row (reduce over the last dim); axis=0: one per column
    mx       (1, 32) blocks, E8M0 power-of-two scale by the OCP MX v1.0 rule
    gam      GAM (MoR paper 2.5): tensor scale's mantissa, per-block power-of-two exponent

Degenerate inputs never give an Inf/zero scale, and a NaN scale only as below:
* an amax of 0 (all-zero or padding-only block) gives scale 1;
* a tiny amax whose ideal scale overflows fp32 is capped at 2^127 (and floored at 2^-126);
* NaN and +-Inf elements are left out of every amax (like CUDA's fmaxf, which TE's amax uses,
  ignores NaN), so no block is poisoned by another block's bad value.
  Float formats: the bad elements go through the cast: NaN stays NaN in codes and output; +-Inf
  saturates to +-fmax / scale with saturate=True, or follows the format's overflow rule with
  saturate=False (NaN for E4M3, +-Inf for E5M2).
INT8 uses the same machinery with fmax = qmax (127), with one difference: an integer code cannot
hold NaN or Inf (the cast maps NaN to 0 and +-Inf to +-127), so a block that holds one would come
back as plausible finite numbers and hide a diverging run. Its scale is therefore NaN, so its
codes are 0 (codes = cast(x * scale) still holds) and every value the block dequantizes to, and
every GEMM output it enters, is NaN. This keeps the Triton kernels (int8 codes, fp32 scales) and
the torch path equal, costs no host sync, and needs no high-precision side path that plain block
INT8 (Jetfire, SwitchBack) does not have.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Optional

import torch
import torch.nn.functional as F

from ..config import env_switch
from . import formats
from .checks import as_2d, block_shape, nonempty
from .formats import FORMATS, IntFormat, cast, get_format, ilog2
from .formats import pow2 as _exact_pow2
from .ranks import max_over_ranks

__all__ = [
    "SCALINGS",
    "QuantSpec",
    "QTensor",
    "DelayedScaler",
    "block_amax",
    "nonfinite_blocks",
    "expand_blocks",
    "apply_blocks",
    "scale_from_amax",
    "mx_block_scales",
    "gam_block_scales",
    "gam_block_scales_bitwise",
    "compute_scale",
    "quantize",
    "fake_quantize",
]

SCALINGS = ("none", "tensor", "delayed", "block", "channel", "mx", "gam")
_ROUNDINGS = ("nearest", "stochastic")
_REDUCTIONS = ("max", "most_recent")
_DEFAULT_BLOCK = {"block": (1, 128), "gam": (128, 128), "mx": (1, 32)}
_MX_BLOCK = (1, 32)
_E8M0_EXP_RANGE = (-127, 127)
# Scale bounds: finite, normal, and within reach of a power-of-two rescale in fp32.
_SCALE_MIN_EXP, _SCALE_MAX_EXP = -126, 127


# ----------------------------------------------------------------------------------------------
# Spec


@dataclass(frozen=True)
class QuantSpec:
    """Everything that decides how one tensor is quantized; plain data so that a YAML config is a
    spec. `block` is filled in with the mode's default ((1, 128) for block, (128, 128) for gam,
    (1, 32) for mx) and must stay None for modes that do not tile. `margin` divides the scale by
    2^margin (TE). `pow2` rounds scales down to a power of two ("E8" scales, never saturates).
    `history_len`/`reduction` configure the DelayedScaler for scaling="delayed"."""

    fmt: str = "e4m3"
    scaling: str = "tensor"
    block: Optional[tuple] = None
    axis: int = -1
    rounding: str = "nearest"
    saturate: bool = True
    pow2: bool = False
    margin: int = 0
    history_len: int = 1024
    reduction: str = "max"

    def __post_init__(self):
        if self.fmt not in FORMATS:
            raise ValueError(f"fmt: unknown format {self.fmt!r}; known: {', '.join(FORMATS)}")
        if self.scaling not in SCALINGS:
            raise ValueError(f"scaling: must be one of {SCALINGS}, got {self.scaling!r}")
        self._set_block()
        if self.axis not in (-1, 0) or isinstance(self.axis, bool):
            raise ValueError(f"axis: must be -1 (a scale per row) or 0 (a scale per column), got {self.axis!r}")
        if self.rounding not in _ROUNDINGS:
            raise ValueError(f"rounding: must be one of {_ROUNDINGS}, got {self.rounding!r}")
        for name in ("saturate", "pow2"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: must be a bool, got {getattr(self, name)!r}")
        if not _is_int(self.margin) or self.margin < 0:
            raise ValueError(f"margin: must be an int >= 0, got {self.margin!r}")
        if self.margin and self.scaling in ("mx", "gam", "none"):
            raise ValueError(f"margin: not used by scaling={self.scaling!r}; leave it 0")
        if self.pow2 and self.scaling in ("gam", "none"):
            # GAM's point is the tensor-wide mantissa; E8 block scales are scaling="block", pow2=True.
            raise ValueError(f"pow2: not compatible with scaling={self.scaling!r}")
        if not _is_int(self.history_len) or self.history_len < 1:
            raise ValueError(f"history_len: must be an int >= 1, got {self.history_len!r}")
        if self.reduction not in _REDUCTIONS:
            raise ValueError(f"reduction: must be one of {_REDUCTIONS}, got {self.reduction!r}")

    def _set_block(self):
        """block: the scaling's default where None, else checked (block_shape) and made a tuple."""
        block = self.block
        if block is None:
            object.__setattr__(self, "block", _DEFAULT_BLOCK.get(self.scaling))
            return
        if self.scaling not in _DEFAULT_BLOCK:
            raise ValueError(f"block: only used by scaling in {tuple(_DEFAULT_BLOCK)}, not {self.scaling!r}")
        block = block_shape(block)
        if self.scaling == "mx" and block != _MX_BLOCK:
            raise ValueError(f"block: mx scaling uses {_MX_BLOCK} blocks, got {block}")
        object.__setattr__(self, "block", block)

    @property
    def format(self):
        return get_format(self.fmt)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["block"] = list(self.block) if self.block is not None else None  # YAML has no tuples
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "QuantSpec":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown QuantSpec field(s) {unknown}; known: {sorted(known)}")
        d = dict(d)
        if isinstance(d.get("block"), list):
            d["block"] = tuple(d["block"])
        return cls(**d)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# ----------------------------------------------------------------------------------------------
# Layout


def _grid_shape(shape2d, block):
    return (-(-shape2d[0] // block[0]), -(-shape2d[1] // block[1]))


def block_amax(x2d: torch.Tensor, block) -> torch.Tensor:
    """Max |x| per (R, C) block of a 2-D tensor, fp32, grid shape (ceil(rows/R), ceil(cols/C)).
    NaN and Inf count as 0 (see the module docstring); padding is zeros."""
    return _block_amax(x2d, block_shape(block))[0]


def _block_amax(x2d: torch.Tensor, block, nonfinite: bool = False):
    """(block_amax, and with nonfinite=True the nonfinite_blocks grid, else None). On CPU the
    first, unmasked reduction already says which blocks hold a NaN/Inf, so the grid is free."""
    a = x2d.to(torch.float32).abs()
    if a.is_cuda or torch.compiler.is_compiling():
        bad = ~torch.isfinite(blocks_max(a, block)) if nonfinite else None
        # always masked: asking whether any block holds a NaN/Inf would wait for the device (and
        # break a compiled graph)
        return blocks_max(a.nan_to_num_(nan=0.0, posinf=0.0), block), bad
    grid = blocks_max(a, block)
    bad = ~torch.isfinite(grid)
    if bad.any():  # rare: mask NaN/Inf only when some block holds one
        a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
        grid = blocks_max(a, block)
    return grid, (bad if nonfinite else None)


def nonfinite_blocks(x2d: torch.Tensor, block) -> torch.Tensor:
    """Bool grid (block_amax's shape): True where the block holds a NaN or +-Inf. One reduction
    on the device (amax propagates NaN), no host sync."""
    block = block_shape(block)
    return ~torch.isfinite(blocks_max(x2d.to(torch.float32).abs(), block))


def blocks_max(x2d: torch.Tensor, block) -> torch.Tensor:
    """The max over each (R, C) block of a 2-D tensor as it is (NaN propagates; no abs), grid shape
    (ceil(rows/R), ceil(cols/C)), zero-padded. A transposed view (the backward's X^T, W^T, dY^T) is
    reduced in its source's memory order and the grid transposed back: the same maxima, where a
    reduction over the view made the compiler read it strided (one took 47 ms of a 1 B training
    step). The branch reads the layout: Dynamo (torch 2.13) fails to trace such a branch inside a
    ``torch.autocast`` block of an autograd Function's backward, so keep those blocks around the
    GEMMs alone (``lowprec.methods.int8_fast._gemm``)."""
    if x2d.dim() == 2 and not x2d.is_contiguous() and x2d.t().is_contiguous():
        return blocks_max(x2d.t(), (block[1], block[0])).t()
    return _blocks_view(x2d, block).amax(dim=(1, 3))


def _blocks_view(x2d: torch.Tensor, block) -> torch.Tensor:
    """(nr, R, nc, C) view of x2d, zero-padded to whole blocks (a copy only when padding)."""
    br, bc = block
    rows, cols = x2d.shape
    nr, nc = _grid_shape((rows, cols), block)
    if nr * br != rows or nc * bc != cols:
        x2d = F.pad(x2d, (0, nc * bc - cols, 0, nr * br - rows))
    return x2d.reshape(nr, br, nc, bc)


def apply_blocks(x2d: torch.Tensor, grid: torch.Tensor, block, op) -> torch.Tensor:
    """op(x, per-block value) elementwise, broadcasting the grid over its blocks without
    materialising the expanded grid; the result has x2d's shape."""
    rows, cols = x2d.shape
    out = op(_blocks_view(x2d, block), grid[:, None, :, None])
    return out.reshape(out.shape[0] * out.shape[1], -1)[:rows, :cols]


def expand_blocks(grid: torch.Tensor, shape2d, block) -> torch.Tensor:
    """Broadcast a per-block grid to the 2-D element shape (cropping the padded edge)."""
    block = block_shape(block)
    rows, cols = shape2d
    full = grid.repeat_interleave(block[0], dim=0).repeat_interleave(block[1], dim=1)
    return full[:rows, :cols]


def _resolve_block(spec: QuantSpec, shape2d):
    rows, cols = max(shape2d[0], 1), max(shape2d[1], 1)
    if spec.scaling in ("none", "tensor", "delayed"):
        return (rows, cols)
    if spec.scaling == "channel":
        return (1, cols) if spec.axis == -1 else (rows, 1)
    return spec.block


# ----------------------------------------------------------------------------------------------
# Scale rules (pure functions of amaxes)


def _valid_amax(a: torch.Tensor) -> torch.Tensor:
    return (a > 0) & torch.isfinite(a)


def _fp32(v, like: Optional[torch.Tensor] = None) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return v.to(torch.float32)
    device = like.device if like is not None else None
    return torch.tensor(float(v), dtype=torch.float32, device=device)


def _ratio(num: float, den: torch.Tensor) -> torch.Tensor:
    # A correctly rounded fp32 quotient. `num / tensor` in torch is reciprocal-then-multiply (two
    # roundings), which would make fmax/amax differ from what TE and a kernel compute.
    return torch.div(torch.full_like(den, num), den)


def scale_from_amax(amax, fmax: float, margin: int = 0, pow2: bool = False) -> torch.Tensor:
    """fmax / amax / 2^margin in fp32, optionally rounded down to a power of two; 1 where amax is
    0 or not finite; clamped to [2^-126, 2^127] so it is always finite, normal and nonzero."""
    a = _fp32(amax)
    ok = _valid_amax(a)
    s = _ratio(fmax, torch.where(ok, a, torch.ones_like(a)))
    if margin:
        s = s * 2.0 ** -margin  # a power of two: exact
    s = s.clamp(2.0**_SCALE_MIN_EXP, 2.0**_SCALE_MAX_EXP)
    if pow2:
        s = _exact_pow2(ilog2(s))
    return torch.where(ok, s, torch.ones_like(s))


def mx_block_scales(block_amax: torch.Tensor, emax_elem: int) -> torch.Tensor:
    """OCP MX v1.0: shared_exp = floor(log2(amax)) - emax_elem, clamped to E8M0's [-127, 127];
    the decode scale is X = 2^shared_exp, so our encode scale is 2^-shared_exp. amax 0 -> 1."""
    a = _fp32(block_amax)
    ok = _valid_amax(a)
    shared = (ilog2(torch.where(ok, a, torch.ones_like(a))) - emax_elem).clamp(*_E8M0_EXP_RANGE)
    return torch.where(ok, _exact_pow2(-shared), torch.ones_like(a))


def _mantissa_bits(s: torch.Tensor) -> torch.Tensor:
    return s.contiguous().view(torch.int32) & 0x7FFFFF


def _exponent_field(s: torch.Tensor) -> torch.Tensor:
    return (s.contiguous().view(torch.int32) >> 23) & 0xFF


def _floor_log2_ratio(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # floor(log2(a / b)) without forming a / b (whose rounding can cross a power of two):
    # a = ma 2^ea, b = mb 2^eb with ma, mb in [0.5, 1), so a/b = (ma/mb) 2^(ea-eb), ma/mb in (1/2, 2).
    ma, ea = torch.frexp(a)
    mb, eb = torch.frexp(b)
    return ea - eb - (ma < mb).to(torch.int32)


def gam_block_scales(block_amax, tensor_amax, fmax: float) -> torch.Tensor:
    """GAM closed form: s_g * 2^floor(log2(tensor_amax / block_amax)), s_g = fmax / tensor_amax.

    The largest scale of the form s_g * 2^k that keeps the block's amax at or below fmax (up to
    s_g's own fp32 rounding); blocks differ only by powers of two. Blocks with amax 0 get s_g.
    Scales are capped at 2^127 like every scale here.

    k is computed exactly from the amaxes' frexp parts, not as floor(log2(fp32 quotient)): the
    rounded quotient (and log2) can land on the next power of two, which the plain torch.log2
    sketch does on random tensors. Versus the bit rule (which works on the *rounded* scales), this
    can still differ when a block amax is within a few fp32 ulps of tensor_amax / 2^k: the bit rule
    then picks the scale twice as large. Both keep the block amax at or below fmax (to one ulp)."""
    ab = _fp32(block_amax)
    ag = _fp32(tensor_amax, like=ab).expand_as(ab)
    s_g = scale_from_amax(ag, fmax)
    ok = _valid_amax(ab) & _valid_amax(ag)
    one = torch.ones_like(ab)
    k = _floor_log2_ratio(torch.where(ok, ag, one), torch.where(ok, ab, one))
    # Largest k with s_g * 2^k <= 2^127; the bitwise rule hits the same cap through s_b's clamp.
    k_max = _SCALE_MAX_EXP - ilog2(s_g) - (_mantissa_bits(s_g) > 0).to(torch.int32)
    k_min = _SCALE_MIN_EXP - ilog2(s_g)
    k = torch.minimum(torch.maximum(k, k_min), k_max)
    # Adding k to the exponent field: exact s_g * 2^k, and no pow2(k) that could leave fp32 range.
    scaled = (s_g.contiguous().view(torch.int32) + k * (1 << 23)).view(torch.float32)
    return torch.where(ok, scaled, s_g)


def gam_block_scales_bitwise(block_amax, tensor_amax, fmax: float) -> torch.Tensor:
    """GAM by the paper's bit-level rule: take the 23-bit mantissa m_g of s_g = fmax/tensor_amax
    and the 8-bit exponent e_b of s_b = fmax/block_amax; scale = 2^e_b * 1.m_g, with the exponent
    decremented when m_g > m_b (so the block amax cannot exceed fmax). Reference for tests."""
    ab = _fp32(block_amax)
    ag = _fp32(tensor_amax, like=ab).expand_as(ab)
    s_g = scale_from_amax(ag, fmax)
    s_b = scale_from_amax(ab, fmax)
    m_g, m_b = _mantissa_bits(s_g), _mantissa_bits(s_b)
    e = _exponent_field(s_b) - (m_g > m_b).to(torch.int32)
    scaled = (e * (1 << 23) + m_g).view(torch.float32)
    ok = _valid_amax(ab) & _valid_amax(ag)
    return torch.where(ok, scaled, s_g)


# ----------------------------------------------------------------------------------------------
# Delayed scaling


class DelayedScaler:
    """Per-tensor delayed scaling from an amax history.

    Defaults are Transformer Engine's DelayedScaling (history_len=1024, reduction="max",
    margin=0). Megatron-style "most recent amax" is history_len=1, reduction="most_recent".

    One training step:
        cur = amax(x)                       # metrics.amax or block_amax
        q = quantize(x, spec, amax=scaler.step(cur))   # history BEFORE this step, then record it

    `amax(current)` / `scale(current)` reduce the history recorded so far; on the first call
    (empty history) they use `current`. A non-finite amax (an overflowing step) is recorded as
    0, "no information", so it cannot pin the scale for history_len steps; an all-zero history
    gives scale 1 like any zero amax.

    The history is a ring of history_len fp32 slots and a count of the amaxes recorded (call i
    writes slot i % history_len; slots not yet written hold 0, which no amax's max is below):
    fixed shapes, so a compiled graph carries them. A layer keeps the two tensors as its buffers
    and passes them as ``state``; without one the scaler uses its own. `step` reads and records in
    one operator (``delayed_step_``): traced inside an autograd.Function, separate reads of tensors
    that an operator then mutates were ordered inconsistently (the count read after the record, the
    ring before it); on CUDA the operator is one Triton kernel (``record_amax``).

    Several processes (torch.distributed initialized, world size > 1): `step` and `update` take
    the max of this step's amax over all ranks before it enters the history (Transformer Engine
    reduces its amaxes the same way), so every rank keeps the same history and quantizes with the
    same scale; every rank must therefore call them at the same points, as training does.
    """

    def __init__(self, history_len: int = 1024, reduction: str = "max", fmt: str = "e4m3",
                 margin: int = 0, pow2: bool = False):
        if not _is_int(history_len) or history_len < 1:
            raise ValueError(f"history_len: must be an int >= 1, got {history_len!r}")
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction: must be one of {_REDUCTIONS}, got {reduction!r}")
        if not _is_int(margin) or margin < 0:
            raise ValueError(f"margin: must be an int >= 0, got {margin!r}")
        self.history_len = history_len
        self.reduction = reduction
        self.fmax = get_format(fmt).fmax
        self.margin = margin
        self.pow2 = pow2
        self.state = self.new_state()

    @classmethod
    def from_spec(cls, spec: QuantSpec) -> "DelayedScaler":
        return cls(spec.history_len, spec.reduction, spec.fmt, spec.margin, spec.pow2)

    def new_state(self, device=None) -> tuple:
        """(ring, count): an empty history."""
        return (torch.zeros(self.history_len, dtype=torch.float32, device=device),
                torch.zeros((), dtype=torch.int64, device=device))

    @property
    def history(self) -> torch.Tensor:
        """Recorded amaxes of the scaler's own state, oldest first (at most history_len)."""
        return ordered_history(*self.state)

    def amax(self, current=None, state: Optional[tuple] = None) -> torch.Tensor:
        ring, count = self._state(state, current)
        if current is None:
            if int(count) == 0:
                raise ValueError("empty amax history: pass the current amax on the first call")
            current = ring.new_zeros(())
        return _history_amax(ring, count, _fp32(current).to(ring.device).reshape(()), self.reduction == "max")

    def scale(self, current=None, state: Optional[tuple] = None) -> torch.Tensor:
        return scale_from_amax(self.amax(current, state), self.fmax, self.margin, self.pow2)

    def step(self, current, state: Optional[tuple] = None, recorded: bool = False) -> torch.Tensor:
        """One training call: this call's amax is reduced over the ranks, the amax to quantize
        with is taken from the history before this call (on the first call: the reduced current
        amax), and then the reduced amax is recorded: one all_reduce per call (none in a single
        process).

        ``recorded``: the caller knows that the history holds an amax already (``count > 0``), so
        the amax to quantize with is the history's alone and does not wait for ``current``: a
        compiled graph can then compute this call's amax in the same pass that casts with the
        history's (the same value either way)."""
        ring, count = self._state(state, current)
        use_max = self.reduction == "max"
        if not recorded:
            return record_amax(ring, count, self._reduced(current, ring), use_max)
        past = _recorded_amax(ring, count, use_max)
        record_amax(ring, count, self._reduced(current, ring), use_max, after=past)
        return past

    def update(self, amax, state: Optional[tuple] = None) -> None:
        """Record this step's amax (max over the ranks) without using the history."""
        ring, count = self._state(state, amax)
        record_amax(ring, count, self._reduced(amax, ring), True)

    def _state(self, state: Optional[tuple], current) -> tuple:
        if state is not None:
            return state
        # the scaler's own state follows the amaxes' device (a layer's buffers are on its device)
        if isinstance(current, torch.Tensor) and current.device != self.state[0].device:
            self.state = tuple(t.to(current.device) for t in self.state)
        return self.state

    @staticmethod
    def _reduced(amax, ring: torch.Tensor) -> torch.Tensor:
        a = _fp32(amax).detach().reshape(()).to(ring.device)
        # before the reduction: a max over a NaN and a number is not the same on every backend
        a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
        return max_over_ranks(a)


def _history_amax(ring: torch.Tensor, count: torch.Tensor, current: torch.Tensor, use_max: bool) -> torch.Tensor:
    """The amax a delayed scaler quantizes with: the history's max or its latest entry, ``current``
    while the history is empty."""
    return torch.where(count > 0, _recorded_amax(ring, count, use_max), current)


def _recorded_amax(ring: torch.Tensor, count: torch.Tensor, use_max: bool) -> torch.Tensor:
    """The max or the latest entry of a history that holds at least one amax."""
    return ring.max() if use_max else ring[(count - 1).remainder(ring.numel())]


def ordered_history(ring: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """A delayed scaler's recorded amaxes, oldest first (read on the host: checkpoints, tests)."""
    n, size = int(count), ring.numel()
    if n <= size:
        return ring[:n].clone()
    return torch.roll(ring, -(n % size)).clone()


def load_history(ring: torch.Tensor, count: torch.Tensor, history: Optional[torch.Tensor]) -> None:
    """Fill a scaler's state in place from recorded amaxes, oldest first (``ordered_history``'s)."""
    ring.zero_()
    h = torch.zeros(0) if history is None else history.reshape(-1)[-ring.numel():]
    ring[:h.numel()] = h.to(ring)
    count.fill_(h.numel())


# An operator that mutates its arguments: Dynamo keeps it as a node of the forward and of the
# backward graph (the gradients' amaxes are recorded in the backward), where an in-place update of
# a layer's buffer inside a backward graph would not be kept.
@torch.library.custom_op("lowprec::delayed_step_", mutates_args=("ring", "count"))
def delayed_step_(ring: torch.Tensor, count: torch.Tensor, amax: torch.Tensor, use_max: bool,
                  after: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The amax to quantize with (``_history_amax``), then ring[count % len(ring)] = amax, count += 1.
    ``after``: unused, an input that orders the update after its computation (a read of the
    history before this update, ``DelayedScaler.step``)."""
    out = _history_amax(ring, count, amax, use_max)
    ring.index_copy_(0, count.remainder(ring.numel()).reshape(1), amax.reshape(1).to(ring.dtype))
    count.add_(1)
    return out


@delayed_step_.register_fake
def _(ring, count, amax, use_max, after=None):
    return torch.empty_like(amax)


# On CUDA: the same as a triton_op, whose one-kernel launch Inductor traces and makes from its own
# code; the opaque operator cost a Python call and five eager launches per slot and call (the host
# set the pace of a 1 B delayed-scaling step; lowprec.kernels.buffer_updates).
@torch.library.triton_op("lowprec::delayed_step_cuda_", mutates_args=("ring", "count"))
def delayed_step_cuda_(ring: torch.Tensor, count: torch.Tensor, amax: torch.Tensor, use_max: bool,
                       after: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``delayed_step_`` on a CUDA device where Triton runs."""
    from ..kernels import buffer_updates as kb
    out = torch.empty_like(amax)
    kb.delayed_step(ring, count, amax.reshape(1), use_max, out, launcher=torch.library.wrap_triton)
    return out


def record_amax(ring: torch.Tensor, count: torch.Tensor, amax: torch.Tensor, use_max: bool,
                after: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``delayed_step_``: on its Triton kernel where the history is on a CUDA device Triton runs on."""
    from ..kernels import buffer_updates as kb
    op = delayed_step_cuda_ if kb.takes_kernel(ring) else delayed_step_
    return op(ring, count, amax, use_max, after)


# ----------------------------------------------------------------------------------------------
# Quantize


@dataclass
class QTensor:
    """codes: fp32, x's shape, values on the format grid (not scaled back).
    scale: fp32 per-block grid of shape (ceil(rows/R), ceil(cols/C)) over the 2-D view of x
    (rows = prod(leading dims), cols = last dim); `expanded_scale()` gives it in x's shape.
    block: the (R, C) block the grid refers to; dtype: x's dtype, restored by dequantize()."""

    codes: torch.Tensor
    scale: torch.Tensor
    spec: QuantSpec
    block: tuple
    dtype: torch.dtype

    def expanded_scale(self) -> torch.Tensor:
        shape2d = tuple(as_2d(self.codes).shape)
        return expand_blocks(self.scale, shape2d, self.block).reshape(self.codes.shape)

    def dequantize(self) -> torch.Tensor:
        codes2d = as_2d(self.codes)
        return apply_blocks(codes2d, self.scale, self.block, torch.div).reshape(self.codes.shape).to(self.dtype)


def _scale_grid(x2d: torch.Tensor, spec: QuantSpec, block, amax) -> torch.Tensor:
    """The encode scales; for INT8, NaN for the blocks that hold a NaN or +-Inf (module docstring)."""
    fmt = spec.format
    is_int = isinstance(fmt, IntFormat)
    if amax is not None and spec.scaling not in ("tensor", "delayed", "gam"):
        raise ValueError(f"amax= is only used by tensor, delayed and gam scaling, not {spec.scaling!r}")
    if spec.scaling == "none":
        grid = torch.ones(_grid_shape(x2d.shape, block), dtype=torch.float32, device=x2d.device)
        bad = nonfinite_blocks(x2d, block) if is_int else None
    else:
        amaxes, bad = _block_amax(x2d, block, nonfinite=is_int)
        if spec.scaling == "mx":
            grid = mx_block_scales(amaxes, fmt.emax)
        elif spec.scaling == "gam":
            tensor_amax = _fp32(amax, like=amaxes).to(amaxes.device) if amax is not None else amaxes.max()
            grid = gam_block_scales(amaxes, tensor_amax, fmt.fmax)
        else:
            if amax is not None:  # tensor / delayed with an amax from elsewhere (history, other ranks)
                amaxes = _fp32(amax).to(amaxes.device).reshape(1, 1)
            grid = scale_from_amax(amaxes, fmt.fmax, spec.margin, spec.pow2)
    return torch.where(bad, torch.full_like(grid, float("nan")), grid) if is_int else grid


def compute_scale(x: torch.Tensor, spec: QuantSpec, amax=None) -> torch.Tensor:
    """The per-block encode-scale grid for x (see the module docstring for its shape).
    amax: for tensor/delayed, the amax to use instead of x's own (delayed without it behaves
    like a scaler with an empty history: x's own amax); for gam, the group amax. INT8 blocks
    holding NaN/Inf get a NaN scale."""
    x2d = as_2d(nonempty(x))
    return _scale_grid(x2d, spec, _resolve_block(spec, x2d.shape), amax)


def quantize(
    x: torch.Tensor,
    spec: QuantSpec,
    generator: Optional[torch.Generator] = None,
    noise: Optional[torch.Tensor] = None,
    amax=None,
) -> QTensor:
    """Scale, then cast with spec's rounding and saturation. noise (x's shape) feeds stochastic
    rounding with given uniforms; generator seeds them otherwise. On CUDA the specs that the Triton
    quantize kernels cover take them (one pass instead of several; the same codes and scales).
    An empty x is an error; INT8 blocks holding NaN/Inf get a NaN scale (module docstring)."""
    nonempty(x)
    # under torch.compile the torch ops below, which the compiler fuses (it cannot trace the
    # kernel's launcher)
    if x.is_cuda and USE_KERNELS and _kernel_covers(spec) and not torch.compiler.is_compiling():
        return _quantize_kernel(x, spec, generator, noise, amax)
    x2d = as_2d(x).to(torch.float32)
    block = _resolve_block(spec, x2d.shape)
    grid = _scale_grid(x2d, spec, block, amax)
    scaled = apply_blocks(x2d, grid, block, torch.mul)
    if noise is not None:
        if tuple(noise.shape) != tuple(x.shape):
            raise ValueError(f"noise shape {tuple(noise.shape)} != input shape {tuple(x.shape)}")
        noise = noise.reshape(scaled.shape)
    codes = cast(scaled, spec.fmt, spec.rounding, spec.saturate, generator, noise)
    return QTensor(codes.reshape(x.shape), grid, spec, tuple(block), x.dtype)


# The CUDA dispatch to lowprec.kernels.quantize; off with LOWPREC_QUANT_KERNELS=0 (or by setting
# this flag, as the tests that compare the two paths do).
USE_KERNELS = env_switch("LOWPREC_QUANT_KERNELS")
_KERNEL_FORMATS = ("e4m3", "e5m2", "int8")


def _kernel_covers(spec: QuantSpec) -> bool:
    return (spec.fmt in _KERNEL_FORMATS and spec.saturate
            and spec.scaling in ("tensor", "delayed", "block") + (("channel",) if spec.axis == -1 else ())
            and (spec.rounding == "nearest" or spec.fmt == "int8"))


def _quantize_kernel(x, spec, generator, noise, amax) -> QTensor:
    from ..kernels import quantize as kq  # Triton: loaded on first use
    if not kq.triton_available(x.device):
        raise RuntimeError("CUDA quantization needs Triton (set lowprec.numerics.scaling.USE_KERNELS = False "
                           "to run the torch path instead)")
    x2d = as_2d(x)
    if x2d.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        x2d = x2d.float()
    block = _resolve_block(spec, x2d.shape)
    scale = None
    if amax is not None:
        if spec.scaling not in ("tensor", "delayed"):
            raise ValueError(f"amax= is only used by tensor, delayed and gam scaling, not {spec.scaling!r}")
        scale = scale_from_amax(_fp32(amax).to(x.device).reshape(1, 1), spec.format.fmax, spec.margin, spec.pow2)
    elif spec.scaling == "delayed":  # no history yet: the tensor's own amax, as the torch path does
        scale = scale_from_amax(block_amax(x2d.float(), block), spec.format.fmax, spec.margin, spec.pow2)
    if noise is not None and tuple(noise.shape) != tuple(x.shape):
        raise ValueError(f"noise shape {tuple(noise.shape)} != input shape {tuple(x.shape)}")
    u = None
    if spec.rounding == "stochastic":
        u = formats._uniforms(x2d, generator, None if noise is None else noise.reshape(x2d.shape))
    codes, grid = kq.quantize_spec(x2d, spec, scale=scale, noise=u)
    return QTensor(codes.float().reshape(x.shape), grid, spec, tuple(block), x.dtype)


def fake_quantize(
    x: torch.Tensor,
    spec: QuantSpec,
    generator: Optional[torch.Generator] = None,
    noise: Optional[torch.Tensor] = None,
    amax=None,
) -> torch.Tensor:
    """quantize() then dequantize(): same shape and dtype as x."""
    return quantize(x, spec, generator, noise, amax).dequantize()
