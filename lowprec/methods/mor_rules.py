"""MoR's decision rule, shared by the torch path (``lowprec.methods.mor``) and the kernels
(``lowprec.kernels.mor_quant``): nothing here imports a kernel, so both sides import this module."""

from __future__ import annotations

from ..numerics.checks import number

DEFAULT_THRESHOLD = 0.045


def check_threshold(threshold) -> float:
    """The threshold as a float: a finite number >= 0 (NaN would always choose BF16 and Inf always
    E4M3, whatever the error)."""
    return number("threshold", threshold, low=0.0)


def decide(err: float, threshold: float = DEFAULT_THRESHOLD) -> str:
    """"e4m3" if err <= threshold, else "bf16" (a NaN error is not <= anything: BF16). threshold:
    a finite number >= 0."""
    return "e4m3" if err <= check_threshold(threshold) else "bf16"
