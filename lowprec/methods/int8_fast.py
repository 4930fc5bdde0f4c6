"""The INT8 recipes on the fast path: block INT8 (the ``int8_block`` recipe, Jetfire) and INT8 with
block fallback (``lowprec.methods.int8_fallback``, every rule), traced whole by ``torch.compile``
with nothing in the step that waits for the device.

Per GEMM (``int8_linear``, an autograd Function of the three GEMMs), each operand is quantized as
the emulation quantizes it, by the same functions: ``FallbackInt8Quantizer.quantize`` (block
statistics, the rule's mask on the device, the two INT8 parts) or, for an INT8 block ``QuantSpec``,
the first part alone. Where the kernels run (CUDA: ``lowprec.methods.int8_ops.quantizes_on_kernels``) the
parts come from the quantize operator, one Triton pass per operand launched from Inductor's code;
elsewhere from torch ops (``lowprec.numerics.quantize``) that Inductor fuses. Stochastic rounding
draws from ``lowprec.numerics.rounding_stream`` with keys made on the device from the layer's call
counter, the same keys the emulation uses, so the codes and scales are the emulation's bit for bit.
The dynamic rule's level and the fallback counts are the layer's buffers
(``lowprec.methods.int8_fallback_state``), updated by operators the compiled graph keeps.

The product (``int8_mm``): where the kernels run, the Triton block-scaled INT8 GEMM as an operator
(``lowprec.methods.int8_ops.block_mm``: on CUDA a ``triton_op`` whose launches Inductor makes, on the
CPU one opaque node of the graph); elsewhere,
or with ``gemm: emulated`` in the method, the fp32 GEMM of the dequantized values, the emulation's
own arithmetic (bit for bit on the CPU). The operators run on the CPU too (tests), on the Triton
interpreter where it is active, else on the kernels' torch references: for the GEMM
``int8_block_gemm_reference``, the kernel's arithmetic, which differs from the fp32 GEMM of the
values only in the order and rounding of its sums.

Where a backward operand's quantization is the transpose of a forward one's (``FastPlan.reused``,
``reused_slots``: X^T of the weight gradient, W^T of the input gradient, and dY^T of the weight
gradient from the input gradient's dY, each where both slots quantize alike in square blocks with
nearest rounding and the absmax rule or none: X and W in Jetfire's recipe and INT8 fallback's
default), the backward takes that operand transposed instead of quantizing again (counted for its
slot as quantizing would count it), and the forward keeps X^T's and W^T's INT8 codes for it in
place of X: one activation-sized and one weight-sized quantization less per layer and step, with
the emulation's codes bit for bit. The quantize operator writes those transposes row-major in the
same pass (``_gemm``'s ``reused_t``).

Where this differs from the emulation: on CUDA, the INT8 GEMM's order of sums. In a compiled model
Inductor may also keep a bf16 intermediate that it fuses (the layer's input, dX on its way back to
fp32) in fp32 instead of rounding it as eager does; ``torch._inductor.config.emulate_precision_casts``
keeps eager's roundings, and with it the compiled layer equals the emulation bit for bit on the CPU.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..gemm import traced_output
from ..numerics import quantize
from ..numerics import rounding_stream as _stream
from ..numerics.formats import round_cast
from ..recipes import OPERANDS, OperandCall, slot_key
from .int8_fallback import FallbackInt8Quantizer, FallbackQTensor
from .int8_fallback_rules import _int8_spec
from .int8_fallback_state import FallbackBuffers
from .int8_ops import block_mm, quantize_operand, quantizes_on_kernels, stream_keys, takes_kernels


def int8_spec_ok(spec) -> bool:
    """Whether an operand runs on this fast path: an INT8 fallback quantizer, or an INT8 block
    QuantSpec exactly as that quantizer quantizes (no margin or power-of-two scales)."""
    if isinstance(spec, FallbackInt8Quantizer):
        return True
    return (getattr(spec, "fmt", None) == "int8" and spec.scaling == "block"
            and spec == _int8_spec(spec.block, spec.rounding))


def int8_pair(a, b) -> bool:
    """Whether a GEMM's two operands run on this fast path: both INT8 with one K-group (the
    kernel's rescale is per K-group of both)."""
    return int8_spec_ok(a) and int8_spec_ok(b) and _block(a)[1] == _block(b)[1]


def _block(spec) -> tuple:
    return tuple(spec.block)


