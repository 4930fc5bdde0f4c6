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

The method contract: a paper's method is a module that exports ``METHODS``, a sequence of
``Method`` (the recipe name a method section gives, its own keys with defaults, and
``build_recipe``), and may export ``WEIGHT_EXPORTS``. The core finds the modules (``registry``),
checks a section's keys once (``Method.own_keys``) and builds its recipe (``recipe_from_config``).
A Recipe says what the GEMMs see, and may add a per-layer ``weight_transform`` and a term of the
training loss (``extra_loss``); an ``OperandQuantizer`` may keep per-layer state for checkpoints and
report extra telemetry (hooks with no-op defaults). docs/adding-a-method.md walks through it.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Callable, NamedTuple, Optional, Union

import torch

from .numerics import QuantSpec
from .numerics import rounding_stream as _stream

GEMMS = ("fprop", "dgrad", "wgrad")
OPERANDS = {"fprop": ("x", "w"), "dgrad": ("dy", "w"), "wgrad": ("dy", "x")}
# the six (GEMM, operand) slots of a layer in one order, a GEMM's two operands side by side: the
# index of per-slot state in a layer's buffers and of the slot's random stream
SLOTS = tuple((g, op) for g in GEMMS for op in OPERANDS[g])


def slot_key(call_key: Optional[Any], gemm: str, operand: str):
    """The random key of one operand of a forward call's GEMMs, from the call's key
    (``rounding_stream.operand_key`` of the slot); None for a call that draws nothing."""
    return None if call_key is None else _stream.operand_key(call_key, SLOTS.index((gemm, operand)))


@dataclass
class OperandCall:
    """Where an operand quantizer is being applied: the layer (a ``QLinear``), the GEMM and operand
    names, the key of this call's random draws (``lowprec.numerics.rounding_stream``: a 0-d int64
    tensor on the layer's device, from the run seed, layer, call count, GEMM and operand, so it
    survives a resume; an int is taken as a key too), and whether the layer is training."""
    layer: Any
    gemm: str
    operand: str
    seed: Any
    training: bool


class OperandQuantizer(abc.ABC):
    """An operand treatment that a QuantSpec cannot describe (a per-call format choice, a block
    fallback to two INT8 parts, ...). Returns the fp32 values the GEMM multiplies and a dict of
    numbers for telemetry (e.g. {"format": "e4m3", "fallback_ratio": 0.02})."""

    name = "custom"
    # whether ``__call__`` reads ``call.seed``: QLinear makes a random key per forward call only for
    # recipes that draw (the key's operator costs host time at every call of a compiled step)
    draws = True

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

    def attach_layer(self, layer) -> None:
        """Called once by each ``QLinear`` built with this quantizer: per-layer state that a compiled
        step updates goes on the layer as buffers (e.g. INT8 fallback's dynamic level and counts)."""

    # Per-layer state that must survive a resume (e.g. a dynamic rule's running level): QLinear
    # saves it in its extra state and hands it back on load. Stateless quantizers keep the no-ops.
    def state_for_layer(self, name: str) -> dict:
        """This quantizer's state for layer ``name`` (tensors and numbers; {} when it has none)."""
        return {}

    def load_state_for_layer(self, name: str, state: dict) -> None:
        """Restore what ``state_for_layer(name)`` returned ({} when the checkpoint holds none)."""

    def telemetry_stats(self, t: torch.Tensor) -> dict:
        """Extra numbers for telemetry about operand ``t``, worth their cost only on telemetry steps
        (QLinear asks for them there alone)."""
        return {}

    def to_dict(self) -> dict:
        return {"quantizer": self.name, **{k: v for k, v in vars(self).items() if not k.startswith("_")}}


Operand = Union[QuantSpec, OperandQuantizer, None]


class Choice(NamedTuple):
    """A telemetry value that names one of two things by a device flag (MoR's chosen format), read
    with the step's other numbers (``lowprec.telemetry``) instead of waiting for the device alone."""

    flag: torch.Tensor
    if_true: str
    if_false: str


class LazyStats(Mapping):
    """An operand quantizer's telemetry numbers, made Python values only when read. A value may be
    a tensor, a ``Choice`` or a function returning one: converting a CUDA tensor waits for the
    device, and QLinear reads the stats only on telemetry steps."""

    def __init__(self, **items):
        self._items = items

    def __getitem__(self, key):
        v = self._items[key]
        if callable(v):
            v = v()
        if isinstance(v, Choice):
            return v.if_true if bool(v.flag) else v.if_false
        return v.item() if isinstance(v, torch.Tensor) else v

    def pending(self) -> dict:
        """The values as they stand now, not yet read from the device: functions called, tensors
        copied (a count read later must be the count at this call, not after the next GEMMs)."""
        out = {}
        for k, v in self._items.items():
            v = v() if callable(v) else v
            out[k] = v.detach().clone() if isinstance(v, torch.Tensor) else v
        return out

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
    # a term the trainer adds to the training loss, from the model (e.g. a penalty on learnable
    # bit-widths); None: the loss is the language-model loss alone
    extra_loss: Optional[Callable[[torch.nn.Module], torch.Tensor]] = None

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


# Keys any method section may carry, read by lowprec.methods and lowprec.linear rather than by a
# method's build_recipe (the one list of them).
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


