"""The weight transforms of the GaussWS paper's arms: ``GaussWSWeight`` (W_c = bf16(W + noise * Delta),
cached per optimizer step) and ``STEWeight`` (straight-through RTN MX fake quantization), with the
MX round-to-nearest they and the post-training export share."""

from __future__ import annotations

import math
import warnings
from typing import Optional

import torch
from torch import nn

from ...errors import error_text
from ...numerics import QuantSpec, fake_quantize
from ...numerics.checks import one_of
from . import step_hook
from .autograd import _CachedWeight, _STEBits
from .noise import NOISES, RNGS, gaussws_reference
from .sampler import SAMPLERS, noise_seed
from .step import B_RANGE, block_pair, grid_shape

RESAMPLES = ("step", "microbatch")
BACKENDS = ("auto", "torch", "triton")


def _triton_module():
    try:
        from ...kernels import gaussws_noise as kg
    except Exception:  # a broken triton install must not break the torch path
        return None
    return kg


class GaussWSWeight(nn.Module):
    """Maps a master weight to the weight every GEMM uses: W_c = bf16(W + noise * Delta) in training,
    bf16(W) in evaluation. One per linear layer; see the module docstring.

    shape: the weight as stored; transposed: True for GPT2 Conv1D weights stored (in, out) (blocks,
    the b grid and ``bits`` refer to the (out, in) layout either way). out_dtype: None returns W_c's
    values in the master weight's dtype (QLinear's emulation then keeps an fp32 weight gradient, as
    in the bf16 recipe); torch.bfloat16 returns the cached bf16 tensor itself (autocast path). A
    call may ask for its own (``forward(w, out_dtype)``: ``QLinear.graph_weight`` for a compiled
    graph whose GEMMs are bf16).

    ``stable_output`` (an attribute, off by default; ``lowprec.linear.compiled`` sets it for CUDA
    graphs, whose recorded kernels read their inputs at fixed addresses): every draw writes its W_c
    into the same bf16 tensor instead of a new one. A draw then overwrites the W_c of the last one,
    so each forward's backward must run before the next draw, as a training loop does."""

    def __init__(self, shape, *, seed: int = 0, transposed: bool = False, noise: str = "rounded_gaussian",
                 b: int = 6, block=(32, 32), learnable_b: bool = False, b_min: int = 4, b_max: int = 16,
                 resample: str = "step", sampler: str = "threshold", backend: str = "auto",
                 rng: str = "generator", out_dtype: Optional[torch.dtype] = None):
        super().__init__()
        one_of("noise", noise, NOISES)
        one_of("sampler", sampler, SAMPLERS)
        one_of("resample", resample, RESAMPLES)
        one_of("backend", backend, BACKENDS)
        one_of("rng", rng, RNGS)
        for name, v in (("b", b), ("b_min", b_min), ("b_max", b_max)):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or (name != "b" and v != int(v)):
                raise ValueError(f"{name} must be a number (b_min/b_max integers), got {v!r}")
        lo, hi = B_RANGE
        if not lo <= b_min <= b_max <= hi:
            raise ValueError(f"need {lo} <= b_min <= b_max <= {hi}, got b_min={b_min}, b_max={b_max}")
        if not learnable_b and (not math.isfinite(b) or b != int(b) or not lo <= b <= hi):
            raise ValueError(f"fixed b must be an integer in {lo}..{hi}, got {b!r}")
        if learnable_b and not (math.isfinite(b) and b_min <= b <= b_max):
            raise ValueError(f"b (the learnable b's initial value) must be in [b_min, b_max] = "
                             f"[{b_min}, {b_max}], got {b!r}")
        if sampler == "normal" and noise != "rounded_gaussian":
            raise ValueError("sampler applies to noise='rounded_gaussian' only")
        if len(shape) != 2:
            raise ValueError(f"GaussWS works on 2-D weights, got shape {tuple(shape)}")
        self.shape, self.transposed = tuple(int(s) for s in shape), bool(transposed)
        self.layer_seed = int(seed)
        self.noise, self.sampler, self.resample = noise, sampler, resample
        self.backend, self.rng, self.out_dtype = backend, rng, out_dtype
        self.block = block_pair(block)  # (out, in) orientation
        self.b_min, self.b_max = int(b_min), int(b_max)
        self.learnable_b = bool(learnable_b)
        out_in = self.shape[::-1] if self.transposed else self.shape
        self.grid = grid_shape(out_in, self.block)
        self.b_init = b
        if self.learnable_b:
            # flat (row-major over the (out, in) block grid; bits_grid() is the 2-D view): trainers
            # that exempt parameters with dim < 2 from weight decay then exempt b too
            self.bits = nn.Parameter(torch.full((self.grid[0] * self.grid[1],), float(b), dtype=torch.float32))
        else:
            self.b = int(b)
        # W_c drawn so far: the counter half of the (layer seed, counter) RNG stream. A host int, not
        # a buffer: reading a CUDA buffer would sync the device once per layer and step. It travels
        # with checkpoints as the module's extra state, so a resumed run draws what an uninterrupted
        # one would have.
        self.samples = 0
        self._cache: Optional[dict] = None
        self.stable_output = False
        self._out: Optional[torch.Tensor] = None  # the W_c tensor every draw writes with stable_output
        self._eval_out: Optional[torch.Tensor] = None  # and bf16(W) in evaluation
        self.last_backend: Optional[str] = None
        self._triton_on: dict = {}  # device -> whether the kernel draws there (_use_triton)
        step_hook.install()

    def get_extra_state(self):
        return {"samples": int(self.samples)}

    def set_extra_state(self, state) -> None:
        self.samples = int((state or {}).get("samples", 0))

    def extra_repr(self) -> str:
        b = (f"learnable b (init {self.b_init}, used in [{self.b_min}, {self.b_max}])" if self.learnable_b
             else f"b={self.b}")
        return (f"noise={self.noise}, {b}, block={self.block}, resample={self.resample}, "
                f"sampler={self.sampler}, backend={self.backend}")

    # -- layout helpers: noise is drawn on the stored layout, blocks refer to (out, in)
    @property
    def stored_block(self) -> tuple[int, int]:
        return self.block[::-1] if self.transposed else self.block

    def bits_grid(self) -> torch.Tensor:
        """The learnable b as the (out, in) block grid (a view of ``bits``)."""
        return self.bits.view(self.grid)

    def effective_bits(self) -> torch.Tensor:
        """The integer b grid used by the forward ((out, in) block grid), differentiable (STE)."""
        if not self.learnable_b:
            return torch.full(self.grid, float(self.b))
        return _STEBits.apply(self.bits_grid(), float(self.b_min), float(self.b_max))

    def invalidate(self) -> None:
        """Forget the cached W_c: the next training forward draws a new one (needed only when the
        weight was changed without bumping its version, e.g. through ``.data``)."""
        self._cache = None

    def _key(self, w: torch.Tensor):
        key = (step_hook.epoch(), w.data_ptr(), w._version, w.device, w.dtype, tuple(w.shape))
        if self.learnable_b:
            key += (self.bits.data_ptr(), self.bits._version)
        return key

    def _use_triton(self, w: torch.Tensor) -> bool:
        # asked at every draw; the answer is the device's (the options are fixed)
        known = self._triton_on.get(w.device)
        if known is None:
            known = self._triton_on[w.device] = self._triton_for(w)
        return known

    def _triton_for(self, w: torch.Tensor) -> bool:
        if self.backend == "torch":
            return False
        kernel_ok = self.noise == "rounded_gaussian" and self.sampler == "threshold"
        kg = _triton_module() if kernel_ok else None
        usable = kg is not None and kg.triton_available(w.device) and kg.supports_block(self.stored_block)
        if self.backend == "triton":
            if not usable:
                raise RuntimeError(
                    "backend='triton' needs noise='rounded_gaussian', sampler='threshold', a stored block "
                    f"with rows divisible by 4 (got {self.stored_block}) and Triton on {w.device}")
            return True
        return usable and w.is_cuda

    def _draw(self, w: torch.Tensor, b_int: torch.Tensor):
        w2d = w.detach()
        seed = noise_seed(self.layer_seed, self.samples)
        if self.learnable_b:
            b_stored = b_int.t() if self.transposed else b_int
            b_arg = b_stored.to(device=w.device, dtype=torch.int32).contiguous()
        else:
            b_arg = self.b
        keep_unit = self.learnable_b
        out = self._kept("_out", w2d) if self.stable_output else None
        if self._use_triton(w2d):
            kg = _triton_module()
            res = kg.gaussws_noise_ex(w2d, b_arg, self.stored_block, seed, return_r=keep_unit,
                                      return_delta=keep_unit, check_b_values=False, out=out)
            w_c, unit, delta = res.w_c, res.r, res.delta
            self.last_backend = "triton"
        else:
            # b_arg is this module's own (clamped to [b_min, b_max]): reading it would wait for the device
            w_c, unit, delta = gaussws_reference(w2d, b_arg, self.stored_block, seed=seed, sampler=self.sampler,
                                                 rng=self.rng, noise=self.noise, check_b_values=False)
            if out is not None:
                w_c = out.copy_(w_c)
            self.last_backend = "torch"
        self.samples += 1
        if not keep_unit:
            unit = delta = None
        return w_c, unit, delta

    @property
    def graph_stable(self) -> bool:
        """Whether CUDA graphs may take this transform's weights (``lowprec.linear.compiled``): with a
        fixed b. A learnable b is refused: its training curve under graphs left the one without them
        (at step 20 of a GPT2 smoke run on the H200 the loss read 3.8475 with graphs, 3.8440 without;
        the cause not found yet; tests/test_gpu.py)."""
        return not self.learnable_b

    def _kept(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """The bf16 tensor of ``like``'s shape and device kept in attribute ``name`` (made the
        first time): what the draws (``_out``) or evaluation (``_eval_out``) write with
        ``stable_output``."""
        t = getattr(self, name)
        if t is None or t.device != like.device or t.shape != like.shape:
            t = torch.empty(like.shape, dtype=torch.bfloat16, device=like.device)
            setattr(self, name, t)
        return t

    def _check_shape(self, w: torch.Tensor) -> None:
        if tuple(w.shape) != self.shape:
            raise ValueError(f"weight shape {tuple(w.shape)} != the transform's {self.shape}")

    def _out_dtype(self, w: torch.Tensor, asked: Optional[torch.dtype]) -> torch.dtype:
        """The dtype a call returns W_c in: the one asked for, else the transform's, else w's."""
        return asked or self.out_dtype or w.dtype

    def _stale(self, key) -> bool:
        """Whether this call draws a new W_c (the cache is of another step or weight version)."""
        c = self._cache
        return self.resample == "microbatch" or c is None or c["key"] != key

    def forward(self, w: torch.Tensor, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """W_c (training) or bf16(W) (evaluation) in ``out_dtype``, else the transform's
        ``out_dtype``, else the master weight's dtype."""
        self._check_shape(w)
        out_dtype = self._out_dtype(w, out_dtype)
        if not self.training:
            if self.stable_output:  # a tensor of its own: the cached W_c may serve this step again
                return self._kept("_eval_out", w).copy_(w.detach()).to(out_dtype)
            return w.to(torch.bfloat16).to(out_dtype)
        b_eff = self.effective_bits() if self.learnable_b else None
        key = self._key(w)
        if self._stale(key):
            with torch.no_grad():
                w_c, unit, delta = self._draw(w, b_eff.detach() if b_eff is not None else None)
            # draws never bump w's version, so the key taken before the draw is the one to match
            self._cache = {"key": key, "w_c": w_c, "unit": unit, "delta": delta}
        c = self._cache
        return _CachedWeight.apply(w, b_eff, c["w_c"], c["unit"], c["delta"], self.stored_block,
                                   self.transposed, out_dtype)

    # why the grouped launch failed in this process (then every draw takes its own launch)
    _group_error: Optional[str] = None

    def _groupable(self, w: torch.Tensor) -> bool:
        """Whether ``forward_many`` draws this call with others: training, a fixed b, the kernel,
        and the grouped launch not failed before."""
        return (self.training and not self.learnable_b and GaussWSWeight._group_error is None
                and self._use_triton(w.detach()))

    @classmethod
    def forward_many(cls, transforms: list, ws: list, out_dtypes: list) -> list:
        """``[t(w, out_dtype) for ...]``, each value the same bit for bit, with the training draws
        of fixed-b transforms on the kernel's device made by one launch per stored block and tiling
        (``gaussws_noise_group``) and their W_c's handed out detached: their gradient is the
        identity's, which the layer that multiplies a W_c applies in its own graph
        (``lowprec.linear.linked_weight``), so that a compiled block's backward makes its master
        weights' gradients, block by block, with no autograd node or cast of its own. What
        ``lowprec.linear.compiled`` calls before each step, where 84 draws, autograd nodes and
        gradient casts a step set the pace of a 98 M model's CUDA graphs (and one node for all
        would hand every master weight its gradient at the end of the backward only). The others
        (evaluation, a learnable b, the torch backend) take their own ``forward``."""
        for t, w in zip(transforms, ws):
            t._check_shape(w)
        groupable = [t._groupable(w) for t, w in zip(transforms, ws)]
        results = [None if g else t(w, d) for g, t, w, d in zip(groupable, transforms, ws, out_dtypes)]
        grouped = [i for i, g in enumerate(groupable) if g]
        if not grouped:
            return results
        keys = {i: transforms[i]._key(ws[i]) for i in grouped}
        stale: dict = {}  # stored block -> indices whose W_c is drawn now
        for i in grouped:
            if transforms[i]._stale(keys[i]):
                stale.setdefault(transforms[i].stored_block, []).append(i)
        kg = _triton_module()
        drawn: dict = {}
        try:
            with torch.no_grad():
                for block, idx in stale.items():
                    ts = [transforms[i] for i in idx]
                    w2d = [ws[i].detach() for i in idx]
                    outs = [t._kept("_out", w) if t.stable_output else None for t, w in zip(ts, w2d)]
                    seeds = [noise_seed(t.layer_seed, t.samples) for t in ts]
                    drawn.update(zip(idx, kg.gaussws_noise_group(w2d, [t.b for t in ts], block, seeds, outs=outs)))
        except Exception as exc:
            # the grouped kernel failing to build for a GPU or Triton not yet seen (its tests run on
            # the CPU's interpreter and the H200): each weight's own launch, the same draws (nothing
            # was counted yet), and the reason said once
            GaussWSWeight._group_error = error_text(exc)
            warnings.warn(f"GaussWS: the grouped noise launch failed ({GaussWSWeight._group_error}); "
                          "drawing each weight with its own launch from now on", RuntimeWarning)
            for i in grouped:
                results[i] = transforms[i](ws[i], out_dtypes[i])
            return results
        for i, w_c in drawn.items():
            t = transforms[i]
            t.samples += 1
            t.last_backend = "triton"
            t._cache = {"key": keys[i], "w_c": w_c, "unit": None, "delta": None}
        for i in grouped:
            w_c, dtype = transforms[i]._cache["w_c"], transforms[i]._out_dtype(ws[i], out_dtypes[i])
            results[i] = w_c if dtype == w_c.dtype else w_c.to(dtype)
        return results

    @classmethod
    def factory(cls, **opts):
        """A ``Recipe.weight_transform``: builds the transform for a QLinear layer."""
        def make(layer) -> "GaussWSWeight":
            return cls(tuple(layer.weight.shape), seed=layer.seed, transposed=layer.transposed, **opts)
        make.__name__ = "gaussws(" + ", ".join(f"{k}={v}" for k, v in sorted(opts.items())) + ")"
        return make


class STEWeight(nn.Module):
    """Straight-through round-to-nearest MX fake quantization of the weight (1x32 blocks along the
    input dimension, E8M0 scales; lowprec.numerics QuantSpec(scaling="mx")), in training and eval."""

    def __init__(self, fmt: str, transposed: bool = False):
        super().__init__()
        self.fmt = _ste_format(fmt)
        self.transposed = bool(transposed)

    def extra_repr(self) -> str:
        return f"fmt={self.fmt}, mx 1x32 along in"

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        q = mx_rtn(w.detach(), self.fmt, transposed=self.transposed)
        return w + (q - w.detach())

    @classmethod
    def factory(cls, fmt: str):
        fmt = _ste_format(fmt)

        def make(layer) -> "STEWeight":
            return cls(fmt, transposed=layer.transposed)
        make.__name__ = f"ste_mx({fmt})"
        return make


# ----------------------------------------------------------------------------------------------
# MX round-to-nearest (STE arms and export)

STE_FORMATS = {"mxfp4": "e2m1", "mxfp6_e3m2": "e3m2", "mxfp6_e2m3": "e2m3", "mxfp8": "e4m3"}
_MX_ELEMENT_FORMATS = tuple(STE_FORMATS.values())
# names export_weights / mx_rtn accept -> the MX element format
EXPORT_FORMATS = {**STE_FORMATS, **{f: f for f in _MX_ELEMENT_FORMATS}}


def _ste_format(fmt: str) -> str:
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"MX format must be one of {sorted(EXPORT_FORMATS)}, got {fmt!r}")
    return EXPORT_FORMATS[fmt]


def mx_rtn(w: torch.Tensor, fmt: str, transposed: bool = False) -> torch.Tensor:
    """W round-to-nearest on the MX grid of `fmt` (1x32 blocks along the input dimension), in W's
    dtype (exact: these grids fit bf16)."""
    fmt = _ste_format(fmt)
    w2d = w.t() if transposed else w
    q = fake_quantize(w2d.to(torch.float32), QuantSpec(fmt=fmt, scaling="mx"))
    return (q.t() if transposed else q).to(w.dtype)

