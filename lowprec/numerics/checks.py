"""Argument checks shared by the quantizers, their reference functions and the Triton kernels'
wrappers. Each error names the parameter and the value it got. They look at host values and tensor
metadata only, never at a device tensor's contents, so a check on every GEMM costs no device sync;
quantizer objects still run them once, when they are built.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional

import torch

__all__ = ["nonempty", "number", "integer", "block_shape"]


def nonempty(x: torch.Tensor, name: str = "x") -> torch.Tensor:
    """x itself, unless it has no elements: an empty operand has no amax, no scale and no block
    grid, so every quantizer refuses it here instead of failing somewhere inside torch."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: must be a torch.Tensor, got {type(x).__name__}")
    if x.numel() == 0:
        raise ValueError(f"{name}: empty tensor of shape {tuple(x.shape)}; there is nothing to quantize")
    return x


def _is_real(v) -> bool:
    # numbers.Real: Python and numpy scalars alike (numpy's bool is not one); a bool is not a number here
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _bounds_text(low, high, low_open, high_open) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high:g}")
    return " and ".join(parts)


def number(name: str, v, *, low: Optional[float] = None, high: Optional[float] = None,
           low_open: bool = False, high_open: bool = False) -> float:
    """v as a float if it is a finite real number (not a bool) within the bounds; NaN and +-Inf
    are refused because every threshold here would silently mean "always" or "never" with them."""
    ok = _is_real(v) and math.isfinite(v)
    if ok and low is not None:
        ok = v > low if low_open else v >= low
    if ok and high is not None:
        ok = v < high if high_open else v <= high
    if not ok:
        bounds = _bounds_text(low, high, low_open, high_open)
        raise ValueError(f"{name}: must be a finite number{' ' + bounds if bounds else ''}, got {v!r}")
    return float(v)


def integer(name: str, v, *, low: Optional[int] = None, high: Optional[int] = None) -> int:
    """v as an int if it is an integer (an int, or a float with an integral value; not a bool)
    within [low, high]."""
    ok = _is_real(v) and math.isfinite(v) and v == int(v)
    if ok and low is not None:
        ok = v >= low
    if ok and high is not None:
        ok = v <= high
    if not ok:
        bounds = _bounds_text(low, high, False, False)
        raise ValueError(f"{name}: must be an integer{' ' + bounds if bounds else ''}, got {v!r}")
    return int(v)


def block_shape(block, name: str = "block") -> tuple:
    """(rows, cols) of a block: two positive ints (a list from YAML is fine)."""
    if (not isinstance(block, (tuple, list)) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in block)):
        raise ValueError(f"{name}: must be two positive ints (rows, cols), got {block!r}")
    return (int(block[0]), int(block[1]))


def as_2d(x: torch.Tensor) -> torch.Tensor:
    """x as the 2-D matrix that scaling and GEMMs see: leading dimensions flattened into rows, the
    last one kept (the reduction dimension); a scalar is 1 x 1. A view where reshape allows one."""
    if x.dim() == 0:
        return x.reshape(1, 1)
    return x.reshape(-1, x.shape[-1])


def one_of(name: str, value, choices):
    """``value`` if it is one of ``choices``, else a ValueError naming ``name`` and the choices."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value
