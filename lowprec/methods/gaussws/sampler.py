"""GaussWS's noise R = round(N(0,1)/2) and its random bits: the exact pmf, the threshold sampler (one
uniform 32-bit word per element against the pmf's cumulative probabilities: bit 0 gives the sign,
bits 1..31 the magnitude), and Philox4x32-10 in torch, bit-exact with Triton's ``tl.randint4x`` and
the noise kernel (``lowprec.kernels.gaussws_noise``, which takes its constants from here). Element
(r, c) of a 2-D tensor takes output ``r % 4`` of counter ``(r // 4) * cols + c``. No kernel is
imported here: this module is below both the torch path and the kernel."""

from __future__ import annotations

import hashlib
import math
from typing import Optional

import torch

SAMPLERS = ("threshold", "normal")
PHILOX_ROUNDS = 10
R_MAX = 3  # |R| >= 4 has probability 2.6e-12, below the sampler's 2^-31 resolution

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

