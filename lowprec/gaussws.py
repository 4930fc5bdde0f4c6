"""GaussWS: Gaussian weight sampling for pseudo-quantization training (arXiv 2505.11170), its
comparison arms, post-training MX export and the analytics behind the paper's figures.

What is known about the paper, and what is guessed, is in ``shared/papers/gaussws.md`` (the brief);
the choices below cite its sections.  Every unknown is an option whose default is our reading.

The method (per linear weight W, in training mode)::

    R    ~ round(N(0,1)/2)                         P(0)=.6827  P(+-1)=.1573  P(+-2)=.00135  P(+-3)=2.9e-7
    Delta = 2^ceil(log2 amax_block) * 2^(1-b)       per square block of W's (out, in) layout; exact pow2
    W_c  = bf16(W + R*Delta)                         fp32 add, then one RNE cast to bf16
    dL/dW = dL/dW_c                                  the noise is a constant: identity Jacobian

W_c is computed once per optimizer step and cached (``resample="step"``): it is recomputed only after
an optimizer step (a step post-hook on every ``torch.optim.Optimizer``; fused AdamW does not move a
weight's ``_version``) or an in-place change of the master weight (its ``_version`` counter:
``load_state_dict``, ``copy_``), so gradient-accumulation micro-batches and the forward and
input-gradient GEMMs all see the same W_c; ``mark_step()`` covers updates that neither sees.
Evaluation (``module.training`` False) uses bf16(W) without noise, which is what a BF16 operator
would see.

Randomness is counter-based and reproducible from (layer seed, sample index): ``samples`` counts the
W_c drawn so far and travels with checkpoints (the transform's ``_extra_state``).  Two bit sources:

* ``philox``: Philox4x32-10 (the generator of ``tl.randint4x``), one 32-bit word per element, with
  element (r, c) of the stored 2-D layout taking output ``r % 4`` of counter ``(r // 4) * cols + c``.
  The Triton kernel (``lowprec.kernels.gaussws_noise``) always uses it, and ``philox_bits`` here
  reproduces those bits exactly in torch, so the torch path with ``rng="philox"`` and the kernel give
  bit-identical W_c.
* ``generator``: a ``torch.Generator`` seeded with the same seed (fast on CPU; the torch path's
  default).  Same distribution, different draws.

Sampler (brief 2.2: the paper's bit-operation sampler is unknown): ``threshold`` (default) compares
one uniform 32-bit word per element with the pmf's cumulative probabilities (bit 0 gives the sign,
bits 1..31 the magnitude; exact to 2^-31 per value, |R| <= 3), ``normal`` is the definition
round(randn/2) (torch only).

Delta (brief 2.3): the anchor is ceil(log2 amax) computed from the amax's bits (no log2 floats).
Blocks whose amax is 0 (or an fp32 subnormal) get Delta = 0 and stay exactly bf16(W); NaN and +-Inf
elements are left out of the amax (as everywhere in lowprec.numerics) and pass through the add, so
NaN stays NaN, Inf stays Inf, and they never change another element's noise.  Exponents below
2^-126 flush Delta to 0 (only for blocks with amax < 2^(b-128), far below any trained weight).

Learnable b (brief 2.3, v2): one fp32 Parameter per block (``bits``, flat; ``bits_grid()`` is the
(out, in) block grid), init 6; the forward uses b_eff = clamp(round(b), b_min, b_max) so Delta stays a power of two,
and the backward treats rounding and clamp as identity (straight-through; our choice, the paper's
reconciliation is unknown) with dW_c/db = -ln2 * R * Delta (Delta relaxed as 2^(E+1-b)).
``bit_decay_loss(model, lam)`` is the v2 Eq. 7 penalty lam * sum_layers (1/m_i) sum_blocks (b - b_min)_+.
The learnable arm also caches R as int8 (1 byte/param) for the b gradient; see ``memory_breakdown``.

Arms with the same interface (``weight_transform`` factories for ``lowprec.recipes.Recipe``):
``noise="uniform"`` (DiffQ paper: W + U(-1/2, 1/2)*Delta), ``noise="gaussian"`` (DiffQ repo default:
W + N(0,1)/2*Delta, unrounded), both with the same power-of-two Delta so that only the noise law
differs; and straight-through RTN fake quantization to MXFP4/6/8 (``ste_recipe``), applied in training
and evaluation (the trained model *is* the quantized one).

Entry points:
    gaussws_recipe(method_cfg), ste_recipe(fmt), ste_recipe_from_config(method_cfg)    recipes
        METHODS (GAUSSWS, STE: lowprec.recipes.Method), WEIGHT_EXPORTS (the MX exports of lowprec.evaluate)
    apply_native(model, method_cfg)       the same transforms on plain nn.Linear (bf16 autocast path)
    bit_decay_loss(model, lam), bit_parameters(model), noise_modules(model), mark_step()
    export_weights(model, fmt), exported_copy(model, fmt), EXPORT_FORMATS          post-training MX RTN
    exact_share, expected_exact_share, exactness_rows, block_label                 the 9-bit figure
    bytes_per_param(method_cfg), memory_breakdown(method_cfg)                      memory accounting
    gaussws_reference(w, b, block, ...), philox_bits, rounded_gaussian_from_bits, block_delta
"""

from __future__ import annotations

import copy
import hashlib
import math
from typing import Iterable, Optional, Sequence, Union

import torch
from torch import nn

from .numerics import QuantSpec, block_amax, fake_quantize
from .numerics.checks import integer, nonempty
from .numerics.formats import pow2 as _exact_pow2
from .numerics.scaling import apply_blocks
from .linear import DEFAULT_EXCLUDE, QLinear, layer_seed, linear_layers
from .recipes import Gemm, Method, Recipe, recipe_from_config

__all__ = [
    "GAUSSWS_KEYS", "NOISES", "SAMPLERS", "STE_FORMATS", "METHODS", "WEIGHT_EXPORTS", "BitDecay",
    "gaussws_recipe", "ste_recipe", "ste_recipe_from_config",
    "GaussWSWeight", "STEWeight", "apply_native", "mark_step",
    "bit_decay_loss", "bit_parameters", "noise_modules",
    "export_weights", "exported_copy", "mx_rtn", "EXPORT_FORMATS",
    "exact_share", "expected_exact_share", "exactness_rows", "block_label", "bytes_per_param", "memory_breakdown",
    "rounded_gaussian_pmf", "threshold_pmf", "rounded_gaussian_from_bits", "sample_rounded_gaussian",
    "philox4x32", "philox_bits", "noise_seed", "philox_key", "block_delta", "gaussws_reference", "check_b",
    "B_RANGE",
]

