"""Sub-tensor MoR on the fast path: every 128x128 block E4M3, E5M2 or BF16, one GEMM per product, and
nothing in the step that waits for the device.

Per operand (``subtensor_operand``): one BF16 tensor that holds each block's codes as values (E4M3
and E5M2 codes are exact in BF16) or, for a BF16 block, the tensor rounded to BF16, and one scale
grid with each block's encode scale (1 for a BF16 block), by the emulation's own rule
(``lowprec.methods.mor``). On CUDA (``quantize: auto``, the default, or ``kernel``) three Triton
passes per block make them (``lowprec.kernels.mor_subtensor_quant``), plus the transpose and the
FP8 codes in both layouts, with the rule's torch code on the grids between them; elsewhere, or with
``quantize: torch``, torch ops that Inductor fuses (``subtensor_parts``: both formats' codes and
block errors, each block's choice). The same operand either way, bit for bit; the kernels are faster
end to end on the H200 (results/bench/e2e_h200.csv: 0.51x of compiled BF16 against 0.46x at 1 B).
Per GEMM (``subtensor_mm``): the Triton block-scaled GEMM
(``lowprec.kernels.block_fp8_gemm``) on BF16 tensor cores, each K-step's product multiplied by the
outer product of its blocks' 1 / s before it joins the fp32 accumulator. The choice is data, not a
branch: a block-mixed operand costs what an all-E4M3 one costs.

Where this differs from the emulation (``SubTensorMoRQuantizer.__call__``, fp32 GEMMs of the
dequantized values): accumulation order and multiplying by 1 / s instead of dividing by s (every
product of two values is exact in fp32 either way), and a backward GEMM whose operand is the
transpose of a forward one (square blocks) reuses that operand's codes, scales and choices, whose
block errors differ from the transpose's own only in fp64 summation order.

With blocks whose height is a multiple of the GPU tile (128), the output tiles whose A block-row and
B block-column chose E4M3 throughout (nearly every one at ``small``) multiply FP8 copies of the
codes on FP8 tensor cores and the rest the BF16 values (``block_scaled_mm``'s ``fp8_tiles``: two
launches of one kernel, each tile computed by one); the kernel's E4M3 rate is about 1.45x its BF16
one at the 1 B shapes (results/bench/block_scaled_gemm_h200.csv); the 1 B step ran at 0.46x of
compiled BF16 with them (9967d27), 0.30x without (e391b6d). With 128x128 blocks on CUDA the FP8
tiles come from cuBLAS's block-scaled GEMM instead (``FP8_TILES_ON_CUBLAS``), which makes every
tile, and the kernel's BF16 launch adds to the others the K-blocks of other formats alone
(``MIXED_BLOCKS``; or overwrites those tiles whole).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from ..config import env_switch
from ..gemm import (block_scaled_mm, block_scaled_mm_cuda, block_scaled_rest_, block_scaled_rest_cuda_, dequantized,
                    shape_fits, triton_runs_on)
from ..numerics.scaled_mm import fp8_mm
from ..numerics.scaling import as_2d, expand_blocks
from ..recipes import OPERANDS, SLOTS
from .layer_buffers import add_rows
from .mor import (COUNT_COLUMNS, E4M3, E5M2, SubTensorMoRQuantizer, block_counts, dynamic_range, subtensor_choice,
                  subtensor_error_blocks, subtensor_parts, subtensor_scales)

# the Triton GEMM's K-step must divide a block's width (its FP8 MMA depth is 32)
_WIDTH_STEP = 32
# the Triton GEMM's output tile on the GPU: blocks whose height it divides can run whole tiles on FP8
FP8_TILE = 128
# The all-E4M3 tiles of 128x128 blocks on cuBLAS's block-scaled FP8 GEMM (``fp8_mm``, every tile, a
# bf16 product as every block-scaled cuBLAS GEMM's), the other tiles then overwritten by the Triton
# kernel's BF16 launch (``block_scaled_rest_``), in place of the kernel's own FP8 launch: at 1 B on
# an H100 (d0c7170) that launch took 152 ms of the step's 318 ms of GPU kernels, where cuBLAS's
# block-scaled GEMMs of per-block MoR, the same shapes, took 66 ms. Measured on the H200 at 9094350,
# each against compiled BF16 of its own run: 1 B 0.634x against 0.574x with the kernel's FP8 launch,
# 98 M with CUDA graphs 0.403x against 0.366x (results/bench/e2e_h200_{1b,100m}[_sub_triton]_9094350.csv).
# The BF16 launch still took 49 ms of the 1 B step: it recomputes every tile of a block-row or
# block-column holding one block of another format (profiles/llama_1b_mor_sub_two_way_9094350).
# LOWPREC_SUBTENSOR_CUBLAS=0 keeps the kernel's FP8 launch (fp32 sums, no bf16 rounding of those tiles).
FP8_TILES_ON_CUBLAS = env_switch("LOWPREC_SUBTENSOR_CUBLAS")
# With FP8_TILES_ON_CUBLAS, the kernel's launch after cuBLAS adds, in the tiles that read a block of
# another format, only the K-blocks where A's or B's block is not E4M3, to cuBLAS's product of codes
# that are zero in those blocks (the values pass writes them so), instead of recomputing those
# tiles whole: its work then follows the blocks of other formats, not the block-rows that hold one.
# Measured on an H100 at 230dd0b, each against compiled BF16 of its own run: 1 B 0.679x against
# 0.605x recomputing whole tiles, the BF16 launch 24 ms of the step where it had taken 49 ms on the
# H200 (results/bench/e2e_h100_1b_sub_{mixed,rows}_230dd0b.csv, profiles/llama_1b_mor_sub_two_way_
# 230dd0b_h100.txt). LOWPREC_SUBTENSOR_MIXED_BLOCKS=0 recomputes the whole tiles.
MIXED_BLOCKS = env_switch("LOWPREC_SUBTENSOR_MIXED_BLOCKS")


def fast_subtensor_quantizer(q) -> bool:
    """Whether an operand quantizer runs on this fast path: sub-tensor MoR whose values are the
    exact dequantized codes (``dequant="fp32"``) over square blocks (their transposes are the
    transposed blocks) whose side the GEMM's K-step divides."""
    if type(q) is not SubTensorMoRQuantizer or q.dequant != "fp32":
        return False
    rows, cols = q.block
    return rows == cols and cols % _WIDTH_STEP == 0


