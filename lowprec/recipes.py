"""Recipes: what each operand of the three GEMMs of a linear layer sees.

A linear layer ``Y = X W^T`` runs three GEMMs per training step:

    fprop   Y  = X  W^T     a = X   (M, K)    b = W    (N, K)
    dgrad   dX = dY W       a = dY  (M, N)    b = W^T  (K, N)
    wgrad   dW = dY^T X     a = dY^T (N, M)   b = X^T  (K, M)

Every operand is described in the orientation it enters its GEMM, *reduction dimension last*, so a
block of ``(1, 128)`` always means 128 consecutive elements along the dimension being summed (the
DeepSeek-V3 / Transformer Engine 1x128 convention: activations in fprop are grouped along K, the
same tensor in wgrad along M), and ``channel`` scaling (axis=-1) gives one scale per row of that view
(per token for X in fprop, per output channel for W).  An operand spec of ``None`` means "not
quantized": the operand is rounded to the recipe's ``high_precision`` dtype (bf16 or fp32) and the
GEMM accumulates in fp32.

Named recipes (``RECIPES``), each documented below with its source:
  bf16                    operands rounded to bf16, fp32 accumulate (on GPU: Lightning bf16-mixed)
  fp8_tensorwise_current  every operand E4M3, per-tensor current scaling (torchao "tensorwise")
  fp8_delayed             E4M3 forward / E5M2 gradients, delayed scaling from an amax history
                          (Transformer Engine DelayedScaling defaults: HYBRID, history 1024, max)
  fp8_hybrid              E4M3 forward / E5M2 gradients, per-tensor current scaling
                          (TE Float8CurrentScaling with Format.HYBRID)
  fp8_blockwise           E4M3; activations and gradients in 1x128 groups, weights in 128x128 tiles,
                          fp32 scales (DeepSeek-V3; TE Float8BlockScaling)
  mxfp8                   E4M3 with OCP MX scaling: 1x32 blocks, E8M0 power-of-two scales
  int8_block              INT8 in 32x32 blocks; gradients with stochastic rounding (Jetfire)
  int8_rowwise            INT8, X and dY per row, W per tensor; weight gradient in 16 bits
                          (SwitchBack)
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Callable, NamedTuple, Optional, Union

import torch

from .numerics import QuantSpec

GEMMS = ("fprop", "dgrad", "wgrad")
OPERANDS = {"fprop": ("x", "w"), "dgrad": ("dy", "w"), "wgrad": ("dy", "x")}


@dataclass
class OperandCall:
    """Where an operand quantizer is being applied: the layer (a ``QLinear``), the GEMM and operand
    names, a seed for this call's random draws (derived from the run seed, layer, call count, GEMM
    and operand, so it survives a resume), and whether the layer is training."""
    layer: Any
    gemm: str
    operand: str
    seed: int
    training: bool


class OperandQuantizer(abc.ABC):
    """An operand treatment that a QuantSpec cannot describe (a per-call format choice, a block
    fallback to two INT8 parts, ...). Returns the fp32 values the GEMM multiplies and a dict of
    numbers for telemetry (e.g. {"format": "e4m3", "fallback_ratio": 0.02})."""

    name = "custom"

    @abc.abstractmethod
    def __call__(self, t: torch.Tensor, call: OperandCall) -> tuple[torch.Tensor, dict]:
        ...

    def fused_gemm(self, other: "Operand", a: torch.Tensor, b: torch.Tensor, call_a: OperandCall,
                   call_b: OperandCall) -> Optional[torch.Tensor]:
        """fp32 ``a @ b.T`` on a hardware path (a low-precision GEMM kernel) when this quantizer
        treats ``a`` and ``other`` treats ``b``, multiplying the same quantized values that
        ``__call__`` would return (only the accumulation order may differ); None where there is
        no such path, and QLinear multiplies the emulated values. Never called on telemetry steps,
        so it need not produce statistics."""
        return None

    def to_dict(self) -> dict:
        return {"quantizer": self.name, **{k: v for k, v in vars(self).items() if not k.startswith("_")}}


Operand = Union[QuantSpec, OperandQuantizer, None]


class LazyStats(Mapping):
    """An operand quantizer's telemetry numbers, made Python values only when read. A value may be
    a tensor or a function returning one: converting a CUDA tensor waits for the device, and
    QLinear reads the stats only on telemetry steps."""

    def __init__(self, **items):
        self._items = items

    def __getitem__(self, key):
        v = self._items[key]
        if callable(v):
            v = v()
        return v.item() if isinstance(v, torch.Tensor) else v

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)


class Gemm(NamedTuple):
    """The two operands of one GEMM: ``a`` (left) and ``b`` (right), reduction dimension last."""
    a: Operand
    b: Operand


@dataclass(frozen=True)
class Recipe:
    name: str
    fprop: Gemm
    dgrad: Gemm
    wgrad: Gemm
    high_precision: str = "bf16"  # dtype of operands that are not quantized: "bf16" or "fp32"
    description: str = ""
    # builds, per layer, a module mapping the master weight to the weight every GEMM uses (for
    # weight-noise and fake-quantization methods); gradients reach the master weight through it
    weight_transform: Optional[Callable[[Any], torch.nn.Module]] = None

    def __post_init__(self):
        if self.high_precision not in ("bf16", "fp32"):
            raise ValueError(f"recipe {self.name}: high_precision must be 'bf16' or 'fp32', "
                             f"got {self.high_precision!r}")
        for g in GEMMS:
            gemm = getattr(self, g)
            if not isinstance(gemm, Gemm):
                object.__setattr__(self, g, Gemm(*gemm))

    def gemm(self, name: str) -> Gemm:
        return getattr(self, name)

    @property
    def quantized(self) -> bool:
        return self.weight_transform is not None or any(s is not None for g in GEMMS for s in self.gemm(g))

    def to_dict(self) -> dict:
        wt = self.weight_transform
        return {"name": self.name, "high_precision": self.high_precision,
                "weight_transform": getattr(wt, "__name__", repr(wt)) if wt is not None else None,
                **{g: {k: (s.to_dict() if s is not None else None) for k, s in zip("ab", self.gemm(g))}
                   for g in GEMMS}}


def _same(spec: Optional[QuantSpec]) -> Gemm:
    return Gemm(spec, spec)


def _fp8(fmt: str, scaling: str, **kw) -> QuantSpec:
    return QuantSpec(fmt=fmt, scaling=scaling, **kw)


_E4M3_T = _fp8("e4m3", "tensor")
_E5M2_T = _fp8("e5m2", "tensor")
_E4M3_D = _fp8("e4m3", "delayed", history_len=1024, reduction="max")
_E5M2_D = _fp8("e5m2", "delayed", history_len=1024, reduction="max")
_E4M3_1x128 = _fp8("e4m3", "block", block=(1, 128))
_E4M3_128x128 = _fp8("e4m3", "block", block=(128, 128))
_MX = _fp8("e4m3", "mx")
_I8_32 = QuantSpec(fmt="int8", scaling="block", block=(32, 32))
_I8_32_SR = QuantSpec(fmt="int8", scaling="block", block=(32, 32), rounding="stochastic")
_I8_ROW = QuantSpec(fmt="int8", scaling="channel", axis=-1)
_I8_T = QuantSpec(fmt="int8", scaling="tensor")

RECIPES: dict[str, Recipe] = {r.name: r for r in [
    Recipe("bf16", Gemm(None, None), Gemm(None, None), Gemm(None, None),
           description="BF16 operands, fp32 accumulation"),
    Recipe("fp8_tensorwise_current", _same(_E4M3_T), _same(_E4M3_T), _same(_E4M3_T),
           description="E4M3 everywhere, per-tensor current scaling (torchao Float8Linear tensorwise)"),
    Recipe("fp8_delayed", _same(_E4M3_D), Gemm(_E5M2_D, _E4M3_D), Gemm(_E5M2_D, _E4M3_D),
           description="HYBRID formats, delayed scaling, amax history 1024 reduced by max (TE defaults; "
                       "Megatron uses history 1, most_recent)"),
    Recipe("fp8_hybrid", _same(_E4M3_T), Gemm(_E5M2_T, _E4M3_T), Gemm(_E5M2_T, _E4M3_T),
           description="E4M3 forward, E5M2 gradients, per-tensor current scaling"),
    Recipe("fp8_blockwise", Gemm(_E4M3_1x128, _E4M3_128x128), Gemm(_E4M3_1x128, _E4M3_128x128),
           Gemm(_E4M3_1x128, _E4M3_1x128),
           description="E4M3, 1x128 groups for activations and gradients, 128x128 weight tiles, fp32 scales"),
    Recipe("mxfp8", _same(_MX), _same(_MX), _same(_MX),
           description="MXFP8: E4M3 elements, 1x32 blocks, E8M0 scales (OCP MX v1.0)"),
    Recipe("int8_block", _same(_I8_32), Gemm(_I8_32_SR, _I8_32), Gemm(_I8_32_SR, _I8_32),
           description="INT8 per 32x32 block; gradients stochastically rounded (Jetfire)"),
    Recipe("int8_rowwise", Gemm(_I8_ROW, _I8_T), Gemm(_I8_ROW, _I8_T), Gemm(None, None),
           description="INT8: activations and gradients per row, weights per tensor; weight gradient "
                       "in 16 bits (SwitchBack)"),
]}


def _spec_or_none(d) -> Optional[QuantSpec]:
    return None if d is None else QuantSpec.from_dict(d)


# Paper methods build their recipe from the method config (their own keys); "module:function",
# imported on first use so that the numerics core does not depend on the paper modules.
RECIPE_BUILDERS: dict[str, str] = {
    "gaussws": "lowprec.gaussws:gaussws_recipe",
    "ste": "lowprec.gaussws:ste_recipe_from_config",
    "int8_fallback": "lowprec.int8_fallback:int8_fallback_recipe",
    "mor": "lowprec.mor:mor_recipe",
}
# Keys any method section may carry, read by lowprec.methods and lowprec.linear rather than by a
# recipe builder; the builders accept them beside their own keys (the one list of them).
GENERIC_METHOD_KEYS = frozenset({"name", "recipe", "include", "exclude", "telemetry_every"})


def check_generic_keys(method_cfg: dict) -> None:
    """The types of the generic keys: nothing downstream checks them before training starts."""
    for key in ("include", "exclude"):
        pats = method_cfg.get(key)
        if pats is None and key == "include":  # null: every linear layer
            continue
        if key in method_cfg and (isinstance(pats, str) or not isinstance(pats, (list, tuple))
                                  or not all(isinstance(p, str) for p in pats)):
            raise ValueError(f"method.{key}: must be a list of module-name patterns (fnmatch), got {pats!r}")
    every = method_cfg.get("telemetry_every")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 0):
        raise ValueError(f"method.telemetry_every: must be an integer >= 0 (steps; 0: off), got {every!r}")


def _builder(name: str):
    import importlib

    module, func = RECIPE_BUILDERS[name].split(":")
    return getattr(importlib.import_module(module), func)


OVERRIDE_KEYS = set(GEMMS) | {"high_precision"}


def with_overrides(recipe: Recipe, method_cfg: dict) -> Recipe:
    """``recipe`` with the method config's per-GEMM operand overrides and ``high_precision``, e.g.
    ``{wgrad: {a: null}}`` keeps the weight gradient's dY in high precision."""
    changes = {}
    for g in GEMMS:
        if g in method_cfg:
            over = method_cfg[g] or {}
            unknown = set(over) - {"a", "b"}
            if unknown:
                raise ValueError(f"method.{g}: unknown operand(s) {sorted(unknown)}; use 'a' and 'b'")
            cur = recipe.gemm(g)
            try:
                changes[g] = Gemm(*(_spec_or_none(over[k]) if k in over else getattr(cur, k) for k in "ab"))
            except ValueError as e:
                raise ValueError(f"method.{g}: {e}") from e
    if "high_precision" in method_cfg:
        changes["high_precision"] = method_cfg["high_precision"]
    return replace(recipe, **changes) if changes else recipe