@dataclass(frozen=True)
class Method:
    """A paper's method, as a module declares it to the core (its ``METHODS``; see
    ``lowprec.recipes`` below for how modules are found).

    recipe:       the name a method section's ``recipe`` key gives (unique among all methods and
                  the built-in ``RECIPES``)
    keys:         the method's own keys and their defaults (None: no default, or one that depends
                  on another key); a section may carry these, the generic keys and the overrides
                  (``with_overrides``), and nothing else
    build_recipe: the Recipe of a section's own keys (only those given: defaults are its to apply);
                  raises ValueError naming the key for a bad value
    """
    recipe: str
    keys: Mapping[str, Any]
    build_recipe: Callable[[dict], Recipe]

    def own_keys(self, method_cfg: Optional[dict]) -> dict:
        """The section's keys that are this method's own, after the one check of unknown keys."""
        cfg = dict(method_cfg or {})
        if cfg.get("recipe", self.recipe) != self.recipe:
            raise ValueError(f"method ({self.recipe}): section names recipe {cfg['recipe']!r}")
        check_generic_keys(cfg)
        own = {k: v for k, v in cfg.items() if k not in GENERIC_METHOD_KEYS | OVERRIDE_KEYS}
        unknown = set(own) - set(self.keys)
        if unknown:
            raise ValueError(f"method ({self.recipe}): unknown key(s) {sorted(unknown)}; its keys: "
                             f"{sorted(self.keys)}; any method's: {sorted(GENERIC_METHOD_KEYS | OVERRIDE_KEYS)}")
        return own

    def recipe_for(self, method_cfg: Optional[dict] = None) -> Recipe:
        """The recipe of a method section (generic keys ignored, overrides applied)."""
        cfg = dict(method_cfg or {})
        return with_overrides(self.build_recipe(self.own_keys(cfg)), cfg)


# Where methods come from: every module or subpackage of lowprec.methods that exports METHODS (a
# method of this repository: its module there is all it takes), and any module that an installed
# distribution names under the "lowprec.methods" entry point group (a method in a package of its
# own). A method module exports METHODS (a sequence of Method) and may export WEIGHT_EXPORTS
# ({format name: function(model, format) that rewrites the model's weights in place}, post-training
# exports that lowprec.evaluate offers for any run).
ENTRY_POINT_GROUP = "lowprec.methods"


class _Registry(NamedTuple):
    methods: dict         # recipe name -> Method
    exports: dict         # weight export format -> function(model, format)
    module_of: dict       # recipe name -> the module that defines it
    export_module_of: dict


def _method_modules() -> list[tuple[str, bool]]:
    """(module name, whether it must export METHODS): the modules of lowprec.methods, which may
    hold helpers (a method's fast path, the rules its kernels share), then the entry points."""
    import importlib
    import pkgutil
    from importlib.metadata import entry_points

    package = importlib.import_module(".methods", __package__)
    here = [(m.name, False) for m in pkgutil.iter_modules(package.__path__, package.__name__ + ".")]
    return here + [(ep.module, True) for ep in entry_points(group=ENTRY_POINT_GROUP)]


@functools.lru_cache(maxsize=1)
def registry() -> _Registry:
    """Every method and weight export of the method modules (imported on first use, so that the
    numerics core does not load the paper modules until a method asks for one)."""
    import importlib

    reg = _Registry({}, {}, {}, {})
    modules: dict = {}
    for module_name, required in _method_modules():  # each once; required if any source requires it
        modules[module_name] = modules.get(module_name, False) or required
    for module_name, required in modules.items():
        module = importlib.import_module(module_name)
        methods = getattr(module, "METHODS", None)
        if methods is None and not required:
            continue
        if methods is None or not all(isinstance(m, Method) for m in methods):
            raise TypeError(f"method module {module_name}: METHODS must be a sequence of lowprec.recipes.Method")
        for m in methods:
            where = reg.module_of.get(m.recipe, "the built-in recipes" if m.recipe in RECIPES else None)
            if where:
                raise ValueError(f"method module {module_name}: recipe {m.recipe!r} is also defined by {where}")
            reg.methods[m.recipe], reg.module_of[m.recipe] = m, module_name
        for fmt, fn in getattr(module, "WEIGHT_EXPORTS", {}).items():
            if fmt in reg.exports:
                raise ValueError(f"method module {module_name}: weight export {fmt!r} is also defined by "
                                 f"{reg.export_module_of[fmt]}")
            reg.exports[fmt], reg.export_module_of[fmt] = fn, module_name
    return reg


def recipe_from_config(method_cfg: dict) -> Recipe:
    """The recipe a method config names: a built-in recipe (``RECIPES``) or a paper method
    (``registry()``, built from its own keys), either way with the per-GEMM operand overrides
    of ``with_overrides``, e.g. ``{recipe: gaussws, fprop: {a: {fmt: e4m3, scaling: tensor}}}``.
    Unknown keys are refused here, for every method."""
    name = method_cfg.get("recipe", "bf16")
    if name in RECIPES:
        return Method(name, {}, lambda own: RECIPES[name]).recipe_for(method_cfg)
    methods = registry().methods
    if name not in methods:
        raise ValueError(f"method.recipe: unknown recipe {name!r}; known: {sorted(RECIPES) + sorted(methods)}")
    return methods[name].recipe_for(method_cfg)