class SubTensorOperand(NamedTuple):
    """An operand after the sub-tensor decision: (rows, K) BF16 values on each block's code grid (a
    BF16 block: the tensor rounded to BF16), the fp32 encode-scale grid (1 for a BF16 block), the
    int8 choice grid (``mor.E4M3``, ``E5M2``, ``BF16``) and the (R, C) block."""
    values: torch.Tensor
    scale: torch.Tensor
    choice: torch.Tensor
    block: tuple
    e4m3: Optional[torch.Tensor] = None      # the E4M3 codes as FP8 (the kernels write them), or None
    values_t: Optional[torch.Tensor] = None  # the kernels' row-major transposes of values and e4m3
    e4m3_t: Optional[torch.Tensor] = None

    def t(self) -> "SubTensorOperand":
        """The transposed tensor's operand (square blocks): the kernels' transposed copies where they
        wrote them, else views (``subtensor_mm`` has the GEMM's operands written K-contiguous)."""
        if self.values_t is not None:
            return SubTensorOperand(self.values_t, self.scale.t(), self.choice.t(), self.block[::-1], self.e4m3_t,
                                    self.values, self.e4m3)
        return SubTensorOperand(self.values.t(), self.scale.t(), self.choice.t(), self.block[::-1],
                                None if self.e4m3 is None else self.e4m3.t())

    def dequantized(self) -> torch.Tensor:
        """The fp32 values the emulation multiplies (``SubTensorResult.values``)."""
        return dequantized(self.values, self.scale, self.block)


