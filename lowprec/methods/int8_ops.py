"""The graph operators of the INT8 recipes (block INT8 and INT8 with block fallback): one operand's
quantization and the block-scaled product, each one node of a compiled graph.

``quantize_operand(x2d, block, mask, keys)`` -> ``FallbackQTensor``: block INT8 of a 2-D operand,
with the blocks of ``mask`` (a bool grid, decided beforehand by the fallback rule; None: nothing
falls back) in two INT8 parts, rounded to nearest or stochastically with the rounding stream's
``keys`` (``stream_keys``). On CUDA a ``triton_op``: Inductor launches the one-pass Triton kernel
(``lowprec.kernels.int8_fallback_gemm.quantize_fallback_int8``) from its own code, which reads the
operand once through its strides (a transposed view is not copied), draws the stochastic rounding's
uniforms in the kernel (no tensor of draws is written) and writes the codes row-major, as the GEMM
takes them, and, for an operand that a backward GEMM takes transposed (X^T, W^T, dY^T), their
row-major transposes too, from registers (a separate transpose of int8 codes is a slow strided
copy). Where nothing can fall back it writes the first part alone. Profiled at the 1 B shape, the
same quantization in Inductor's fused torch ops took about 140 of the 312 ms of a step of INT8
fallback in 128 x 128 blocks (the stream's hash in int64, the draws, several passes per operand);
on this operator the quantize passes take 64 of 242 ms (results/bench/profiles/).

``block_mm(...)``: ``A @ B.T`` of block-scaled INT8 operands on the Triton GEMM
(``lowprec.kernels.int8_fallback_gemm``: the first parts in its main loop, the second parts after
it over each tile's flagged K-groups, or with ``second_parts="sparse"`` in passes of their own, found on the
device either way), summed in fp32 and returned in ``out_dtype`` (fp32, or bf16 rounded once: a
layer's output under autocast, which the kernel then writes at half the bytes, and which its
consumers read at half): on CUDA a ``triton_op`` whose launches Inductor makes from its own code,
elsewhere the opaque operator ``int8_block_mm``.

Both run where ``takes_kernels`` says (CUDA with Triton; tests add "cpu" to ``KERNEL_DEVICES``; the
quantize operator not with LOWPREC_QUANT_KERNELS=0, ``quantizes_on_kernels``):
there, on the CPU, the kernels run on the Triton interpreter where it is active, else on their torch
references (``fallback_quantize``, ``int8_block_gemm_reference``), the same codes bit for bit and the
GEMM's arithmetic. The quantization equals ``fallback_quantize`` (and, with no mask,
``lowprec.numerics.quantize`` of the INT8 block spec) bit for bit everywhere.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..kernels import runs_on
from ..numerics import rounding_stream as _stream
from ..numerics import scaling as _scaling
from .int8_fallback import FallbackQTensor, fallback_quantize, int8_block_gemm_reference

# devices whose INT8 recipes quantize and multiply on these operators (where Triton runs); tests add
# "cpu" to run them (their torch references, or the interpreter) inside a compiled graph
KERNEL_DEVICES = ("cuda",)


def takes_kernels(device: torch.device) -> bool:
    """Whether GEMMs of operands on ``device`` multiply on the GEMM operator."""
    return device.type in KERNEL_DEVICES and _kernels_run_on(device.type)


def quantizes_on_kernels(device: torch.device) -> bool:
    """Whether operands on ``device`` are quantized on the quantize operator (also switched off with
    the other quantize kernels: ``lowprec.numerics.scaling.USE_KERNELS``, LOWPREC_QUANT_KERNELS=0)."""
    return takes_kernels(device) and _scaling.USE_KERNELS


def _kernels_run_on(device_type: str) -> bool:
    # the CPU: the operators' torch references where the interpreter is off
    return device_type == "cpu" or runs_on("int8_fallback_gemm", device_type)


# ----------------------------------------------------------------------------------------------
# Quantization


def stream_keys(seed, device: torch.device) -> torch.Tensor:
    """The rounding-stream keys of an operand's two parts (``rounding_stream.part_key``), as the
    quantize operator takes them: on the operand's ``device`` (a seed given as a number makes them
    on the CPU)."""
    return torch.stack([_stream.part_key(seed, p) for p in range(2)]).to(device)


def quantize_operand(x2d: torch.Tensor, block, mask: Optional[torch.Tensor], keys: Optional[torch.Tensor],
                     transposed: bool = False) -> FallbackQTensor:
    """``fallback_quantize(x2d, block, mask, rounding, noise=the draws of keys)`` on the quantize
    operator: codes int8, the first part alone where ``mask`` is None (residual zeros, scales 1);
    with ``transposed`` the codes' row-major transposes too (``FallbackQTensor.codes_t``), for a
    backward GEMM that takes the operand transposed."""
    op = int8_quantize_cuda if x2d.is_cuda else int8_quantize
    q1, s1, q2, s2, flags, q1t, q2t = op(x2d, list(block), mask, keys, transposed)
    t = dict(codes_t=q1t, residual_t=None if mask is None else q2t) if transposed else {}
    if mask is None:
        return FallbackQTensor(q1, s1, torch.zeros_like(q1), torch.ones_like(s1),
                               torch.zeros_like(s1, dtype=torch.bool), tuple(block), maybe_fallback=False, **t)
    return FallbackQTensor(q1, s1, q2, s2, flags.bool(), tuple(block), **t)


def _quantize(x2d, block, mask, keys, transposed, launcher=None) -> tuple:
    from ..kernels import int8_fallback_gemm as kf
    first_only = mask is None
    if kf.triton_available(x2d.device):
        out = kf.quantize_fallback_int8(x2d, tuple(block), mask=mask, keys=keys, first_only=first_only,
                                        transposed=transposed, launcher=launcher)
    else:
        if x2d.is_cuda:
            raise RuntimeError("lowprec::int8_quantize on CUDA needs Triton (lowprec.kernels.int8_fallback_gemm)")
        noise = None if keys is None else tuple(_stream.uniforms(k, tuple(x2d.shape)) for k in keys)
        fq = fallback_quantize(x2d, tuple(block), mask, "nearest" if keys is None else "stochastic", noise=noise)
        # row-major, as the kernel writes them and the fake says: the torch ops keep a transposed
        # view's strides (W^T, dY^T), which a compiled graph's size-and-stride check refuses
        q1, q2 = fq.codes.to(torch.int8).contiguous(), fq.residual.to(torch.int8).contiguous()
        out = (q1, fq.scale.contiguous(), q2, fq.residual_scale.contiguous(), fq.mask.to(torch.int8).contiguous())
        if transposed:
            out += (q1.t().contiguous(), q2.t().contiguous())
    q1, s1, q2, s2, flags = out[:5]
    q1t, q2t = out[5:] if transposed else (None, None)
    if first_only:
        q2, s2, flags = _empty(x2d, torch.int8, torch.float32, torch.int8)
        q2t = None
    # the operator's schema is fixed: absent outputs are empty tensors (outputs never alias)
    q1t, q2t = (_empty(x2d, torch.int8)[0] if t is None else t for t in (q1t, q2t))
    return q1, s1, q2, s2, flags, q1t, q2t


def _empty(x2d, *dtypes) -> tuple:
    return tuple(x2d.new_empty(0, dtype=dt) for dt in dtypes)


def _fake(x2d, block, mask, keys, transposed) -> tuple:
    (M, N), grid = x2d.shape, (-(-x2d.shape[0] // block[0]), -(-x2d.shape[1] // block[1]))
    codes = x2d.new_empty((M, N), dtype=torch.int8)
    scale = x2d.new_empty(grid, dtype=torch.float32)
    if mask is None:
        second = _empty(x2d, torch.int8, torch.float32, torch.int8)
    else:
        second = (torch.empty_like(codes), torch.empty_like(scale), x2d.new_empty(grid, dtype=torch.int8))
    t = tuple(x2d.new_empty((N, M) if transposed and (i == 0 or mask is not None) else 0, dtype=torch.int8)
              for i in range(2))
    return codes, scale, *second, *t


_OUTPUTS = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


# off CUDA (the interpreter, or the torch reference): an opaque node in a compiled graph
@torch.library.custom_op("lowprec::int8_quantize", mutates_args=())
def int8_quantize(x2d: torch.Tensor, block: list[int], mask: Optional[torch.Tensor], keys: Optional[torch.Tensor],
                  transposed: bool) -> _OUTPUTS:
    """(q1 int8, s1, q2 int8, s2, flags int8, q1^T, q2^T) of a 2-D fp32/bf16/fp16 operand: the encode
    scales and parts of ``fallback_quantize``; with ``mask`` None the first part alone (the second
    part's outputs empty); the transposes (row-major) only with ``transposed`` (else empty)."""
    return _quantize(x2d, block, mask, keys, transposed)


int8_quantize.register_fake(_fake)


# on CUDA: a triton_op, whose launch Inductor traces and makes from its own code
@torch.library.triton_op("lowprec::int8_quantize_cuda", mutates_args=())
def int8_quantize_cuda(x2d: torch.Tensor, block: list[int], mask: Optional[torch.Tensor],
                       keys: Optional[torch.Tensor], transposed: bool) -> _OUTPUTS:
    """``int8_quantize`` on a CUDA device."""
    return _quantize(x2d, block, mask, keys, transposed, launcher=torch.library.wrap_triton)


# ----------------------------------------------------------------------------------------------
# The product


@torch.library.custom_op("lowprec::int8_block_mm", mutates_args=())
def int8_block_mm(qa: torch.Tensor, da: torch.Tensor, ra: Optional[torch.Tensor], dra: Optional[torch.Tensor],
                  fa: Optional[torch.Tensor], block_a: list[int], qb: torch.Tensor, db: torch.Tensor,
                  rb: Optional[torch.Tensor], drb: Optional[torch.Tensor], fb: Optional[torch.Tensor],
                  block_b: list[int], out_dtype: torch.dtype, second_parts: str) -> torch.Tensor:
    """``A @ B.T`` of block-scaled INT8 operands (int8 codes, DECODE scales, optional second parts
    with their flags; the arguments of ``int8_block_gemm_reference``) in ``out_dtype``, the second
    parts after the main loop (``second_parts`` "tail") or in passes of their own ("sparse"): the
    Triton kernel where Triton runs on the device (the interpreter on the CPU), else its torch
    reference (in the tail's order of sums for the tail)."""
    from ..kernels import int8_fallback_gemm as kf
    if kf.triton_available(qa.device):
        return kf.int8_fallback_gemm(qa, da, qb, db, tuple(block_a), tuple(block_b), ra, dra, fa, rb, drb, fb,
                                     fallback=second_parts, out_dtype=out_dtype)
    if qa.is_cuda:
        raise RuntimeError("lowprec::int8_block_mm on CUDA needs Triton (lowprec.kernels.int8_fallback_gemm)")
    return int8_block_gemm_reference(qa, da, qb, db, tuple(block_a), tuple(block_b), ra, dra, fa, rb, drb, fb,
                                     order="tail" if second_parts == "tail" else "k").to(out_dtype)


@int8_block_mm.register_fake
def _(qa, da, ra, dra, fa, block_a, qb, db, rb, drb, fb, block_b, out_dtype, second_parts):
    return qa.new_empty((qa.shape[0], qb.shape[0]), dtype=out_dtype)


# On CUDA: a triton_op, whose launches (the main kernel; with sparse second parts their passes) Inductor traces and
# makes from its own code. As an opaque operator each call cost about 200 us of Python on the host
# (argument checks, configuration lookup, Triton's launcher), 336 calls per step of the 1 B model,
# where the step is host-bound. A shape class new to the trace is tuned while it is traced.
@torch.library.triton_op("lowprec::int8_block_mm_cuda", mutates_args=())
def int8_block_mm_cuda(qa: torch.Tensor, da: torch.Tensor, ra: Optional[torch.Tensor], dra: Optional[torch.Tensor],
                       fa: Optional[torch.Tensor], block_a: list[int], qb: torch.Tensor, db: torch.Tensor,
                       rb: Optional[torch.Tensor], drb: Optional[torch.Tensor], fb: Optional[torch.Tensor],
                       block_b: list[int], out_dtype: torch.dtype, second_parts: str) -> torch.Tensor:
    """``int8_block_mm`` on a CUDA device."""
    from ..kernels import int8_fallback_gemm as kf
    return kf.int8_fallback_gemm(qa, da, qb, db, tuple(block_a), tuple(block_b), ra, dra, fa, rb, drb, fb,
                                 fallback=second_parts, out_dtype=out_dtype, launcher=torch.library.wrap_triton)


def block_mm(qa, da, ra, dra, fa, block_a, qb, db, rb, drb, fb, block_b, out_dtype=torch.float32,
             second_parts: str = "tail") -> torch.Tensor:
    """The product on the operator of the operands' device (``int8_block_mm_cuda`` on CUDA), in
    ``out_dtype`` where the kernel writes it (fp32, bf16), else in fp32 and then cast."""
    from ..kernels.int8_fallback_gemm import OUT_DTYPES
    op = int8_block_mm_cuda if qa.is_cuda else int8_block_mm
    written = out_dtype if out_dtype in OUT_DTYPES else torch.float32
    y = op(qa, da, ra, dra, fa, list(block_a), qb, db, rb, drb, fb, list(block_b), written, second_parts)
    return y.to(out_dtype)