NOISES = ("rounded_gaussian", "uniform", "gaussian")
SAMPLERS = ("threshold", "normal")
RESAMPLES = ("step", "microbatch")
BACKENDS = ("auto", "torch", "triton")
RNGS = ("generator", "philox")

LN2 = math.log(2.0)
PHILOX_ROUNDS = 10
R_MAX = 3  # |R| >= 4 has probability 2.6e-12, below the sampler's 2^-31 resolution
B_RANGE = (1, 24)  # bit-widths b: Delta = 2^(E+1-b) is a step of a b-bit grid; 24 is fp32's precision


# ----------------------------------------------------------------------------------------------
# The noise law R = round(N(0,1)/2)


def _phi_interval(lo: float, hi: float) -> float:
    return 0.5 * (math.erf(hi / math.sqrt(2.0)) - math.erf(lo / math.sqrt(2.0)))


def rounded_gaussian_pmf(max_abs: int = R_MAX) -> dict[int, float]:
    """Exact pmf of round(N(0,1)/2) on -max_abs..max_abs: R = k iff N in [2k-1, 2k+1)."""
    return {k: _phi_interval(2 * k - 1, 2 * k + 1) for k in range(-max_abs, max_abs + 1)}


def _cdf_abs(k: int) -> float:
    # P(|R| <= k) = P(|N| < 2k+1) = erf((2k+1)/sqrt 2)
    return math.erf((2 * k + 1) / math.sqrt(2.0))


# The threshold sampler: m = u >> 1 (31 bits) against 2^31 * P(|R| <= k); sign from bit 0.
THRESHOLDS = tuple(int(round(_cdf_abs(k) * 2.0**31)) for k in range(R_MAX))


def threshold_pmf() -> dict[int, float]:
    """The exact pmf the threshold sampler realises (multiples of 2^-32)."""
    edges = (0,) + THRESHOLDS + (2**31,)
    p_abs = [(edges[k + 1] - edges[k]) / 2.0**31 for k in range(R_MAX + 1)]
    out = {0: p_abs[0]}
    for k in range(1, R_MAX + 1):
        out[k] = out[-k] = p_abs[k] / 2
    return dict(sorted(out.items()))


def rounded_gaussian_from_bits(bits: torch.Tensor) -> torch.Tensor:
    """R (int8, bits' shape) from uniform 32-bit words (any integer dtype; read as uint32)."""
    u = bits.to(torch.int64) & 0xFFFFFFFF
    m = u >> 1
    mag = torch.zeros_like(u)
    for t in THRESHOLDS:
        mag += (m >= t).to(torch.int64)
    return torch.where((u & 1) == 1, -mag, mag).to(torch.int8)


def sample_rounded_gaussian(shape, generator: Optional[torch.Generator] = None, sampler: str = "threshold",
                            device=None) -> torch.Tensor:
    """R ~ round(N(0,1)/2) as int8, from a torch.Generator."""
    if sampler == "threshold":
        bits = torch.randint(0, 2**32, tuple(shape), generator=generator, dtype=torch.int64, device=device)
        return rounded_gaussian_from_bits(bits)
    if sampler == "normal":
        z = torch.randn(tuple(shape), generator=generator, dtype=torch.float32, device=device)
        return torch.round(z / 2).clamp(-127, 127).to(torch.int8)
    raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")


# ----------------------------------------------------------------------------------------------
# Philox4x32 in torch (bit-exact with Triton's tl.randint4x and the kernel)

_PHILOX_M0, _PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
_PHILOX_W0, _PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
_U32 = 0xFFFFFFFF


def _mulhilo32(a: int, x: torch.Tensor):
    # a * x needs 64 unsigned bits, which int64 cannot hold; split x into 16-bit halves.
    xl, xh = x & 0xFFFF, x >> 16
    p_lo, p_hi = a * xl, a * xh  # each < 2^48
    t = p_lo + ((p_hi & 0xFFFF) << 16)
    return (p_hi >> 16) + (t >> 32), t & _U32


def philox4x32(c0: torch.Tensor, c1: torch.Tensor, k0: int, k1: int, rounds: int = PHILOX_ROUNDS):
    """Philox4x32-`rounds` of counters (c0, c1, 0, 0) under key (k0, k1); int64 tensors holding
    uint32 values. Counter (0,0,0,0), key (0,0) gives the Random123 answer 6627e8d5 e169c58d ..."""
    c0 = c0.to(torch.int64) & _U32
    c1 = c1.to(torch.int64) & _U32
    c2 = torch.zeros_like(c0)
    c3 = torch.zeros_like(c0)
    for _ in range(rounds):
        hi0, lo0 = _mulhilo32(_PHILOX_M0, c0)
        hi1, lo1 = _mulhilo32(_PHILOX_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + _PHILOX_W0) & _U32
        k1 = (k1 + _PHILOX_W1) & _U32
    return c0, c1, c2, c3


def philox_key(seed: int) -> tuple[int, int]:
    """The Philox key of a 62-bit seed: two 31-bit halves (so that both fit a signed kernel arg)."""
    return seed & 0x7FFFFFFF, (seed >> 31) & 0x7FFFFFFF


