"""Model-level helpers of GaussWS: its transforms in a model, the learnable bit-widths and their loss
term, the native (parametrization) path for bf16 autocast, and the post-training MX export."""

from __future__ import annotations

import copy
from typing import Iterable, Optional

import torch
from torch import nn

from ...linear import DEFAULT_EXCLUDE, QLinear, layer_seed, linear_layers
from ...recipes import recipe_from_config
from .weight import EXPORT_FORMATS, GaussWSWeight, _ste_format, mx_rtn

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

