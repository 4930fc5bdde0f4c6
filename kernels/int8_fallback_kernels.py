"""The Triton kernels of INT8 training with block-level fallback: the block statistics and the
one-pass fallback quantization (``_stats_kernel``, ``_fallback_quant_kernel``), the block-scaled
INT8 GEMM with the second parts in its main loop or after it (``_gemm_kernel``) and the
second-part pass (``_residual_kernel``). What they compute, in which order of sums, and why it is exact, is written
in ``lowprec.kernels.int8_fallback_gemm``, the host side that checks the arguments, picks launch
configurations (``lowprec.kernels.int8_fallback_tuning``) and launches them. The kernels keep
their names: profiles and the tuning log show them.

Interpreter: these kernels call jit helpers of ``lowprec.kernels.quantize`` and
``lowprec.kernels._common``; set TRITON_INTERPRET=1 before the modules are first imported, or
reload them in order (``_common.reload_for_interpreter``: _common, quantize, this one).
"""

from __future__ import annotations

from . import _common as _c
from . import quantize as _kq

triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()

# the largest K-group whose int32 products the add trick (``_exact_f32``) converts exactly:
# |partial product| < 2^22
MAGIC_MAX_GROUP = (1 << 22) // (127 * 127)

# this module's GEMM kernel and the helpers it calls from quantize and _common (mode checks);
# empty when Triton does not import
_JIT_FNS: tuple = ()

