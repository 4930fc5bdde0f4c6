"""A recipe-aware linear layer and the module swap that installs it.

``convert(model, recipe)`` replaces ``nn.Linear`` and transformers' GPT2 ``Conv1D`` (whose weight is
stored transposed, (in, out)) with ``QLinear``; the weight and bias Parameters are kept as they are,
so optimizer state, checkpoints and state-dict keys do not change.  ``QLinear`` runs its own autograd
Function: each of the three GEMMs quantizes its two operands as the recipe says (``lowprec.recipes``)
and multiplies in fp32: the emulation, the reference every method is defined by.

The fast path (``lowprec.gemm.FastPlan``) runs the same recipe as a training path: activations stay
in their dtype, unquantized operands go to BF16 tensor-core GEMMs, FP8 operands to ``_scaled_mm``,
INT8 ones to the Triton INT8 GEMM (``lowprec.methods.int8_fast``), with no host sync, so
``torch.compile`` traces the layer whole. It is taken where the recipe allows (``FastPlan.for_recipe``),
on the devices ``LOWPREC_FAST_PATH`` names (``cuda``, the default; ``all``; ``off``), and never on a
telemetry step, which needs the emulation's values. On both paths stochastic rounding draws from keys
made on the device from the layer's seed and ``calls`` counter (``lowprec.numerics.rounding_stream``).

    from lowprec import convert, RECIPES
    convert(model, RECIPES["fp8_hybrid"])             # two lines, like torchao's convert_to_float8_training
"""

from __future__ import annotations

import os
import zlib
from typing import Iterable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .compile_passes import realize_shared_operands
from .config import env_switch
from .gemm import FastPlan, FP8Operand, fast_path_applies, is_quantized, scaled_mm, traced_output
from .methods.int8_fallback_state import FallbackBuffers
from .methods.int8_fast import int8_linear
from .methods.layer_buffers import pass_buffers
from .methods.mor import COUNTS_BUFFER
from .methods.mor_fast import MoROperand
from .methods.mor_subtensor_fast import SubTensorOperand
from .numerics import DelayedScaler, QuantSpec, block_amax, quantize, ranks
from .numerics.scaling import load_history, ordered_history
from .numerics import rounding_stream as _stream
from .numerics.checks import one_of
from .numerics.formats import round_cast
from .recipes import GEMMS, OPERANDS, LazyStats, OperandCall, OperandQuantizer, Recipe, slot_key
from .layer_names import matches
from .telemetry import Telemetry

DEFAULT_EXCLUDE = ("lm_head", "*.lm_head", "score")

_HP_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}

# Devices whose QLinear layers take the fast path when their recipe allows: "cuda" (default), "all"
# (the CPU too: tests, and CPU runs that want speed over the emulation's exact accumulation order), "off"
FAST_PATH = os.environ.get("LOWPREC_FAST_PATH", "cuda")
_FAST_PATH_CHOICES = ("cuda", "all", "off")
# Delayed scaling's recorded path (``QLinear.refresh_histories_recorded``): on by default;
# LOWPREC_DELAYED_RECORDED=0 keeps every call on the form that waits for its own amax, for an A/B of
# the two in one GPU job (1 B on the H200 at 2755e9c: 1.219x of compiled BF16 recorded, 1.152x waiting)
DELAYED_RECORDED = env_switch("LOWPREC_DELAYED_RECORDED")


def _conv1d_class():
    try:
        from transformers.pytorch_utils import Conv1D
        return Conv1D
    except ImportError:  # transformers is optional for the library itself
        return None


def layer_seed(seed: int, name: str) -> int:
    """A layer's own seed: the run seed mixed with the layer's name, stable across processes."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) & 0x7FFFFFFF


def linear_layers(model: nn.Module, include: Optional[Iterable[str]] = None,
                  exclude: Iterable[str] = DEFAULT_EXCLUDE):
    """(parent, attribute, full name, module, transposed) of every linear layer that include/exclude
    select: QLinear, nn.Linear, and GPT2's Conv1D (transposed weight)."""
    conv1d = _conv1d_class()
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if isinstance(child, QLinear):
                transposed = child.transposed
            elif isinstance(child, nn.Linear):
                transposed = False
            elif conv1d is not None and isinstance(child, conv1d):
                transposed = True
            else:
                continue
            if (include is not None and not matches(name, include)) or matches(name, exclude):
                continue
            yield parent, child_name, name, child, transposed