def subtensor_operand(q: SubTensorMoRQuantizer, t: torch.Tensor) -> SubTensorOperand:
    """Codes, scales and choices of one 2-D operand (reduction last) under ``q``'s rule: by the Triton
    kernels (``lowprec.kernels.mor_subtensor_quant``, three passes over the tensor) where Triton runs
    and ``q.quantize`` is "kernel", or "auto" on CUDA; else in torch ops (``subtensor_parts``, which
    Inductor fuses)."""
    x2d = as_2d(t)
    by_kernel = q.quantize == "kernel" or (q.quantize == "auto" and x2d.is_cuda)
    if by_kernel and triton_runs_on(x2d.device.type) and x2d.dtype in (torch.float32, torch.bfloat16):
        op = subtensor_quantize_cuda if x2d.is_cuda else subtensor_quantize
        values, values_t, e4m3, e4m3_t, scale, choice = op(x2d, list(q.block), q.mode, q.scale)
        return SubTensorOperand(values, scale, choice, q.block, e4m3, values_t, e4m3_t)
    x2d = x2d.float()
    p = subtensor_parts(x2d, q.block, q.mode, q.scale)
    per_elem = expand_blocks(p.choice, tuple(x2d.shape), p.block)
    values = torch.where(per_elem == E4M3, p.codes["e4m3"],
                         torch.where(per_elem == E5M2, p.codes["e5m2"], x2d)).to(torch.bfloat16)
    return SubTensorOperand(values, _encode_scale(p.choice, p.scales), p.choice, p.block)


def _encode_scale(choice: torch.Tensor, scales: dict) -> torch.Tensor:
    """Each block's encode scale: its format's (1 for a BF16 block)."""
    one = torch.ones_like(scales["e4m3"])
    return torch.where(choice == E4M3, scales["e4m3"], torch.where(choice == E5M2, scales["e5m2"], one))


def _quantize_by_kernels(x2d: torch.Tensor, block: list, mode: str, scale: str, launcher=None) -> tuple:
    """(values, their transpose, E4M3 codes, their transpose, encode scales, choices): the kernels'
    passes, with the emulation's rule (``lowprec.methods.mor``) on the block grids between them."""
    from ..kernels import mor_subtensor_quant as kq
    amax, amin, bad = kq.block_stats(x2d, block, launcher)
    scales, dr = subtensor_scales(amax, scale), dynamic_range(amax, amin, bad)
    # the error pass reads only the blocks whose choice reads their sums
    err = kq.block_errors(x2d, block, scales["e4m3"], scales["e5m2"], launcher, need=subtensor_error_blocks(dr))
    choice = subtensor_choice(dr, err[0], err[1], mode)
    outs = kq.block_values(x2d, block, choice, scales["e4m3"], scales["e5m2"], launcher)
    return (*outs, _encode_scale(choice, scales), choice)


# off CUDA (the Triton interpreter): an opaque node in a compiled graph (as ``gemm.block_scaled_mm``)
@torch.library.custom_op("lowprec::subtensor_quantize", mutates_args=())
def subtensor_quantize(x2d: torch.Tensor, block: list[int], mode: str, scale: str) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sub-tensor MoR's quantization of a 2-D fp32 or bf16 tensor by the Triton kernels: (values bf16,
    their transpose, E4M3 codes float8_e4m3fn, their transpose, encode-scale grid fp32, choice grid
    int8); the transposes row-major (N, M)."""
    return _quantize_by_kernels(x2d, block, mode, scale)


@subtensor_quantize.register_fake
def _(x2d, block, mode, scale):
    (M, N), grid = x2d.shape, (-(-x2d.shape[0] // block[0]), -(-x2d.shape[1] // block[1]))
    layouts = [x2d.new_empty(shape, dtype=dt) for dt in (torch.bfloat16, torch.float8_e4m3fn) for shape in ((M, N), (N, M))]
    return (*layouts, x2d.new_empty(grid, dtype=torch.float32), x2d.new_empty(grid, dtype=torch.int8))


# on CUDA: a triton_op, whose launches (and the rule's ops on the grids) Inductor traces
@torch.library.triton_op("lowprec::subtensor_quantize_cuda", mutates_args=())
def subtensor_quantize_cuda(x2d: torch.Tensor, block: list[int], mode: str, scale: str) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``subtensor_quantize`` on a CUDA device."""
    return _quantize_by_kernels(x2d, block, mode, scale, launcher=torch.library.wrap_triton)


