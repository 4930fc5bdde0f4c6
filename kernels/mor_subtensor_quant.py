"""Triton kernels for sub-tensor MoR's quantization (``lowprec.methods.mor.subtensor_parts``): per block
of a 2-D tensor, its statistics, both formats' relative errors and the values of the chosen format,
in three passes over x with one program per block, without the dequantized tensors.

API (each takes ``launcher``: None to launch here, or ``torch.library.wrap_triton`` inside a
``triton_op`` that a compiled graph traces)::

    block_stats(x2d, block)              -> (amax fp32, amin fp32, bad bool) grids
    block_errors(x2d, block, s4, s5, need=None) -> (2, n_brow, n_bcol) fp64: E4M3's and E5M2's error
                                            sums (0 where the bool grid need is False: not read)
    block_values(x2d, block, choice, s4, s5) -> (values bf16 (M, N), their transpose (N, M),
                                                 E4M3 codes float8_e4m3fn (M, N), their transpose)
    triton_available(device=None), interpreter_active()

Each pass also takes ``config``, a ``PassConfig`` (the step a program loops by, its warps); without
one, the pass's entry of ``DEFAULT_CONFIGS`` (measured on the H200).

The rule between the passes (dynamic range, scales, choice) is the emulation's own torch code on the
small grids (``lowprec.methods.mor_subtensor_fast.subtensor_operand`` composes them), so only the
per-element work is here, computed as the emulation computes it:

* stats: amax of the finite |x| (0 without one), the smallest non-zero finite |x| (+Inf without
  one), and whether the block holds a NaN or +-Inf (``mor.block_dynamic_range``);
* errors: per format, the value q of RNE of x * s onto its grid, saturating (formed in magnitudes
  from fp32 adds, ``_common._fp8_value``: the term's bits are the signed form's, and the codes
  themselves are not needed), dequantized by a correctly rounded division by s, terms
  |(q - x) / x| in fp32 (0 where x == 0),
  summed in fp64 (``mor._block_sum``): equal to the emulation's sums up to fp64 summation order;
  with ``need``, only for the blocks whose choice reads them (``mor.subtensor_error_blocks``: those
  whose dynamic range E5M2's holds and E4M3's does not), the rest neither read nor summed;
* values: per block, the chosen format's codes (E4M3, E5M2), or x rounded to BF16 (a BF16 block),
  as BF16 (every FP8 code is exact there), and the E4M3 codes as FP8 bits, zero in the blocks
  that chose another format (what the FP8 GEMMs read: cuBLAS's product of them sums the E4M3
  blocks alone, ``lowprec.methods.mor_subtensor_fast.MIXED_BLOCKS``), each also
  transposed (row-major (N, M)): the backward's GEMMs take the transposes of the forward's operands
  K-contiguous, which a copy from a transposed view would cost another pass for.

Blocks that overhang the tensor are masked (masked lanes count as the emulation's zero padding). x is
fp32 or bf16 (read as raw words, as in ``lowprec.kernels.quantize``), any strides. Inside the kernels
only Triton builtins and ``lowprec.kernels._common``'s helpers (``tl.full``, not ``tl.zeros``):
triton.language's own jit helpers break the interpreter when Triton was imported before
``TRITON_INTERPRET`` was set (``lowprec.kernels._common``).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from lowprec.numerics.checks import block_shape as _check_block, nonempty

from . import _common as _c
from ._common import _cdiv, _next_pow2

triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()

__all__ = ["block_stats", "block_errors", "block_values", "PassConfig", "DEFAULT_CONFIGS", "triton_available",
           "interpreter_active"]

_INPUT_DTYPES = (torch.float32, torch.bfloat16)
_JIT_FNS: tuple = ()


class PassConfig(NamedTuple):
    """A launch of one pass: elements per loop step of a program (a power of two; the error pass
    keeps two fp64 accumulators of this size in registers) and warps per program."""
    step: int = 2048
    num_warps: int = 4


# each pass's launch where the caller gives none: the fastest of six (step, warps) pairs at the ~1B
# step's activation shapes on the H200 (results/bench/subtensor_quant_h200.csv, 2f8af82): the
# error pass, which keeps two fp64 accumulators per element of the step, gains most from smaller
# steps on more warps (0.19 against 0.30 ms at 16384 x 5632)
DEFAULT_CONFIGS = {"stats": PassConfig(2048, 4), "errors": PassConfig(1024, 8), "values": PassConfig(2048, 8)}


if triton is not None:
    from ._common import _fp8_round, _fp8_value, _load_fp32, _max_axis, _round_bf16, _strided, _sum_axis

    @triton.jit
    def _min_combine(a, b):
        return tl.minimum(a, b)

    @triton.jit
    def _block_origin(pid, n_bcol, BR, BC):
        """First row and column (int64) of program pid's block; offsets inside a block are int32."""
        return (pid // n_bcol).to(tl.int64) * BR, (pid % n_bcol).to(tl.int64) * BC

    @triton.jit
    def _block_step(row0, col0, r0, c0, M, N, BR, BC, TR: tl.constexpr, TC: tl.constexpr):
        """The (TR, TC) step at (r0, c0) inside the block at (row0, col0): its rows and columns
        relative to the block, and the mask of those inside both the block and the tensor."""
        r = r0 + tl.arange(0, TR)[:, None]
        c = c0 + tl.arange(0, TC)[None, :]
        return r, c, (r < BR) & (c < BC) & (row0 + r < M) & (col0 + c < N)

    @triton.jit
    def _stats_kernel(x_ptr, amax_ptr, amin_ptr, bad_ptr, M, N, sxr, sxc, BR, BC, n_bcol,
                      TR: tl.constexpr, TC: tl.constexpr, IN_KIND: tl.constexpr,
                      X_LAYOUT: tl.constexpr):
        pid = tl.program_id(0)
        row0, col0 = _block_origin(pid, n_bcol, BR, BC)
        x_blk = x_ptr + row0 * sxr + col0 * sxc
        amax = tl.full((TR, TC), 0.0, dtype=tl.float32)
        amin = tl.full((TR, TC), float("inf"), dtype=tl.float32)
        bad = tl.full((TR, TC), 0, dtype=tl.int32)
        for r0 in range(0, BR, TR):
            for c0 in range(0, BC, TC):
                r, c, mask = _block_step(row0, col0, r0, c0, M, N, BR, BC, TR, TC)
                a = tl.abs(_load_fp32(x_blk, _strided(r, c, sxr, sxc, X_LAYOUT), mask, IN_KIND))
                finite = a < float("inf")  # NaN compares false
                amax = tl.maximum(amax, tl.where(finite, a, 0.0))
                amin = tl.minimum(amin, tl.where(finite & (a > 0.0), a, float("inf")))
                bad = tl.maximum(bad, tl.where(finite, 0, 1))  # masked lanes load 0: finite
        tl.store(amax_ptr + pid, _max_axis(_max_axis(amax, 1), 0))
        tl.store(amin_ptr + pid, tl.reduce(tl.reduce(amin, 1, _min_combine), 0, _min_combine))
        tl.store(bad_ptr + pid, _max_axis(_max_axis(bad, 1), 0).to(tl.int8))

    @triton.jit
    def _ratio(x, q, s):
        """|(q / s - x) / x| in fp32 with correctly rounded divisions, 0 where x == 0."""
        # x == 0 divides 0 by 1 (|+-0 / 1| is +0, what the term is there), the operands selected
        # before the division: a select of its quotient after it kept each element's flag live
        # across both formats' divisions and cost two selects more (the fp64 term's halves)
        nz = x != 0.0
        num = tl.where(nz, tl.math.div_rn(q, s) - x, 0.0)
        return tl.abs(tl.math.div_rn(num, tl.where(nz, x, 1.0)))

    @triton.jit
    def _errors_kernel(x_ptr, s4_ptr, s5_ptr, need_ptr, err_ptr, M, N, sxr, sxc, BR, BC, n_bcol, n_blocks,
                       TR: tl.constexpr, TC: tl.constexpr, IN_KIND: tl.constexpr, HAS_NEED: tl.constexpr,
                       X_LAYOUT: tl.constexpr):
        pid = tl.program_id(0)
        row0, col0 = _block_origin(pid, n_bcol, BR, BC)
        x_blk = x_ptr + row0 * sxr + col0 * sxc
        s4 = tl.load(s4_ptr + pid)
        s5 = tl.load(s5_ptr + pid)
        e4 = tl.full((TR, TC), 0.0, dtype=tl.float64)
        e5 = tl.full((TR, TC), 0.0, dtype=tl.float64)
        todo = True
        if HAS_NEED:
            todo = tl.load(need_ptr + pid) != 0
        if todo:  # a block whose choice does not read its sums keeps zeros, reading nothing
            for r0 in range(0, BR, TR):
                for c0 in range(0, BC, TC):
                    r, c, mask = _block_step(row0, col0, r0, c0, M, N, BR, BC, TR, TC)
                    # in magnitudes, as mor_quant's cast pass forms its terms: a code's value is odd
                    # in x * s (s > 0; round half to even is symmetric), so each term is
                    # |(q(|x| s) / s - |x|) / |x||, bit for bit |(q / s - x) / x|, and only the
                    # values are needed here, not the codes (NaN: |x| stays NaN, so the term does)
                    a = tl.abs(_load_fp32(x_blk, _strided(r, c, sxr, sxc, X_LAYOUT), mask, IN_KIND))
                    q4 = _fp8_value(tl.minimum(a * s4, 448.0), 3, -6)
                    q5 = _fp8_value(tl.minimum(a * s5, 57344.0), 2, -14)
                    e4 += _ratio(a, q4, s4).to(tl.float64)
                    e5 += _ratio(a, q5, s5).to(tl.float64)
        tl.store(err_ptr + pid, _sum_axis(_sum_axis(e4, 1), 0))
        tl.store(err_ptr + n_blocks + pid, _sum_axis(_sum_axis(e5, 1), 0))

    @triton.jit
    def _values_kernel(x_ptr, choice_ptr, s4_ptr, s5_ptr, values_ptr, e4m3_ptr, values_t_ptr, e4m3_t_ptr,
                       M, N, sxr, sxc, BR, BC, n_bcol, TR: tl.constexpr, TC: tl.constexpr, IN_KIND: tl.constexpr,
                       X_LAYOUT: tl.constexpr):
        pid = tl.program_id(0)
        row0, col0 = _block_origin(pid, n_bcol, BR, BC)
        x_blk = x_ptr + row0 * sxr + col0 * sxc
        out_blk = row0 * N + col0    # row-major (M, N) outputs
        out_t_blk = col0 * M + row0  # and their transposes, row-major (N, M)
        choice = tl.load(choice_ptr + pid).to(tl.int32)  # lowprec.methods.mor: 0 E4M3, 1 E5M2, 2 BF16
        s4 = tl.load(s4_ptr + pid)
        s5 = tl.load(s5_ptr + pid)
        for r0 in range(0, BR, TR):
            for c0 in range(0, BC, TC):
                r, c, mask = _block_step(row0, col0, r0, c0, M, N, BR, BC, TR, TC)
                x = _load_fp32(x_blk, _strided(r, c, sxr, sxc, X_LAYOUT), mask, IN_KIND)
                code4, q4 = _fp8_round(x * s4, 448.0, 3, -6, 8)
                if choice == 1:
                    _, v = _fp8_round(x * s5, 57344.0, 2, -14, 15)
                elif choice == 2:
                    v = _round_bf16(x)
                else:
                    v = q4
                # v is on the BF16 grid: its top 16 bits are the BF16 word (NaN keeps a NaN's bits)
                word = (v.to(tl.int32, bitcast=True) >> 16).to(tl.int16)
                tl.store(values_ptr + out_blk + r * N + c, word, mask=mask)
                # a block of another format holds zero codes: a GEMM of these codes alone then sums
                # exactly the E4M3 blocks (lowprec.methods.mor_subtensor_fast, MIXED_BLOCKS)
                code4 = tl.where(choice == 0, code4, 0)
                tl.store(e4m3_ptr + out_blk + r * N + c, code4, mask=mask)
                # the backward's operand is the transpose: written here, not copied from a view later,
                # from the program's own row-major words and codes read back after a barrier, so that
                # only those change layout (stored from `word` and `code4`, Triton's layout pass
                # computed them a second time in the transposed stores' layout: sm_90, Triton 3.6, an
                # E4M3 block 61.4 -> 41.2 instructions an element; kernel_sass)
                tl.debug_barrier()
                word = tl.load(values_ptr + out_blk + r * N + c, mask=mask)
                code4 = tl.load(e4m3_ptr + out_blk + r * N + c, mask=mask)
                tl.store(values_t_ptr + out_t_blk + c * M + r, word, mask=mask)
                tl.store(e4m3_t_ptr + out_t_blk + c * M + r, code4, mask=mask)

    _JIT_FNS = (_stats_kernel, _errors_kernel, _values_kernel, _load_fp32)


def triton_available(device=None) -> bool:
    return _c.available(interpreter_active(), device)


def interpreter_active() -> bool:
    return bool(_JIT_FNS) and _c.is_interpreted(*_JIT_FNS)


def _geometry(x2d: torch.Tensor, block, config: Optional[PassConfig], pass_name: str) -> tuple:
    """(x argument, block grid shape (n_brow, n_bcol), launch grid (one program per block),
    (M, N, strides, BR, BC, n_bcol), launch options) of x2d over block: the options are the
    step's (TR, TC) tile and the warps."""
    _c.require_triton("lowprec.kernels.mor_subtensor_quant", "lowprec.methods.mor", _TRITON_IMPORT_ERROR,
                      _JIT_FNS, x2d.device)
    if not isinstance(x2d, torch.Tensor) or x2d.dim() != 2:
        raise ValueError(f"x2d must be a 2-D tensor, got {getattr(x2d, 'shape', type(x2d).__name__)}")
    nonempty(x2d)
    if x2d.dtype not in _INPUT_DTYPES:
        raise TypeError(f"x2d must be float32 or bfloat16, got {x2d.dtype}")
    br, bc = _check_block(block)
    M, N = x2d.shape
    n_brow, n_bcol = _cdiv(M, br), _cdiv(N, bc)
    cfg = config or DEFAULT_CONFIGS[pass_name]
    if cfg.step < 1 or cfg.step & (cfg.step - 1) or cfg.num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"config: step must be a power of two and num_warps 1-16 (a power of two), got {cfg}")
    tc = min(_next_pow2(bc), 128, cfg.step)
    tr = min(_next_pow2(br), max(cfg.step // tc, 1))
    # offsets inside a block are int32 (the kernels add them to an int64 block origin)
    if max(br * abs(x2d.stride(0)) + bc * abs(x2d.stride(1)), br * N, bc * M) >= 2 ** 31:
        raise ValueError(f"x2d of shape {tuple(x2d.shape)} and strides {x2d.stride()}: a {br}x{bc} block spans "
                         "2^31 elements or more; use a smaller block")
    in_kind, x_arg = _c._in_kind(x2d)
    launch = dict(TR=tr, TC=tc, IN_KIND=in_kind, X_LAYOUT=_c.stride_layout(x2d), num_warps=cfg.num_warps)
    return x_arg, (n_brow, n_bcol), (n_brow * n_bcol,), (M, N, x2d.stride(0), x2d.stride(1), br, bc, n_bcol), launch


def block_stats(x2d: torch.Tensor, block, launcher=None, config: Optional[PassConfig] = None) -> tuple:
    """(amax, amin, bad) over the (ceil(M/R), ceil(N/C)) block grid (module docstring)."""
    x_arg, shape, grid, geom, launch = _geometry(x2d, block, config, "stats")
    amax = torch.empty(shape, dtype=torch.float32, device=x2d.device)
    amin, bad = torch.empty_like(amax), torch.empty(shape, dtype=torch.int8, device=x2d.device)
    _c.launch(_stats_kernel, launcher)[grid](x_arg, amax, amin, bad, *geom, **launch)
    return amax, amin, bad.bool()


def block_errors(x2d: torch.Tensor, block, s4: torch.Tensor, s5: torch.Tensor, launcher=None,
                 config: Optional[PassConfig] = None, need: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Both formats' per-block sums of relative errors at encode scales s4 (E4M3) and s5 (E5M2):
    (2, n_brow, n_bcol) fp64. ``need``: a bool block grid; blocks where it is False are not read
    and their sums are 0 (``lowprec.methods.mor.subtensor_error_blocks``: the blocks whose choice
    reads them)."""
    x_arg, shape, grid, geom, launch = _geometry(x2d, block, config, "errors")
    _check_grid("s4", s4, shape)
    _check_grid("s5", s5, shape)
    if need is not None:
        _check_grid("need", need, shape)
    err = torch.empty((2, *s4.shape), dtype=torch.float64, device=x2d.device)
    need_arg = s4 if need is None else need.to(torch.int8).contiguous()  # a placeholder without need
    _c.launch(_errors_kernel, launcher)[grid](x_arg, s4.contiguous(), s5.contiguous(), need_arg, err, *geom,
                                            grid[0], HAS_NEED=need is not None, **launch)
    return err


def block_values(x2d: torch.Tensor, block, choice: torch.Tensor, s4: torch.Tensor, s5: torch.Tensor,
                 launcher=None, config: Optional[PassConfig] = None) -> tuple:
    """(values bf16 (M, N), E4M3 codes float8_e4m3fn (M, N), and the two transposed, (N, M)), all
    row-major (module docstring)."""
    x_arg, shape, grid, geom, launch = _geometry(x2d, block, config, "values")
    for name, g in (("choice", choice), ("s4", s4), ("s5", s5)):
        _check_grid(name, g, shape)
    # written as raw words and viewed after: a traced graph then never sees a kernel write through
    # a view of another dtype
    M, N = x2d.shape
    words, words_t = (torch.empty(shape, dtype=torch.int16, device=x2d.device) for shape in ((M, N), (N, M)))
    codes, codes_t = (torch.empty(shape, dtype=torch.uint8, device=x2d.device) for shape in ((M, N), (N, M)))
    _c.launch(_values_kernel, launcher)[grid](x_arg, choice.contiguous(), s4.contiguous(), s5.contiguous(),
                                            words, codes, words_t, codes_t, *geom, **launch)
    return tuple(w.view(torch.bfloat16) for w in (words, words_t)) + tuple(
        c.view(torch.float8_e4m3fn) for c in (codes, codes_t))


def _check_grid(name: str, g: torch.Tensor, shape: tuple) -> None:
    if tuple(g.shape) != shape:
        raise ValueError(f"{name} must be the block grid of shape {shape}, got {tuple(g.shape)}")