class QLinear(nn.Module):
    """``y = x W^T + b`` with every GEMM operand quantized as ``recipe`` says."""

    def __init__(self, weight: nn.Parameter, bias: Optional[nn.Parameter], recipe: Recipe, name: str = "",
                 transposed: bool = False, telemetry: Optional[Telemetry] = None, seed: int = 0):
        super().__init__()
        self.weight, self.bias = weight, bias
        self.recipe, self.name, self.transposed = recipe, name, transposed
        self.telemetry = telemetry
        self.seed = layer_seed(seed, name)
        # counts forward calls; persistent so stochastic rounding after a resume draws what an
        # uninterrupted run would have drawn
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64, device=weight.device))
        # the seed as a tensor: the random keys are made on the device from it and `calls`
        # (lowprec.numerics.rounding_stream), and compiled layers share one graph
        self.register_buffer("seed_key", torch.tensor(self.seed, dtype=torch.int64, device=weight.device),
                             persistent=False)
        # whether a GEMM operand may draw random numbers (the keys are made only then)
        self._random = any(s.draws if isinstance(s, OperandQuantizer) else getattr(s, "rounding", None) == "stochastic"
                           for g in GEMMS for s in recipe.gemm(g))
        self.scalers = {(g, op): DelayedScaler.from_spec(spec)
                        for g in GEMMS for op, spec in zip(OPERANDS[g], recipe.gemm(g))
                        if isinstance(spec, QuantSpec) and spec.scaling == "delayed"}
        # each delayed scaler's history is two buffers of the layer (they move with it, and a compiled
        # step updates them in its graph; `_apply` keeps the scaler's own state pointing at them);
        # checkpoints carry them as extra state, oldest first
        for (g, op), scaler in self.scalers.items():
            for part, t in zip(("ring", "count"), scaler.new_state(weight.device)):
                self.register_buffer(f"amax_{part}_{g}_{op}", t, persistent=False)
            scaler.state = self._history(g, op)
        # whether every delayed slot's history is known (on the host) to hold an amax
        # (``refresh_histories_recorded``): the fast path then quantizes with the histories' amaxes
        # without waiting for this call's (``DelayedScaler.step``'s ``recorded``)
        self.histories_recorded = False
        self._history_reads = 0
        self.weight_transform = recipe.weight_transform(self) if recipe.weight_transform else None
        self.fast_plan = FastPlan.for_recipe(recipe)
        for q in self._quantizers():
            q.attach_layer(self)
        # the transformed weight of this step, set eagerly by `compiled` before a compiled forward:
        # weight transforms keep host-side state (GaussWS's noise counter and cache) that a
        # compiled graph must not trace
        self._weight_now: Optional[torch.Tensor] = None

    @property
    def in_features(self) -> int:
        return self.weight.shape[0 if self.transposed else 1]

    @property
    def out_features(self) -> int:
        return self.weight.shape[1 if self.transposed else 0]

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, recipe={self.recipe.name}"

    def _quantizers(self) -> list:
        """The recipe's operand quantizers, each once, in slot order."""
        found = {}
        for g in GEMMS:
            for spec in self.recipe.gemm(g):
                if isinstance(spec, OperandQuantizer):
                    found.setdefault(id(spec), spec)
        return list(found.values())

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        for (g, op), scaler in self.scalers.items():  # the moved buffers
            scaler.state = self._history(g, op)
        return out

    def _history(self, gemm: str, operand: str) -> tuple:
        """(ring, count): the delayed scaler's state of an operand slot (``DelayedScaler``)."""
        return getattr(self, f"amax_ring_{gemm}_{operand}"), getattr(self, f"amax_count_{gemm}_{operand}")

    # delayed-scaling histories and quantizer state (OperandQuantizer.state_for_layer, e.g. the
    # dynamic fallback rule's EMA level) travel with checkpoints, so a resumed run continues exactly
    # where the killed one was
    def get_extra_state(self):
        state = {f"{g}.{op}": ordered_history(*self._history(g, op)) for g, op in self.scalers}
        quantizers = [q.state_for_layer(self.name) for q in self._quantizers()]
        if any(quantizers):
            state["quantizers"] = quantizers
        return state

    def set_extra_state(self, state):
        for g, op in self.scalers:
            load_history(*self._history(g, op), (state or {}).get(f"{g}.{op}"))
        self.histories_recorded, self._history_reads = False, 0  # loaded histories may be empty: asked again
        saved = (state or {}).get("quantizers") or []
        for i, q in enumerate(self._quantizers()):
            q.load_state_for_layer(self.name, saved[i] if i < len(saved) else {})

    def fast(self, x: torch.Tensor) -> bool:
        """Whether this call takes the fast path: the recipe allows it, the device is enabled, and
        no telemetry is recorded (a compiled step never records: the trainer runs recording steps
        eagerly)."""
        if not self._fast_on(x.device):
            return False
        return torch.compiler.is_compiling() or not self._measuring()

    def _fast_on(self, device: torch.device) -> bool:
        """Whether the fast path serves this layer on ``device`` (a plan, the device enabled)."""
        if self.fast_plan is None:
            return False
        one_of("LOWPREC_FAST_PATH", FAST_PATH, _FAST_PATH_CHOICES)
        return not (FAST_PATH == "off" or (FAST_PATH == "cuda" and device.type != "cuda"))

    def graph_weight_dtype(self) -> Optional[torch.dtype]:
        """The dtype ``compiled`` asks the weight transform for (None: the transform's own). Where
        the layer's fast plan multiplies in high precision (GaussWS: BF16 GEMMs) and the transform
        can give its weight in that dtype (``out_dtype``), it comes in it: GaussWS's W_c is a BF16
        tensor, which an fp32 copy for the graph to cast back cost 112 copies and 96 casts per step
        at 1 B (about 5 ms of 180); the values and the master weight's gradient are the same bit
        for bit."""
        t, plan = self.weight_transform, self.fast_plan
        if self._fast_on(self.weight.device) and plan.all_hp and hasattr(t, "out_dtype"):
            return plan.high_precision
        return None

    def graph_weight(self) -> torch.Tensor:
        """The transformed weight ``compiled`` hands the compiled graph (``graph_weight_dtype``)."""
        dtype = self.graph_weight_dtype()
        t = self.weight_transform
        return t(self.weight) if dtype is None else t(self.weight, out_dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled(x.device.type):
            # the input in the autocast dtype, as torch.nn.Linear and torchao's Float8Linear take it:
            # an fp32 activation (after a norm kept in fp32) is rounded to bf16 before quantization
            out_dtype = torch.get_autocast_dtype(x.device.type)
            x = round_cast(x, out_dtype)
        else:
            out_dtype = x.dtype
        fast = self.fast(x)
        with torch.autocast(device_type=x.device.type, enabled=False):
            w = self._weight_now
            if w is None:
                w = self.weight if self.weight_transform is None else self.weight_transform(self.weight)
            else:
                w = linked_weight(self.weight, w)
            if fast:
                counts = pass_buffers(self, COUNTS_BUFFER) if self.training else None
                int8 = None
                if self.fast_plan.int8:  # its draws and fallback state: keys and buffers on the device
                    int8 = (self._next_key(), FallbackBuffers.passes(self) or None, self.training)
                # the other fast plans draw nothing: `calls` stays
                return _fast_linear(x, w, self.bias, self.fast_plan, self.transposed, out_dtype, counts, int8,
                                    self if self.scalers else None)
            y = _QLinearFn.apply(x.float(), w, self.bias, self, self._next_key())
        return y.to(out_dtype)

    # ------------------------------------------------------------------ one GEMM
    def call_count(self) -> int:
        """Training forward calls so far (the ``calls`` buffer; a device read on CUDA)."""
        return int(self.calls)

    def _next_key(self) -> Optional[torch.Tensor]:
        """This forward call's random key, made on the device (no host read of the count), and
        ``calls`` advanced for a training call (evaluation passes must not shift the training
        steps' draws); None for a recipe that draws nothing (``calls`` advances all the same). Each
        rank rounds its own shard of dY: its stream must be its own, or the ranks' rounding errors
        are equal and do not average out in the gradient all-reduce."""
        if not self._random:
            if self.training:
                self.calls += 1
            return None
        return _stream.next_call_key_(self.seed_key, self.calls, ranks.rank(), self.training)

    def delayed_amax(self, gemm: str, operand: str, t: Optional[torch.Tensor],
                     current: Optional[torch.Tensor] = None, recorded: bool = False) -> Optional[torch.Tensor]:
        """The amax a delayed-scaling slot quantizes ``t`` with, from its history (a training call
        records ``t``'s amax, reduced over the ranks; evaluation reads the history only); None for
        a slot without delayed scaling. ``current``: ``t``'s amax where the caller has it
        (``tensor_amax``; ``t`` may then be None). ``recorded``: the history holds an amax
        (``histories_recorded`` when the call began; ``DelayedScaler.step``)."""
        scaler = self.scalers.get((gemm, operand))
        if scaler is None:
            return None
        if current is None:
            current = tensor_amax(t)
        state = self._history(gemm, operand)
        return scaler.step(current, state, recorded) if self.training else scaler.amax(current, state)

    def refresh_histories_recorded(self) -> bool:
        """``histories_recorded``, read from the devices' counts while it is False (a host read,
        so the compiled training loop asks before a step, ``compiled``, and stops once it holds:
        a history never empties but by loading one, which clears the flag). At most
        ``HISTORY_READS`` reads: a slot that never records (a layer without a backward) leaves the
        flag False, and the step its original form, rather than a host read at every step.
        Always False with ``DELAYED_RECORDED`` off."""
        if not DELAYED_RECORDED:
            return False
        if not self.histories_recorded and self.scalers and self._history_reads < HISTORY_READS:
            self._history_reads += 1
            self.histories_recorded = all(bool(self._history(g, op)[1] > 0) for g, op in self.scalers)
        return self.histories_recorded

    def _operand(self, gemm: str, operand: str, t: torch.Tensor, spec: QuantSpec, key=None):
        """The operand's QTensor under ``spec`` (``key``: the call's random key, for stochastic
        rounding)."""
        amax = self.delayed_amax(gemm, operand, t)
        noise = None
        if spec.rounding == "stochastic":
            noise = _stream.uniforms(slot_key(key, gemm, operand), tuple(t.shape), device=t.device)
        return quantize(t, spec, noise=noise, amax=amax)

    def _values(self, gemm: str, operand: str, t: torch.Tensor, spec, key) -> torch.Tensor:
        """The fp32 values the GEMM multiplies for this operand, recording telemetry if asked."""
        tel = self.telemetry
        want = tel is not None and tel.wants(self.name, gemm, operand)
        if spec is None:
            values = round_cast(t, _HP_DTYPES[self.recipe.high_precision]).float()
            if want:
                tel.record(self.name, gemm, operand, t, values, None, None)
        elif isinstance(spec, OperandQuantizer):
            values, stats = spec(t, OperandCall(self, gemm, operand, slot_key(key, gemm, operand), self.training))
            if want:
                pending = stats.pending() if isinstance(stats, LazyStats) else stats  # read with the step's rows
                tel.record(self.name, gemm, operand, t, values, None, None, **pending, **spec.telemetry_stats(t))
        else:
            qt = self._operand(gemm, operand, t, spec, key)
            values = qt.dequantize().float()
            if want:
                tel.record(self.name, gemm, operand, t, values, qt.expanded_scale(), spec.fmt)
        return values

    def _measuring(self) -> bool:
        return self.telemetry is not None and self.telemetry.recording()

    def gemm(self, name: str, a: torch.Tensor, b: torch.Tensor, key: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``a @ b.T`` with a: (rows, R) and b: (cols, R), R the reduction dimension; ``key``: the
        random key of the forward call the GEMM belongs to (``_next_key``)."""
        spec_a, spec_b = self.recipe.gemm(name)
        op_a, op_b = OPERANDS[name]
        if isinstance(spec_a, OperandQuantizer) and a.is_cuda and not self._measuring():
            calls = [OperandCall(self, name, op, slot_key(key, name, op), self.training) for op in (op_a, op_b)]
            y = spec_a.fused_gemm(spec_b, a, b, *calls)
            if y is not None:
                return y
        if fast_path_applies(a, b, spec_a, spec_b):
            qta, qtb = self._operand(name, op_a, a, spec_a, key), self._operand(name, op_b, b, spec_b, key)
            tel = self.telemetry
            for op, t, qt in ((op_a, a, qta), (op_b, b, qtb)):
                if tel is not None and tel.wants(self.name, name, op):
                    tel.record(self.name, name, op, t, qt.dequantize().float(), qt.expanded_scale(), qt.spec.fmt)
            return scaled_mm(qta, qtb)
        return self._values(name, op_a, a, spec_a, key) @ self._values(name, op_b, b, spec_b, key).t()


class _QLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer: QLinear, key):
        w = weight.t() if layer.transposed else weight  # (N, K)
        x2d = x.reshape(-1, x.shape[-1])
        y = layer.gemm("fprop", x2d, w.float(), key)
        if bias is not None:
            y = y + bias.float()
        # the backward's draws belong to this call: its key, not the counter's value by then
        ctx.layer, ctx.key = layer, key
        ctx.has_bias = bias is not None
        ctx.save_for_backward(x, weight)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        layer = ctx.layer
        w = (weight.t() if layer.transposed else weight).float()
        dy2d = dy.reshape(-1, dy.shape[-1]).float()
        x2d = x.reshape(-1, x.shape[-1])
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = layer.gemm("dgrad", dy2d, w.t(), ctx.key).reshape(x.shape)
        if ctx.needs_input_grad[1]:
            dw = layer.gemm("wgrad", dy2d.t(), x2d.t(), ctx.key)
            dw = (dw.t() if layer.transposed else dw).to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2d.sum(0)
        return dx, dw, db, None, None


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a model: the children of its largest ``nn.ModuleList`` whose
    members share one class (``model.layers`` of Llama and Nemotron, ``transformer.h`` of GPT2)."""
    best: list[nn.Module] = []
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and len(m) > len(best) and len({type(c) for c in m}) == 1:
            best = list(m)
    return best


def _eager_numerics() -> dict:
    """Inductor settings under which compiled quantization is the eager emulation's, bit for bit.

    Inductor rounds at a cast to bf16 only where asked: otherwise a fused kernel quantizes an fp32
    activation that QLinear rounds to bf16 first without that rounding (36.7 dB apart at the forward
    output of FP8 current scaling, 0 with it on; tests/test_fast_path.py). Triton's fp32 ``/`` is
    approximate (div.full), so scales (fmax / amax) and dequantized values need correctly rounded
    division where the torch version offers it."""
    import torch._inductor.config as inductor_config

    options = {"emulate_precision_casts": True}
    if hasattr(inductor_config, "eager_numerics"):
        options["eager_numerics.division_rounding"] = True
    elif hasattr(inductor_config, "emulate_divison_rounding"):  # the spelling of torch 2.10-2.11
        options["emulate_divison_rounding"] = True
    return options


EAGER_NUMERICS = _eager_numerics()
# Inductor passes of every compiled block (lowprec.compile_passes says why)
GRAPH_PASSES = {"post_grad_custom_post_pass": realize_shared_operands}
# train.compile_numerics: "eager" keeps EAGER_NUMERICS; "fast" leaves Inductor's own defaults
COMPILE_NUMERICS = ("eager", "fast")


def compile_numerics_options(numerics: str) -> dict:
    """Inductor options of ``train.compile_numerics``: {} for "eager" (``compile_blocks`` applies
    ``EAGER_NUMERICS``: the compiled blocks compute what eager ones do, bit for bit), each of them off
    for "fast" (Inductor may skip bf16 roundings that eager makes and divide approximately: measured at
    1 B on the H200, FP8 current scaling 1.22x of compiled BF16 against 1.17x,
    results/bench/e2e_h200_fast_numerics.csv; the quantized codes then differ from eager's in rare
    elements)."""
    if numerics not in COMPILE_NUMERICS:
        raise ValueError(f"train.compile_numerics: one of {list(COMPILE_NUMERICS)}, got {numerics!r}")
    return {} if numerics == "eager" else {key: False for key in EAGER_NUMERICS}


def compile_blocks(model: nn.Module, *, cudagraphs: bool = False, **compile_kw) -> nn.Module:
    """Regional compilation: each transformer block under ``torch.compile`` (in place), the rest
    (embeddings, final norm, LM head) eager. The blocks share one compiled graph, so compiling
    costs about one block's time instead of the whole model's, at the same speed per token; every
    compiled arm of the benchmarks (BF16, torchao, the suite's) is compiled this way.

    ``cudagraphs``: Inductor replays each block's kernels as a CUDA graph (its cudagraph trees), so
    the host launches one graph per block and pass instead of every kernel: for steps whose host
    time exceeds their GPU time (small models, the many quantization kernels of MoR). A training
    loop then calls ``torch.compiler.cudagraph_mark_step_begin()`` before each step's forward, as
    ``compiled`` does; outputs of one step are overwritten by the next."""
    blocks = repeated_blocks(model)
    if not blocks:
        raise ValueError(f"compile_blocks: {type(model).__name__} has no list of repeated blocks to compile")
    # static shapes: a run has one training and one evaluation shape, so nothing is lost, and
    # Inductor specializes every kernel to its shape
    compile_kw.setdefault("dynamic", False)
    compile_kw["options"] = {**EAGER_NUMERICS, **GRAPH_PASSES, **(compile_kw.get("options") or {})}
    if cudagraphs:
        compile_kw["options"]["triton.cudagraphs"] = True
    if "mode" in compile_kw:  # torch.compile takes mode or options, not both
        raise ValueError("compile_blocks: pass Inductor settings as options=, not mode= (the compiled blocks keep "
                         f"{EAGER_NUMERICS})")
    for block in blocks:
        block.compile(**compile_kw)
    return model


def tensor_amax(t: torch.Tensor) -> torch.Tensor:
    """A tensor's amax as delayed scaling records it: 0-d fp32, NaN and Inf ignored (as in every amax).
    Reduced per row first (the same max): a reduction over rows is one that a compiled graph may
    compute in the kernel that casts the rows, where the cast does not wait for it
    (``DelayedScaler.step``'s ``recorded``)."""
    t2d = t.reshape(1, -1) if t.dim() < 2 else t.reshape(-1, t.shape[-1])
    return block_amax(t2d, (1, t2d.shape[1])).max()


def transformed_layers(model: nn.Module) -> list:
    """The QLinear layers of a model whose weights pass a transform before each call (GaussWS)."""
    return [m for m in model.modules() if isinstance(m, QLinear) and m.weight_transform is not None]


def graph_weights(layers: list) -> list:
    """``[m.graph_weight() for m in layers]``, where a transform class that transforms several
    weights at once (``forward_many(transforms, weights, out_dtypes)``: GaussWS's draws in one
    launch, handed out detached for each layer to link, ``linked_weight``) takes all of its layers
    in one call."""
    by_class: dict = {}
    for i, m in enumerate(layers):
        by_class.setdefault(type(m.weight_transform), []).append(i)
    out: list = [None] * len(layers)
    for cls, idx in by_class.items():
        many = getattr(cls, "forward_many", None)
        if many is None:
            got = [layers[i].graph_weight() for i in idx]
        else:
            got = many([layers[i].weight_transform for i in idx], [layers[i].weight for i in idx],
                       [layers[i].graph_weight_dtype() for i in idx])
        for i, w in zip(idx, got):
            out[i] = w
    return out


def linked_weight(weight: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A layer's transformed weight ``w`` as its GEMMs take it: where a transform handed it over
    detached (``graph_weights``), linked to the master ``weight`` with the identity gradient, cast
    to the master's dtype (the straight-through gradient of GaussWS's fixed-b W_c). Applied inside
    the layer, so in a compiled block the link is part of the block's graph: its backward makes
    the master weights' gradients as it ends (DDP reduces them while the blocks before it run
    theirs), where an autograd node made before the step would run after the whole backward."""
    if w.requires_grad or not weight.requires_grad:
        return w
    return _StraightThrough.apply(weight, w)


class _StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, w):
        ctx.weight_dtype = weight.dtype
        return w.view_as(w)

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.weight_dtype), None


def unstable_weight_layers(model: nn.Module) -> list:
    """The transformed layers whose weights CUDA graphs cannot take: transforms that are not
    ``graph_stable`` (a transform that can draw into fixed tensors, ``stable_output``, says whether
    it may: GaussWS's ``GaussWSWeight``, unless b is learnable) or that make a new tensor at every
    call (without ``graph_stable`` at all: the STE arms'). CUDA graphs read a
    recorded kernel's inputs at fixed addresses, so their graphs would be recorded again at every
    step (measured before GaussWS had it: 1 B at 0.18x of BF16, 770 ms of host time per step against
    156 ms of GPU kernels, results/bench/e2e_h200_cudagraphs.csv)."""
    return [m for m in transformed_layers(model) if not getattr(m.weight_transform, "graph_stable", False)]


def unstable_why(layer) -> str:
    """Why CUDA graphs cannot take this layer's transformed weight (``unstable_weight_layers``)."""
    t = layer.weight_transform
    if hasattr(t, "graph_stable"):
        return f"{type(t).__name__} {t.extra_repr()}: not validated under CUDA graphs"
    return f"{type(t).__name__}: makes a new tensor at every call"


# host reads of a delayed-scaling layer's history counts before it stops asking
# (``QLinear.refresh_histories_recorded``): the first training step records every slot
HISTORY_READS = 3


class compiled:
    """A converted model for training and evaluation with its blocks compiled (``compile_blocks``):
    before each call the QLinear layers' weight transforms run eagerly (their draws and caches stay
    in Python; the compiled graph takes the transformed weights as inputs, in the dtype its GEMMs
    take where the transform can give it, ``QLinear.graph_weight``, and gradients reach the master
    weights through them), all layers of a transform class that can at once (``graph_weights``).
    The same model module is called, so its state dict, hooks and optimizer are unchanged;
    ``compile_kw`` go to ``torch.compile``. With ``cudagraphs`` each call begins a new step of
    Inductor's CUDA graphs (``compile_blocks``): call it once per forward whose backward has run, as
    a training or evaluation loop does; the transforms then write their weights
    into the same tensors at every call (``stable_output``; a transform without it is refused,
    ``unstable_weight_layers``), and a weight that still moves raises. Before a training call,
    delayed-scaling layers are asked whether their histories hold an amax
    (``QLinear.refresh_histories_recorded``: a host read per layer for the first steps), so that the
    compiled steps after it quantize with the histories' amaxes without waiting for the current
    ones (one graph more)."""

    def __init__(self, model: nn.Module, *, cudagraphs: bool = False, **compile_kw):
        self._transformed = transformed_layers(model)
        self._delayed = [m for m in model.modules() if isinstance(m, QLinear) and m.scalers]
        if cudagraphs:
            unstable = unstable_weight_layers(model)
            if unstable:
                raise ValueError(f"compiled: cudagraphs=True with this weight transform is not supported "
                                 f"({unstable_why(unstable[0])}); compile without CUDA graphs")
            for m in self._transformed:
                m.weight_transform.stable_output = True
        self.model = compile_blocks(model, cudagraphs=cudagraphs, **compile_kw)
        self.cudagraphs = cudagraphs
        self._addresses: dict = {}  # (layer, training) -> the address its weight had in the graphs

    def eager(self, *args, **kwargs):
        """A call with the compiled blocks run eagerly (telemetry steps: QLinear records only
        outside compiled graphs)."""
        with torch.compiler.set_stance("force_eager"):
            return self.model(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        if self.cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        for m in self._delayed:  # a host read per layer until the histories hold an amax (two steps)
            if m.training:
                m.refresh_histories_recorded()
        for m, w in zip(self._transformed, graph_weights(self._transformed)):
            m._weight_now = w
            if self.cudagraphs:
                self._same_address(m)
        try:
            return self.model(*args, **kwargs)
        finally:
            for m in self._transformed:
                m._weight_now = None

    def _same_address(self, m) -> None:
        """Raise if layer m's weight is not where the graphs recorded it (a transform that still
        hands a new tensor: e.g. an fp32 copy, where the compiled GEMMs do not take its bf16 W_c)."""
        ptr = m._weight_now.data_ptr()
        if self._addresses.setdefault((id(m), m.training), ptr) != ptr:
            raise RuntimeError(f"compiled: with CUDA graphs a transformed weight must stay at one address, but "
                               f"{type(m.weight_transform).__name__} gave a new tensor ({m._weight_now.dtype}; "
                               "stable only where the compiled GEMMs take its own dtype); compile without "
                               "CUDA graphs")


def _fast_linear(x, weight, bias, plan: FastPlan, transposed: bool, out_dtype: torch.dtype,
                 counts: Optional[tuple] = None, int8: Optional[tuple] = None,
                 layer: Optional[QLinear] = None) -> torch.Tensor:
    """The layer's three GEMMs on ``plan``; ``layer``: the QLinear whose delayed scalers' histories
    the delayed slots read and record (``QLinear.delayed_amax``)."""
    if plan.int8:  # int8: (call key, the layer's FallbackBuffers per pass or None, training)
        return int8_linear(x, weight, bias, plan, transposed, out_dtype, *int8)
    if plan.all_hp:  # plain autograd: the GEMMs are autocast's, in the recipe's dtype
        dt = plan.high_precision
        w = weight.t() if transposed else weight
        return F.linear(x.to(dt), w.to(dt), None if bias is None else bias.to(dt)).to(out_dtype)
    return _FastLinearFn.apply(x, weight, bias, plan, transposed, out_dtype, counts, layer)


class _FastLinearFn(torch.autograd.Function):
    """The three GEMMs of ``FastPlan``: activations and gradients in their own dtype, the weight
    gradient in fp32 (bf16 where ``_scaled_mm`` returns only bf16). Each tensor is quantized once
    per scale layout: where the backward GEMMs' operands are transposes with the same scales
    (``FastPlan.reused``), their codes (and MoR decisions) are transposed copies of the forward's,
    and the forward keeps the quantized activation for the weight gradient instead of the
    high-precision one. A reused delayed-scaling slot still records its tensor's amax in its own
    history: the source's, which the forward keeps for the backward (``FastPlan.reused``). ``counts``:
    the layer's MoR decision counts, the forward's and the backward's tensors (training calls only;
    ``lowprec.methods.layer_buffers.register_pass_buffers``); ``layer``: the QLinear of delayed-scaling
    slots (``_fast_linear``)."""

    @staticmethod
    def forward(ctx, x, weight, bias, plan: FastPlan, transposed: bool, out_dtype: torch.dtype, counts, layer):
        w = weight.t() if transposed else weight  # (N, K)
        x2d = x.reshape(-1, x.shape[-1])
        # read once: the backward of this call takes the same (the flag may change before it runs)
        ctx.recorded = recorded = layer is not None and layer.histories_recorded
        amax_x, cur_x = _delayed_amax(layer, "fprop", "x", x2d, recorded=recorded)
        amax_w, cur_w = _delayed_amax(layer, "fprop", "w", w, recorded=recorded)
        qx = plan.operand("fprop", "x", x2d, amax=amax_x)
        qw = plan.operand("fprop", "w", w, amax=amax_w)
        y = plan.mm("fprop", qx, qw, out_dtype, None if counts is None else counts[0])
        if bias is not None:
            y = y + bias.to(out_dtype)
        ctx.plan, ctx.transposed, ctx.has_bias = plan, transposed, bias is not None
        ctx.counts, ctx.layer = None if counts is None else counts[1], layer
        ctx.x_shape, ctx.x_dtype, ctx.w_dtype = x.shape, x.dtype, weight.dtype
        x_keep = _kept(qx) if ("wgrad", "x") in plan.reused else x2d
        w_keep = _kept(qw) if ("dgrad", "w") in plan.reused else w
        ctx.x_meta, ctx.w_meta = _meta(x_keep), _meta(w_keep)
        # the amaxes the backward's reused delayed slots record (None where a slot is not one)
        source_amaxes = (cur_x if ("wgrad", "x") in plan.delayed_reused else None,
                         cur_w if ("dgrad", "w") in plan.delayed_reused else None)
        ctx.save_for_backward(*_tensors(x_keep), *_tensors(w_keep), *source_amaxes)
        return traced_output(y.reshape(*x.shape[:-1], y.shape[-1]))

    @staticmethod
    def backward(ctx, dy):
        plan = ctx.plan
        saved = ctx.saved_tensors
        x_keep, w_keep = _unpack(saved[:4], ctx.x_meta), _unpack(saved[4:8], ctx.w_meta)
        cur_x, cur_w = saved[8:]
        layer, recorded = ctx.layer, ctx.recorded
        dy2d = dy.reshape(-1, dy.shape[-1])
        dx = dw = db = qdy = cur_dy = None
        if ctx.needs_input_grad[0]:
            amax_dy, cur_dy = _delayed_amax(layer, "dgrad", "dy", dy2d, recorded=recorded)
            qdy = plan.operand("dgrad", "dy", dy2d, amax=amax_dy)
            wt = _transpose_of(w_keep)
            qw = plan.operand("dgrad", "w", wt, source=w_keep,
                              amax=_delayed_amax(layer, "dgrad", "w", wt, cur_w, recorded)[0])
            dx = plan.mm("dgrad", qdy, qw, ctx.x_dtype, ctx.counts).reshape(ctx.x_shape)
        if ctx.needs_input_grad[1]:
            dyt, xt = dy2d.t(), _transpose_of(x_keep)  # views; unused where an operand is reused
            reuse_dy = ("wgrad", "dy") in plan.delayed_reused and is_quantized(qdy)
            a = plan.operand("wgrad", "dy", dyt, source=qdy,
                             amax=_delayed_amax(layer, "wgrad", "dy", dyt, cur_dy if reuse_dy else None, recorded)[0])
            b = plan.operand("wgrad", "x", xt, source=x_keep,
                             amax=_delayed_amax(layer, "wgrad", "x", xt, cur_x, recorded)[0])
            dw = plan.mm("wgrad", a, b, torch.float32, ctx.counts)
            dw = (dw.t() if ctx.transposed else dw).to(ctx.w_dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2d.float().sum(0)
        return dx, dw, db, None, None, None, None, None


def _delayed_amax(layer: Optional[QLinear], gemm: str, operand: str, t,
                  current: Optional[torch.Tensor] = None, recorded: bool = False) -> tuple:
    """(the amax a delayed slot quantizes ``t`` with, the amax it records: ``current`` where the
    caller has it, a reused slot's source's, else ``t``'s own), or (None, None) for a slot without
    delayed scaling; ``recorded``: ``QLinear.delayed_amax``'s."""
    if layer is None or (gemm, operand) not in layer.scalers:
        return None, None
    current = tensor_amax(t) if current is None else current
    return layer.delayed_amax(gemm, operand, t, current, recorded), current


def _kept(op):
    """A reused operand as the backward keeps it (``FP8Operand.kept``, ``MoROperand.kept``)."""
    return op.kept() if isinstance(op, (FP8Operand, MoROperand)) else op


def _transpose_of(kept):
    """The high-precision transpose of a kept operand, or None for a quantized one (its transpose
    comes from ``FastPlan.operand``'s source)."""
    return None if is_quantized(kept) else kept.t()


# an operand kept for the backward travels through save_for_backward as four tensors (or Nones)
def _meta(op):
    if isinstance(op, MoROperand):
        return ("mor", op.fp8.spec, op.fp8.kind, op.fp8_t, op.hp_t)
    if isinstance(op, SubTensorOperand):
        return ("mor_sub_t" if op.values_t is not None else "mor_sub", op.block)
    return ("fp8", op.spec, op.kind) if isinstance(op, FP8Operand) else None


def _tensors(op) -> tuple:
    if isinstance(op, MoROperand):
        return op.fp8.codes, op.fp8.scale, op.e4m3, op.hp
    if isinstance(op, SubTensorOperand):
        # the backward multiplies a kept operand's transpose only: where the kernels wrote the
        # transposed copies (values and FP8 codes, K-contiguous for the backward's GEMMs), those are
        # kept instead of the forward's, which a view would have to copy again
        if op.values_t is not None:
            return op.values_t, op.scale, op.choice, op.e4m3_t
        return op.values, op.scale, op.choice, None
    return (op.codes, op.scale, op.codes_t, op.scale_t) if isinstance(op, FP8Operand) else (op, None, None, None)


def _unpack(saved, meta):
    if meta is None:
        return saved[0]
    if meta[0] == "mor_sub":
        return SubTensorOperand(saved[0], saved[1], saved[2], meta[1])
    if meta[0] == "mor_sub_t":  # the transposed copies kept (_tensors): the forward's layout as views
        values_t, scale, choice, e4m3_t = saved
        return SubTensorOperand(values_t.t(), scale, choice, meta[1], e4m3_t.t(), values_t, e4m3_t)
    if meta[0] == "mor":
        return MoROperand(FP8Operand(saved[0], saved[1], meta[1], meta[2]), saved[2], saved[3], meta[3], meta[4])
    return FP8Operand(saved[0], saved[1], meta[1], meta[2], saved[2], saved[3])


def convert(model: nn.Module, recipe: Recipe, include: Optional[Iterable[str]] = None,
            exclude: Iterable[str] = DEFAULT_EXCLUDE, telemetry: Optional[Telemetry] = None,
            seed: int = 0) -> list[str]:
    """Swap linear layers for ``QLinear`` in place; returns the names of the swapped modules.

    include / exclude: fnmatch patterns on module names (``model.layers.*.mlp.*``); by default every
    linear layer except the LM head.  Embeddings and norms are not linear layers and stay as they are.
    """
    swapped = []
    for parent, attr, name, child, transposed in list(linear_layers(model, include, exclude)):
        if isinstance(child, QLinear):
            continue  # already converted
        setattr(parent, attr, QLinear(child.weight, child.bias, recipe, name=name, transposed=transposed,
                                      telemetry=telemetry, seed=seed))
        swapped.append(name)
    if not swapped:
        raise ValueError(f"convert: no linear layer matched include={include} exclude={list(exclude)}")
    return swapped