def subtensor_mm(a: SubTensorOperand, b: SubTensorOperand, out_dtype: torch.dtype) -> torch.Tensor:
    """``a @ b.T`` of two operands: the block-scaled Triton GEMM where Triton runs, else the fp32 GEMM
    of the dequantized values (the emulation's arithmetic)."""
    if triton_runs_on(a.values.device.type):
        op = block_scaled_mm_cuda if a.values.is_cuda else block_scaled_mm
        # K-contiguous values: the kernel multiplies a transposed view at about half the rate on the
        # H200 (results/bench/block_scaled_gemm_h200.csv); in a compiled graph Inductor writes this
        # layout from the quantization kernel itself rather than copying
        av, bv = a.values.contiguous(), b.values.contiguous()
        tiles = {}
        if a.block[0] % FP8_TILE == 0 and b.block[0] % FP8_TILE == 0:
            # output tiles whose two block-rows chose E4M3 throughout run on FP8 tensor cores (the
            # kernel's E4M3 rate is about 1.45x its BF16 one at the 1 B shapes, same file)
            tiles = dict(a_e4m3=_e4m3_codes(a, av), a_rows_e4m3=_rows_all_e4m3(a.choice),
                         b_e4m3=_e4m3_codes(b, bv), b_rows_e4m3=_rows_all_e4m3(b.choice))
            if _fp8_tiles_on_cublas(a, b, tiles["a_e4m3"], tiles["b_e4m3"]):
                # every tile from cuBLAS's block-scaled FP8 GEMM of the E4M3 codes, then the tiles
                # that read a block of another format overwritten by the kernel's BF16 launch
                out = fp8_mm(tiles["a_e4m3"], a.scale, "128x128", tiles["b_e4m3"], b.scale, "128x128", out_dtype)
                rest = block_scaled_rest_cuda_ if av.is_cuda else block_scaled_rest_
                # MIXED_BLOCKS: the codes of other formats' blocks are zero (_e4m3_codes), so cuBLAS
                # summed exactly the K-blocks of two E4M3 blocks, and the kernel adds the others
                choices = (a.choice, b.choice) if MIXED_BLOCKS else (None, None)
                rest(out, av, a.scale, list(a.block), bv, b.scale, list(b.block), tiles["a_rows_e4m3"],
                     tiles["b_rows_e4m3"], *choices)
                return out
        return op(av, a.scale, list(a.block), bv, b.scale, list(b.block), out_dtype, **tiles)
    return (a.dequantized() @ b.dequantized().t()).to(out_dtype)


def _fp8_tiles_on_cublas(a: SubTensorOperand, b: SubTensorOperand, a8: torch.Tensor, b8: torch.Tensor) -> bool:
    """Whether the all-E4M3 tiles' product comes from cuBLAS (``FP8_TILES_ON_CUBLAS``): 128x128 blocks
    (the grid ``_scaled_mm`` takes) of CUDA operands whose shape it takes (``gemm.shape_fits``)."""
    return (FP8_TILES_ON_CUBLAS and a8.is_cuda and tuple(a.block) == tuple(b.block) == (128, 128)
            and shape_fits(a8, b8, "128x128", "128x128"))


def _e4m3_codes(op: SubTensorOperand, values: torch.Tensor) -> torch.Tensor:
    """The operand's E4M3 codes as K-contiguous FP8, zero in the blocks of other formats: the
    kernels' copy (written so), or the values of the blocks that chose E4M3 cast (exact)."""
    if op.e4m3 is not None:
        return op.e4m3.contiguous()
    e4m3 = expand_blocks(op.choice == E4M3, tuple(values.shape), op.block)
    return torch.where(e4m3, values, torch.zeros_like(values)).to(torch.float8_e4m3fn)


def _rows_all_e4m3(choice: torch.Tensor) -> torch.Tensor:
    """int8 per block-row: 1 where every block of the row chose E4M3."""
    return (choice == E4M3).all(dim=1).to(torch.int8)


def count_subtensor_gemm(counts: torch.Tensor, gemm: str, a: SubTensorOperand, b: SubTensorOperand) -> None:
    """Adds one call and each operand's blocks by format to the GEMM's two slots of a layer's decision
    counts (all of ``lowprec.methods.mor.COUNT_COLUMNS``, as the emulation counts them), without a
    host read."""
    slot = SLOTS.index((gemm, OPERANDS[gemm][0]))
    rows = []
    for op in (a, b):
        per_column = block_counts(op.choice)
        per_column["calls"] = torch.ones_like(per_column["blocks"])  # made on the device: no host copy
        rows.append(torch.stack([per_column[c] for c in COUNT_COLUMNS]))
    add_rows(counts, slot, torch.stack(rows).to(counts.dtype))
