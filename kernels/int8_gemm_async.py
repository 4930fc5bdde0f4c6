"""The block-scaled INT8 GEMM of ``lowprec.kernels.int8_fallback_gemm`` (first parts) as a Gluon
kernel for Hopper whose tensor-core products run while the last one is rescaled.

Why a second kernel: Triton (3.6) makes a ``tl.dot`` whose int32 result feeds other arithmetic
synchronous, so each K-group's product waits for the one before it to be rescaled
(``lowprec.bench.kernel_sass``, column ``mma_in_flight``: 0 for every Triton candidate); the
tensor cores idle while the CUDA cores convert and rescale, and the two costs add instead of
overlapping. Gluon states the asynchronous warpgroup MMA and its wait explicitly: K-group kb's
product is issued into one int32 accumulator, then the wait leaves it in flight
(``warpgroup_mma_wait(1)``) while K-group kb - 1's product, in the other accumulator, is
converted and added with its scales. The operands come by TMA into a ring of ``STAGES`` shared-
memory stages, each with an mbarrier; a stage is refilled once the product that read it retired.

Same sums in the same order as the Triton kernel and ``int8_block_gemm_reference``: per K-group,
acc + fp32(p) * (sa x sb), fp32(p) exact (the add trick, group <= 259); a GPU may contract the
multiply-add into an FMA, as the Triton kernel's default does.

Scope: A (M, K) and B (N, K) int8, K-contiguous, 16-byte aligned rows (TMA), K a multiple of the
group G (16 <= G <= 256, a power of two), scale blocks of A's rows (BMS) and B's rows (BNS) that
either cover the output tile (one scale per K-group: the 128x128 blocks) or divide it (Jetfire's
32x32 blocks: one per row). ``supports`` says whether a call is in scope; the host module keeps
the Triton kernel for the rest (fused second parts, traced launches, other GPUs).
"""

from __future__ import annotations

import torch

from ._common import _cdiv, tma_readable
from .int8_fallback_kernels import MAGIC_MAX_GROUP
from .int8_fallback_tuning import GemmConfig

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                                  warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    # the TMA load's name: async_copy_global_to_shared up to Triton 3.6, async_load after
    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    # the CTA's barrier: thread_barrier up to Triton 3.6, barrier after
    _cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
    _IMPORT_ERROR = None
except Exception as exc:  # noqa: BLE001 - no Triton, or one without Gluon's Hopper ops
    gluon = gl = None
    _IMPORT_ERROR = exc

__all__ = ["available", "supports", "int8_block_gemm_async"]


def available(device=None) -> bool:
    """Gluon imports and the device is a Hopper GPU (warpgroup MMA, TMA)."""
    if _IMPORT_ERROR is not None or not torch.cuda.is_available():
        return False
    dev = torch.device("cuda") if device is None else torch.device(device)
    return dev.type == "cuda" and torch.cuda.get_device_capability(dev)[0] == 9


def supports(qa: torch.Tensor, qb: torch.Tensor, group: int, bms: int, bns: int, cfg: GemmConfig) -> bool:
    """Whether ``int8_block_gemm_async`` takes these operands in tile configuration ``cfg`` (see the
    module's scope)."""
    if not (qa.is_cuda and available(qa.device)) or qa.dtype != torch.int8 or qb.dtype != torch.int8:
        return False
    K = qa.shape[1]
    if group & (group - 1) or not 16 <= group <= min(256, MAGIC_MAX_GROUP) or K % group:
        return False
    if not (tma_readable(qa) and tma_readable(qb)):
        return False
    return all(bs % tile == 0 or tile % bs == 0 for bs, tile in ((bms, cfg.block_m), (bns, cfg.block_n)))


