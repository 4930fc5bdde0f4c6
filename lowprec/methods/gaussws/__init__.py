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

The package, by concern (each name below is also exported here):
    sampler       the noise law, the threshold sampler, Philox (shared with the noise kernel)
    step          Delta, and the checks of b and of the block shape (shared with the kernel)
    noise         the unit noise of each arm and the reference W_c: gaussws_reference
    step_hook     the optimizer-step hook behind the per-step cache: mark_step()
    autograd      the cached W_c's Function and the learnable b's straight-through rounding
    weight        GaussWSWeight, STEWeight, mx_rtn, EXPORT_FORMATS
    recipes       the contract: GAUSSWS_KEYS, METHODS (GAUSSWS, STE), gaussws_recipe, ste_recipe, BitDecay
    model         noise_modules, bit_parameters, bit_decay_loss, apply_native (bf16 autocast path),
                  export_weights, exported_copy, WEIGHT_EXPORTS (post-training MX RTN)
    analysis      exact_share, expected_exact_share, exactness_rows, block_label (the 9-bit figure);
                  memory_breakdown, bytes_per_param (memory accounting)
"""

from .analysis import (block_label, bytes_per_param, exact_share, exactness_rows, expected_exact_share,
                       memory_breakdown)
from .model import (WEIGHT_EXPORTS, apply_native, bit_decay_loss, bit_parameters, export_weights, exported_copy,
                    noise_modules)
from .noise import NOISES, gaussws_reference
from .recipes import GAUSSWS, GAUSSWS_KEYS, METHODS, STE, STE_KEYS, BitDecay, gaussws_recipe, ste_recipe, \
    ste_recipe_from_config
from .sampler import (PHILOX_ROUNDS, SAMPLERS, THRESHOLDS, noise_seed, philox4x32, philox_bits, philox_key,
                      rounded_gaussian_from_bits, rounded_gaussian_pmf, sample_rounded_gaussian, threshold_pmf)
from .step import B_RANGE, block_delta, check_b, delta_from_amax
from .step_hook import mark_step
from .weight import EXPORT_FORMATS, STE_FORMATS, GaussWSWeight, STEWeight, mx_rtn

__all__ = [
    "block_label",
    "bytes_per_param",
    "exact_share",
    "exactness_rows",
    "expected_exact_share",
    "memory_breakdown",
    "WEIGHT_EXPORTS",
    "apply_native",
    "bit_decay_loss",
    "bit_parameters",
    "export_weights",
    "exported_copy",
    "noise_modules",
    "NOISES",
    "gaussws_reference",
    "GAUSSWS",
    "GAUSSWS_KEYS",
    "METHODS",
    "STE",
    "STE_KEYS",
    "BitDecay",
    "gaussws_recipe",
    "ste_recipe",
    "ste_recipe_from_config",
    "PHILOX_ROUNDS",
    "SAMPLERS",
    "THRESHOLDS",
    "noise_seed",
    "philox4x32",
    "philox_bits",
    "philox_key",
    "rounded_gaussian_from_bits",
    "rounded_gaussian_pmf",
    "sample_rounded_gaussian",
    "threshold_pmf",
    "B_RANGE",
    "block_delta",
    "check_b",
    "delta_from_amax",
    "mark_step",
    "EXPORT_FORMATS",
    "STE_FORMATS",
    "GaussWSWeight",
    "STEWeight",
    "mx_rtn",
]