def describe(a, b) -> str:
    """One line for provenance: a GEMM's two INT8 operands and what multiplies them."""
    def one(s):
        if isinstance(s, FallbackInt8Quantizer):
            return f"int8 {s.block[0]}x{s.block[1]} ({s.rule})"
        return f"int8 {s.block[0]}x{s.block[1]}{' SR' if s.rounding == 'stochastic' else ''}"
    on = "the Triton INT8 GEMM" if getattr(a, "gemm", "kernel") == "kernel" else "an fp32 GEMM of the values"
    return f"{one(a)} / {one(b)} on {on}"


# ----------------------------------------------------------------------------------------------
# Operands and the product


def int8_operand(spec, t: torch.Tensor, call: OperandCall, transposed: bool = False) -> FallbackQTensor:
    """The operand ``t`` (2-D, reduction last) quantized as the emulation quantizes it: on the
    quantize operator where the kernels run (``int8_ops.quantizes_on_kernels``), else in torch ops.
    ``transposed``: a backward GEMM takes it transposed (the operator writes the codes' transposes
    in the same pass)."""
    if isinstance(spec, FallbackInt8Quantizer):
        return spec.quantize(t, call, transposed)[0]
    stochastic = spec.rounding == "stochastic"
    if quantizes_on_kernels(t.device):
        keys = stream_keys(call.seed, t.device) if stochastic else None
        return quantize_operand(t, spec.block, None, keys, transposed)
    noise = _stream.uniforms(call.seed, tuple(t.shape), device=t.device) if stochastic else None
    q = quantize(t, spec, noise=noise)
    codes = q.codes.reshape(t.shape)
    return FallbackQTensor(codes, q.scale, torch.zeros_like(codes), torch.ones_like(q.scale),
                           torch.zeros_like(q.scale, dtype=torch.bool), tuple(q.block), maybe_fallback=False)


def uses_kernel(spec, device: torch.device) -> bool:
    """Whether a GEMM with an operand of ``spec`` on ``device`` multiplies on the INT8 operator."""
    return getattr(spec, "gemm", "kernel") == "kernel" and takes_kernels(device)  # gemm: emulated (a key)


def int8_mm(a: FallbackQTensor, b: FallbackQTensor, kernel: bool, out_dtype: torch.dtype = torch.float32,
            second_parts: str = "tail") -> torch.Tensor:
    """``dequant(a) @ dequant(b).T`` summed in fp32, rounded once to ``out_dtype``: on the INT8 GEMM
    operator (``kernel``; ``second_parts``, the method's key: "tail" after its main loop, "sparse"
    in passes of their own), else the fp32 GEMM of the dequantized values (the emulation's)."""
    if not kernel:  # rounded by round_cast: a compiled graph keeps it (torch 2.11's Inductor dropped the cast)
        return round_cast(a.dequantize() @ b.dequantize().t(), out_dtype)
    return block_mm(*_kernel_operands(a), a.block, *_kernel_operands(b), b.block, out_dtype, second_parts)


def _kernel_operands(f: FallbackQTensor) -> tuple:
    """(int8 codes, decode scales, second part, its decode scales, flags) as the kernel takes them;
    the second part None where no block can fall back (known without looking). Row-major here, in
    the traced graph: an operand quantized in its GEMM's orientation (W^T, dY^T, X^T) is a transposed
    view, and Inductor writes the codes row-major in the quantization kernel itself instead of the
    operator copying them (336 copies, 64 ms of a 1B step's 607 ms of GPU time, profiled)."""
    ops = f.gemm_operands() if f.maybe_fallback else (*f.first_operands(), None, None, None)
    return tuple(None if t is None else t.contiguous() for t in ops)


# ----------------------------------------------------------------------------------------------
# The layer


def int8_linear(x, weight, bias, plan, transposed: bool, out_dtype: torch.dtype, key: torch.Tensor,
                buffers: Optional[tuple], training: bool) -> torch.Tensor:
    """``y = x W^T + b`` of a QLinear whose plan has INT8 GEMMs (``FastPlan.int8``). ``key``: this
    call's random key (``rounding_stream.call_key``); ``buffers``: the layer's fallback state, for
    an INT8 fallback recipe: its forward's and its backward's FallbackBuffers
    (``FallbackBuffers.passes``)."""
    flat = None if buffers is None else tuple(t for bufs in buffers for t in bufs)
    return _Int8LinearFn.apply(x, weight, bias, plan, transposed, out_dtype, key, flat, training)