if gluon is not None:

    @gluon.jit
    def _tile_of(pid, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
        """(pid_m, pid_n): GROUP_M row-tiles at a time, so that programs sharing B tiles run
        together (L2 reuse), as the Triton kernels order them (``_common._grouped_tile``, a Triton
        function, which a Gluon kernel cannot call)."""
        n_pm = gl.cdiv(M, BLOCK_M)
        per_group = GROUP_M * gl.cdiv(N, BLOCK_N)
        first_m = (pid // per_group) * GROUP_M
        rows = gl.minimum(n_pm - first_m, GROUP_M)
        return first_m + (pid % per_group) % rows, (pid % per_group) // rows

    @gluon.jit
    def _scale_index(start, n, n_kb, R: gl.constexpr, BS: gl.constexpr, layout: gl.constexpr):
        """Offsets into a (blocks, n_kb) scale grid of a tile's R rows from ``start``: one scalar
        where a block covers the tile, else one per row, clamped to the last block (rows past n
        read it; their results are not stored)."""
        last = gl.cdiv(n, BS) - 1
        if BS % R == 0:
            return (start // BS) * n_kb
        else:
            return gl.minimum((start + gl.arange(0, R, layout=layout)) // BS, last) * n_kb

    @gluon.jit
    def _scale_tile(da_ptr, sa_idx, db_ptr, sb_idx, kb, ROW_VEC: gl.constexpr, COL_VEC: gl.constexpr):
        """K-group kb's rescale: the outer product of its row and column scales (a scalar, a row or
        a column broadcast where a block covers the tile)."""
        sa = gl.load(da_ptr + sa_idx + kb)
        sb = gl.load(db_ptr + sb_idx + kb)
        if ROW_VEC and COL_VEC:
            return sa[:, None] * sb[None, :]
        elif ROW_VEC:
            return (sa * sb)[:, None]
        elif COL_VEC:
            return (sa * sb)[None, :]
        else:
            return sa * sb

    @gluon.jit
    def _add_scaled(acc, p, s):
        # p as fp32 by the add trick (exact for |p| < 2^22): an integer and a float add, where the
        # conversion instruction issues at a quarter of the rate
        return acc + ((p + 0x4B400000).to(gl.float32, bitcast=True) - 12582912.0) * s

    @gluon.jit
    def _load_group(a_desc, b_desc, a_smem, b_smem, ready, kb, off_m, off_n, GK: gl.constexpr, STAGES: gl.constexpr):
        s = kb % STAGES
        bar = ready.index(s)
        mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
        _tma_load(a_desc, [off_m, kb * GK], bar, a_smem.index(s))
        _tma_load(b_desc, [off_n, kb * GK], bar, b_smem.index(s))

    @gluon.jit
    def _issue(a_smem, b_smem, ready, zero, kb, STAGES: gl.constexpr):
        """K-group kb's int32 product, asynchronous, once its operands have landed."""
        s = kb % STAGES
        mbarrier.wait(ready.index(s), (kb // STAGES) & 1)
        return warpgroup_mma(a_smem.index(s), b_smem.index(s).permute((1, 0)), zero, use_acc=False, is_async=True)

    @gluon.jit
    def _retire(acc, p, kb, a_desc, b_desc, a_smem, b_smem, ready, da_ptr, sa_idx, db_ptr, sb_idx, n_kb, off_m, off_n,
                GK: gl.constexpr, STAGES: gl.constexpr, ROW_VEC: gl.constexpr, COL_VEC: gl.constexpr):
        """acc + K-group kb's product, rescaled, once it has retired with the one issued after it
        left in flight; its stage then takes K-group kb + STAGES. The scales load first, while the
        product finishes (loaded a group ahead, a second scale tile in registers: 155 spills with
        32-row blocks on sm_90)."""
        s = _scale_tile(da_ptr, sa_idx, db_ptr, sb_idx, kb, ROW_VEC, COL_VEC)
        p = warpgroup_mma_wait(num_outstanding=1, deps=(p,))
        if gl.num_warps() > 4:
            # each warpgroup waits for its own MMAs: the stage is refilled once both have read it
            _cta_barrier()
        if kb + STAGES < n_kb:
            _load_group(a_desc, b_desc, a_smem, b_smem, ready, kb + STAGES, off_m, off_n, GK, STAGES)
        return _add_scaled(acc, p, s)

    @gluon.jit
    def _gemm_kernel(a_desc, b_desc, da_ptr, db_ptr, c_ptr, M, N, n_kb,
                     BMS: gl.constexpr, BNS: gl.constexpr, GK: gl.constexpr,
                     BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr):
        """One BLOCK_M x BLOCK_N tile of C = A @ B.T (fp32), K-group by K-group."""
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                             instr_shape=[16, BLOCK_N, 32])
        row_layout: gl.constexpr = gl.SliceLayout(1, acc_layout)
        col_layout: gl.constexpr = gl.SliceLayout(0, acc_layout)
        ROW_VEC: gl.constexpr = BMS % BLOCK_M != 0
        COL_VEC: gl.constexpr = BNS % BLOCK_N != 0

        pid_m, pid_n = _tile_of(gl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N

        a_smem = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_M, GK], a_desc.layout)
        b_smem = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, GK], b_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
        fence_async_shared()
        # every stage filled: K-group kb's stage is refilled with kb + STAGES once kb retires
        for i in gl.static_range(STAGES):
            if i < n_kb:
                _load_group(a_desc, b_desc, a_smem, b_smem, ready, i, off_m, off_n, GK, STAGES)

        sa_idx = _scale_index(off_m, M, n_kb, BLOCK_M, BMS, row_layout)
        sb_idx = _scale_index(off_n, N, n_kb, BLOCK_N, BNS, col_layout)
        zero = gl.zeros([BLOCK_M, BLOCK_N], gl.int32, acc_layout)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)

        # Two int32 accumulators in turn: K-group kb's product is issued into one while K-group
        # kb - 1's, in the other, is waited for (kb's stays in flight), its stage refilled and its
        # product rescaled. Two K-groups a loop iteration keep each accumulator in its registers
        # (a loop-carried swap of the two moved 47 registers an iteration on sm_90).
        p0 = _issue(a_smem, b_smem, ready, zero, 0, STAGES)
        for it in range(0, (n_kb - 1) // 2):
            kb = 1 + 2 * it
            p1 = _issue(a_smem, b_smem, ready, zero, kb, STAGES)
            acc = _retire(acc, p0, kb - 1, a_desc, b_desc, a_smem, b_smem, ready, da_ptr, sa_idx, db_ptr, sb_idx,
                          n_kb, off_m, off_n, GK, STAGES, ROW_VEC, COL_VEC)
            p0 = _issue(a_smem, b_smem, ready, zero, kb + 1, STAGES)
            acc = _retire(acc, p1, kb, a_desc, b_desc, a_smem, b_smem, ready, da_ptr, sa_idx, db_ptr, sb_idx,
                          n_kb, off_m, off_n, GK, STAGES, ROW_VEC, COL_VEC)
        if n_kb % 2 == 0:  # K-group n_kb - 1 is left
            p1 = _issue(a_smem, b_smem, ready, zero, n_kb - 1, STAGES)
            acc = _retire(acc, p0, n_kb - 2, a_desc, b_desc, a_smem, b_smem, ready, da_ptr, sa_idx, db_ptr, sb_idx,
                          n_kb, off_m, off_n, GK, STAGES, ROW_VEC, COL_VEC)
            s = _scale_tile(da_ptr, sa_idx, db_ptr, sb_idx, n_kb - 1, ROW_VEC, COL_VEC)
            acc = _add_scaled(acc, warpgroup_mma_wait(num_outstanding=0, deps=(p1,)), s)
        else:
            s = _scale_tile(da_ptr, sa_idx, db_ptr, sb_idx, n_kb - 1, ROW_VEC, COL_VEC)
            acc = _add_scaled(acc, warpgroup_mma_wait(num_outstanding=0, deps=(p0,)), s)

        for i in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(i))
        rows = off_m + gl.arange(0, BLOCK_M, layout=row_layout)
        cols = off_n + gl.arange(0, BLOCK_N, layout=col_layout)
        offs = rows.to(gl.int64)[:, None] * N + cols[None, :]
        gl.store(c_ptr + offs, acc, mask=(rows < M)[:, None] & (cols < N)[None, :])


def _descriptor(q: torch.Tensor, rows: int, group: int):
    layout = gl.NVMMASharedLayout.get_default_for([rows, group], gl.int8)
    return TensorDescriptor.from_tensor(q, [rows, group], layout)


def int8_block_gemm_async(qa: torch.Tensor, da: torch.Tensor, qb: torch.Tensor, db: torch.Tensor, group: int,
                          bms: int, bns: int, c: torch.Tensor, cfg: GemmConfig, warmup: bool = False):
    """C (fp32, (M, N), written) = A @ B.T of int8 A (M, K), B (N, K) with decode scales da
    (ceil(M / bms), K / group) and db (ceil(N / bns), K / group), contiguous. The caller checks
    ``supports``. ``cfg``: its tile (block_m, block_n), num_warps, num_stages (the TMA ring's depth)
    and group_m. ``warmup``: compile only, return the compiled kernel."""
    M, K = qa.shape
    N = qb.shape[0]
    args = (_descriptor(qa, cfg.block_m, group), _descriptor(qb, cfg.block_n, group), da, db, c, M, N, K // group)
    meta = dict(BMS=bms, BNS=bns, GK=group, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, STAGES=cfg.num_stages,
                GROUP_M=cfg.group_m, num_warps=cfg.num_warps)
    grid = (_cdiv(M, cfg.block_m) * _cdiv(N, cfg.block_n),)
    if warmup:
        return _gemm_kernel.warmup(*args, grid=grid, **meta)
    _gemm_kernel[grid](*args, **meta)
    return c


