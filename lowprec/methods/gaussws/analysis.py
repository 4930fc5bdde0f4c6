"""The analyses behind the GaussWS figures and tables: exactness of the noise under the BF16 operator
(the 9-bit figure) and the analytic memory of each arm."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from .recipes import GAUSSWS, gaussws_options
from .sampler import rounded_gaussian_pmf, sample_rounded_gaussian
from .step import _as_2d, _expand, block_delta, block_pair

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
    block = block_pair(block)
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
    r, c = block_pair(block)
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