if triton is not None and _kq.triton is not None:
    from ._common import (_finite_abs, _grouped_tile, _load_fp32, _max_axis, _round_bf16, _stream_uniforms,
                          _strided, _sum_axis)
    from .quantize import _encode, _nonfinite, _scale_from_amax

    @triton.jit
    def _block_pids(n_brow, G: tl.constexpr):
        """This program's (pid_r, pid_c): G vertically stacked blocks, programs run down block-columns."""
        pid = tl.program_id(0)
        n_rgrp = (n_brow + G - 1) // G
        return pid % n_rgrp, pid // n_rgrp

    @triton.jit
    def _chunk_view(pid_r, pid_c, r0, c0, M, N, n_brow, BR: tl.constexpr, BC: tl.constexpr, CH: tl.constexpr,
                    CW: tl.constexpr, G: tl.constexpr):
        """Rows r0 .. r0 + CH and columns c0 .. c0 + CW of each of the program's G (BR, BC) blocks
        as a [G, CH, CW] tile: its rows (int64), columns and mask."""
        g = tl.arange(0, G)[:, None, None]
        r = r0 + tl.arange(0, CH)[None, :, None]
        c = c0 + tl.arange(0, CW)[None, None, :]
        brow = pid_r * G + g
        row = brow * BR + r
        col = pid_c * BC + c
        mask = (r < BR) & (c < BC) & (brow < n_brow) & (row < M) & (col < N)
        return row.to(tl.int64), col, mask

    @triton.jit
    def _block_view(M, N, n_brow, BR: tl.constexpr, BC: tl.constexpr, RP: tl.constexpr, CP: tl.constexpr,
                    G: tl.constexpr):
        """This program's (pid_r, pid_c) and the rows, columns and mask of its G whole blocks as a
        [G, RP, CP] tile."""
        pid_r, pid_c = _block_pids(n_brow, G)
        row, col, mask = _chunk_view(pid_r, pid_c, 0, 0, M, N, n_brow, BR, BC, RP, CP, G)
        return pid_r, pid_c, row, col, mask

    @triton.jit
    def _block_max(v):
        return _max_axis(_max_axis(v, 2), 1)

    @triton.jit
    def _block_sum(v):
        return _sum_axis(_sum_axis(v, 2), 1)

    @triton.jit
    def _stats_kernel(x_ptr, sx0, sx1, amax_ptr, err_ptr, M, N, n_brow, n_bcol,
                      BR: tl.constexpr, BC: tl.constexpr, RP: tl.constexpr, CP: tl.constexpr,
                      G: tl.constexpr, IN_KIND: tl.constexpr, X_LAYOUT: tl.constexpr):
        pid_r, pid_c, row, col, mask = _block_view(M, N, n_brow, BR, BC, RP, CP, G)
        x = _load_fp32(x_ptr, _strided(row, col, sx0, sx1, X_LAYOUT), mask, IN_KIND)
        x = tl.where(tl.abs(x) < float("inf"), x, 0.0)  # NaN and Inf count as 0, as in the reference
        amax = _block_max(tl.abs(x))
        s = _scale_from_amax(amax, 127.0, 1.0, False)
        q = _encode(x * s[:, None, None], 0.0, 127.0, True, 0, 0, 0, False, False, tl.int8)
        d = x - tl.math.div_rn(q.to(tl.float32), s[:, None, None])
        err2 = _block_sum(d * d)
        ref2 = _block_sum(x * x)
        ok = ref2 > 0.0
        rel = tl.where(ok, tl.sqrt_rn(tl.math.div_rn(err2, tl.where(ok, ref2, 1.0))), 0.0)
        gi = pid_r * G + tl.arange(0, G)
        sidx = gi * n_bcol + pid_c
        tl.store(amax_ptr + sidx, amax, mask=gi < n_brow)
        tl.store(err_ptr + sidx, rel, mask=gi < n_brow)

    @triton.jit
    def _draws(u_ptr, key_ptr, part, offs, mask, ROUNDING: tl.constexpr):
        """The stochastic rounding's uniforms of one part at offs (0.0 for nearest rounding)."""
        u = 0.0
        if ROUNDING == 1:
            u = tl.load(u_ptr + offs, mask=mask, other=0.0)
        elif ROUNDING == 2:
            u = _stream_uniforms(key_ptr, part, offs)
        return u

    @triton.jit
    def _first_part(x_ptr, sx0, sx1, u1_ptr, key_ptr, s1, row, col, offs, mask, IN_KIND: tl.constexpr,
                    ROUNDING: tl.constexpr, X_LAYOUT: tl.constexpr):
        """(x, its first-part codes q1) of a chunk (offs: its row-major offsets). The offsets come
        in, not out: Inductor's analysis of which arguments a kernel writes takes every result of a
        call as derived from all its arguments, and a store through offsets returned here would
        count x as written (a mutated input is then copied, or fails to compile)."""
        x = _load_fp32(x_ptr, _strided(row, col, sx0, sx1, X_LAYOUT), mask, IN_KIND)
        u1 = _draws(u1_ptr, key_ptr, 0, offs, mask, ROUNDING)
        q1 = _encode(x * s1[:, None, None], u1, 127.0, True, 0, 0, 0, ROUNDING != 0, False, tl.int8)
        return x, q1

    @triton.jit
    def _residual(x, q1, s1):
        """x less the value the GEMM will see for q1 (a correctly rounded q1 / s1)."""
        return x - tl.math.div_rn(q1.to(tl.float32), s1[:, None, None])

    @triton.jit
    def _store_codes(q_ptr, qt_ptr, q, offs, row, col, mask, M, TRANS: tl.constexpr):
        """Codes row-major, and with TRANS their transpose row-major (N, M) too."""
        tl.store(q_ptr + offs, q, mask=mask)
        if TRANS:
            tl.store(qt_ptr + (col.to(tl.int64) * M + row), q, mask=mask)

    @triton.jit
    def _fallback_quant_kernel(x_ptr, sx0, sx1, u1_ptr, u2_ptr, key_ptr, q1_ptr, s1_ptr, q2_ptr, s2_ptr,
                               flag_ptr, mask_ptr, thr_ptr, q1t_ptr, q2t_ptr, M, N, n_brow, n_bcol,
                               BR: tl.constexpr, BC: tl.constexpr, CH: tl.constexpr, CW: tl.constexpr,
                               G: tl.constexpr, IN_KIND: tl.constexpr, ROUNDING: tl.constexpr,
                               MODE: tl.constexpr, SECOND: tl.constexpr, TRANS: tl.constexpr,
                               X_LAYOUT: tl.constexpr):
        """G blocks, a CH x CW chunk of them at a time: a pass for the blocks' amax, one for the
        first part (and the residual's amax where a block falls back), and only where one does, one
        for the second part; a pass after the first reads x again from cache. A program thus holds a
        chunk, not a block, so that many run on an SM at once (a 128x128 block held whole leaves one
        or two). G > 1 only where a chunk is whole blocks. x read through its strides (sx0, sx1): a transposed
        view needs no copy first; the codes are written row-major. ROUNDING 0: nearest; 1:
        stochastic with the draws u1_ptr / u2_ptr (x's 2-D shape, row-major); 2: stochastic with the
        rounding stream's draws of the keys key_ptr[0] / key_ptr[1], made here. MODE 0: flags from
        mask_ptr; 1: amax > *thr_ptr; 2: no fallback. SECOND: write the second part, scales and flags
        (else the first part only). TRANS: also write the codes' transposes, row-major (N, M), to
        q1t_ptr / q2t_ptr (a backward GEMM takes them, where a separate transpose of int8 codes was a
        slow strided copy)."""
        pid_r, pid_c = _block_pids(n_brow, G)
        NCW: tl.constexpr = (BC + CW - 1) // CW
        NCH: tl.constexpr = ((BR + CH - 1) // CH) * NCW  # chunks per block, row-major
        # maxima kept per element over the chunks and reduced across the block once: a reduction
        # per chunk crossed the warps through shared memory (six barriers a chunk on sm_90)
        amax_e = tl.full([G, CH, CW], 0.0, tl.float32)
        bad_e = tl.full([G, CH, CW], 0.0, tl.float32)
        for ci in range(0, NCH):
            row, col, mask = _chunk_view(pid_r, pid_c, (ci // NCW) * CH, (ci % NCW) * CW, M, N, n_brow, BR, BC, CH,
                                         CW, G)
            x = _load_fp32(x_ptr, _strided(row, col, sx0, sx1, X_LAYOUT), mask, IN_KIND)
            amax_e = tl.maximum(amax_e, _finite_abs(x))
            bad_e = tl.maximum(bad_e, _nonfinite(x))
        amax = _block_max(amax_e)
        bad = _block_max(bad_e)
        s1 = _scale_from_amax(amax, 127.0, 1.0, False)
        # a block holding NaN/Inf: NaN scale, so q1 = 0 and the residual is NaN (amax 0: q2 = 0,
        # s2 = 1), exactly as in the reference
        s1 = tl.where(bad > 0.0, float("nan"), s1)
        gi = pid_r * G + tl.arange(0, G)
        gmask = gi < n_brow
        sidx = gi * n_bcol + pid_c
        tl.store(s1_ptr + sidx, s1, mask=gmask)
        flag = amax < 0.0
        if SECOND:
            if MODE == 0:
                flag = tl.load(mask_ptr + sidx, mask=gmask, other=0) != 0
            elif MODE == 1:
                flag = amax > tl.load(thr_ptr)
        any_flag = _max_axis(flag.to(tl.int32), 0) > 0

        amax_r_e = tl.full([G, CH, CW], 0.0, tl.float32)
        for ci in range(0, NCH):
            row, col, mask = _chunk_view(pid_r, pid_c, (ci // NCW) * CH, (ci % NCW) * CW, M, N, n_brow, BR, BC, CH,
                                         CW, G)
            offs = row * N + col
            x, q1 = _first_part(x_ptr, sx0, sx1, u1_ptr, key_ptr, s1, row, col, offs, mask, IN_KIND, ROUNDING,
                                X_LAYOUT)
            _store_codes(q1_ptr, q1t_ptr, q1, offs, row, col, mask, M, TRANS)
            if SECOND:
                if any_flag:
                    amax_r_e = tl.maximum(amax_r_e, _finite_abs(_residual(x, q1, s1)))
                else:
                    _store_codes(q2_ptr, q2t_ptr, tl.full([G, CH, CW], 0, tl.int8), offs, row, col, mask, M, TRANS)
        if SECOND:
            s2 = _scale_from_amax(tl.where(flag, _block_max(amax_r_e), 0.0), 127.0, 1.0, False)
            if any_flag:
                for ci in range(0, NCH):
                    row, col, mask = _chunk_view(pid_r, pid_c, (ci // NCW) * CH, (ci % NCW) * CW, M, N, n_brow, BR,
                                                 BC, CH, CW, G)
                    offs = row * N + col
                    x, q1 = _first_part(x_ptr, sx0, sx1, u1_ptr, key_ptr, s1, row, col, offs, mask, IN_KIND,
                                        ROUNDING, X_LAYOUT)
                    u2 = _draws(u2_ptr, key_ptr, 1, offs, mask, ROUNDING)
                    q2 = _encode(_residual(x, q1, s1) * s2[:, None, None], u2, 127.0, True, 0, 0, 0, ROUNDING != 0,
                                 False, tl.int8)
                    q2 = tl.where(flag[:, None, None], q2, 0).to(tl.int8)
                    _store_codes(q2_ptr, q2t_ptr, q2, offs, row, col, mask, M, TRANS)
            tl.store(s2_ptr + sidx, s2, mask=gmask)
            tl.store(flag_ptr + sidx, flag.to(tl.int8), mask=gmask)

    @triton.jit
    def _exact_f32(p, MAGIC: tl.constexpr):
        """An int32 tile as fp32, exact for |p| < 2^22 either way. MAGIC: write p into the mantissa of
        1.5 * 2^23 with an integer add, then subtract 1.5 * 2^23 (one integer and one float add, both
        full rate, where the int-to-float conversion instruction issues at a quarter of it)."""
        if MAGIC:
            return (p + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0
        else:
            return p.to(tl.float32)

    @triton.jit
    def _scale_tile(sa, sb, UA: tl.constexpr = False, UB: tl.constexpr = False):
        """The rescale of one K-group's product: the outer product of the row scales sa and the
        column scales sb. UA / UB: sa / sb is one scalar for the whole tile (its scale block covers
        the tile), so the tile is a broadcast vector, or a scalar, instead of a product per element
        (the same fp32 products: bit for bit)."""
        if UA and UB:
            return sa * sb
        elif UA:
            return (sa * sb)[None, :]
        elif UB:
            return (sa * sb)[:, None]
        else:
            return sa[:, None] * sb[None, :]

    @triton.jit
    def _scale_rows(start, n, R: tl.constexpr, BS: tl.constexpr, BLOCKED: tl.constexpr):
        """The scale-grid rows of a tile's R rows from ``start`` (of n, in blocks of BS rows):
        with BLOCKED (BS divides R and start), one per block, [R // BS], which ``_expand`` repeats
        over the block's rows; else one per row, [R]. Clamped to the last block, which the tile's
        rows past n read (their results are not stored)."""
        last = (n + BS - 1) // BS - 1
        if BLOCKED:
            return tl.minimum(start // BS + tl.arange(0, R // BS), last)
        else:
            return tl.minimum((start + tl.arange(0, R)) // BS, last)

    @triton.jit
    def _expand(v, R: tl.constexpr, BS: tl.constexpr, BLOCKED: tl.constexpr):
        """With BLOCKED, the [R] vector of a [R // BS] vector's values, each repeated BS times: the
        same values per row, but the compiler sees them equal, so a thread loads and multiplies a
        block's scale once, not once per element it holds."""
        if BLOCKED:
            return tl.broadcast_to(v[:, None], [R // BS, BS]).reshape(R)
        else:
            return v

    @triton.jit
    def _add_scaled(acc, p, s, MAGIC: tl.constexpr):
        """acc + p * s: an int32 product tile as fp32 (exact), times its scale tile."""
        return acc + _exact_f32(p, MAGIC) * s

    @triton.jit
    def _add_scaled_dot(acc, a, b, sa, sb, MAGIC: tl.constexpr, UA: tl.constexpr = False, UB: tl.constexpr = False):
        """acc + (a . b) * (sa x sb): the int8 dot into int32, rescaled (``_scale_tile``)."""
        return _add_scaled(acc, tl.dot(a, b, out_dtype=tl.int32), _scale_tile(sa, sb, UA, UB), MAGIC)

    @triton.jit
    def _ab_tiles(a_ptr, a_desc, a_rows, b_ptr, b_desc, b_cols, kb, offs_k, pid_m, pid_n, K,
                  GK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_K: tl.constexpr,
                  USE_TMA: tl.constexpr):
        """K-group kb's [BLOCK_M, BLOCK_K] tile of A and [BLOCK_K, BLOCK_N] tile of B."""
        a = _a_tile(a_ptr, a_desc, a_rows, kb, offs_k, pid_m, K, GK, BLOCK_M, EVEN_K, USE_TMA)
        b = _b_tile(b_ptr, b_desc, b_cols, kb, offs_k, pid_n, K, GK, BLOCK_N, EVEN_K, USE_TMA)
        return a, b

    @triton.jit
    def _a_tile(ptr, desc, rows_off, kb, offs_k, pid_m, K, GK: tl.constexpr, BLOCK_M: tl.constexpr,
                EVEN_K: tl.constexpr, USE_TMA: tl.constexpr):
        """K-group kb's [BLOCK_M, BLOCK_K] tile of a K-contiguous operand, by its descriptor or pointers."""
        if USE_TMA:
            return desc.load([pid_m * BLOCK_M, kb * GK])
        else:
            return _rows_tile(ptr, rows_off, kb, offs_k, K, GK, EVEN_K)

    @triton.jit
    def _b_tile(ptr, desc, cols_off, kb, offs_k, pid_n, K, GK: tl.constexpr, BLOCK_N: tl.constexpr,
                EVEN_K: tl.constexpr, USE_TMA: tl.constexpr):
        """The same as a [BLOCK_K, BLOCK_N] tile (the right-hand operand of tl.dot)."""
        if USE_TMA:
            return tl.trans(desc.load([pid_n * BLOCK_N, kb * GK]))
        else:
            return _cols_tile(ptr, cols_off, kb, offs_k, K, GK, EVEN_K)

    @triton.jit
    def _rows_tile(ptr, rows_off, kb, offs_k, K, GK: tl.constexpr, EVEN_K: tl.constexpr):
        """[R, BLOCK_K] int8 tile of K-group kb of a K-contiguous operand (rows_off: row * K)."""
        kk = kb * GK + offs_k
        if EVEN_K:
            return tl.load(ptr + rows_off[:, None] + kk[None, :])
        else:
            k_ok = (offs_k < GK) & (kk < K)
            return tl.load(ptr + rows_off[:, None] + kk[None, :], mask=k_ok[None, :], other=0)

    @triton.jit
    def _cols_tile(ptr, cols_off, kb, offs_k, K, GK: tl.constexpr, EVEN_K: tl.constexpr):
        """The same as a [BLOCK_K, C] tile (the right-hand operand of tl.dot)."""
        kk = kb * GK + offs_k
        if EVEN_K:
            return tl.load(ptr + cols_off[None, :] + kk[:, None])
        else:
            k_ok = (offs_k < GK) & (kk < K)
            return tl.load(ptr + cols_off[None, :] + kk[:, None], mask=k_ok[:, None], other=0)

    @triton.jit(do_not_specialize=["n_kb"])  # only a loop bound and a scale-row stride
    def _gemm_kernel(a_ptr, da_ptr, b_ptr, db_ptr, c_ptr,
                     ra_ptr, dra_ptr, fa_ptr, rb_ptr, drb_ptr, fb_ptr,
                     M, N, K, n_kb,
                     BMS: tl.constexpr, BNS: tl.constexpr, GK: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     KG: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, MAGIC: tl.constexpr,
                     USE_TMA: tl.constexpr, HAS_RA: tl.constexpr, HAS_RB: tl.constexpr, WS: tl.constexpr,
                     PIPE: tl.constexpr = False, TAIL: tl.constexpr = False, KCHUNK: tl.constexpr = 16,
                     NRB: tl.constexpr = 2, NCB: tl.constexpr = 2):
        """One BLOCK_M x BLOCK_N tile of C = A @ B.T; KG K-groups per loop iteration (n_kb % KG == 0),
        each its own int32 dot and fp32 rescale. HAS_RA / HAS_RB: A's / B's second part, in the
        main loop (a uniform branch per K-group where a row-block of the tile is flagged) or, with
        TAIL, after it (``_tail``: only the K-groups where one is, found KCHUNK flags
        at a time; NRB / NCB: a power of two at least the row- / column-blocks a tile meets). PIPE (no second part in the main loop, KG 1): the loop issues the next K-group's
        dot before rescaling the last one's product, the same sums in the same order. C is written
        in its own dtype (fp32, or bf16 rounded once to nearest from the fp32 sum)."""
        pid = tl.program_id(0)
        pid_m, pid_n = _grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        if USE_TMA:
            # made on the device, so that a traced launch takes them too (``_common.tma_device``)
            a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
            b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
        else:  # never read: the descriptor loads are compiled out
            a_desc, b_desc = a_ptr, b_ptr
        ra_desc, rb_desc = a_desc, b_desc  # the tail's second parts, by descriptor where the first parts are
        if USE_TMA and TAIL and HAS_RA:
            ra_desc = tl.make_tensor_descriptor(ra_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        if USE_TMA and TAIL and HAS_RB:
            rb_desc = tl.make_tensor_descriptor(rb_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        # rows past the edge read a valid row (their results are not stored): no masks along M, N
        rm = offs_m % M
        rn = offs_n % N
        offs_k = tl.arange(0, BLOCK_K)
        a_rows = rm.to(tl.int64) * K
        b_cols = rn.to(tl.int64) * K
        # a scale block that covers the tile along M (N) gives one scale per K-group: loaded once
        # per program and broadcast (UA / UB of _add_scaled_dot); not with fused second parts, whose
        # flags are read per row-block (the tail reads them apart). Blocks that divide the tile (BA / BB) are loaded once per
        # block (_scale_rows, _expand): Jetfire's 32x32 blocks in 128x128 tiles on sm_90, per loop
        # iteration, 144 -> 28 scale loads, 256 -> 16 products, 162 -> 0 spilled registers
        # (results/bench/int8_gemm_sass_sm90.csv); the rows' wrap-around (rm) hid the shared blocks
        IN_LOOP: tl.constexpr = (HAS_RA or HAS_RB) and not TAIL
        UA: tl.constexpr = BMS % BLOCK_M == 0 and not IN_LOOP
        UB: tl.constexpr = BNS % BLOCK_N == 0 and not IN_LOOP
        BA: tl.constexpr = not UA and BLOCK_M % BMS == 0
        BB: tl.constexpr = not UB and BLOCK_N % BNS == 0
        if UA:
            sa_idx = ((pid_m * BLOCK_M) // BMS) * n_kb
        else:
            sa_idx = _scale_rows(pid_m * BLOCK_M, M, BLOCK_M, BMS, BA) * n_kb
        if UB:
            sb_idx = ((pid_n * BLOCK_N) // BNS) * n_kb
        else:
            sb_idx = _scale_rows(pid_n * BLOCK_N, N, BLOCK_N, BNS, BB) * n_kb

        acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
        if PIPE:
            # K-group kb's dot is issued before K-group kb - 1's product is rescaled, so that the
            # tensor cores have work while the rescale runs (the sums keep their order)
            a, b = _ab_tiles(a_ptr, a_desc, a_rows, b_ptr, b_desc, b_cols, 0, offs_k, pid_m, pid_n, K,
                             GK, BLOCK_M, BLOCK_N, EVEN_K, USE_TMA)
            sa = _expand(tl.load(da_ptr + sa_idx), BLOCK_M, BMS, BA)
            sb = _expand(tl.load(db_ptr + sb_idx), BLOCK_N, BNS, BB)
            p = tl.dot(a, b, out_dtype=tl.int32)
            for kb in tl.range(1, n_kb):
                a, b = _ab_tiles(a_ptr, a_desc, a_rows, b_ptr, b_desc, b_cols, kb, offs_k, pid_m, pid_n, K,
                                 GK, BLOCK_M, BLOCK_N, EVEN_K, USE_TMA)
                sa_next = _expand(tl.load(da_ptr + sa_idx + kb), BLOCK_M, BMS, BA)
                sb_next = _expand(tl.load(db_ptr + sb_idx + kb), BLOCK_N, BNS, BB)
                p_next = tl.dot(a, b, out_dtype=tl.int32)
                acc = _add_scaled(acc, p, _scale_tile(sa, sb, UA, UB), MAGIC)
                p, sa, sb = p_next, sa_next, sb_next
            acc = _add_scaled(acc, p, _scale_tile(sa, sb, UA, UB), MAGIC)
        else:
            for it in tl.range(0, n_kb // KG, warp_specialize=WS):
                for j in tl.static_range(KG):
                    kb = it * KG + j
                    # scales first: their loads are in flight during the dot
                    da = _expand(tl.load(da_ptr + sa_idx + kb), BLOCK_M, BMS, BA)
                    db = _expand(tl.load(db_ptr + sb_idx + kb), BLOCK_N, BNS, BB)
                    a, b = _ab_tiles(a_ptr, a_desc, a_rows, b_ptr, b_desc, b_cols, kb, offs_k, pid_m, pid_n, K,
                                     GK, BLOCK_M, BLOCK_N, EVEN_K, USE_TMA)
                    acc = _add_scaled_dot(acc, a, b, da, db, MAGIC, UA, UB)
                    if HAS_RA and not TAIL:
                        fa = tl.load(fa_ptr + sa_idx + kb).to(tl.int32)
                        dra = _expand(tl.where(fa != 0, tl.load(dra_ptr + sa_idx + kb), 0.0), BLOCK_M, BMS, BA)
                        any_a = _max_axis(fa, 0) > 0
                        if any_a:
                            a2 = _rows_tile(ra_ptr, a_rows, kb, offs_k, K, GK, EVEN_K)
                            acc = _add_scaled_dot(acc, a2, b, dra, db, MAGIC)
                    if HAS_RB and not TAIL:
                        fb = tl.load(fb_ptr + sb_idx + kb).to(tl.int32)
                        drb = _expand(tl.where(fb != 0, tl.load(drb_ptr + sb_idx + kb), 0.0), BLOCK_N, BNS, BB)
                        if _max_axis(fb, 0) > 0:
                            b2 = _cols_tile(rb_ptr, b_cols, kb, offs_k, K, GK, EVEN_K)
                            acc = _add_scaled_dot(acc, a, b2, da, drb, MAGIC)
                            if HAS_RA:
                                if any_a:
                                    a2b = _rows_tile(ra_ptr, a_rows, kb, offs_k, K, GK, EVEN_K)
                                    acc = _add_scaled_dot(acc, a2b, b2, dra, drb, MAGIC)
        if TAIL:
            if HAS_RA:
                acc = _tail(acc, a_ptr, a_desc, da_ptr, ra_ptr, ra_desc, dra_ptr, fa_ptr, b_ptr, b_desc, db_ptr, rb_ptr,
                            rb_desc, drb_ptr, fb_ptr, a_rows, b_cols, sa_idx, sb_idx, pid_m, pid_n, M, N, K, n_kb,
                            offs_k, BMS, BNS, GK, BLOCK_M, BLOCK_N, KCHUNK, NRB, NCB, EVEN_K, MAGIC, UA, UB, BA, BB,
                            USE_TMA, False, HAS_RA)
            if HAS_RB:  # after A's: B's second part, with the cross term
                acc = _tail(acc, a_ptr, a_desc, da_ptr, ra_ptr, ra_desc, dra_ptr, fa_ptr, b_ptr, b_desc, db_ptr, rb_ptr,
                            rb_desc, drb_ptr, fb_ptr, a_rows, b_cols, sa_idx, sb_idx, pid_m, pid_n, M, N, K, n_kb,
                            offs_k, BMS, BNS, GK, BLOCK_M, BLOCK_N, KCHUNK, NRB, NCB, EVEN_K, MAGIC, UA, UB, BA, BB,
                            USE_TMA, True, HAS_RA)
        if c_ptr.dtype.element_ty == tl.bfloat16:
            acc = _round_bf16(acc)  # to nearest, then the cast is exact (the interpreter's truncates)
        c_offs = offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(c_ptr + c_offs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])

    @triton.jit
    def _min_combine(a, b):
        return tl.minimum(a, b)

    @triton.jit
    def _flag_chunk(fr_ptr, rbs, rb_ok, c0, kc, n_kb):
        """[KCHUNK] bool: K-groups c0 + kc where one of the row-blocks rbs is flagged."""
        f = tl.load(fr_ptr + rbs[:, None] * n_kb + (c0 + kc)[None, :],
                    mask=rb_ok[:, None] & ((c0 + kc) < n_kb)[None, :], other=0)
        return _max_axis(f.to(tl.int32), 0) != 0

    @triton.jit
    def _tile_blocks(start, n, R: tl.constexpr, BS: tl.constexpr, NB: tl.constexpr):
        """The scale-grid rows (blocks of BS rows) that rows start .. start + R of n meet, and which
        of them exist: a [NB] vector (NB: a power of two, at least as many as a tile meets)."""
        bs = start // BS + tl.arange(0, NB)
        return bs, bs <= (tl.minimum(start + R, n) - 1) // BS

    @triton.jit
    def _next_flagged(rem, kc, KCHUNK: tl.constexpr):
        """(the lowest K-group offset set in rem, rem without it)."""
        kl = tl.reduce(tl.where(rem, kc, KCHUNK), 0, _min_combine)
        return kl, rem & (kc != kl)

    @triton.jit
    def _flagged_scales(f_ptr, d_ptr, idx, kb, R: tl.constexpr, BS: tl.constexpr, BLOCKED: tl.constexpr):
        """A second part's decode scales of K-group kb for a tile's rows (idx: ``_scale_rows``, or
        one index for a block covering the tile), zero where a block is not flagged: its codes and
        scale are then never read into the sum."""
        return _expand(tl.where(tl.load(f_ptr + idx + kb) != 0, tl.load(d_ptr + idx + kb), 0.0), R, BS, BLOCKED)

    @triton.jit
    def _tail(acc, a_ptr, a_desc, da_ptr, ra_ptr, ra_desc, dra_ptr, fa_ptr, b_ptr, b_desc, db_ptr, rb_ptr, rb_desc,
              drb_ptr, fb_ptr, a_rows, b_cols, sa_idx, sb_idx, pid_m, pid_n, M, N, K, n_kb, offs_k,
              BMS: tl.constexpr, BNS: tl.constexpr, GK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              KCHUNK: tl.constexpr, NRB: tl.constexpr, NCB: tl.constexpr, EVEN_K: tl.constexpr, MAGIC: tl.constexpr,
              UA: tl.constexpr, UB: tl.constexpr, BA: tl.constexpr, BB: tl.constexpr, USE_TMA: tl.constexpr,
              SIDE_B: tl.constexpr, HAS_RA: tl.constexpr):
        """acc plus one operand's second part over the K-groups (increasing) where a block of the
        tile is flagged: A's against B's first part (SIDE_B False: A's row-blocks' flags), or B's
        against A's first part and then, where a row-block of A is flagged too (HAS_RA), against
        A's second part (SIDE_B: B's column-blocks' flags)."""
        rbs, rb_ok = _tile_blocks(pid_m * BLOCK_M, M, BLOCK_M, BMS, NRB)
        if SIDE_B:
            fs_ptr = fb_ptr
            bs, b_ok = _tile_blocks(pid_n * BLOCK_N, N, BLOCK_N, BNS, NCB)
        else:
            fs_ptr = fa_ptr
            bs, b_ok = rbs, rb_ok
        kc = tl.arange(0, KCHUNK)
        for c0 in range(0, n_kb, KCHUNK):
            rem = _flag_chunk(fs_ptr, bs, b_ok, c0, kc, n_kb)
            for _ in range(0, _sum_axis(rem.to(tl.int32), 0)):
                kl, rem = _next_flagged(rem, kc, KCHUNK)
                kb = c0 + kl
                if SIDE_B:
                    da = _expand(tl.load(da_ptr + sa_idx + kb), BLOCK_M, BMS, BA)
                    drb = _flagged_scales(fb_ptr, drb_ptr, sb_idx, kb, BLOCK_N, BNS, BB)
                    a, b2 = _ab_tiles(a_ptr, a_desc, a_rows, rb_ptr, rb_desc, b_cols, kb, offs_k, pid_m, pid_n, K, GK,
                                      BLOCK_M, BLOCK_N, EVEN_K, USE_TMA)
                    acc = _add_scaled_dot(acc, a, b2, da, drb, MAGIC, UA, UB)
                    if HAS_RA:
                        fa = tl.load(fa_ptr + rbs * n_kb + kb, mask=rb_ok, other=0).to(tl.int32)
                        if _max_axis(fa, 0) > 0:
                            dra = _flagged_scales(fa_ptr, dra_ptr, sa_idx, kb, BLOCK_M, BMS, BA)
                            a2 = _a_tile(ra_ptr, ra_desc, a_rows, kb, offs_k, pid_m, K, GK, BLOCK_M, EVEN_K, USE_TMA)
                            acc = _add_scaled_dot(acc, a2, b2, dra, drb, MAGIC, UA, UB)
                else:
                    dra = _flagged_scales(fa_ptr, dra_ptr, sa_idx, kb, BLOCK_M, BMS, BA)
                    db = _expand(tl.load(db_ptr + sb_idx + kb), BLOCK_N, BNS, BB)
                    a2, b = _ab_tiles(ra_ptr, ra_desc, a_rows, b_ptr, b_desc, b_cols, kb, offs_k, pid_m, pid_n, K, GK,
                                      BLOCK_M, BLOCK_N, EVEN_K, USE_TMA)
                    acc = _add_scaled_dot(acc, a2, b, dra, db, MAGIC, UA, UB)
        return acc

    @triton.jit(do_not_specialize=["n_kb", "n_ysplit"])
    def _residual_kernel(r_ptr, dr_ptr, fr_ptr, y_ptr, dy_ptr, yr_ptr, dyr_ptr, fy_ptr, c_ptr,
                         R, Y, K, n_kb, stride_cr, stride_cy, n_ysplit,
                         RBS: tl.constexpr, YBS: tl.constexpr, GK: tl.constexpr,
                         BLOCK_R: tl.constexpr, BLOCK_Y: tl.constexpr, BLOCK_K: tl.constexpr,
                         NRB: tl.constexpr, KCHUNK: tl.constexpr, EVEN_K: tl.constexpr, MAGIC: tl.constexpr,
                         HAS_CROSS: tl.constexpr):
        """The second part of one operand (R: codes r, decode scales dr, flags fr) against the first
        part of the other (Y), added to C[r, y] (strides stride_cr, stride_cy); HAS_CROSS adds Y's
        second part against R's in the same K-group. A program owns BLOCK_R rows of R and every
        n_ysplit-th BLOCK_Y tile of Y, and visits only the K-groups where its rows hold a flagged
        block (found in registers from the flag grid, in increasing order); a program without any
        returns after reading its flags."""
        pid = tl.program_id(0)
        pid_r = pid // n_ysplit
        pid_y0 = pid % n_ysplit
        offs_r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
        r_ok = offs_r < R
        rr = offs_r % R
        r_rows = rr.to(tl.int64) * K
        BLK_R: tl.constexpr = BLOCK_R % RBS == 0
        BLK_Y: tl.constexpr = BLOCK_Y % YBS == 0
        sr_idx = _scale_rows(pid_r * BLOCK_R, R, BLOCK_R, RBS, BLK_R) * n_kb
        first_rb = (pid_r * BLOCK_R) // RBS
        last_rb = (tl.minimum(pid_r * BLOCK_R + BLOCK_R, R) - 1) // RBS
        rbs = first_rb + tl.arange(0, NRB)
        rb_ok = rbs <= last_rb
        kc = tl.arange(0, KCHUNK)
        offs_k = tl.arange(0, BLOCK_K)

        total = 0
        for c0 in range(0, n_kb, KCHUNK):
            total += _sum_axis(_flag_chunk(fr_ptr, rbs, rb_ok, c0, kc, n_kb).to(tl.int32), 0)
        if total > 0:
            for yt in range(pid_y0, (Y + BLOCK_Y - 1) // BLOCK_Y, n_ysplit):
                offs_y = yt * BLOCK_Y + tl.arange(0, BLOCK_Y)
                ry = offs_y % Y
                y_cols = ry.to(tl.int64) * K
                sy_idx = _scale_rows(yt * BLOCK_Y, Y, BLOCK_Y, YBS, BLK_Y) * n_kb
                acc = tl.full([BLOCK_R, BLOCK_Y], 0.0, tl.float32)
                for c0 in range(0, n_kb, KCHUNK):
                    rem = _flag_chunk(fr_ptr, rbs, rb_ok, c0, kc, n_kb)
                    for i in range(0, _sum_axis(rem.to(tl.int32), 0)):
                        kl, rem = _next_flagged(rem, kc, KCHUNK)
                        kb = c0 + kl
                        dr = _flagged_scales(fr_ptr, dr_ptr, sr_idx, kb, BLOCK_R, RBS, BLK_R)
                        dy = _expand(tl.load(dy_ptr + sy_idx + kb), BLOCK_Y, YBS, BLK_Y)
                        r = _rows_tile(r_ptr, r_rows, kb, offs_k, K, GK, EVEN_K)
                        yv = _cols_tile(y_ptr, y_cols, kb, offs_k, K, GK, EVEN_K)
                        acc = _add_scaled_dot(acc, r, yv, dr, dy, MAGIC)
                        if HAS_CROSS:
                            fy = tl.load(fy_ptr + sy_idx + kb).to(tl.int32)
                            if _max_axis(fy, 0) > 0:
                                dyr = _expand(tl.where(fy != 0, tl.load(dyr_ptr + sy_idx + kb), 0.0), BLOCK_Y, YBS, BLK_Y)
                                y2 = _cols_tile(yr_ptr, y_cols, kb, offs_k, K, GK, EVEN_K)
                                acc = _add_scaled_dot(acc, r, y2, dr, dyr, MAGIC)
                c_offs = offs_r.to(tl.int64)[:, None] * stride_cr + offs_y.to(tl.int64)[None, :] * stride_cy
                c_mask = r_ok[:, None] & (offs_y < Y)[None, :]
                c = tl.load(c_ptr + c_offs, mask=c_mask, other=0.0)
                tl.store(c_ptr + c_offs, c + acc, mask=c_mask)

    _JIT_FNS = (_gemm_kernel, _encode, _load_fp32, _grouped_tile, _stream_uniforms)


def interpreter_active() -> bool:
    """True when these kernels (and the quantize and _common helpers they call) run under the
    interpreter."""
    return bool(_JIT_FNS) and _c.is_interpreted(*_JIT_FNS)
