"""The GaussWS paper's recipes through the method contract (``lowprec.recipes.Method``): ``gaussws``
(weight noise; its keys and defaults GAUSSWS_KEYS) and ``ste`` (MX fake quantization of the weights)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ...recipes import Gemm, Method, Recipe
from .model import bit_decay_loss
from .step import block_pair
from .weight import STE_FORMATS, GaussWSWeight, STEWeight, _ste_format

GAUSSWS_KEYS = {"noise": "rounded_gaussian", "b": 6, "block": [32, 32], "learnable_b": False,
                "b_min": 4, "b_max": 16, "resample": "step", "sampler": "threshold", "backend": "auto",
                "rng": "generator", "bit_decay": 0.0}
STE_KEYS = {"fmt": None}
_BF16 = Gemm(None, None)


def gaussws_options(own: dict) -> dict:
    """GaussWSWeight options from a method section's own keys (defaults: GAUSSWS_KEYS)."""
    opts = {k: own.get(k, v) for k, v in GAUSSWS_KEYS.items() if k != "bit_decay"}
    opts["block"] = block_pair(tuple(opts["block"]) if isinstance(opts["block"], list) else opts["block"])
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