def recipe_from_config(method_cfg: dict) -> Recipe:
    """The recipe a method config names: a built-in recipe (``RECIPES``) or a paper method
    (``RECIPE_BUILDERS``, built from its own keys), either way with the per-GEMM operand overrides
    of ``with_overrides``, e.g. ``{recipe: gaussws, fprop: {a: {fmt: e4m3, scaling: tensor}}}``."""
    name = method_cfg.get("recipe", "bf16")
    check_generic_keys(method_cfg)
    if name in RECIPE_BUILDERS:
        own = {k: v for k, v in method_cfg.items() if k not in GENERIC_METHOD_KEYS | OVERRIDE_KEYS}
        return with_overrides(_builder(name)(own), method_cfg)
    if name not in RECIPES:
        raise ValueError(f"method.recipe: unknown recipe {name!r}; known: {sorted(RECIPES) + sorted(RECIPE_BUILDERS)}")
    unknown = set(method_cfg) - GENERIC_METHOD_KEYS - OVERRIDE_KEYS
    if unknown:
        raise ValueError(f"method: unknown key(s) {sorted(unknown)} for recipe {name!r}; known: "
                         f"{sorted(GENERIC_METHOD_KEYS | OVERRIDE_KEYS)}")
    return with_overrides(RECIPES[name], method_cfg)