def _gemm(plan, name: str, a, b, key, buffers, training: bool, reused_t=(False, False),
          out_dtype: torch.dtype = torch.float32) -> tuple:
    """(``a @ b.T`` of GEMM ``name`` (reduction last) in ``out_dtype`` (summed in fp32, rounded
    once), its two operands): each operand quantized here from its tensor, or given already
    quantized (a ``FallbackQTensor``: ``FastPlan.reused``). ``reused_t``: per operand, whether a
    later GEMM takes it transposed (its codes' transposes are written by the same pass)."""
    from ..gemm import hp_mm
    kind, spec_a, spec_b = plan.gemms[name]
    if kind == "hp":
        with _no_autocast(a):
            return hp_mm(a, b, plan.high_precision, torch.float32).to(out_dtype), (a, b)
    ops = []
    for op, t, spec, want_t in zip(OPERANDS[name], (a, b), (spec_a, spec_b), reused_t):
        call = OperandCall(buffers, name, op, slot_key(key, name, op), training)
        if isinstance(t, FallbackQTensor):
            if isinstance(spec, FallbackInt8Quantizer):  # counted as quantizing it would count it
                spec.count(t, call)
            ops.append(t)
        else:
            ops.append(int8_operand(spec, t, call, want_t))
    second_parts = getattr(spec_a, "second_parts", "tail")  # an INT8 block spec has none
    with _no_autocast(ops[0].codes):
        return (int8_mm(*ops, kernel=uses_kernel(spec_a, ops[0].codes.device), out_dtype=out_dtype,
                        second_parts=second_parts), tuple(ops))


def _no_autocast(t) -> torch.autocast:
    """Autocast off around a GEMM: a compiled backward is traced under the autocast state of the
    forward's caller, where the fp32 GEMM would run in bf16 (QLinear turns autocast off around the
    forward). Around the GEMM alone, not the backward's quantization: Dynamo (torch 2.13) fails to
    trace a branch on a tensor's layout (``lowprec.numerics.scaling.blocks_max``) inside an
    autocast block of an autograd Function's backward."""
    return torch.autocast(device_type=t.device.type, enabled=False)


def reused_slots(plan) -> frozenset:
    """``FastPlan.reused`` of an INT8 plan: the (GEMM, operand) slots whose operand is taken,
    transposed, from the slot it is the transpose of (``lowprec.gemm.TRANSPOSED_FROM``) instead of
    quantized again, where that gives the same codes: both slots quantize alike, in square blocks,
    with nearest rounding, both falling back or neither, by a rule whose mask of the transpose is
    the transpose of the mask (absmax: block maxima against a quantile of them; not the error
    rule's fp32 sums, top-k's ties, or the dynamic rule's per-slot level). The forward keeps X's
    and W's codes for the backward where their slots are reused, in place of X and W."""
    from ..gemm import TRANSPOSED_FROM
    out = set()
    for (gt, op), (gs, _) in TRANSPOSED_FROM.items():
        if plan.gemms[gt][0] != "int8" or plan.gemms[gs][0] != "int8":
            continue
        target, source = (plan.gemms[g][1 + OPERANDS[g].index(op)] for g in (gt, gs))
        square = target.block[0] == target.block[1]
        if isinstance(target, FallbackInt8Quantizer):
            falls = target.falls_back(gt, op)
            same = (target is source and target.rounding(op) == "nearest" and falls == target.falls_back(gs, op)
                    and (not falls or target.rule in ("absmax", "none")))
        else:
            same = target == source and target.rounding == "nearest"
        if same and square:
            out.add((gt, op))
    return frozenset(out)


def _transposed(f: FallbackQTensor) -> FallbackQTensor:
    """The operand of the transposed tensor: the codes' transposes where the kernel wrote them,
    else transposed views."""
    codes = f.codes.t() if f.codes_t is None else f.codes_t
    residual = f.residual.t() if f.residual_t is None else f.residual_t
    return FallbackQTensor(codes, f.scale.t(), residual, f.residual_scale.t(), f.mask.t(), tuple(f.block)[::-1],
                           maybe_fallback=f.maybe_fallback)


_NONE5 = (None,) * 5


def _kept(f: FallbackQTensor) -> tuple:
    """A quantized operand's transpose as the forward saves it for the backward: INT8 codes (exact:
    integers in [-127, 127]) and the grids; the second part only where a block can fall back."""
    ft = _transposed(f)
    second = (ft.residual.to(torch.int8), ft.residual_scale) if ft.maybe_fallback else (None, None)
    return (ft.codes.to(torch.int8), ft.scale, *second, ft.mask)