def philox_bits(shape, seed: int, rounds: int = PHILOX_ROUNDS, device=None) -> torch.Tensor:
    """The kernel's 32-bit words for a 2-D tensor of `shape` (int64 holding uint32): element (r, c)
    is output r % 4 of Philox at counter (r // 4) * cols + c (four rows share one Philox call)."""
    rows, cols = shape
    quads = -(-rows // 4)
    ctr = torch.arange(quads * cols, dtype=torch.int64, device=device)
    k0, k1 = philox_key(seed)
    outs = philox4x32(ctr & _U32, ctr >> 32, k0, k1, rounds)
    bits = torch.stack([o.reshape(quads, cols) for o in outs], dim=1).reshape(quads * 4, cols)
    return bits[:rows]


def noise_seed(layer_seed: int, index: int) -> int:
    """62-bit seed of the index-th W_c of a layer; a hash so that nearby (seed, index) pairs give
    unrelated Philox keys."""
    h = hashlib.blake2b(f"gaussws:{int(layer_seed)}:{int(index)}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 62) - 1)


# ----------------------------------------------------------------------------------------------
# Delta and the reference W_c


def _as_2d(w: torch.Tensor) -> torch.Tensor:
    if w.dim() != 2:
        raise ValueError(f"GaussWS works on 2-D weights, got shape {tuple(w.shape)}")
    return nonempty(w, "w")


def check_b(b: Union[int, torch.Tensor], *, read_tensor: bool = True) -> Union[int, torch.Tensor]:
    """b as the functions below take it: an integer in B_RANGE (1..24), or a tensor of such
    integers (any dtype). A tensor's values are checked by reading them, which waits for the
    device; ``read_tensor=False`` skips that for a b the caller built itself (``GaussWSWeight``
    clamps its learnable b to [b_min, b_max]), so training never waits."""
    lo, hi = B_RANGE
    if not isinstance(b, torch.Tensor):
        return integer("b", b, low=lo, high=hi)
    if b.dtype == torch.bool or b.is_complex():
        raise ValueError(f"b: a tensor of b must hold integers, got dtype {b.dtype}")
    if read_tensor and b.numel():
        bad = (b != torch.round(b)) | (b < lo) | (b > hi) if b.is_floating_point() else (b < lo) | (b > hi)
        if bool(bad.any()):
            raise ValueError(f"b: must hold integers in {lo}..{hi}, got {b[bad].flatten()[0].item()!r} "
                             f"(at {tuple(bad.nonzero()[0].tolist())})")
    return b


def _block_pair(block) -> tuple[int, int]:
    if isinstance(block, int) and not isinstance(block, bool):
        block = (block, block)
    if (not isinstance(block, (tuple, list)) or len(block) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in block)):
        raise ValueError(f"block must be a positive int or two positive ints (rows, cols), got {block!r}")
    return int(block[0]), int(block[1])


def grid_shape(shape2d, block) -> tuple[int, int]:
    return -(-shape2d[0] // block[0]), -(-shape2d[1] // block[1])


def delta_from_amax(amax: torch.Tensor, b: Union[int, torch.Tensor], *, check: bool = True) -> torch.Tensor:
    """Delta = 2^(ceil(log2 amax) + 1 - b) per block, fp32, exact; 0 where amax is 0, subnormal or
    the exponent falls below 2^-126. b: an int or an integer tensor broadcastable to amax, in
    B_RANGE (``check_b``; check=False leaves a tensor's values unread)."""
    b = check_b(b, read_tensor=check)
    bits = amax.to(torch.float32).contiguous().view(torch.int32)
    e_field = (bits >> 23) & 0xFF
    e_ceil = e_field - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    b_int = b.to(torch.int32) if isinstance(b, torch.Tensor) else int(b)
    n = e_ceil + 1 - b_int
    ok = (e_field > 0) & (e_field < 255) & (n >= -126)
    return torch.where(ok, _exact_pow2(n.clamp(-126, 127)), torch.zeros((), dtype=torch.float32, device=amax.device))


def block_delta(w2d: torch.Tensor, b: Union[int, torch.Tensor], block=(32, 32), *,
                check: bool = True) -> torch.Tensor:
    """The per-block Delta grid of a 2-D tensor (grid shape ceil(rows/R) x ceil(cols/C))."""
    block = _block_pair(block)
    return delta_from_amax(block_amax(_as_2d(w2d).detach(), block), b, check=check)


def _expand(grid: torch.Tensor, x2d: torch.Tensor, block) -> torch.Tensor:
    return apply_blocks(x2d, grid, block, lambda x, g: x * g)


def _unit_noise(noise: str, shape, *, seed: int, sampler: str, rng: str, device) -> torch.Tensor:
    """Noise before scaling by Delta: R as int8, or fp32 uniform / Gaussian units."""
    if noise == "rounded_gaussian":
        if rng == "philox":
            if sampler != "threshold":
                raise ValueError("rng='philox' draws 32-bit words for the threshold sampler; "
                                 "sampler='normal' needs rng='generator'")
            return rounded_gaussian_from_bits(philox_bits(shape, seed, device=device))
        gen = torch.Generator(device=device).manual_seed(seed)
        return sample_rounded_gaussian(shape, gen, sampler, device=device)
    if rng == "philox":
        raise ValueError(f"rng='philox' is implemented for noise='rounded_gaussian' only, not {noise!r}")
    gen = torch.Generator(device=device).manual_seed(seed)
    if noise == "uniform":
        return torch.rand(tuple(shape), generator=gen, device=device) - 0.5
    if noise == "gaussian":
        return torch.randn(tuple(shape), generator=gen, device=device) / 2
    raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")


def gaussws_reference(w: torch.Tensor, b: Union[int, torch.Tensor] = 6, block=(32, 32), *,
                      seed: Optional[int] = None, bits: Optional[torch.Tensor] = None,
                      r: Optional[torch.Tensor] = None, sampler: str = "threshold", rng: str = "philox",
                      noise: str = "rounded_gaussian", check_b_values: bool = True):
    """Torch reference: (W_c bf16, unit noise, Delta grid) for a 2-D weight in its stored layout.

    The noise comes from, in order of precedence: `r` (given R / unit noise), `bits` (32-bit words
    for the threshold sampler, e.g. from the kernel's debug output), or `seed` with `rng`
    ("philox": the kernel's bits; "generator": torch.Generator). b: int or integer grid in
    B_RANGE (``check_b``; check_b_values=False leaves a grid's values unread)."""
    w2d = _as_2d(w).detach()
    block = _block_pair(block)
    delta = block_delta(w2d, b, block, check=check_b_values)
    if r is not None:
        unit = r
    elif bits is not None:
        if noise != "rounded_gaussian" or sampler != "threshold":
            raise ValueError("bits= feeds the threshold sampler of noise='rounded_gaussian'")
        unit = rounded_gaussian_from_bits(bits)
    elif seed is not None:
        unit = _unit_noise(noise, w2d.shape, seed=seed, sampler=sampler, rng=rng, device=w2d.device)
    else:
        raise ValueError("give seed=, bits= or r=")
    # unit * Delta is exact (|R| <= 3 times a power of two); the add is one fp32 RNE, then one cast.
    noise_t = _expand(delta, unit.to(torch.float32), block)
    w_c = (w2d.to(torch.float32) + noise_t).to(torch.bfloat16)
    return w_c, unit, delta


# ----------------------------------------------------------------------------------------------
# Knowing when a step happened

# A weight's _version counter moves with every in-place update made through torch's dispatcher
# (foreach/for-loop optimizers, load_state_dict, copy_), but NOT with fused optimizers
# (torch.optim.AdamW(fused=True) leaves it unchanged). So the cache key also holds a global count of
# optimizer steps, advanced by a step post-hook on every torch.optim.Optimizer (installed once, when
# the first GaussWS transform is built).
_STEP_EPOCH = 0
_HOOK_HANDLE = None


def _on_optimizer_step(optimizer, args, kwargs) -> None:
    global _STEP_EPOCH
    _STEP_EPOCH += 1


def _install_step_hook() -> None:
    global _HOOK_HANDLE
    if _HOOK_HANDLE is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook
        _HOOK_HANDLE = register_optimizer_step_post_hook(_on_optimizer_step)


def mark_step() -> None:
    """Tell every GaussWS transform that the weights changed (for updates outside torch.optim
    optimizers and outside the dispatcher, e.g. through ``.data``): the next training forward of each
    layer draws a new W_c."""
    _on_optimizer_step(None, (), {})


# ----------------------------------------------------------------------------------------------
# The weight transforms


def _triton_module():
    try:
        from .kernels import gaussws_noise as kg
    except Exception:  # a broken triton install must not break the torch path
        return None
    return kg


class _CachedWeight(torch.autograd.Function):
    """Hands the cached W_c to the GEMMs; the backward is the identity for W (the noise is a
    constant of the step, the bf16 cast straight-through) and -ln2 * R * Delta for a learnable b."""

    @staticmethod
    def forward(ctx, w, bits_eff, cache, unit, delta, block, transposed, out_dtype):
        ctx.w_dtype = w.dtype
        ctx.block, ctx.transposed = block, transposed
        if unit is not None:
            ctx.save_for_backward(unit, delta)
        if out_dtype == cache.dtype:
            return cache.view_as(cache)
        return cache.to(out_dtype)

    @staticmethod
    def backward(ctx, g):
        gw = g.to(ctx.w_dtype) if ctx.needs_input_grad[0] else None
        gb = None
        if ctx.needs_input_grad[1]:
            unit, delta = ctx.saved_tensors
            br, bc = ctx.block
            prod = g.to(torch.float32) * unit.to(torch.float32)
            rows, cols = prod.shape
            nr, nc = grid_shape((rows, cols), ctx.block)
            prod = nn.functional.pad(prod, (0, nc * bc - cols, 0, nr * br - rows))
            sums = prod.reshape(nr, br, nc, bc).sum(dim=(1, 3))
            gb = -LN2 * sums * delta
            if ctx.transposed:
                gb = gb.t()
        return gw, gb, None, None, None, None, None, None


class _STEBits(torch.autograd.Function):
    @staticmethod
    def forward(ctx, b, lo, hi):
        return torch.round(b).clamp(lo, hi)

    @staticmethod
    def backward(ctx, g):
        return g, None, None


class GaussWSWeight(nn.Module):
    """Maps a master weight to the weight every GEMM uses: W_c = bf16(W + noise * Delta) in training,
    bf16(W) in evaluation. One per linear layer; see the module docstring.

    shape: the weight as stored; transposed: True for GPT2 Conv1D weights stored (in, out) (blocks,
    the b grid and ``bits`` refer to the (out, in) layout either way). out_dtype: None returns W_c's
    values in the master weight's dtype (QLinear's emulation then keeps an fp32 weight gradient, as
    in the bf16 recipe); torch.bfloat16 returns the cached bf16 tensor itself (autocast path)."""

    def __init__(self, shape, *, seed: int = 0, transposed: bool = False, noise: str = "rounded_gaussian",
                 b: int = 6, block=(32, 32), learnable_b: bool = False, b_min: int = 4, b_max: int = 16,
                 resample: str = "step", sampler: str = "threshold", backend: str = "auto",
                 rng: str = "generator", out_dtype: Optional[torch.dtype] = None):
        super().__init__()
        if noise not in NOISES:
            raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
        if resample not in RESAMPLES:
            raise ValueError(f"resample must be one of {RESAMPLES}, got {resample!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if rng not in RNGS:
            raise ValueError(f"rng must be one of {RNGS}, got {rng!r}")
        for name, v in (("b", b), ("b_min", b_min), ("b_max", b_max)):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or (name != "b" and v != int(v)):
                raise ValueError(f"{name} must be a number (b_min/b_max integers), got {v!r}")
        lo, hi = B_RANGE
        if not lo <= b_min <= b_max <= hi:
            raise ValueError(f"need {lo} <= b_min <= b_max <= {hi}, got b_min={b_min}, b_max={b_max}")
        if not learnable_b and (not math.isfinite(b) or b != int(b) or not lo <= b <= hi):
            raise ValueError(f"fixed b must be an integer in {lo}..{hi}, got {b!r}")
        if learnable_b and not (math.isfinite(b) and b_min <= b <= b_max):
            raise ValueError(f"b (the learnable b's initial value) must be in [b_min, b_max] = "
                             f"[{b_min}, {b_max}], got {b!r}")
        if sampler == "normal" and noise != "rounded_gaussian":
            raise ValueError("sampler applies to noise='rounded_gaussian' only")
        if len(shape) != 2:
            raise ValueError(f"GaussWS works on 2-D weights, got shape {tuple(shape)}")
        self.shape, self.transposed = tuple(int(s) for s in shape), bool(transposed)
        self.layer_seed = int(seed)
        self.noise, self.sampler, self.resample = noise, sampler, resample
        self.backend, self.rng, self.out_dtype = backend, rng, out_dtype
        self.block = _block_pair(block)  # (out, in) orientation
        self.b_min, self.b_max = int(b_min), int(b_max)
        self.learnable_b = bool(learnable_b)
        out_in = self.shape[::-1] if self.transposed else self.shape
        self.grid = grid_shape(out_in, self.block)
        self.b_init = b
        if self.learnable_b:
            # flat (row-major over the (out, in) block grid; bits_grid() is the 2-D view): trainers
            # that exempt parameters with dim < 2 from weight decay then exempt b too
            self.bits = nn.Parameter(torch.full((self.grid[0] * self.grid[1],), float(b), dtype=torch.float32))
        else:
            self.b = int(b)
        # W_c drawn so far: the counter half of the (layer seed, counter) RNG stream. A host int, not
        # a buffer: reading a CUDA buffer would sync the device once per layer and step. It travels
        # with checkpoints as the module's extra state, so a resumed run draws what an uninterrupted
        # one would have.
        self.samples = 0
        self._cache: Optional[dict] = None
        self.last_backend: Optional[str] = None
        _install_step_hook()

    def get_extra_state(self):
        return {"samples": int(self.samples)}

    def set_extra_state(self, state) -> None:
        self.samples = int((state or {}).get("samples", 0))

    def extra_repr(self) -> str:
        b = (f"learnable b (init {self.b_init}, used in [{self.b_min}, {self.b_max}])" if self.learnable_b
             else f"b={self.b}")
        return (f"noise={self.noise}, {b}, block={self.block}, resample={self.resample}, "
                f"sampler={self.sampler}, backend={self.backend}")

    # -- layout helpers: noise is drawn on the stored layout, blocks refer to (out, in)
    @property
    def stored_block(self) -> tuple[int, int]:
        return self.block[::-1] if self.transposed else self.block

    def bits_grid(self) -> torch.Tensor:
        """The learnable b as the (out, in) block grid (a view of ``bits``)."""
        return self.bits.view(self.grid)

    def effective_bits(self) -> torch.Tensor:
        """The integer b grid used by the forward ((out, in) block grid), differentiable (STE)."""
        if not self.learnable_b:
            return torch.full(self.grid, float(self.b))
        return _STEBits.apply(self.bits_grid(), float(self.b_min), float(self.b_max))

    def invalidate(self) -> None:
        """Forget the cached W_c: the next training forward draws a new one (needed only when the
        weight was changed without bumping its version, e.g. through ``.data``)."""
        self._cache = None

    def _key(self, w: torch.Tensor):
        key = (_STEP_EPOCH, w.data_ptr(), w._version, w.device, w.dtype, tuple(w.shape))
        if self.learnable_b:
            key += (self.bits.data_ptr(), self.bits._version)
        return key

    def _use_triton(self, w: torch.Tensor) -> bool:
        if self.backend == "torch":
            return False
        kernel_ok = self.noise == "rounded_gaussian" and self.sampler == "threshold"
        kg = _triton_module() if kernel_ok else None
        usable = kg is not None and kg.triton_available(w.device) and kg.supports_block(self.stored_block)
        if self.backend == "triton":
            if not usable:
                raise RuntimeError(
                    "backend='triton' needs noise='rounded_gaussian', sampler='threshold', a stored block "
                    f"with rows divisible by 4 (got {self.stored_block}) and Triton on {w.device}")
            return True
        return usable and w.is_cuda

    def _draw(self, w: torch.Tensor, b_int: torch.Tensor):
        w2d = w.detach()
        seed = noise_seed(self.layer_seed, self.samples)
        if self.learnable_b:
            b_stored = b_int.t() if self.transposed else b_int
            b_arg = b_stored.to(device=w.device, dtype=torch.int32).contiguous()
        else:
            b_arg = self.b
        keep_unit = self.learnable_b
        if self._use_triton(w2d):
            kg = _triton_module()
            res = kg.gaussws_noise_ex(w2d, b_arg, self.stored_block, seed, return_r=keep_unit,
                                      return_delta=keep_unit, check_b_values=False)
            w_c, unit, delta = res.w_c, res.r, res.delta
            self.last_backend = "triton"
        else:
            # b_arg is this module's own (clamped to [b_min, b_max]): reading it would wait for the device
            w_c, unit, delta = gaussws_reference(w2d, b_arg, self.stored_block, seed=seed, sampler=self.sampler,
                                                 rng=self.rng, noise=self.noise, check_b_values=False)
            self.last_backend = "torch"
        self.samples += 1
        if not keep_unit:
            unit = delta = None
        return w_c, unit, delta

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        if tuple(w.shape) != self.shape:
            raise ValueError(f"weight shape {tuple(w.shape)} != the transform's {self.shape}")
        out_dtype = self.out_dtype or w.dtype
        if not self.training:
            return w.to(torch.bfloat16).to(out_dtype)
        b_eff = self.effective_bits() if self.learnable_b else None
        key = self._key(w)
        c = self._cache
        if self.resample == "microbatch" or c is None or c["key"] != key:
            with torch.no_grad():
                w_c, unit, delta = self._draw(w, b_eff.detach() if b_eff is not None else None)
            # draws never bump w's version, so the key taken before the draw is the one to match
            c = self._cache = {"key": key, "w_c": w_c, "unit": unit, "delta": delta}
        return _CachedWeight.apply(w, b_eff, c["w_c"], c["unit"], c["delta"], self.stored_block,
                                   self.transposed, out_dtype)

    @classmethod
    def factory(cls, **opts):
        """A ``Recipe.weight_transform``: builds the transform for a QLinear layer."""
        def make(layer) -> "GaussWSWeight":
            return cls(tuple(layer.weight.shape), seed=layer.seed, transposed=layer.transposed, **opts)
        make.__name__ = "gaussws(" + ", ".join(f"{k}={v}" for k, v in sorted(opts.items())) + ")"
        return make


class STEWeight(nn.Module):
    """Straight-through round-to-nearest MX fake quantization of the weight (1x32 blocks along the
    input dimension, E8M0 scales; lowprec.numerics QuantSpec(scaling="mx")), in training and eval."""

    def __init__(self, fmt: str, transposed: bool = False):
        super().__init__()
        self.fmt = _ste_format(fmt)
        self.transposed = bool(transposed)

    def extra_repr(self) -> str:
        return f"fmt={self.fmt}, mx 1x32 along in"

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        q = mx_rtn(w.detach(), self.fmt, transposed=self.transposed)
        return w + (q - w.detach())

    @classmethod
    def factory(cls, fmt: str):
        fmt = _ste_format(fmt)

        def make(layer) -> "STEWeight":
            return cls(fmt, transposed=layer.transposed)
        make.__name__ = f"ste_mx({fmt})"
        return make


# ----------------------------------------------------------------------------------------------
# MX round-to-nearest (STE arms and export)

STE_FORMATS = {"mxfp4": "e2m1", "mxfp6_e3m2": "e3m2", "mxfp6_e2m3": "e2m3", "mxfp8": "e4m3"}
_MX_ELEMENT_FORMATS = tuple(STE_FORMATS.values())
# names export_weights / mx_rtn accept -> the MX element format
EXPORT_FORMATS = {**STE_FORMATS, **{f: f for f in _MX_ELEMENT_FORMATS}}


def _ste_format(fmt: str) -> str:
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"MX format must be one of {sorted(EXPORT_FORMATS)}, got {fmt!r}")
    return EXPORT_FORMATS[fmt]


def mx_rtn(w: torch.Tensor, fmt: str, transposed: bool = False) -> torch.Tensor:
    """W round-to-nearest on the MX grid of `fmt` (1x32 blocks along the input dimension), in W's
    dtype (exact: these grids fit bf16)."""
    fmt = _ste_format(fmt)
    w2d = w.t() if transposed else w
    q = fake_quantize(w2d.to(torch.float32), QuantSpec(fmt=fmt, scaling="mx"))
    return (q.t() if transposed else q).to(w.dtype)


# ----------------------------------------------------------------------------------------------
# Recipes

GAUSSWS_KEYS = {"noise": "rounded_gaussian", "b": 6, "block": [32, 32], "learnable_b": False,
                "b_min": 4, "b_max": 16, "resample": "step", "sampler": "threshold", "backend": "auto",
                "rng": "generator", "bit_decay": 0.0}
STE_KEYS = {"fmt": None}
_BF16 = Gemm(None, None)


def gaussws_options(own: dict) -> dict:
    """GaussWSWeight options from a method section's own keys (defaults: GAUSSWS_KEYS)."""
    opts = {k: own.get(k, v) for k, v in GAUSSWS_KEYS.items() if k != "bit_decay"}
    opts["block"] = _block_pair(tuple(opts["block"]) if isinstance(opts["block"], list) else opts["block"])
    _bit_decay(own)
    # validate now (config time), not at the first forward
    GaussWSWeight((opts["block"][0], opts["block"][1]), **opts)
    return opts


def _bit_decay(own: dict) -> float:
    lam = own.get("bit_decay", GAUSSWS_KEYS["bit_decay"])
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not lam >= 0:
        raise ValueError(f"method.bit_decay must be a number >= 0, got {lam!r}")
    return float(lam)


class BitDecay:
    """The training-loss term of learnable b: ``bit_decay_loss(model, lam)`` (a Recipe's extra_loss)."""

    def __init__(self, lam: float):
        self.lam = lam

    def __call__(self, model: nn.Module) -> torch.Tensor:
        return bit_decay_loss(model, self.lam)

    def __repr__(self) -> str:
        return f"BitDecay(lam={self.lam:g})"


def _build_gaussws(own: dict) -> Recipe:
    opts = gaussws_options(own)
    lam = _bit_decay(own)
    b = "learnable b" if opts["learnable_b"] else f"b={opts['b']}"
    desc = (f"{opts['noise']} weight noise, {b}, {opts['block'][0]}x{opts['block'][1]} blocks, "
            f"W_c cached per {opts['resample']}; BF16 operands, fp32 accumulate")
    return Recipe("gaussws", _BF16, _BF16, _BF16, high_precision="bf16", description=desc,
                  weight_transform=GaussWSWeight.factory(**opts), extra_loss=BitDecay(lam) if lam else None)


def ste_recipe(fmt: str) -> Recipe:
    """Straight-through RTN MX fake quantization of the weights (fmt: e2m1/e3m2/e2m3/e4m3 or
    mxfp4/mxfp6_e3m2/mxfp6_e2m3/mxfp8)."""
    f = _ste_format(fmt)
    alias = {v: k for k, v in STE_FORMATS.items()}[f]
    return Recipe(f"ste_{alias}", _BF16, _BF16, _BF16, high_precision="bf16",
                  description=f"weights fake-quantized to MX {f} (RTN, 1x32 along in, "
                              "straight-through); BF16 operands, fp32 accumulate",
                  weight_transform=STEWeight.factory(f))


def _build_ste(own: dict) -> Recipe:
    if own.get("fmt") is None:
        raise ValueError("method (ste): needs fmt (e2m1, e3m2, e2m3 or e4m3)")
    return ste_recipe(own["fmt"])


# The contract (lowprec.recipes.Method): the recipes a method section may name, and the exports
# lowprec.evaluate offers
GAUSSWS = Method("gaussws", GAUSSWS_KEYS, _build_gaussws)
STE = Method("ste", STE_KEYS, _build_ste)
METHODS = (GAUSSWS, STE)


def gaussws_recipe(method_cfg: Optional[dict] = None) -> Recipe:
    """The GaussWS recipe (or its noise arms) for a method config such as
    ``{recipe: gaussws, b: 6, block: [32, 32], learnable_b: false, resample: step,
    sampler: threshold, noise: rounded_gaussian}``; GEMM operands stay BF16, fp32 accumulate.
    ``bit_decay`` > 0 adds the learnable b's penalty to the training loss (``Recipe.extra_loss``)."""
    return GAUSSWS.recipe_for(method_cfg)


def ste_recipe_from_config(method_cfg: dict) -> Recipe:
    """``{recipe: ste, fmt: e2m1}`` (fmt: e2m1/e3m2/e2m3/e4m3 or mxfp4/mxfp6_e3m2/mxfp6_e2m3/mxfp8)."""
    return STE.recipe_for(method_cfg)


# ----------------------------------------------------------------------------------------------
# Model-level helpers


def noise_modules(model: nn.Module):
    """(name, GaussWSWeight) for every GaussWS transform in the model."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, GaussWSWeight)]


def bit_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The learnable bit-widths (1-D): keep them out of weight decay (decay would drag b toward 0,
    on top of bit_decay_loss) and consider a learning rate of their own."""
    return [m.bits for _, m in noise_modules(model) if m.learnable_b]


def bit_decay_loss(model: nn.Module, lam: float, b_min: Optional[float] = None) -> torch.Tensor:
    """lam * sum_layers (1/m_i) sum_blocks (b - b_min)_+ over layers with learnable b (v2 Eq. 7 as
    the reviewers describe it; m_i = number of blocks of layer i). 0 when there are none."""
    terms = []
    for _, m in noise_modules(model):
        if m.learnable_b:
            floor = m.b_min if b_min is None else b_min
            terms.append(torch.relu(m.bits - floor).sum() / m.bits.numel())
    if not terms:
        return torch.zeros(())
    return lam * torch.stack(terms).sum()


def apply_native(model: nn.Module, method_cfg: dict, include: Optional[Iterable[str]] = None,
                 exclude: Optional[Iterable[str]] = None, seed: int = 0) -> list[str]:
    """Install a recipe's weight transform on plain nn.Linear / Conv1D layers as a parametrization
    (``torch.nn.utils.parametrize``), leaving the layers' own kernels in place: the path for bf16
    autocast training on GPU, where QLinear's fp32 emulation would dominate the step. GaussWS
    transforms return the cached bf16 W_c (inputs must be bf16: use autocast). Create the optimizer
    afterwards (the weight moves to ``<layer>.parametrizations.weight.original``). include/exclude
    default to the method config's, then to every linear layer but the LM head; layer seeds follow
    QLinear's rule, so both paths give a layer the same noise stream (given the same rng)."""
    from torch.nn.utils import parametrize
    recipe = recipe_from_config(method_cfg)
    include = method_cfg.get("include") if include is None else include
    exclude = method_cfg.get("exclude", DEFAULT_EXCLUDE) if exclude is None else exclude
    done = []
    for _, _, name, mod, is_conv in list(linear_layers(model, include, exclude)):
        if isinstance(mod, QLinear) or parametrize.is_parametrized(mod):
            continue
        stub = type("LayerInfo", (), {"weight": mod.weight, "seed": layer_seed(seed, name), "transposed": is_conv})
        t = recipe.weight_transform(stub)
        if isinstance(t, GaussWSWeight):
            t.out_dtype = torch.bfloat16
        # unsafe: the safe path evaluates the transform once at registration, which would draw a W_c
        parametrize.register_parametrization(mod, "weight", t, unsafe=True)
        done.append(name)
    if not done:
        raise ValueError(f"apply_native: no linear layer matched include={include} exclude={list(exclude)}")
    return done


def _master_weight(mod: nn.Module) -> torch.Tensor:
    p = getattr(mod, "parametrizations", None)
    if p is not None and "weight" in p:
        return p["weight"].original
    return mod.weight


def _master_key(name: str, mod: nn.Module) -> str:
    p = getattr(mod, "parametrizations", None)
    suffix = "parametrizations.weight.original" if p is not None and "weight" in p else "weight"
    return f"{name}.{suffix}" if name else suffix


def export_weights(model: nn.Module, fmt: str, include: Optional[Iterable[str]] = None,
                   exclude: Iterable[str] = DEFAULT_EXCLUDE, inplace: bool = True) -> dict:
    """Post-training export: every linear weight (QLinear, nn.Linear, Conv1D, parametrized or not;
    LM head excluded by default) replaced by its round-to-nearest MX quantization (fmt: any key of
    EXPORT_FORMATS: mxfp8/mxfp6_e3m2/mxfp6_e2m3/mxfp4 or e4m3/e3m2/e2m3/e2m1; 1x32 blocks along the
    input dimension, E8M0 scales).

    inplace=True (default): the model's weights are overwritten (lowprec.evaluate reloads a fresh
    model per format); inplace=False leaves the model untouched. Either way the returned state dict
    is a copy with the exported weights. Evaluate in eval mode: GaussWS then adds no noise and uses
    bf16(W), which is exact for every MX grid value."""
    f = _ste_format(fmt)
    # QLinear's extra state (delayed-scaling histories) is a dict, not a tensor
    sd = {k: v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
          for k, v in model.state_dict().items()}
    for _, _, name, mod, transposed in linear_layers(model, include, exclude):
        w = _master_weight(mod)
        q = mx_rtn(w.detach(), f, transposed=transposed)
        sd[_master_key(name, mod)] = q
        if inplace:
            with torch.no_grad():
                w.copy_(q)
    return sd


def exported_copy(model: nn.Module, fmt: str, **kw) -> nn.Module:
    """A deep copy of the model in eval mode with exported (MX RTN) weights."""
    m = copy.deepcopy(model)
    export_weights(m, fmt, inplace=True, **kw)
    return m.eval()


# the contract's weight exports (lowprec.evaluate --export): post-training MX RTN of every linear weight
WEIGHT_EXPORTS = {fmt: export_weights for fmt in EXPORT_FORMATS}


# ----------------------------------------------------------------------------------------------
# Analytics: exactness of the noise under the BF16 operator, memory


_OPERATORS = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _representable(x: torch.Tensor, operator: str) -> torch.Tensor:
    return x.to(_OPERATORS[operator]).to(torch.float32) == x


def _exact_sum(a: torch.Tensor, b: torch.Tensor, operator: str) -> torch.Tensor:
    """Whether the real sum a + b is representable in the operator dtype: TwoSum gives the fp32
    sum s and its rounding error e exactly, so a + b = s + e; exact iff e == 0 and s fits."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return (e == 0) & _representable(s, operator) & torch.isfinite(s)


def _prepare(w: torch.Tensor, b, block, operator: str):
    if operator not in _OPERATORS:
        raise ValueError(f"operator must be one of {tuple(_OPERATORS)}, got {operator!r}")
    w2d = _as_2d(w).detach().to(torch.float32)
    # the noise is added to a weight the operator can already hold; fp32 weights are first rounded,
    # else every R = 0 element would count as inexact and the curve would say nothing about the noise
    w_op = w2d.to(_OPERATORS[operator]).to(torch.float32)
    block = _block_pair(block)
    delta = block_delta(w_op, b, block)
    return w_op, _expand(delta, torch.ones_like(w_op), block), block


def _matrices(w) -> list[torch.Tensor]:
    """One 2-D weight, or the weights of a model (a sequence of 2-D tensors in (out, in) layout, each
    blocked on its own: a block never spans two matrices)."""
    ws = [w] if isinstance(w, torch.Tensor) else list(w)
    if not ws:
        raise ValueError("w: no weight matrices given")
    return ws


def block_label(block) -> str:
    """"32x32", "1x32": (rows, cols) of the (out, in) layout, as tables and figures name a block shape."""
    r, c = _block_pair(block)
    return f"{r}x{c}"


def exact_share(w, b: int, block=(32, 32), *, seed: int = 0, sampler: str = "threshold",
                operator: str = "bf16", r: Optional[torch.Tensor] = None) -> float:
    """Share of elements with op(W + R*Delta) == W + R*Delta exactly, for one sampled R (or the
    given r, for a single W), W first rounded to the operator dtype ("bf16" or "fp16"). W: a 2-D
    weight or a sequence of them (the share over all their elements, one R stream)."""
    ws = _matrices(w)
    if r is not None and len(ws) != 1:
        raise ValueError("r= gives the noise of one weight matrix; pass a single 2-D w")
    gen = None
    exact = total = 0
    for m in ws:
        w_op, delta_full, _ = _prepare(m, b, block, operator)
        if r is None:
            if gen is None:
                gen = torch.Generator(device=w_op.device).manual_seed(seed)
            rm = sample_rounded_gaussian(w_op.shape, gen, sampler, device=w_op.device)
        else:
            rm = r
        exact += _exact_sum(w_op, rm.to(torch.float32) * delta_full, operator).sum().item()
        total += w_op.numel()
    return exact / total


def expected_exact_share(w, b: int, block=(32, 32), *, operator: str = "bf16", return_std: bool = False):
    """E[exact_share] over R's pmf: mean over elements of sum_r P(r) [op(w + r Delta) == w + r Delta].
    W: a 2-D weight or a sequence of them (the mean over all their elements). return_std: also the
    standard deviation of one sampled exact_share (elements independent)."""
    p_sum = var_sum = 0.0
    n = 0
    for m in _matrices(w):
        w_op, delta_full, _ = _prepare(m, b, block, operator)
        p_elem = torch.zeros_like(w_op, dtype=torch.float64)
        for k, p in rounded_gaussian_pmf().items():
            p_elem += p * _exact_sum(w_op, k * delta_full, operator).double()
        p_sum += p_elem.sum().item()
        var_sum += (p_elem * (1 - p_elem)).sum().item()
        n += p_elem.numel()
    mean = p_sum / n
    if not return_std:
        return mean
    return mean, math.sqrt(var_sum) / n


def exactness_rows(w, bs: Sequence[int] = tuple(range(4, 13)), block=(32, 32), *,
                   source: str = "", seed: int = 0, operator: str = "bf16") -> list[dict]:
    """Rows for the exactness figure/table: for each b, kind 'expected' (over the pmf, with the
    sampling std of one draw) and 'measured' (one draw), with the block shape (``block_label``);
    is_peak = 1 on the b with the highest share per kind (the smallest such b on ties) and, on the
    peak row, lead = its share minus the runner-up's (how clearly the peak stands out). W: a 2-D
    weight or a sequence of them."""
    rows = []
    label = block_label(block)
    for b in bs:
        mean, std = expected_exact_share(w, b, block, operator=operator, return_std=True)
        rows.append({"source": source, "block": label, "operator": operator, "b": int(b), "kind": "expected",
                     "share": mean, "std": std})
        rows.append({"source": source, "block": label, "operator": operator, "b": int(b), "kind": "measured",
                     "share": exact_share(w, b, block, seed=seed + int(b), operator=operator), "std": std})
    for kind in ("expected", "measured"):
        sub = sorted((r for r in rows if r["kind"] == kind), key=lambda r: (-r["share"], r["b"]))
        for r in sub:
            r["is_peak"], r["lead"] = 0, math.nan
        sub[0]["is_peak"] = 1
        sub[0]["lead"] = sub[0]["share"] - sub[1]["share"] if len(sub) > 1 else math.nan
    return rows


def memory_breakdown(method_cfg: Optional[dict] = None, **overrides) -> dict:
    """Extra GPU memory per noised weight element of a method (analytic, bytes), by component, for a
    method config (``{recipe: gaussws, learnable_b: true, ...}``; None: the GaussWS defaults) with
    keyword overrides (learnable_b=, block=, noise=, optimizer=).

    w_c_cache: the bf16 W_c kept between steps (the paper's "2 bytes per parameter").
    Learnable b adds the cached unit noise for the b gradient (int8 R: 1 byte; fp32 for the
    uniform/Gaussian arms), the Delta grid, and the b Parameter with its gradient and two AdamW
    states (4 bytes per block each). Recipes other than gaussws (bf16, ste: their weights are
    computed in each forward) hold nothing extra between steps. Transients (QLinear's fp32 copy of
    W_c in the emulation path, autocast's per-forward bf16 weight copies) are not counted."""
    cfg = {"recipe": "gaussws", **(method_cfg or {})}
    if cfg.get("recipe") != GAUSSWS.recipe:
        return {"total": 0.0}
    optimizer = overrides.pop("optimizer", "adamw")
    cfg.update(overrides)
    opts = gaussws_options(GAUSSWS.own_keys(cfg))
    br, bc = opts["block"]
    per_block = 1.0 / (br * bc)
    parts = {"w_c_cache": 2.0}
    if opts["learnable_b"]:
        parts["unit_noise_cache"] = 1.0 if opts["noise"] == "rounded_gaussian" else 4.0
        parts["delta_grid"] = 4.0 * per_block
        states = {"adamw": 2, "adam": 2, "sgd": 0}.get(optimizer, 2)
        parts["bits_param_grad_states"] = 4.0 * (2 + states) * per_block
    parts["total"] = sum(parts.values())
    return parts


def bytes_per_param(method_cfg: Optional[dict] = None, **overrides) -> float:
    """Total analytic extra bytes per noised weight element (see memory_breakdown): 2.0 for GaussWS
    with a fixed b, 0.0 for recipes that keep nothing between steps."""
    return memory_breakdown(method_cfg, **overrides)["total"]
