"""Hardware GEMMs for QLinear: FP8 quantization in plain torch ops and ``torch._scaled_mm``.

Two users:
* the fast path (``lowprec.linear``, ``FastPlan``): activations stay in their own dtype, operands a
  recipe leaves unquantized go to a BF16 (or FP32) GEMM, FP8 operands are quantized here
  (``quantize_fp8``: amax, scale, cast; written as torch ops so that ``torch.compile`` fuses them
  into one or two passes) and multiplied by ``fp8_mm`` on FP8 tensor cores. No dequantized copy is
  materialized and nothing waits for the device.
* the emulation on CUDA (``scaled_mm``): two QTensors whose scales ``_scaled_mm`` can take.

``quantize_fp8`` gives the codes and scales of ``lowprec.numerics.quantize`` bit for bit (the same
amax rule, ``scale_from_amax`` and a saturating round-to-nearest-even cast; the tests compare them);
the GEMM differs from the emulation only in accumulation order and in multiplying by the fp32
reciprocal of the encode scale instead of dividing by it.

The pairs of scale kinds with a hardware GEMM are ``FP8_PAIRS``: ``torch._scaled_mm``
(``lowprec.numerics.scaled_mm``: per-tensor and per-row scales, and on CUDA 1x128 x 128x128 and
1x128 x 1x128 blocks, the latter the weight gradient of DeepSeek-style recipes; on CUDA a block-scaled
pair whose K ends in a partial block is padded with zeros to whole blocks, ``padded_k``). Where cuBLAS
does not take that pair (another device, a shape ``shape_fits`` refuses), the Triton GEMM of
``lowprec.kernels.block_fp8_gemm`` scales each K-step's FP8 product by its blocks' scales
(``TRITON_PAIRS``, ``block_scaled_mm``, which sub-tensor MoR's GEMMs use too; on CUDA a ``triton_op``
that Inductor launches itself).
Any other pair, or a shape they refuse, multiplies the dequantized operands in fp32: the
emulation's arithmetic, still exact codes.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Optional, Union

import torch
import torch.nn.functional as F

from .numerics import QuantSpec, to_torch_dtype
from .kernels import runs_on as _kernels_run_on
from .numerics import scaling as _scaling
from .numerics import scaled_mm as _scaled
from .numerics.scaled_mm import fp8_mm
from .numerics.scaling import (_resolve_block, apply_blocks, blocks_max, expand_blocks, gam_block_scales,
                               scale_from_amax)

_FP8 = ("e4m3", "e5m2")
# operand scale kinds: "tensor" (one scale), "row" (one per row of the reduction-last view),
# "1x128" / "128x128" (DeepSeek-V3 blocks along the reduction dimension)
_ROW, _TENSOR = "row", "tensor"


# Compiled on torch 2.11 (the GPU machines'), an INT8 layer without a bias, whose output was the GEMM
# operator's own, got exactly zero input and weight gradients (with a bias, or eager, right). The
# likely cause: Dynamo's trace of an autograd.Function routing an output's gradient to another output
# that aliases it (pytorch issue 180642: zero gradients on torch 2.11, with an in-place op in the
# forward, as MoR's BF16 fix-up and sub-tensor MoR's second GEMM are). A copy made in the traced
# forward is an output of its own, and Inductor drops the copy from the code it generates (no kernel,
# no memory traffic); eager, nothing is copied. Not yet run on a GPU.
COPY_TRACED_OUTPUT = True


def traced_output(y: torch.Tensor) -> torch.Tensor:
    """What a fast-path autograd Function (QLinear's, INT8's) returns: ``y``, copied inside a trace
    (``COPY_TRACED_OUTPUT``)."""
    return y.clone() if COPY_TRACED_OUTPUT and torch.compiler.is_compiling() else y


def scale_kind(spec) -> Optional[str]:
    """How ``_scaled_mm`` sees an operand's scales, or None where the fast path cannot quantize it
    (not FP8, stochastic rounding, MX / GAM scales, no saturation). Delayed scaling is a tensor
    scale from the amax its layer's history gives (``quantize_fp8``'s ``amax``)."""
    if not (isinstance(spec, QuantSpec) and spec.fmt in _FP8 and spec.rounding == "nearest" and spec.saturate):
        return None
    if spec.scaling in ("tensor", "delayed"):
        return _TENSOR
    if spec.scaling == "channel" and spec.axis == -1:
        return _ROW
    if spec.scaling == "block" and spec.block in ((1, 128), (128, 128)):
        return f"{spec.block[0]}x{spec.block[1]}"
    return None


# (kind of a, kind of b) pairs with a hardware GEMM, and what runs them: "scaled_mm" (torch._scaled_mm
# on any device torch has it for), "scaled_mm_cuda" (cuBLAS only; a's 128x128 grid goes as the 1x128
# scales of its rows)
FP8_PAIRS = {(_TENSOR, _TENSOR): "scaled_mm", (_ROW, _ROW): "scaled_mm", (_TENSOR, _ROW): "scaled_mm",
             (_ROW, _TENSOR): "scaled_mm", ("1x128", "128x128"): "scaled_mm_cuda",
             ("128x128", "128x128"): "scaled_mm_cuda", ("1x128", "1x128"): "scaled_mm_cuda"}
# pairs that the Triton block-scaled GEMM takes where _scaled_mm does not (the interpreter on CPU, a
# shape cuBLAS refuses), E4M3 only
TRITON_PAIRS = {("1x128", "1x128")}


def quantize_fp8(t: torch.Tensor, spec: QuantSpec,
                 amax: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, scale grid) of a 2-D operand (reduction dimension last) under an FP8 ``spec`` that
    ``scale_kind`` accepts, or GAM scaling (MoR): codes in the torch float8 dtype, row-major; the
    encode-scale grid as in ``QTensor.scale``. NaN and +-Inf are left out of every amax (as in
    ``block_amax``); NaN stays NaN in the codes and +-Inf saturates to +-fmax. Delayed scaling takes
    the ``amax`` its history gives (``DelayedScaler.step``), not the tensor's own."""
    if spec.scaling == "block" and amax is None and _block_quantize_on_kernel(t.device):
        return fp8_block_quantize_cuda(t, spec.fmt, list(spec.block), spec.margin, spec.pow2)
    # the amax from t as it is (encode_scales), the cast from its fp32 widening: compiled, the one
    # tensor both read is then t, which Inductor stores in t's dtype (bf16 for SwiGLU's product);
    # a widening that both read, it stored in fp32
    scale = encode_scales(t, spec, amax)
    x = t.float()
    return fp8_cast(apply_blocks(x, scale, _resolve_block(spec, tuple(x.shape)), torch.mul), spec).contiguous(), scale


