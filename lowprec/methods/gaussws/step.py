"""GaussWS's step size Delta = 2^(ceil(log2 amax_block) + 1 - b) per block of the weight, exact, and the
checks of b and of the block shape (which the noise kernel shares: no kernel is imported here)."""

from __future__ import annotations

from typing import Union

import torch

from ...numerics import block_amax
from ...numerics.checks import integer, nonempty
from ...numerics.formats import pow2 as _exact_pow2
from ...numerics.scaling import apply_blocks

B_RANGE = (1, 24)  # bit-widths b: Delta = 2^(E+1-b) is a step of a b-bit grid; 24 is fp32's precision


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


def block_pair(block) -> tuple[int, int]:
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
    block = block_pair(block)
    return delta_from_amax(block_amax(_as_2d(w2d).detach(), block), b, check=check)


def _expand(grid: torch.Tensor, x2d: torch.Tensor, block) -> torch.Tensor:
    return apply_blocks(x2d, grid, block, lambda x, g: x * g)

