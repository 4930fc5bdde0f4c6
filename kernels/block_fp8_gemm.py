"""Block-scaled GEMM (Triton) for operand pairs whose scales change along K on both sides:
DeepSeek-style recipes' weight gradient (1x128 x 1x128 E4M3 blocks), which cuBLAS refuses, and
sub-tensor MoR's block-mixed operands (``lowprec.methods.mor_subtensor_fast``: each 128x128 block
E4M3, E5M2 or BF16, held as BF16 values on its code grid, a BF16 block with scale 1).

API::

    block_scaled_mm(a_codes, a_scales, a_block, b_codes, b_scales, b_block, out_dtype=torch.float32,
                    config=None, launcher=None, fp8_tiles=None) -> (M, N) tensor
    block_scaled_mm_rest(out, a_codes, a_scales, a_block, b_codes, b_scales, b_block, a_rows, b_rows)
    BlockConfig(block_m, block_n, block_k, num_warps, num_stages), default_config(M, N, widths, dtype)
    triton_available(device=None), interpreter_active()

``dequant(A) @ dequant(B).T`` of codes A (M, K) and B (N, K) (both float8_e4m3fn, or both bfloat16;
any strides; the K-contiguous layout the quantization pass writes is the fast one) with fp32
ENCODE-scale grids over (R, C) blocks (x ~= code / s). FP8 codes multiply on FP8 tensor cores, BF16
ones on BF16 tensor cores (every product exact in fp32 either way). Each K-step's product starts
from zero, is multiplied by the outer product of its rows' 1 / s (torch's ``1 / s``, correctly
rounded, computed once per grid) and added to the fp32 accumulator, so the K-step divides every
block width narrower than K. This is also the promotion interval: the tensor cores' ~14-bit FP8
accumulation never spans more than one K-step. ``fp8_tiles`` (BF16 codes): FP8 copies and
per-block-row flags; flagged tiles multiply on FP8 tensor cores, the rest on BF16 ones (two
launches; ``block_scaled_mm``'s docstring).

Why a kernel of its own: the MoR GEMM (``lowprec.kernels.mor_gemm``) carries the same product in its
FP8 loop, but its per-program decision, predicated BF16 loads and both main loops in one kernel cost
registers and pipelining; on the H200 at the 1B training shapes it reached about 150 TFLOP/s for
this pair (``results/bench/profiles/llama_1b_fp8_blockwise_da2be48.txt``). This loop loads the two
code tiles and two scale vectors per K-step, nothing else.

Interpreter (TRITON_INTERPRET=1 before the first import, or ``_common.reload_for_interpreter``): E4M3
codes go in as uint8 bits and are decoded to fp32 (``_common._e4m3_to_f32``), BF16 ones widened to
fp32 on the host (exact; numpy has no bf16), and multiplied in fp32; a bf16 output is rounded by
``_common._round_bf16`` (the interpreter's cast truncates).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from lowprec.numerics.checks import block_shape as _check_block

from . import _common as _c
from ._common import _cdiv

triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()

__all__ = ["block_scaled_mm", "block_scaled_mm_rest", "BlockConfig", "default_config", "triton_available",
           "interpreter_active"]

_OUT_DTYPES = (torch.float32, torch.bfloat16)
_GROUP_M = 8
_MIN_BLOCK_K = 32  # FP8 MMA's K on Hopper
_JIT_FNS: tuple = ()


class BlockConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


if triton is not None:
    from ._common import _e4m3_to_f32, _grouped_tile, _round_bf16

    @triton.jit
    def _block_scaled_gemm_kernel(a_ptr, b_ptr, as_ptr, bs_ptr, c_ptr, fa_ptr, fb_ptr, ca_ptr, cb_ptr, M, N, K,
                                  s_am, s_ak, s_bn, s_bk, s_asr, s_asc, s_bsr, s_bsc, s_car, s_cac, s_cbr, s_cbc,
                                  a_br, a_bc, b_br, b_bc,
                                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                  GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, OUT_BF16: tl.constexpr,
                                  BF16_IN: tl.constexpr, INTERP: tl.constexpr, A_UNIFORM: tl.constexpr,
                                  B_UNIFORM: tl.constexpr, SELECT: tl.constexpr):
        """as_ptr, bs_ptr: DECODE scales (1 / s). A_UNIFORM / B_UNIFORM: a tile's rows lie in one
        block-row (the block height a multiple of the tile's), so a K-step has one scale, not a
        vector of them. SELECT (both uniform): 0 every tile; 1 only the tiles whose A block-row and
        B block-column are both flagged (int8 flags fa_ptr, fb_ptr, one per block-row); 2 the other
        tiles; 3 the tiles of 2, each adding to C the K-steps whose A or B block is not E4M3 (int8
        choice grids ca_ptr, cb_ptr, 0 for E4M3) and skipping the others. A tile not selected runs
        no K-step and stores nothing."""
        pid = tl.program_id(0)
        pid_m, pid_n = _grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        k_end = K
        run = 1
        if SELECT != 0:
            both = ((tl.load(fa_ptr + (pid_m * BLOCK_M) // a_br) != 0).to(tl.int32)
                    * (tl.load(fb_ptr + (pid_n * BLOCK_N) // b_br) != 0).to(tl.int32))
            run = both if SELECT == 1 else 1 - both
            k_end = K * run
        if SELECT == 3:
            ca_row = ca_ptr + ((pid_m * BLOCK_M) // a_br).to(tl.int64) * s_car
            cb_row = cb_ptr + ((pid_n * BLOCK_N) // b_br).to(tl.int64) * s_cbr
        rm = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
        # rows past the end read the last row (their results are not stored): only K is masked
        rm_ld = tl.minimum(rm, M - 1)
        rn_ld = tl.minimum(rn, N - 1)
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + rm_ld[:, None] * s_am + rk[None, :] * s_ak
        b_ptrs = b_ptr + rn_ld[:, None] * s_bn + rk[None, :] * s_bk
        if A_UNIFORM:
            a_s = as_ptr + ((pid_m * BLOCK_M) // a_br).to(tl.int64) * s_asr
        else:
            a_s = as_ptr + (rm_ld // a_br) * s_asr
        if B_UNIFORM:
            b_s = bs_ptr + ((pid_n * BLOCK_N) // b_br).to(tl.int64) * s_bsr
        else:
            b_s = bs_ptr + (rn_ld // b_br) * s_bsr
        acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
        for k0 in range(0, k_end, BLOCK_K):
            if SELECT == 3:  # a K-step of two E4M3 blocks is the other GEMM's
                mixed = ((tl.load(ca_row + (k0 // a_bc) * s_cac) != 0)
                         | (tl.load(cb_row + (k0 // b_bc) * s_cbc) != 0))
            else:
                mixed = True
            if mixed:
                # tiles go from the loads straight into the dot (a conversion between them would keep
                # the loads out of the asynchronous copy pipeline); a ragged K masks FP8 codes through
                # their bits, as a masked load's fill must be an integer
                if EVEN_K:
                    a = tl.load(a_ptrs)
                    b = tl.load(b_ptrs)
                elif BF16_IN or INTERP:
                    k_ok = (k0 + rk < K)[None, :]
                    a = tl.load(a_ptrs, mask=k_ok, other=0)
                    b = tl.load(b_ptrs, mask=k_ok, other=0)
                else:
                    k_ok = (k0 + rk < K)[None, :]
                    a = tl.load(a_ptrs.to(tl.pointer_type(tl.uint8), bitcast=True), mask=k_ok, other=0)
                    b = tl.load(b_ptrs.to(tl.pointer_type(tl.uint8), bitcast=True), mask=k_ok, other=0)
                    a = a.to(tl.float8e4nv, bitcast=True)
                    b = b.to(tl.float8e4nv, bitcast=True)
                if INTERP and BF16_IN:  # fp32 on the host already
                    p = tl.dot(a, tl.trans(b), input_precision="ieee")
                elif INTERP:
                    p = tl.dot(_e4m3_to_f32(a), tl.trans(_e4m3_to_f32(b)), input_precision="ieee")
                else:
                    p = tl.dot(a, tl.trans(b))
                inv_a = tl.load(a_s + (k0 // a_bc) * s_asc)
                inv_b = tl.load(b_s + (k0 // b_bc) * s_bsc)
                if A_UNIFORM and B_UNIFORM:
                    # one factor a K-step: a fused multiply-add an element, where the two factors one
                    # after the other took a multiply more (sm_90: 64 of a 128-deep K-step's 258
                    # instructions on FP8 codes, 310 on BF16 values; lowprec.bench.kernel_sass)
                    acc += p * (inv_a * inv_b)
                else:
                    if not A_UNIFORM:
                        inv_a = inv_a[:, None]
                    if not B_UNIFORM:
                        inv_b = inv_b[None, :]
                    acc += p * inv_a * inv_b
            a_ptrs += BLOCK_K * s_ak
            b_ptrs += BLOCK_K * s_bk
        c_ptrs = c_ptr + rm[:, None] * N + rn[None, :]
        ok = (rm < (M * run))[:, None] & (rn < N)[None, :]  # a tile not selected stores nothing
        if SELECT == 3:
            acc += tl.load(c_ptrs, mask=ok, other=0.0).to(tl.float32)
        if OUT_BF16:
            if INTERP:
                acc = _round_bf16(acc)
            tl.store(c_ptrs, acc.to(tl.bfloat16), mask=ok)
        else:
            tl.store(c_ptrs, acc, mask=ok)

    _JIT_FNS = (_block_scaled_gemm_kernel, _grouped_tile, _e4m3_to_f32, _round_bf16)


def interpreter_active() -> bool:
    """True when the kernel was built for the Triton interpreter (TRITON_INTERPRET=1 at import)."""
    return bool(_JIT_FNS) and _c.is_interpreted(*_JIT_FNS)


def triton_available(device=None) -> bool:
    return triton is not None and _c.available(interpreter_active(), device)


def default_config(M: int, N: int, widths: tuple, dtype: torch.dtype = torch.float8_e4m3fn) -> BlockConfig:
    """Tiles for an (M, N) output whose K-steps must divide ``widths`` (the block widths narrower
    than K): a K-step of 128 FP8 codes where they allow (the FP8 MMA's natural depth, and the
    promotion interval cuBLAS uses; 4 stages of 128 x 128 x 128 tiles hold 128 KB); as many BF16
    values in 3 stages (192 KB): per K-step the rescale costs as much as a 64-deep BF16 MMA, so the
    deeper step halves its share (measured on the H200 at f82fe0d: 185 against 106 TFLOP/s at
    2048 x 2048 x 16384, ``python -m lowprec.bench.block_scaled_gemm --configs``)."""
    k = 128
    for w in widths:
        while w % k:
            k //= 2
    if interpreter_active():
        return BlockConfig(32, 32, min(k, 32), 4, 1)
    return BlockConfig(128, 128, k, 8, 4 if dtype.itemsize == 1 else 3)


_IN_DTYPES = (torch.float8_e4m3fn, torch.bfloat16)


def _operand(codes: torch.Tensor, scales: torch.Tensor, block, name: str) -> tuple:
    if codes.dim() != 2 or codes.dtype not in _IN_DTYPES:
        raise ValueError(f"{name}_codes must be a 2-D float8_e4m3fn or bfloat16 tensor, got {codes.dtype} "
                         f"{tuple(codes.shape)}")
    br, bc = _check_block(tuple(block))
    rows, k = codes.shape
    want = (_cdiv(rows, br), _cdiv(k, bc))
    if scales.dtype != torch.float32 or tuple(scales.shape) != want:
        raise ValueError(f"{name}_scales: an fp32 grid of shape {want} for {(br, bc)} blocks, got "
                         f"{scales.dtype} {tuple(scales.shape)}")
    if scales.device != codes.device:
        raise ValueError(f"{name}: codes on {codes.device}, scales on {scales.device}")
    return br, bc


def _pair(a_codes, a_scales, a_block, b_codes, b_scales, b_block, out_dtype) -> tuple:
    """((M, N, K), (a's block rows and columns, b's), the block widths narrower than K) of a checked
    operand pair and output dtype (each problem named)."""
    a_br, a_bc = _operand(a_codes, a_scales, a_block, "a")
    b_br, b_bc = _operand(b_codes, b_scales, b_block, "b")
    (M, K), (N, kb) = a_codes.shape, b_codes.shape
    if kb != K:
        raise ValueError(f"reduction dimensions differ: a {tuple(a_codes.shape)}, b {tuple(b_codes.shape)}")
    if b_codes.device != a_codes.device:
        raise ValueError(f"a and b on different devices: {a_codes.device} and {b_codes.device}")
    if b_codes.dtype != a_codes.dtype:
        raise ValueError(f"a and b of different dtypes: {a_codes.dtype} and {b_codes.dtype}")
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be float32 or bfloat16, got {out_dtype}")
    widths = tuple(w for w in (a_bc, b_bc) if w < K)
    if any(w % _MIN_BLOCK_K for w in widths):
        raise ValueError(f"blocks {tuple(a_block)} and {tuple(b_block)}: a block narrower than K must have a "
                         f"width that is a multiple of {_MIN_BLOCK_K}")
    _c.require_triton("lowprec.kernels.block_fp8_gemm", "lowprec.gemm.dequantized_mm", _TRITON_IMPORT_ERROR,
                      _JIT_FNS, a_codes.device)
    return (M, N, K), (a_br, a_bc, b_br, b_bc), widths


def block_scaled_mm(a_codes: torch.Tensor, a_scales: torch.Tensor, a_block, b_codes: torch.Tensor,
                    b_scales: torch.Tensor, b_block, out_dtype: torch.dtype = torch.float32,
                    config: Optional[BlockConfig] = None, launcher=None, fp8_tiles=None) -> torch.Tensor:
    """``dequant(A) @ dequant(B).T`` (module docstring). launcher: None to launch here, or
    ``torch.library.wrap_triton`` inside a ``triton_op`` that a compiled graph traces (Inductor
    then launches the kernel from its own code).

    ``fp8_tiles`` (BF16 codes only): ``(a_e4m3, a_rows, b_e4m3, b_rows)``, the same codes as
    float8_e4m3fn (exact where a block's codes are E4M3's; elsewhere never read) and, per block-row,
    an int8 flag that every block of it holds E4M3 codes. The output tiles whose A block-row and B
    block-column are both flagged multiply the FP8 copies on FP8 tensor cores, the others the BF16
    codes, in two launches of one kernel (same tiles, each tile stored by one of them); the sums
    are the same either way (every product exact in fp32). Needs block heights that are multiples
    of the tile's."""
    (M, N, K), (a_br, a_bc, b_br, b_bc), widths = _pair(a_codes, a_scales, a_block, b_codes, b_scales, b_block,
                                                        out_dtype)
    out = torch.empty((M, N), dtype=out_dtype, device=a_codes.device)
    if not (M and N and K):
        return out.zero_()
    cfg = config or default_config(M, N, widths, a_codes.dtype)
    if any(w % cfg.block_k for w in widths):
        raise ValueError(f"config {cfg}: the K-step must divide the block widths {widths}")
    dec = _decoded(a_scales, b_scales, (a_br, a_bc, b_br, b_bc))
    if fp8_tiles is None:
        _launch(out, a_codes, b_codes, dec, cfg, 0, None, launcher)
        return out
    a8, a_rows, b8, b_rows = _fp8_tiles(fp8_tiles, a_codes, b_codes, a_br, b_br)
    cfg8 = default_config(M, N, widths, torch.float8_e4m3fn) if config is None else cfg
    if (cfg8.block_m, cfg8.block_n) != (cfg.block_m, cfg.block_n) or a_br % cfg.block_m or b_br % cfg.block_n:
        raise ValueError(f"fp8_tiles: block heights {a_br}, {b_br} must be multiples of the tile "
                         f"{cfg.block_m} x {cfg.block_n}, the same for both launches")
    _launch(out, a8, b8, dec, cfg8, 1, (a_rows, b_rows), launcher)
    _launch(out, a_codes, b_codes, dec, cfg, 2, (a_rows, b_rows), launcher)
    return out


def block_scaled_mm_rest(out: torch.Tensor, a_codes: torch.Tensor, a_scales: torch.Tensor, a_block,
                         b_codes: torch.Tensor, b_scales: torch.Tensor, b_block, a_rows: torch.Tensor,
                         b_rows: torch.Tensor, config: Optional[BlockConfig] = None, launcher=None,
                         choices: Optional[tuple] = None) -> None:
    """Stores into ``out`` (M, N, contiguous) the tiles of ``dequant(A) @ dequant(B).T`` (BF16 codes)
    whose A block-row or B block-column is not flagged in ``a_rows`` / ``b_rows`` (``fp8_tiles``'
    flags), and leaves the flagged tiles as they are: ``fp8_tiles``' second launch alone, for an
    output whose flagged tiles another GEMM made (sub-tensor MoR's FP8 product on cuBLAS,
    ``lowprec.methods.mor_subtensor_fast``). Needs block heights that are multiples of the tile's.

    With ``choices`` (the two operands' int8 choice grids, 0 for an E4M3 block) those tiles are not
    overwritten but added to: each takes only the K-blocks where A's or B's block is not E4M3, for an
    ``out`` that already holds the sum over the K-blocks where both are (cuBLAS's product of codes
    that are zero in every other block), so the work follows the blocks of other formats, not the
    rows that hold them."""
    (M, N, K), (a_br, a_bc, b_br, b_bc), widths = _pair(a_codes, a_scales, a_block, b_codes, b_scales, b_block,
                                                        out.dtype)
    if a_codes.dtype != torch.bfloat16:
        raise ValueError(f"block_scaled_mm_rest: only for bfloat16 codes, got {a_codes.dtype}")
    if tuple(out.shape) != (M, N) or out.device != a_codes.device or not out.is_contiguous():
        raise ValueError(f"block_scaled_mm_rest: out must be a contiguous {(M, N)} tensor on {a_codes.device}, "
                         f"got {tuple(out.shape)} on {out.device}")
    _check_rows(a_rows, a_codes, a_br, "a")
    _check_rows(b_rows, b_codes, b_br, "b")
    if choices is not None:
        for name, grid, scales in (("a", choices[0], a_scales), ("b", choices[1], b_scales)):
            if grid.dtype != torch.int8 or grid.shape != scales.shape or grid.device != scales.device:
                raise ValueError(f"block_scaled_mm_rest: {name}'s choices must be an int8 grid of shape "
                                 f"{tuple(scales.shape)} on {scales.device}, got {grid.dtype} {tuple(grid.shape)}")
    if not (M and N and K):
        out.zero_()
        return
    cfg = config or default_config(M, N, widths, a_codes.dtype)
    if any(w % cfg.block_k for w in widths) or a_br % cfg.block_m or b_br % cfg.block_n:
        raise ValueError(f"config {cfg}: the K-step must divide the block widths {widths}, the tile the block "
                         f"heights {a_br}, {b_br}")
    _launch(out, a_codes, b_codes, _decoded(a_scales, b_scales, (a_br, a_bc, b_br, b_bc)), cfg,
            2 if choices is None else 3, (a_rows, b_rows), launcher, choices)


def _decoded(a_scales, b_scales, blocks) -> tuple:
    # decode scales once per grid, not per K-step in every program: torch's 1 / s is correctly
    # rounded (div_rn), and a division per scale in the loop held the kernel at a fraction of the
    # tensor cores' rate (block_scaled_gemm_h200.csv)
    return 1.0 / a_scales, 1.0 / b_scales, blocks


def _check_rows(rows, codes, br, name) -> None:
    want = (_cdiv(codes.shape[0], br),)
    if rows.dtype != torch.int8 or tuple(rows.shape) != want or rows.device != codes.device:
        raise ValueError(f"fp8_tiles: {name}_rows must be int8 of shape {want} on {codes.device}, "
                         f"got {rows.dtype} {tuple(rows.shape)} on {rows.device}")


def _fp8_tiles(fp8_tiles, a_codes, b_codes, a_br, b_br) -> tuple:
    a8, a_rows, b8, b_rows = fp8_tiles
    if a_codes.dtype != torch.bfloat16:
        raise ValueError(f"fp8_tiles: only for bfloat16 codes, got {a_codes.dtype}")
    for name, c8, codes, rows, br in (("a", a8, a_codes, a_rows, a_br), ("b", b8, b_codes, b_rows, b_br)):
        if c8.dtype != torch.float8_e4m3fn or c8.shape != codes.shape or c8.device != codes.device:
            raise ValueError(f"fp8_tiles: {name}_e4m3 must be float8_e4m3fn of {name}_codes' shape "
                             f"{tuple(codes.shape)} on {codes.device}, got {c8.dtype} {tuple(c8.shape)}")
        _check_rows(rows, codes, br, name)
    return a8, a_rows, b8, b_rows


def _launch(out, a_codes, b_codes, dec, cfg: BlockConfig, select: int, rows, launcher, choices=None) -> None:
    """One launch of the kernel over every tile of ``out`` (``select``: which ones compute;
    ``choices``, the two operands' choice grids, for select 3)."""
    (M, K), N = a_codes.shape, b_codes.shape[0]
    a_dec, b_dec, (a_br, a_bc, b_br, b_bc) = dec
    interp, bf16 = interpreter_active(), a_codes.dtype == torch.bfloat16
    a8, b8 = ((c.float() if bf16 else c.view(torch.uint8)) if interp else c for c in (a_codes, b_codes))
    fa, fb = rows if rows is not None else (a_dec, b_dec)  # placeholders, never read without select
    ca, cb = choices if choices is not None else (fa, fb)  # the same, without select 3
    kernel = _c.launch(_block_scaled_gemm_kernel, launcher)
    kernel[(_cdiv(M, cfg.block_m) * _cdiv(N, cfg.block_n),)](
        a8, b8, a_dec, b_dec, out, fa, fb, ca, cb, M, N, K, *a8.stride(), *b8.stride(), *a_dec.stride(),
        *b_dec.stride(), *(ca.stride() if choices is not None else (0, 0)),
        *(cb.stride() if choices is not None else (0, 0)), a_br, a_bc, b_br, b_bc,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=_GROUP_M, EVEN_K=K % cfg.block_k == 0,
        OUT_BF16=out.dtype == torch.bfloat16, BF16_IN=bf16, INTERP=interp,
        A_UNIFORM=a_br % cfg.block_m == 0, B_UNIFORM=b_br % cfg.block_n == 0, SELECT=select,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