def encode_scales(t: torch.Tensor, spec: QuantSpec, amax: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The encode-scale grid ``quantize_fp8`` casts a 2-D ``t`` with (in torch ops: not the block
    kernel's pass), for a pass that casts on its own (``lowprec.methods.mor_fast``). The amax is
    taken in t's own dtype (|x| and the max are exact in any float format), widened after."""
    if spec.scaling == "delayed":
        if amax is None:
            raise ValueError("quantize_fp8: delayed scaling needs the amax of its history (amax=)")
        amax = amax.float().reshape(1, 1)
    elif amax is not None:
        raise ValueError(f"quantize_fp8: amax= is for delayed scaling, not {spec.scaling!r}")
    else:
        mag = torch.where(torch.isfinite(t), t.abs(), torch.zeros((), dtype=t.dtype, device=t.device))
        amax = blocks_max(mag, _resolve_block(spec, tuple(t.shape))).float()
    fmax = spec.format.fmax
    if spec.scaling == "gam":
        return gam_block_scales(amax, amax.max(), fmax)
    return scale_from_amax(amax, fmax, spec.margin, spec.pow2)


def fp8_cast(scaled: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """FP8 codes of values already multiplied by their encode scales: saturated at the format's
    largest finite value, then cast (round to nearest even; NaN stays NaN)."""
    fmax = spec.format.fmax
    return scaled.clamp(-fmax, fmax).to(to_torch_dtype(spec.fmt))


def _block_quantize_on_kernel(device: torch.device) -> bool:
    """Whether block scaling quantizes on the Triton block kernel (``fp8_block_quantize_cuda``):
    on CUDA, with the quantize kernels on (``lowprec.numerics.scaling.USE_KERNELS``)."""
    return device.type == "cuda" and _scaling.USE_KERNELS and _kernels_run_on("quantize", "cuda")


# Block scaling on CUDA: one Triton pass (amax per block, scale, cast), launched from Inductor's
# code, that reads the operand through its strides and writes the codes row-major. Inductor's fusion
# of the torch ops below took 0.61-0.66 ms for one down-projection operand of the 1 B step
# (the transposed dY^T and X^T of the weight gradient; profile llama_1b_fp8_blockwise_109cfb1).
@torch.library.triton_op("lowprec::fp8_block_quantize_cuda", mutates_args=())
def fp8_block_quantize_cuda(x2d: torch.Tensor, fmt: str, block: list[int], margin: int,
                            pow2: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(FP8 codes row-major, encode-scale grid) of a 2-D CUDA tensor under block scaling, those of
    ``quantize_fp8`` bit for bit (``lowprec.kernels.quantize``)."""
    from .kernels import quantize as kq
    return kq.quantize_fp8(x2d, fmt, "block", tuple(block), margin=margin, pow2=pow2,
                           launcher=torch.library.wrap_triton)


def quantize_fp8_with_transpose(t: torch.Tensor, spec: QuantSpec) -> tuple:
    """``quantize_fp8`` of a 2-D tensor and of its transpose under a 1x128 spec (``WITH_TRANSPOSE``):
    ``(codes, scale, codes_t, scale_t)``. On CUDA one Triton pass reads ``t`` once for both
    (``fp8_block_quantize_t_cuda``); elsewhere the two quantizations, bit for bit the same."""
    if _block_quantize_on_kernel(t.device):
        return fp8_block_quantize_t_cuda(t, spec.fmt, spec.block[1], spec.margin, spec.pow2)
    return (*quantize_fp8(t, spec), *quantize_fp8(t.t(), spec))


# The activation and its gradient each need both layouts (1x128 blocks along features for the
# forward or input-gradient GEMM, along tokens for the weight gradient's transposed operand); two
# passes of the kernel above took 57 ms of the 1 B step's 167 ms of GPU kernels, the second reading
# the transposed view (profile llama_1b_fp8_blockwise_71a3705).
@torch.library.triton_op("lowprec::fp8_block_quantize_t_cuda", mutates_args=())
def fp8_block_quantize_t_cuda(x2d: torch.Tensor, fmt: str, block: int, margin: int,
                              pow2: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes, scale, codes_t, scale_t) of a 2-D CUDA tensor and its transpose in (1, block) blocks
    from one read (``lowprec.kernels.quantize.quantize_fp8_with_transpose``)."""
    from .kernels import quantize as kq
    return kq.quantize_fp8_with_transpose(x2d, fmt, block, margin=margin, pow2=pow2,
                                          launcher=torch.library.wrap_triton)


def kind_block(kind: str, shape) -> tuple:
    """The (rows, cols) scale block of a scale kind over a (rows, cols) operand."""
    rows, cols = shape
    return {_TENSOR: (rows, cols), _ROW: (1, cols), "1x128": (1, 128), "128x128": (128, 128)}[kind]


# scale kinds whose codes and scales of a tensor's transpose are the transposed codes and scales
# (one scale, or square blocks): the backward GEMMs reuse them instead of quantizing again
TRANSPOSABLE = (_TENSOR, "128x128")
# scale kinds whose transpose is quantized with the tensor itself, in the same pass
# (``quantize_fp8_with_transpose``): the backward GEMMs take those codes
WITH_TRANSPOSE = ("1x128",)


class FP8Operand(NamedTuple):
    """A quantized GEMM operand: row-major (rows, K) FP8 codes, their encode-scale grid, the spec
    and its scale kind; ``codes_t``, ``scale_t``: the operand of the transposed tensor where its
    quantization made both (``WITH_TRANSPOSE``). An operand kept for the backward only (``kept``)
    holds those alone (``codes`` None)."""
    codes: Optional[torch.Tensor]
    scale: Optional[torch.Tensor]
    spec: QuantSpec
    kind: str
    codes_t: Optional[torch.Tensor] = None
    scale_t: Optional[torch.Tensor] = None

    @classmethod
    def of(cls, t: torch.Tensor, spec: QuantSpec, kind: Optional[str] = None,
           amax: Optional[torch.Tensor] = None, with_transpose: bool = False) -> "FP8Operand":
        """``t`` quantized under ``spec``; ``kind`` for a GAM spec (``scale_kind`` of others);
        ``amax``: a delayed scaler's; ``with_transpose`` (a kind of ``WITH_TRANSPOSE``): the
        transposed tensor's operand too, from the same pass."""
        kind = kind or scale_kind(spec)
        if with_transpose:
            if kind not in WITH_TRANSPOSE or amax is not None:
                raise ValueError(f"FP8Operand.of: with_transpose is for kinds {WITH_TRANSPOSE}, not {kind!r}"
                                 + (" with a delayed amax" if amax is not None else ""))
            codes, scale, codes_t, scale_t = quantize_fp8_with_transpose(t, spec)
            return cls(codes, scale, spec, kind, codes_t, scale_t)
        return cls(*quantize_fp8(t, spec, amax), spec, kind)

    def t(self) -> "FP8Operand":
        """The operand of the transposed tensor: the one quantized with it, or (a kind of
        ``TRANSPOSABLE``) the same codes and scales as quantizing the transpose, bit for bit, from
        one FP8 transpose copy."""
        if self.codes_t is not None:
            return FP8Operand(self.codes_t, self.scale_t, self.spec, self.kind)
        if self.kind not in TRANSPOSABLE:
            raise ValueError(f"FP8Operand.t: scales of kind {self.kind!r} differ between a tensor and its transpose")
        return FP8Operand(self.codes.t().contiguous(), self.scale.t().contiguous(), self.spec, self.kind)

    def kept(self) -> "FP8Operand":
        """What a backward that takes only the transpose (``t``) keeps of this operand: without
        the codes of its own layout where the transposed ones were made with them."""
        return self if self.codes_t is None else self._replace(codes=None, scale=None)


def dequantized_mm(a8: torch.Tensor, scale_a: torch.Tensor, block_a: tuple, b8: torch.Tensor,
                   scale_b: torch.Tensor, block_b: tuple) -> torch.Tensor:
    """fp32 ``dequant(a) @ dequant(b).T`` of codes with encode-scale grids over (R, C) blocks: the
    fallback for pairs and shapes ``_scaled_mm`` refuses."""
    return dequantized(a8, scale_a, block_a) @ dequantized(b8, scale_b, block_b).t()


def dequantized(codes: torch.Tensor, scale: torch.Tensor, block) -> torch.Tensor:
    """fp32 codes / scale of an operand with an encode-scale grid over (R, C) blocks. The expanded
    grid, not apply_blocks' blocked view: Inductor (torch 2.13) fails to fuse the blocked view of a
    transposed layout."""
    return codes.float() / expand_blocks(scale, tuple(codes.shape), block)


def shape_fits(a: torch.Tensor, b: torch.Tensor, kind_a: str, kind_b: str, k: Optional[int] = None) -> bool:
    """cuBLASLt's shape rules for a (M, K) @ b (N, K).T: K and N multiples of 16, M > 0; for block
    scales whole 128-blocks of K (and of N for a 128x128 grid). ``k``: the K to judge instead of
    the operands' (a padded one, ``padded_k``)."""
    (m, k_own), n = a.shape, b.shape[0]
    k = k_own if k is None else k
    if m == 0 or k % 16 or n % 16:
        return False
    if kind_b == "128x128":
        # a K of no multiple of 4 blocks goes as the pair 1x128 x 1x128 (``fp8_mm``)
        return k % 128 == 0 and n % 128 == 0
    if kind_b == "1x128":
        return k % 128 == 0
    return True


# a block-scaled pair's K on cuBLAS: whole blocks (``shape_fits``)
_BLOCK_K = 128


def padded_k(k: int) -> int:
    """The K a block-scaled pair is padded to for cuBLAS (``hardware_route``'s "scaled_mm_padded")."""
    return -(-k // _BLOCK_K) * _BLOCK_K


def _pad_k(op: "FP8Operand", k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An operand's codes padded along K to ``k`` (whole blocks: the grid is unchanged) with zero
    codes (0x00 is +0 in both FP8 formats), so every added product is 0 and the sums are the
    unpadded ones."""
    codes = F.pad(op.codes.view(torch.uint8), (0, k - op.codes.shape[1])).view(op.codes.dtype)
    return codes, op.scale


def hardware_route(a: "FP8Operand", b: "FP8Operand") -> Optional[str]:
    """What multiplies two quantized operands: "scaled_mm", "scaled_mm_padded" (a block-scaled pair
    on cuBLAS whose K ends in a partial block, padded with zeros to whole blocks), "triton"
    (``FP8_PAIRS``), or None for the fp32 GEMM of the dequantized codes (another pair, two E5M2
    operands, a device or shape refused: a CPU torch whose ``_scaled_mm`` takes no row scales,
    ``scaled_mm.CPU_ROW_SCALES``)."""
    where = FP8_PAIRS.get((a.kind, b.kind))
    if where is None or a.spec.fmt == b.spec.fmt == "e5m2":
        return None
    on_device = a.codes.is_cuda or (where == "scaled_mm" and (a.kind == b.kind == _TENSOR or _scaled.CPU_ROW_SCALES))
    if on_device and shape_fits(a.codes, b.codes, a.kind, b.kind):
        return "scaled_mm"
    if where == "scaled_mm_cuda" and a.codes.is_cuda and shape_fits(
            a.codes, b.codes, a.kind, b.kind, k=padded_k(a.codes.shape[1])):
        return "scaled_mm_padded"
    # any shape: the kernel masks partial tiles
    e4m3 = a.spec.fmt == b.spec.fmt == "e4m3"
    if (a.kind, b.kind) in TRITON_PAIRS and e4m3 and triton_runs_on(a.codes.device.type):
        return "triton"
    return None


def triton_runs_on(device_type: str) -> bool:
    """Whether the Triton block-scaled GEMM runs on ``device_type`` (a constant for Dynamo)."""
    return _kernels_run_on("block_fp8_gemm", device_type)


def operand_mm(a: FP8Operand, b: FP8Operand, out_dtype: torch.dtype, fast_accum: bool = False) -> torch.Tensor:
    """``dequant(a) @ dequant(b).T`` of two quantized operands: on the hardware GEMM of their pair
    where the device and the shape allow (``hardware_route``), else in fp32 from the same codes."""
    route = hardware_route(a, b)
    if route == "scaled_mm":
        return fp8_mm(a.codes, a.scale, a.kind, b.codes, b.scale, b.kind, out_dtype, fast_accum)
    if route == "scaled_mm_padded":
        k = padded_k(a.codes.shape[1])
        return fp8_mm(*_pad_k(a, k), a.kind, *_pad_k(b, k), b.kind, out_dtype, fast_accum)
    if route == "triton":
        op = block_scaled_mm_cuda if a.codes.is_cuda else block_scaled_mm
        return op(a.codes, a.scale, list(kind_block(a.kind, a.codes.shape)), b.codes, b.scale,
                  list(kind_block(b.kind, b.codes.shape)), out_dtype)
    # the blocks from the kinds, not the specs: a transpose's codes written with their own scales
    # (MoR per channel, ``FP8Operand.codes_t``) share the tensor's spec but not its block width
    return dequantized_mm(a.codes, a.scale, kind_block(a.kind, a.codes.shape), b.codes, b.scale,
                          kind_block(b.kind, b.codes.shape)).to(out_dtype)


# off CUDA (the Triton interpreter): an opaque node in a compiled graph, as Dynamo cannot trace the
# Triton launcher's host logic
@torch.library.custom_op("lowprec::block_scaled_mm", mutates_args=())
def block_scaled_mm(a: torch.Tensor, scale_a: torch.Tensor, block_a: list[int], b: torch.Tensor,
                    scale_b: torch.Tensor, block_b: list[int], out_dtype: torch.dtype,
                    a_e4m3: Optional[torch.Tensor] = None, a_rows_e4m3: Optional[torch.Tensor] = None,
                    b_e4m3: Optional[torch.Tensor] = None, b_rows_e4m3: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``dequant(a) @ dequant(b).T`` of codes a (M, K) and b (N, K), both E4M3 or both BF16 values
    on a code grid (sub-tensor MoR), with encode-scale grids over (R, C) blocks, on the Triton
    block-scaled GEMM (``lowprec.kernels.block_fp8_gemm``). The four optional tensors: its
    ``fp8_tiles`` (BF16 codes whose all-E4M3 block-rows multiply on FP8 tensor cores)."""
    from .kernels import block_fp8_gemm as kg
    return kg.block_scaled_mm(a, scale_a, tuple(block_a), b, scale_b, tuple(block_b), out_dtype,
                              fp8_tiles=_fp8_tiles_given(a_e4m3, a_rows_e4m3, b_e4m3, b_rows_e4m3))


@block_scaled_mm.register_fake
def _(a, scale_a, block_a, b, scale_b, block_b, out_dtype, a_e4m3=None, a_rows_e4m3=None, b_e4m3=None,
      b_rows_e4m3=None):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


# on CUDA: a triton_op, whose launch Inductor traces and makes from its own code (an opaque
# operator's launch costs a Python call per GEMM on the host)
@torch.library.triton_op("lowprec::block_scaled_mm_cuda", mutates_args=())
def block_scaled_mm_cuda(a: torch.Tensor, scale_a: torch.Tensor, block_a: list[int], b: torch.Tensor,
                         scale_b: torch.Tensor, block_b: list[int], out_dtype: torch.dtype,
                         a_e4m3: Optional[torch.Tensor] = None, a_rows_e4m3: Optional[torch.Tensor] = None,
                         b_e4m3: Optional[torch.Tensor] = None,
                         b_rows_e4m3: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``block_scaled_mm`` on a CUDA device."""
    from .kernels import block_fp8_gemm as kg
    return kg.block_scaled_mm(a, scale_a, tuple(block_a), b, scale_b, tuple(block_b), out_dtype,
                              launcher=torch.library.wrap_triton,
                              fp8_tiles=_fp8_tiles_given(a_e4m3, a_rows_e4m3, b_e4m3, b_rows_e4m3))


# the second launch of ``fp8_tiles`` alone, into an output whose all-E4M3 tiles another GEMM made
# (``lowprec.kernels.block_fp8_gemm.block_scaled_mm_rest``): off CUDA an opaque node, on CUDA a
# triton_op, as block_scaled_mm
@torch.library.custom_op("lowprec::block_scaled_rest_", mutates_args=("out",))
def block_scaled_rest_(out: torch.Tensor, a: torch.Tensor, scale_a: torch.Tensor, block_a: list[int],
                       b: torch.Tensor, scale_b: torch.Tensor, block_b: list[int], a_rows_e4m3: torch.Tensor,
                       b_rows_e4m3: torch.Tensor, a_choice: Optional[torch.Tensor] = None,
                       b_choice: Optional[torch.Tensor] = None) -> None:
    """Overwrites the tiles of ``out`` whose A block-row or B block-column is not all E4M3 with
    ``dequant(a) @ dequant(b).T`` of the BF16 codes (sub-tensor MoR's operands); with the two choice
    grids, adds to those tiles the K-blocks where either block is not E4M3 instead."""
    from .kernels import block_fp8_gemm as kg
    kg.block_scaled_mm_rest(out, a, scale_a, tuple(block_a), b, scale_b, tuple(block_b), a_rows_e4m3, b_rows_e4m3,
                            choices=_choices_given(a_choice, b_choice))


@block_scaled_rest_.register_fake
def _(out, *args):
    return None


@torch.library.triton_op("lowprec::block_scaled_rest_cuda_", mutates_args=("out",))
def block_scaled_rest_cuda_(out: torch.Tensor, a: torch.Tensor, scale_a: torch.Tensor, block_a: list[int],
                            b: torch.Tensor, scale_b: torch.Tensor, block_b: list[int], a_rows_e4m3: torch.Tensor,
                            b_rows_e4m3: torch.Tensor, a_choice: Optional[torch.Tensor] = None,
                            b_choice: Optional[torch.Tensor] = None) -> None:
    """``block_scaled_rest_`` on a CUDA device."""
    from .kernels import block_fp8_gemm as kg
    kg.block_scaled_mm_rest(out, a, scale_a, tuple(block_a), b, scale_b, tuple(block_b), a_rows_e4m3, b_rows_e4m3,
                            launcher=torch.library.wrap_triton, choices=_choices_given(a_choice, b_choice))


def _choices_given(a_choice, b_choice) -> Optional[tuple]:
    if (a_choice is None) != (b_choice is None):
        raise ValueError("block_scaled_rest_: give both choice grids or neither")
    return None if a_choice is None else (a_choice, b_choice)


def _fp8_tiles_given(*parts) -> Optional[tuple]:
    if all(p is None for p in parts):
        return None
    if any(p is None for p in parts):
        raise ValueError("block_scaled_mm: give all four of a_e4m3, a_rows_e4m3, b_e4m3, b_rows_e4m3, or none")
    return parts


# ----------------------------------------------------------------------------------------------
# The emulation's CUDA shortcut: two QTensors whose scales _scaled_mm takes


def _qtensor_kind(qt) -> Optional[str]:
    spec = qt.spec
    if not (isinstance(spec, QuantSpec) and spec.fmt in _FP8):
        return None
    if spec.scaling in ("tensor", "delayed"):
        return _TENSOR
    if spec.scaling == "channel" and spec.axis == -1:
        return _ROW
    return None


def _eligible(spec) -> bool:
    return isinstance(spec, QuantSpec) and spec.fmt in _FP8 and (
        spec.scaling in ("tensor", "delayed") or (spec.scaling == "channel" and spec.axis == -1))


def fast_path_applies(a: torch.Tensor, b: torch.Tensor, spec_a, spec_b) -> bool:
    """Whether the emulation may multiply these operands' QTensors with ``scaled_mm``."""
    return (a.is_cuda and hasattr(torch, "_scaled_mm") and _eligible(spec_a) and _eligible(spec_b)
            and not (spec_a.fmt == spec_b.fmt == "e5m2")
            and a.shape[1] % 16 == 0 and b.shape[0] % 16 == 0 and a.shape[0] > 0)


def scaled_mm(qa, qb) -> torch.Tensor:
    """fp32 ``dequant(qa) @ dequant(qb).T`` on FP8 tensor cores from two QTensors (per-tensor,
    delayed or per-row scales)."""
    a8 = qa.codes.to(to_torch_dtype(qa.spec.fmt)).contiguous()  # exact: codes are on the grid
    b8 = qb.codes.to(to_torch_dtype(qb.spec.fmt)).contiguous()
    return fp8_mm(a8, qa.scale, _qtensor_kind(qa), b8, qb.scale, _qtensor_kind(qb), torch.float32)


def hp_mm(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype, out_dtype: torch.dtype) -> torch.Tensor:
    """``a @ b.T`` with both operands rounded to ``dtype`` (bf16 tensor cores accumulate in fp32)."""
    return F.linear(a.to(dtype), b.to(dtype)).to(out_dtype)


# ----------------------------------------------------------------------------------------------
# The fast path's plan for a recipe


_PLANS: dict = {}  # id(recipe) -> (recipe, its FastPlan or None)

# The GEMMs that accumulate FP8 products without Hopper's periodic promotion to fp32: the forward
# only, as Transformer Engine (split accumulator off for fprop, on for both gradients) and torchao's
# float8 training (use_fast_accum in the output GEMM) do; the gradients keep full accumulation.
# LOWPREC_FP8_FAST_ACCUM: comma-separated GEMM names, or "none".
FAST_ACCUM_ENV = "LOWPREC_FP8_FAST_ACCUM"


def fast_accum_gemms(text: Optional[str] = None) -> frozenset:
    """The GEMMs of ``LOWPREC_FP8_FAST_ACCUM`` (default ``fprop``)."""
    from .recipes import GEMMS
    text = os.environ.get(FAST_ACCUM_ENV, "fprop") if text is None else text
    names = frozenset() if text.strip() == "none" else frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = names - set(GEMMS)
    if unknown:
        raise ValueError(f"{FAST_ACCUM_ENV}: unknown GEMM(s) {sorted(unknown)}; use names of {list(GEMMS)} or 'none'")
    return names


FAST_ACCUM = fast_accum_gemms()

# (GEMM, operand) -> the operand of an earlier GEMM that is the same tensor transposed
TRANSPOSED_FROM = {("dgrad", "w"): ("fprop", "w"), ("wgrad", "dy"): ("dgrad", "dy"), ("wgrad", "x"): ("fprop", "x")}

Operand = Union[torch.Tensor, FP8Operand]  # a high-precision operand, or a quantized one


class FastPlan:
    """How each GEMM of a recipe runs on the fast path: both operands unquantized ("hp": a GEMM in
    the recipe's high-precision dtype), both FP8 with scales ``_scaled_mm`` understands ("fp8"),
    both tensor-level MoR ("mor": ``lowprec.methods.mor_fast``), both sub-tensor MoR ("mor_sub":
    ``lowprec.methods.mor_subtensor_fast``), or both INT8 in blocks, plain or with block fallback
    ("int8": ``lowprec.methods.int8_fast``, which runs a plan with INT8 GEMMs whole; it mixes them
    with "hp" GEMMs only). ``FastPlan.for_recipe`` is None for a recipe with anything else (other
    operand quantizers, MX specs, stochastic rounding of FP8): such layers run the emulation.
    Delayed scaling's slots (``delayed``) take their amax from the layer's history, which the layer
    passes to ``operand``."""

    def __init__(self, gemms: dict, high_precision: torch.dtype):
        from .recipes import OPERANDS
        self.gemms, self.high_precision = gemms, high_precision
        self.all_hp = all(kind == "hp" for kind, _, _ in gemms.values())
        self._specs = {(g, op): spec for g, (kind, *specs) in gemms.items() for op, spec in zip(OPERANDS[g], specs)}
        # operand slots scaled from their layer's amax history (``operand``'s ``amax``)
        self.delayed = frozenset(k for k, spec in self._specs.items()
                                 if isinstance(spec, QuantSpec) and spec.scaling == "delayed")
        self.has_mor = any(kind == "mor" for kind, _, _ in gemms.values())
        self.int8 = any(kind == "int8" for kind, _, _ in gemms.values())
        # (GEMM, operand) pairs whose quantized operand is the transpose of an earlier one's. Delayed
        # slots too: each still records its own history (the emulation's state), with the amax of the
        # tensor its source quantized; two slots of one spec record the same amaxes (a tensor and its
        # transpose), so their histories, and the scales they give, are equal, as long as each
        # training forward's backward runs, as training does. INT8 slots: where the rounding and the
        # fallback rule of both slots allow it (lowprec.methods.int8_fast)
        if self.int8:
            from .methods.int8_fast import reused_slots
            self.reused = reused_slots(self)
        else:
            self.reused = frozenset(target for target, source in TRANSPOSED_FROM.items()
                                    if self._specs[target] is not None and self._specs[target] == self._specs[source]
                                    and _transposable(self._specs[target]))
        # the reused delayed slots: they record the amax their source's tensor had
        self.delayed_reused = self.reused & self.delayed
        # the slots that quantize their tensor's transpose too, for a reused slot of theirs: 1x128
        # blocks (WITH_TRANSPOSE), and MoR's operands where its pass writes both layouts
        self.with_transpose = frozenset(TRANSPOSED_FROM[target] for target in self.reused
                                        if (isinstance(self._specs[target], QuantSpec)
                                            and scale_kind(self._specs[target]) in WITH_TRANSPOSE)
                                        or gemms[target[0]][0] == "mor")

    @classmethod
    def for_recipe(cls, recipe) -> Optional["FastPlan"]:
        # one plan per recipe, shared by its layers: a compiled graph then guards on one object
        key = id(recipe)
        if key not in _PLANS or _PLANS[key][0] is not recipe:
            _PLANS[key] = (recipe, cls._build(recipe))
        return _PLANS[key][1]

    @classmethod
    def _build(cls, recipe) -> Optional["FastPlan"]:
        from .methods.int8_fast import int8_pair
        from .methods.mor_fast import fast_mor_quantizer
        from .methods.mor_subtensor_fast import fast_subtensor_quantizer
        from .recipes import GEMMS, OperandQuantizer
        gemms = {}
        for g in GEMMS:
            a, b = recipe.gemm(g)
            if int8_pair(a, b):
                gemms[g] = ("int8", a, b)
            elif isinstance(a, OperandQuantizer) or isinstance(b, OperandQuantizer):
                if fast_mor_quantizer(a) and fast_mor_quantizer(b):
                    gemms[g] = ("mor", a, b)
                elif fast_subtensor_quantizer(a) and fast_subtensor_quantizer(b):
                    gemms[g] = ("mor_sub", a, b)
                else:
                    return None
            elif a is None and b is None:
                gemms[g] = ("hp", None, None)
            elif scale_kind(a) is not None and scale_kind(b) is not None:
                gemms[g] = ("fp8", a, b)
            else:
                return None
        kinds = {kind for kind, _, _ in gemms.values()}
        if "int8" in kinds and kinds - {"int8", "hp"}:
            return None
        return cls(gemms, {"bf16": torch.bfloat16, "fp32": torch.float32}[recipe.high_precision])

    def operand(self, gemm: str, op: str, t: torch.Tensor, source: Optional[Operand] = None,
                amax: Optional[torch.Tensor] = None) -> Operand:
        """Operand ``op`` of GEMM ``gemm`` from its tensor ``t`` (reduction last): ``t`` itself for a
        high-precision GEMM, else its FP8Operand; ``source``, the operand an earlier GEMM made of
        ``t``'s transpose, is transposed instead of quantizing ``t`` where ``reused`` allows;
        ``amax``: the slot's delayed scaler's, for a slot of ``delayed``."""
        from .methods.mor_fast import mor_operand
        from .methods.mor_subtensor_fast import subtensor_operand
        spec = self._specs[(gemm, op)]
        if spec is None:
            return t
        if (gemm, op) in self.reused and is_quantized(source):
            return source.t()
        if self.gemms[gemm][0] == "mor":
            return mor_operand(spec, t, with_transpose=(gemm, op) in self.with_transpose)
        if self.gemms[gemm][0] == "mor_sub":
            return subtensor_operand(spec, t)
        if self.gemms[gemm][0] == "int8":  # its quantizers need the layer's call key and buffers
            raise ValueError("FastPlan.operand: INT8 GEMMs run through lowprec.methods.int8_fast.int8_linear")
        return FP8Operand.of(t, spec, amax=amax, with_transpose=(gemm, op) in self.with_transpose)

    def mm(self, name: str, a: Operand, b: Operand, out_dtype: torch.dtype,
           counts: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``a @ b.T`` of GEMM ``name`` from its two operands (``operand``), in ``out_dtype``;
        ``counts``: a layer's MoR decision counts, to which a MoR GEMM adds its call and choices."""
        kind = self.gemms[name][0]
        if kind == "hp":
            return hp_mm(a, b, self.high_precision, out_dtype)
        if kind == "mor":
            from .methods.mor_fast import mor_mm
            return mor_mm(a, b, out_dtype, fast_accum=name in FAST_ACCUM, counts=counts, gemm=name)
        if kind == "mor_sub":
            from .methods.mor_subtensor_fast import count_subtensor_gemm, subtensor_mm
            if counts is not None:
                count_subtensor_gemm(counts, name, a, b)
            return subtensor_mm(a, b, out_dtype)
        return operand_mm(a, b, out_dtype, fast_accum=name in FAST_ACCUM)

    def gemm(self, name: str, a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        """``a @ b.T`` (reduction last) of GEMM ``name`` in ``out_dtype``, both operands from their tensors."""
        from .recipes import OPERANDS
        op_a, op_b = OPERANDS[name]
        return self.mm(name, self.operand(name, op_a, a), self.operand(name, op_b, b), out_dtype)

    def describe(self) -> str:
        """One line for provenance: what each GEMM runs on."""
        def one(kind, a, b):
            if kind == "hp":
                return f"{self.high_precision}".replace("torch.", "")
            if kind == "int8":
                from .methods.int8_fast import describe
                return describe(a, b)
            if kind == "mor":
                return f"MoR {a.partition}/{b.partition} (e4m3 on _scaled_mm, a bf16 choice fixed up on the device)"
            if kind == "mor_sub":
                return f"MoR sub-tensor {a.mode} (block codes as bf16, block-scaled Triton GEMM)"
            kinds = "/".join(f"delayed {scale_kind(s)}" if s.scaling == "delayed" else scale_kind(s) for s in (a, b))
            return f"fp8 {a.fmt}/{b.fmt}, {kinds} scales"
        return ", ".join(f"{g}: {one(*v)}" for g, v in self.gemms.items())

    def fp8_gemms(self) -> int:
        """GEMMs per layer and training step that run on FP8 operands (MoR's: at most)."""
        return sum(kind in ("fp8", "mor") for kind, _, _ in self.gemms.values())


def is_quantized(op) -> bool:
    """Whether a fast-path operand is quantized (FP8, tensor-level or sub-tensor MoR), not a tensor."""
    from .methods.mor_fast import MoROperand
    from .methods.mor_subtensor_fast import SubTensorOperand
    return isinstance(op, (FP8Operand, MoROperand, SubTensorOperand))


def _transposable(spec) -> bool:
    """Whether an operand of a tensor's transpose comes from the tensor's quantization
    (``FP8Operand.t``): one scale or square 128x128 blocks (the transposed codes), 1x128 blocks
    (quantized with the tensor, ``WITH_TRANSPOSE``), FP8 or MoR's E4M3 (per channel with
    ``mor_fast.CHANNEL_WITH_TRANSPOSE``: the transpose's codes and scales of its own, from the
    tensor's quantization)."""
    if isinstance(spec, QuantSpec):
        return scale_kind(spec) in TRANSPOSABLE + WITH_TRANSPOSE
    from .methods import mor_fast
    from .methods.mor_subtensor_fast import fast_subtensor_quantizer
    partitions = ("tensor", "block", "channel") if mor_fast.CHANNEL_WITH_TRANSPOSE else ("tensor", "block")
    return (mor_fast.fast_mor_quantizer(spec) and spec.partition in partitions) or fast_subtensor_quantizer(spec)