def _restored_t(saved: tuple, meta: tuple) -> FallbackQTensor:
    """The transposed operand the forward kept (``_kept``; meta: the forward operand's block and
    maybe_fallback)."""
    codes, scale, residual, residual_scale, mask = saved
    if residual is None:
        residual, residual_scale = torch.zeros_like(codes), torch.ones_like(scale)
    return FallbackQTensor(codes, scale, residual, residual_scale, mask, tuple(meta[0])[::-1], maybe_fallback=meta[1])


class _Int8LinearFn(torch.autograd.Function):
    """The three GEMMs in the emulation's order (fprop; then dgrad, wgrad), each operand quantized
    in its GEMM's orientation as the emulation does, or taken transposed from the slot it is the
    transpose of where that gives the same codes (``FastPlan.reused``); outputs and gradients rounded to
    their tensors' dtypes as the emulation's are."""

    @staticmethod
    def forward(ctx, x, weight, bias, plan, transposed, out_dtype, key, buffers, training):
        # the forward's tensors here, the backward's kept for it (``FallbackBuffers.passes``)
        n = len(FallbackBuffers._fields)
        ctx.buffers = None if buffers is None else FallbackBuffers(*buffers[n:])
        buffers = None if buffers is None else FallbackBuffers(*buffers[:n])
        w = weight.t() if transposed else weight  # (N, K)
        x2d = x.reshape(-1, x.shape[-1])
        reused_t = (("wgrad", "x") in plan.reused, ("dgrad", "w") in plan.reused)
        # the GEMM writes the output in its dtype (rounded once, as the emulation's cast of its fp32
        # product), unless a bias is added to the fp32 product first
        y, (qx, qw) = _gemm(plan, "fprop", x2d, w, key, buffers, training, reused_t,
                            out_dtype if bias is None else torch.float32)
        y = y.reshape(*x.shape[:-1], w.shape[0])
        if bias is not None:  # after the reshape: Inductor would fold a 2-D GEMM and its bias into
            y = y + bias.float()  # one addmm on the CPU, whose sums round differently
        ctx.plan, ctx.transposed, ctx.has_bias, ctx.training = plan, transposed, bias is not None, training
        ctx.x_shape, ctx.x_dtype = x.shape, x.dtype
        # X's and W's codes where the backward takes their transposes (else X itself; W is saved anyway)
        ctx.x_meta = (tuple(qx.block), qx.maybe_fallback) if ("wgrad", "x") in plan.reused else None
        ctx.w_meta = (tuple(qw.block), qw.maybe_fallback) if ("dgrad", "w") in plan.reused else None
        kx = _kept(qx) if ctx.x_meta else (x2d, *_NONE5[1:])
        kw = _kept(qw) if ctx.w_meta else _NONE5
        ctx.save_for_backward(weight, key, *kx, *kw)
        return traced_output(y.to(out_dtype))

    @staticmethod
    def backward(ctx, dy):
        weight, key, *saved = ctx.saved_tensors
        kx, kw = tuple(saved[:5]), tuple(saved[5:])
        plan = ctx.plan
        buffers = ctx.buffers
        w = weight.t() if ctx.transposed else weight
        dy2d = dy.reshape(-1, dy.shape[-1])
        dx = dw = db = qdy = None
        # the GEMMs with autocast off (_gemm), as in the forward
        if ctx.needs_input_grad[0]:
            wt = _restored_t(kw, ctx.w_meta) if ctx.w_meta else w.t()
            reuse_dy_t = ("wgrad", "dy") in plan.reused and ctx.needs_input_grad[1]
            dx, (qdy, _) = _gemm(plan, "dgrad", dy2d, wt, key, buffers, ctx.training, (reuse_dy_t, False),
                                 ctx.x_dtype)
            dx = dx.to(ctx.x_dtype).reshape(ctx.x_shape)
        if ctx.needs_input_grad[1]:
            reuse_dy = ("wgrad", "dy") in plan.reused and isinstance(qdy, FallbackQTensor)
            dyt = _transposed(qdy) if reuse_dy else dy2d.t()
            xt = _restored_t(kx, ctx.x_meta) if ctx.x_meta else kx[0].t()
            dw = _gemm(plan, "wgrad", dyt, xt, key, buffers, ctx.training, out_dtype=weight.dtype)[0]
            dw = (dw.t() if ctx.transposed else dw).to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2d.float().sum(0)
        return dx, dw, db, None, None, None, None, None, None
