"""The reference W_c = bf16(W + unit noise * Delta) in torch, from a seed, the kernel's bits or a given
R, and the unit noise of the three noise laws (rounded Gaussian, DiffQ's uniform, unrounded Gaussian)."""

from __future__ import annotations

from typing import Optional, Union

import torch

from .sampler import philox_bits, rounded_gaussian_from_bits, sample_rounded_gaussian
from .step import _as_2d, _expand, block_delta, block_pair

NOISES = ("rounded_gaussian", "uniform", "gaussian")
RNGS = ("generator", "philox")


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
    block = block_pair(block)
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

