"""Triton kernels for INT8 training with block-level fallback (``lowprec.methods.int8_fallback``).

API::

    block_stats_int8(x, block) -> (amax, rel_err)             # per-block grids, for the rules
    quantize_fallback_int8(x, block, *, mask=None, threshold=None, noise=None, keys=None,
                           first_only=False, launcher=None)
        -> (q1, s1, q2, s2, flags)                            # one pass
    quantize_fallback_rule(x, block, rule, **rule_kw, noise=None) -> same   # two passes
    int8_fallback_gemm(qa, da, qb, db, block_a, block_b, ra=None, dra=None, fa=None,
                       rb=None, drb=None, fb=None, *, fallback="sparse", config=None, launcher=None,
                       out_dtype=torch.float32)
        -> (M, N) = A @ B.T, summed in fp32
    gemm_fallback_qtensors(fqa, fqb) -> fp32                  # from two FallbackQTensors
    triton_available(device=None), interpreter_active()

Quantize. ``quantize_fallback_int8`` reads x once per block and writes the first INT8 part q1
(int8, x's 2-D shape), its ENCODE scales s1 (the ``lowprec.numerics`` convention, x ~= q1 / s1), the
residual part q2 (int8, 0 outside fallback blocks), its encode scales s2 (1 outside) and the flags
(int8 grid). Which blocks fall back: ``mask`` (a bool grid computed beforehand: topk, error, or the
current-median absmax rule, which all need the whole tensor's block statistics first: that is the
second pass, ``block_stats_int8``), or ``threshold`` (a 1-element tensor: block amax > threshold,
decided inside the kernel: the dynamic rule, whose threshold comes from past calls, needs no second
pass), or neither (nothing falls back; ``first_only`` then skips writing the empty second part).
x is read through its strides (a transposed view, as the backward's operands are, is not copied),
the codes are written row-major. Stochastic rounding takes its uniforms as tensors (``noise``) or
draws the rounding stream's in the kernel from the two parts' keys (``keys``: no tensor of draws is
written; ``lowprec.numerics.rounding_stream``). Bit-exact with
``lowprec.methods.int8_fallback.fallback_quantize`` (scales by a correctly rounded division, RNE or
stochastic rounding with the same uniforms). ``lowprec.methods.int8_ops`` makes it a graph operator
(``launcher``: ``torch.library.wrap_triton`` inside its ``triton_op``).

GEMM. A (M, K) and B (N, K), both int8 with K contiguous (B "column-major" as cuBLAS and
``torch._int_mm`` want it), per-block DECODE scales (x ~= q * d) on grids (ceil(M/BM), ceil(K/G))
and (ceil(N/BN), ceil(K/G)), with G the K-group of both operands. One program computes a
BLOCK_M x BLOCK_N output tile; per K-group an int32 ``tl.dot`` of the int8 tiles, converted to fp32
and multiplied by the outer product of the row and column scale vectors, added to an fp32
accumulator. A loop iteration takes ``k_groups`` K-groups (each its own dot and rescale) so that
small groups still load wide tiles; tiles come by pointer loads or, where the operands allow it, by
tensor descriptors (TMA on Hopper), made on the device so that a traced launch takes them too. The
int32 -> fp32 conversion is an integer add into the mantissa of 1.5 * 2^23 and a float subtract
where that is exact (G <= 259): the rescale, not the INT8 MMA, bounds the kernel at small groups,
and the conversion instruction issues at a quarter of the FP32 rate. Launch configurations
(``GemmConfig``) are tuned once per shape class on CUDA (``lowprec.kernels.int8_fallback_tuning``:
M, N, K rounded up to powers of two, the group, the scale blocks; ``candidate_configs``,
``tuned_configs``, ``tuning_log``); GEMMs under ``TUNE_MIN_MACS`` and the interpreter take
``default_config``. On a Hopper GPU the candidates of an untraced call whose operands take
descriptor loads include the Gluon kernel of ``lowprec.kernels.int8_gemm_async``
(``GemmConfig.async_mma``: each K-group's product in flight while the last one is rescaled, which
no Triton formulation keeps); a configuration of it given with fused second parts, or for
operands it does not take, runs the Triton kernel in the same tile.

The second parts (blocks of A or B with a flag), ``fallback=``:

* "sparse" (default): the main kernel multiplies the first parts only; then one pass per operand
  with a second part, whose programs each own BLOCK_R (32) rows of it, find the K-groups where those
  rows hold a flagged block in the flag grid (on the device, in increasing order) and multiply only
  those, adding to C. Work follows the fallback ratio (at 32-row granularity), and with no flag set
  a pass costs a launch whose programs read their flags and return, so operands are passed without
  asking the host whether any flag is set. Order of the fp32 sums: C = (M1 + RA) + RB, with M1 the
  sum over K-groups of q1a.q1b, RA that of q2a.q1b, RB that of q1a.q2b then q2a.q2b per K-group;
  each of the three is an ``int8_block_gemm_reference`` (of the first parts; of (q2a, dra) against
  B's first part; of A's two parts against (q2b, drb)).
* "fused": inside the main loop, a tile whose rows hold at least one flagged block at this K-group
  issues the extra product (uniform branch per program), with the scales of unflagged rows zeroed:
  terms in order q1a.q1b, q2a.q1b, q1a.q2b, q2a.q2b per K-group, the order of
  ``int8_block_gemm_reference`` itself. A tile issues the extra product when any of its
  BLOCK_M / BM row-blocks falls back at that K-group, so the issued share (the bench's
  ``tile_ratio``) can exceed the block fallback ratio when fallback blocks are scattered.
* "tail": after the main loop (which keeps its software pipeline and its per-tile scales), the
  program finds the K-groups where a row-block of its tile is flagged in A's flag grid (on the
  device, 64 flags at a load, in increasing order) and adds q2a.q1b for those only, then the same
  over B's flags with q1a.q2b and, where A's are flagged too, q2a.q2b: work follows the flagged
  tiles, C is written once (in its own dtype: the sparse passes' read-modify-write of an fp32 C
  is gone), and a tile without a flag pays a load of its flags. Order of the fp32 sums, per
  element: the first parts over all K-groups, then A's second part over its K-groups, then per
  K-group B's second part against A's first and second parts (``int8_block_gemm_reference``
  with ``order="tail"``; the terms of unflagged blocks are exact zeros there).

The residual is stored densely (an int8 tensor of A's shape, zero outside fallback blocks): simple
addressing, twice A's INT8 memory; a compact layout indexed by fallback block would save that memory.

Non-finite values. An INT8 code cannot hold NaN or Inf, so a block holding one gets a NaN first-part
scale s1 (so q1 = 0; its residual is then NaN: q2 = 0, s2 = 1), as
``lowprec.numerics`` and ``fallback_quantize`` do: its decode scale is NaN, and so is every GEMM
output row (column) that the block enters. Which blocks fall back is decided on the finite values.
Empty tensors are refused, as in the torch reference.

Exactness. int8 ``tl.dot`` into int32 is exact (interpreter: checked; GPUs: integer MMA). The
int32 -> fp32 conversion is exact while G * 127^2 < 2^24, i.e. G <= 1040 (the add trick: G <= 259).
With the same fp32 multiply/add sequence, the interpreter (numpy) equals the torch reference bit for
bit, whatever the configuration. A GPU compiler may contract ``acc + p * s`` into an FMA (one
rounding instead of two), so on CUDA the result agrees to about 1e-6 relative per K-group instead
of bitwise.

This module is the host side: argument checks, layouts and launches. The Triton kernels are in
``lowprec.kernels.int8_fallback_kernels`` (interpreter: set TRITON_INTERPRET=1 before the kernel
modules are first imported, or reload them: _common, quantize, int8_fallback_kernels,
``_common.reload_for_interpreter``), the launch configurations and their tuning in
``lowprec.kernels.int8_fallback_tuning``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import torch

from lowprec.errors import error_text
from lowprec.numerics import rounding_stream as _stream
from lowprec.numerics.checks import as_2d, block_shape, nonempty, number, one_of

from . import _common as _c
from . import int8_fallback_kernels as _kk
from . import int8_fallback_tuning as _kt
from . import int8_gemm_async as _ka
from . import quantize as _kq
from ._common import _cdiv, _next_pow2, tma_readable
from .int8_fallback_tuning import GemmConfig, ResidualConfig

__all__ = [
    "triton_available",
    "interpreter_active",
    "block_stats_int8",
    "quantize_fallback_int8",
    "quantize_fallback_rule",
    "int8_fallback_gemm",
    "gemm_fallback_qtensors",
    "selected_config",
    "FALLBACK_IMPLS",
]

_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Largest block one quantize program holds (elements); (128, 128) fits.
_MAX_BLOCK_ELEMS = 16384
# Elements a statistics program aims for when blocks are small ((1, 128): 32 block-rows at once).
_QUANT_TILE = 4096
# The quantize pass's programs (measured on the H200 at 8192^2, bf16, the training pass with its
# transposes: results/bench/int8_gemm_h200_quantize_b*.csv): a block larger than _QUANT_CHUNK
# elements is taken _QUANT_CHUNK at a time, in rows of at most _QUANT_CHUNK_COLS columns (None: the
# block's width; 128x128 blocks: 4096-element row strips 0.24 ms, 128x32 column strips 0.26, the
# whole block at once 0.26, 1024-element chunks 0.33-0.63); smaller blocks are stacked up to
# _QUANT_STACK elements (32x32 blocks: one a program 0.24 ms, four 0.29 at e0b22b5)
_QUANT_CHUNK = 4096
_QUANT_CHUNK_COLS = None
_QUANT_STACK = 1024
# flags the tail of the main kernel reads at once, per row-block of its tile (a K-group each)
_TAIL_KCHUNK = 64
FALLBACK_IMPLS = ("sparse", "fused", "tail")
# C's dtypes: fp32, or bf16 rounded once to nearest from the fp32 sum (a layer's output under autocast)
OUT_DTYPES = (torch.float32, torch.bfloat16)


# ----------------------------------------------------------------------------------------------
# Availability


def interpreter_active() -> bool:
    """True when the kernels (and the quantize and _common helpers they call) run under the
    interpreter."""
    return _kk.interpreter_active()


def triton_available(device=None) -> bool:
    return _kk.triton is not None and _kq.triton is not None and _c.available(interpreter_active(), device)


def _require_triton(t: torch.Tensor) -> None:
    _c.require_triton("lowprec.kernels.int8_fallback_gemm", "lowprec.methods.int8_fallback", _kk._TRITON_IMPORT_ERROR,
                      _kk._JIT_FNS, t.device)


# ----------------------------------------------------------------------------------------------
# Quantize


def _prep_x(x: torch.Tensor, block, chunked: bool = False):
    """The operand's 2-D view, its kernel arguments, sizes, launch meta-parameters and grid. A
    program holds G whole blocks (about _QUANT_TILE elements), or with ``chunked`` a CH x CW chunk
    of one block at a time (about _QUANT_CHUNK elements, at most _QUANT_CHUNK_COLS columns) or G
    whole blocks (about _QUANT_STACK elements)."""
    nonempty(x)
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"x must be float32, bfloat16 or float16, got {x.dtype}")
    _require_triton(x)
    br, bc = block_shape(block)
    rp, cp = _next_pow2(br), _next_pow2(bc)
    if rp * cp > _MAX_BLOCK_ELEMS:
        raise ValueError(f"block {block}: at most {_MAX_BLOCK_ELEMS} elements (padded to powers of two)")
    x2d = as_2d(x)  # read through its strides: a transposed view is not copied
    M, N = x2d.shape
    n_brow, n_bcol = _cdiv(M, br), _cdiv(N, bc)
    kind, arg = _c._in_kind(x2d)
    if chunked:
        cw = min(cp, _QUANT_CHUNK_COLS or cp)
        ch = min(rp, max(_QUANT_CHUNK // cw, 1))
        whole = ch == rp and cw == cp
        g = min(_next_pow2(n_brow), max(_QUANT_STACK // (ch * cw), 1)) if whole else 1
        t = dict(BR=br, BC=bc, CH=ch, CW=cw, G=g, IN_KIND=kind, num_warps=_warps(g * ch * cw))
    else:
        g = min(_next_pow2(n_brow), max(_QUANT_TILE // (rp * cp), 1))
        t = dict(BR=br, BC=bc, RP=rp, CP=cp, G=g, IN_KIND=kind, num_warps=_warps(g * rp * cp))
    t["X_LAYOUT"] = _c.stride_layout(x2d)
    return x2d, (arg, *x2d.stride()), M, N, n_brow, n_bcol, t, (_cdiv(n_brow, g) * n_bcol,)


def _blocks_met(rows: int, block_rows: int) -> int:
    """A power of two at least the blocks of ``block_rows`` rows that ``rows`` consecutive rows meet."""
    return _next_pow2(_cdiv(rows - 1, block_rows) + 1)


def _warps(elems: int) -> int:
    """Warps of a program holding ``elems`` elements: a 128x128 block (16384 elements) held by 8
    warps keeps 64 values per thread of each of x, the residual and the codes in registers: 16
    warps halve that."""
    return 16 if elems >= 16384 else 8 if elems >= 4096 else 4


def block_stats_int8(x: torch.Tensor, block=(32, 32)):
    """(amax, rel_err) per block: the block amax (NaN/Inf ignored) and the relative L2 error of
    nearest-rounding INT8, as ``block_amax`` and ``lowprec.methods.int8_fallback.block_int8_error``
    compute them (amax bit-exact; rel_err to fp32 summation order)."""
    x2d, x_args, M, N, n_brow, n_bcol, t, grid = _prep_x(x, block)
    amax = torch.empty((n_brow, n_bcol), dtype=torch.float32, device=x.device)
    err = torch.empty_like(amax)
    _kk._stats_kernel[grid](*x_args, amax, err, M, N, n_brow, n_bcol, **t)
    return amax, err


def quantize_fallback_int8(x: torch.Tensor, block=(32, 32), *, mask: Optional[torch.Tensor] = None,
                           threshold: Optional[torch.Tensor] = None, noise: Optional[tuple] = None,
                           keys: Optional[torch.Tensor] = None, first_only: bool = False, transposed: bool = False,
                           launcher=None):
    """One pass: (q1, s1, q2, s2, flags); see the module docstring. x: any 2-D strides (read through
    them; the codes are row-major). Stochastic rounding of both parts: ``noise=(u1, u2)``, each
    x's 2-D shape of U[0, 1) floats, or ``keys``, an int64 tensor of the two parts' rounding-stream
    keys (``lowprec.numerics.rounding_stream.part_key``: the draws of ``uniforms(key, x's 2-D
    shape)``, made in the kernel). threshold: a number >= 0 (checked), or a 1-element tensor used as
    it is (the dynamic rule's level, computed on the device; Inf there means "no level yet":
    nothing falls back). ``first_only`` (no mask or threshold): the first part alone, (q1, s1,
    None, None, None): nothing falls back, and the kernel writes no second part. ``transposed``: two
    more outputs, q1's and q2's transposes row-major (N, M) from the same pass (q2's None with
    ``first_only``). ``launcher``: None to launch here, or ``torch.library.wrap_triton`` inside a
    ``triton_op``."""
    if mask is not None and threshold is not None:
        raise ValueError("give mask= or threshold=, not both")
    if noise is not None and keys is not None:
        raise ValueError("give noise= or keys=, not both")
    if first_only and (mask is not None or threshold is not None):
        raise ValueError("first_only: no mask or threshold (nothing falls back)")
    if threshold is not None and not isinstance(threshold, torch.Tensor):
        threshold = number("threshold", threshold, low=0.0)
    x2d, x_args, M, N, n_brow, n_bcol, t, grid = _prep_x(x, block, chunked=True)
    dev = x.device
    q1 = torch.empty((M, N), dtype=torch.int8, device=dev)
    s1 = torch.empty((n_brow, n_bcol), dtype=torch.float32, device=dev)
    if first_only:
        q2, s2, flags = q1, s1, s1  # placeholders, never written
    else:
        q2 = torch.empty_like(q1)
        s2 = torch.empty_like(s1)
        flags = torch.empty((n_brow, n_bcol), dtype=torch.int8, device=dev)
    mode, mask_arg, thr_arg = 2, s1, s1
    if mask is not None:
        if tuple(mask.shape) != (n_brow, n_bcol):
            raise ValueError(f"mask grid {tuple(mask.shape)} != block grid {(n_brow, n_bcol)}")
        mode, mask_arg = 0, mask.to(device=dev, dtype=torch.int8).contiguous()
    elif threshold is not None:
        thr = torch.as_tensor(threshold, dtype=torch.float32, device=dev)
        if thr.numel() != 1:
            raise ValueError("threshold must be a single number")
        mode, thr_arg = 1, thr.reshape(1).contiguous()
    rounding, u1, u2, key_arg = 0, s1, s1, s1  # placeholders, read only where the rounding says
    if noise is not None:
        rounding = 1
        u1, u2 = (u.to(device=dev, dtype=torch.float32).reshape(M, N).contiguous() for u in noise)
    elif keys is not None:
        if keys.dtype != torch.int64 or keys.numel() != 2 or keys.device != dev:
            raise ValueError(f"keys must be 2 int64 rounding-stream keys on {dev}, got {keys.dtype} "
                             f"{tuple(keys.shape)} on {keys.device}")
        if M * N > _stream.MAX_ELEMENTS:
            raise ValueError(f"x has {M} x {N} elements; a rounding stream has at most 2^32")
        rounding, key_arg = 2, keys.reshape(2).contiguous()
    q1t = q2t = q1  # placeholders, never written unless transposed
    if transposed:
        q1t = torch.empty((N, M), dtype=torch.int8, device=dev)
        q2t = q1t if first_only else torch.empty_like(q1t)
    _c.launch(_kk._fallback_quant_kernel, launcher)[grid](
        *x_args, u1, u2, key_arg, q1, s1, q2, s2, flags, mask_arg, thr_arg, q1t, q2t, M, N, n_brow, n_bcol,
        ROUNDING=rounding, MODE=mode, SECOND=not first_only, TRANS=transposed, **t)
    out = (q1, s1, None, None, None) if first_only else (q1, s1, q2, s2, flags)
    if transposed:
        out += (q1t, None if first_only else q2t)
    return out


def quantize_fallback_rule(x: torch.Tensor, block=(32, 32), rule: str = "absmax", *, tau: float = 8.0,
                           rho: float = 0.02, error_threshold: float = 0.02, noise: Optional[tuple] = None):
    """Two passes: block statistics, the rule on the grid (torch, no host sync), then the quantize
    pass with the resulting mask. Same rules as ``lowprec.methods.int8_fallback_rules.select_blocks`` (the
    dynamic rule's threshold is known beforehand: call ``quantize_fallback_int8(threshold=...)``)."""
    from lowprec.methods.int8_fallback_rules import check_rule_params, select_blocks

    if rule == "dynamic":
        raise ValueError("rule 'dynamic': pass its threshold to quantize_fallback_int8(threshold=...)")
    check_rule_params(rule, tau=tau, rho=rho, error_threshold=error_threshold)
    if rule == "none":
        return quantize_fallback_int8(x, block, noise=noise)
    amax, err = block_stats_int8(x, block)
    mask, _ = select_blocks(x, block, rule, tau=tau, rho=rho, error_threshold=error_threshold, amax=amax,
                            error=err)
    return quantize_fallback_int8(x, block, mask=mask, noise=noise)


def _tma_usable(qa: torch.Tensor, qb: torch.Tensor, gk: int) -> bool:
    """Descriptor loads need a device that makes them, a power-of-two group of >= 16 bytes, and
    16-byte aligned rows and bases."""
    if not _c.tma_device(qa.device, interpreter_active()) or gk < 16 or gk & (gk - 1):
        return False
    return tma_readable(qa) and tma_readable(qb)


def _is_traced(t: torch.Tensor) -> bool:
    """Whether ``t`` is a tracing stand-in (a fake tensor of a compiled graph's trace) rather than
    memory on a device."""
    from torch._subclasses.fake_tensor import is_fake
    return is_fake(t)


# ----------------------------------------------------------------------------------------------
# GEMM


class _Gemm:
    """Checked operands of one call and the launches of its kernels. ``launcher``: None to launch
    here, or ``torch.library.wrap_triton`` inside a ``triton_op``. Traced launches take the Triton
    kernel, whose descriptors are made on the device, never the Gluon one, whose are made here (a
    descriptor made of a fake tensor would be baked into the graph)."""

    def __init__(self, qa, da, qb, db, block_a, block_b, ra, dra, fa, rb, drb, fb, launcher=None, tail=False,
                 out_dtype=torch.float32):
        for name, q in (("qa", qa), ("qb", qb)):
            if q.dtype != torch.int8 or q.dim() != 2:
                raise TypeError(f"{name} must be a 2-D int8 tensor, got {q.dtype} {tuple(q.shape)}")
            nonempty(q, name)
        M, K = qa.shape
        N = qb.shape[0]
        if qb.shape[1] != K:
            raise ValueError(f"K differs: {tuple(qa.shape)} vs {tuple(qb.shape)}")
        bms, gk = block_shape(block_a, "block_a")
        bns, gk_b = block_shape(block_b, "block_b")
        if gk != gk_b:
            raise ValueError(f"A and B must share the K-group: {block_a} vs {block_b}")
        if gk * 127 * 127 >= 2**31:
            raise ValueError(f"K-group {gk} could overflow the int32 partial products")
        self.M, self.N, self.K, self.gk, self.bms, self.bns = M, N, K, gk, bms, bns
        self.n_kb = _cdiv(K, gk)
        self.dev = qa.device
        self.da = self._scales(da, _cdiv(M, bms), "da")
        self.db = self._scales(db, _cdiv(N, bns), "db")
        self.ra, self.dra, self.fa = self._second_part(ra, dra, fa, qa, _cdiv(M, bms), "a")
        self.rb, self.drb, self.fb = self._second_part(rb, drb, fb, qb, _cdiv(N, bns), "b")
        self.qa, self.qb = qa.contiguous(), qb.contiguous()
        self.even_k = K % gk == 0 and _next_pow2(gk) == gk
        self.launcher = launcher
        self.tma_usable = _tma_usable(self.qa, self.qb, gk)
        self.async_usable = self.tma_usable and launcher is None
        # the second parts the main kernel takes after its loop (``fallback="tail"``), and C's dtype:
        # both change the kernel tuned and run (its registers, its epilogue)
        self.tail_a, self.tail_b = tail and self.ra is not None, tail and self.rb is not None
        self.out_dtype = out_dtype

    def _scales(self, d, rows, what):
        d = d.to(device=self.dev, dtype=torch.float32).contiguous()
        if tuple(d.shape) != (rows, self.n_kb):
            raise ValueError(f"{what}: scale grid {tuple(d.shape)} != {(rows, self.n_kb)}")
        return d

    def _second_part(self, r, dr, f, q, rows, name):
        """An operand's optional second part (codes, decode scales, flags), checked and laid out."""
        if r is None:
            return None, None, None
        if dr is None or f is None or r.shape != q.shape or r.dtype != torch.int8:
            raise ValueError(f"r{name} needs int8 codes of q{name}'s shape, dr{name} and f{name}")
        f = f.to(device=self.dev, dtype=torch.int8).contiguous()
        if tuple(f.shape) != (rows, self.n_kb):
            raise ValueError(f"f{name}: flag grid {tuple(f.shape)} != {(rows, self.n_kb)}")
        return r.contiguous(), self._scales(dr, rows, f"dr{name}"), f

    def key(self) -> tuple:
        tail = "_tail_" + "a" * self.tail_a + "b" * self.tail_b if self.tail_a or self.tail_b else ""
        out = "" if self.out_dtype == torch.float32 else "_" + str(self.out_dtype).removeprefix("torch.")
        return ("main" + tail + out, _kt.bucket(self.M), _kt.bucket(self.N), _kt.bucket(self.K), self.gk, self.bms,
                self.bns, self.even_k, self.tma_usable, self.async_usable)

    # -- the main kernel
    def async_fits(self, cfg: GemmConfig) -> bool:
        """Whether the Gluon kernel of asynchronous MMAs takes this call's first parts in ``cfg``'s tile."""
        return self.async_usable and _ka.supports(self.qa, self.qb, self.gk, self.bms, self.bns, cfg)

    def candidates(self) -> list:
        """The tuning candidates of this call's operands: the asynchronous kernel's tiles where it
        takes them."""
        cands = _kt.candidate_configs(self.gk, tma=self.tma_usable, async_mma=self.async_usable,
                                      tail=self.tail_a or self.tail_b)
        plain = not (self.tail_a or self.tail_b) and self.out_dtype == torch.float32  # what the Gluon kernel runs
        return [cfg for cfg in cands if not cfg.async_mma or (plain and self.async_fits(cfg))]

    def launch_main(self, c, cfg: GemmConfig, fused_a=False, fused_b=False, warmup=False, tail=False):
        """The main kernel into c, with A's / B's second part (fused_a / fused_b) in its main loop
        or, with ``tail``, after it."""
        in_loop = (fused_a or fused_b) and not tail
        if cfg.async_mma:
            if not (fused_a or fused_b) and c.dtype == torch.float32 and self.async_fits(cfg):
                return _ka.int8_block_gemm_async(self.qa, self.da, self.qb, self.db, self.gk, self.bms, self.bns, c,
                                                 cfg, warmup=warmup)
            # second parts, a bf16 C, or operands the kernel does not take: the Triton kernel, same tile
            cfg = replace(cfg, async_mma=False, k_groups=_kt.default_config(self.gk).k_groups)
        pipe = cfg.pipelined and not in_loop
        kg = 1 if pipe else _kt.whole_k_groups(cfg.k_groups, self.n_kb)
        bk = _next_pow2(self.gk)
        # the tail loads the second parts as the main loop loads the first: by descriptor where all are readable
        tma = cfg.tma and self.tma_usable and not (tail and not all(
            tma_readable(r) for r, on in ((self.ra, fused_a), (self.rb, fused_b)) if on))
        if tma and not interpreter_active():
            _c.set_scratch_allocator()
        grid = (_cdiv(self.M, cfg.block_m) * _cdiv(self.N, cfg.block_n),)
        args = (self.qa, self.da, self.qb, self.db, c,
                self.ra if fused_a else self.qa, self.dra if fused_a else self.da, self.fa if fused_a else self.qa,
                self.rb if fused_b else self.qb, self.drb if fused_b else self.db, self.fb if fused_b else self.qb,
                self.M, self.N, self.K, self.n_kb)
        meta = dict(BMS=self.bms, BNS=self.bns, GK=self.gk, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=bk,
                    KG=kg, GROUP_M=cfg.group_m, EVEN_K=self.even_k,
                    MAGIC=cfg.magic and self.gk <= _kk.MAGIC_MAX_GROUP, USE_TMA=tma, HAS_RA=fused_a,
                    HAS_RB=fused_b, WS=cfg.warp_specialize, PIPE=pipe, TAIL=tail and (fused_a or fused_b),
                    KCHUNK=min(_next_pow2(self.n_kb), _TAIL_KCHUNK), NRB=_blocks_met(cfg.block_m, self.bms),
                    NCB=_blocks_met(cfg.block_n, self.bns), num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                    **self._fp_fusion(cfg.fp_fusion))
        if warmup:
            return _kk._gemm_kernel.warmup(*args, grid=grid, **meta)
        _c.launch(_kk._gemm_kernel, self.launcher)[grid](*args, **meta)

    def _fp_fusion(self, on: bool) -> dict:
        """The compile option, given only where it is off: a traced launch takes launch options
        num_warps and num_stages alone, so it cannot turn contraction off."""
        if on:
            return {}
        if self.launcher is not None:
            raise ValueError("fp_fusion=False (no FMA contraction) is not available on a traced launch")
        return {"enable_fp_fusion": False}

    def config(self) -> GemmConfig:
        """The tuned configuration of this shape class (tuning it now if it is new), or the default.
        Tuned on the first parts (with the tail's second parts, flags as they are: the tail compiled
        in changes the main loop's registers); second parts in the loop run in the same configuration."""
        if (interpreter_active() or not _kt.autotune_enabled()
                or self.M * self.N * self.K < _kt.TUNE_MIN_MACS):
            return _kt.default_config(self.gk, self.M, self.N)
        return _kt.tuned_config(self.key(), self._tune, self.dev, check=self._check_recorded)

    def _outside_trace(self):
        """Inside a compiled graph's trace a stand-in's real operands are made outside its modes."""
        import contextlib

        from torch.utils._python_dispatch import _disable_current_modes
        return _disable_current_modes() if _is_traced(self.qa) else contextlib.nullcontext()

    def _tune(self) -> tuple:
        with self._outside_trace():
            return self._stand_in()._time()

    def _check_recorded(self, cfg: GemmConfig):
        """How a recorded configuration's product on a stand-in of this call differs from the integer
        one (``_wrong``), or why it did not run; None where it is right. A record names no more than
        a speed: the product it gives is checked once per process, as tuning checks each candidate."""
        with self._outside_trace():
            s = self._stand_in()
            c, launch = s._launcher()
            try:
                launch(cfg)
                return s._wrong(c)
            except Exception as exc:  # a configuration this device or compiler refuses now
                return error_text(exc)

    def _launcher(self) -> tuple:
        """(C, launch(cfg, warmup=False)): the main kernel on these operands into C, with the tail's
        second parts as the call has them, as tuning and the check of a record run it."""
        c = torch.empty((self.M, self.N), dtype=self.out_dtype, device=self.dev)
        tail = self.tail_a or self.tail_b
        return c, lambda cfg, warmup=False: self.launch_main(c, cfg, self.tail_a, self.tail_b, warmup=warmup,
                                                             tail=tail)

    def _time(self) -> tuple:
        """Tuning on these operands (a stand-in's: unit scales, so that the product a configuration
        must give is the integer one, which ``_wrong`` checks)."""
        c, launch = self._launcher()
        return _kt.time_candidates(self.key(), self.candidates(), launch, self.dev, wrong=lambda: self._wrong(c))

    def _wrong(self, c: torch.Tensor):
        """How ``c`` differs from this stand-in's product (unit scales, no second part flagged: the
        integer product of the first parts), on rows at a prime stride, which meet every row tile:
        None where it is that product to fp32 sums' rounding."""
        rows = torch.arange(0, self.M, 61, device=self.dev)
        want = self.qa[rows].double() @ self.qb.double().t()
        got = c[rows].double()
        scale = float(want.abs().max()) or 1.0
        err = float((got - want).abs().max()) if bool(torch.isfinite(got).all()) else float("inf")
        tol = 1e-2 if c.dtype == torch.bfloat16 else 1e-4  # bf16's half ulp; fp32 sums of K-group products
        return None if err <= tol * scale else f"max error {err:.3g} of {scale:.3g} on {len(rows)} rows"

    def _stand_in(self) -> "_Gemm":
        """Operands of this call's shapes, blocks and device in real memory (random codes, unit
        scales, the tail's second parts without a flag; the timing of the main loop does not depend
        on the values, and their product is known exactly); inside a trace, call it outside the
        trace's modes."""
        qa = torch.randint(-127, 128, (self.M, self.K), dtype=torch.int8, device=self.dev)
        qb = torch.randint(-127, 128, (self.N, self.K), dtype=torch.int8, device=self.dev)
        da = torch.ones((_cdiv(self.M, self.bms), self.n_kb), device=self.dev)
        db = torch.ones((_cdiv(self.N, self.bns), self.n_kb), device=self.dev)

        def second(q, d, on):
            return (torch.zeros_like(q), d, torch.zeros_like(d, dtype=torch.int8)) if on else (None,) * 3

        real = _Gemm(qa, da, qb, db, (self.bms, self.gk), (self.bns, self.gk), *second(qa, da, self.tail_a),
                     *second(qb, db, self.tail_b), tail=True, out_dtype=self.out_dtype)
        real.async_usable = self.async_usable  # the traced call's shape class: no Gluon kernel
        return real

    # -- the second-part pass
    def launch_residual(self, c, side: str, rcfg: ResidualConfig, cross: bool, warmup=False):
        if side == "a":  # C[m, n] += (q2a . q1b) * dra * db
            r, dr, fr, rbs, R = self.ra, self.dra, self.fa, self.bms, self.M
            y, dy, ybs, Y, stride_cr, stride_cy = self.qb, self.db, self.bns, self.N, self.N, 1
            yr, dyr, fy = self.qb, self.db, self.fa
        else:  # C[m, n] += (q1a . q2b) * da * drb (+ (q2a . q2b) * dra * drb with cross)
            r, dr, fr, rbs, R = self.rb, self.drb, self.fb, self.bns, self.N
            y, dy, ybs, Y, stride_cr, stride_cy = self.qa, self.da, self.bms, self.M, 1, self.N
            yr, dyr, fy = (self.ra, self.dra, self.fa) if cross else (self.qa, self.da, self.fb)
        n_rt = _cdiv(R, rcfg.block_r)
        n_ysplit = max(1, min(_cdiv(Y, rcfg.block_y), _cdiv(rcfg.programs, n_rt)))
        nrb = _blocks_met(rcfg.block_r, rbs)
        kchunk = min(_next_pow2(self.n_kb), _next_pow2(rcfg.k_chunk), max(16, 8192 // nrb))
        grid = (n_rt * n_ysplit,)
        args = (r, dr, fr, y, dy, yr, dyr, fy, c, R, Y, self.K, self.n_kb, stride_cr, stride_cy, n_ysplit)
        meta = dict(RBS=rbs, YBS=ybs, GK=self.gk, BLOCK_R=rcfg.block_r, BLOCK_Y=rcfg.block_y,
                    BLOCK_K=_next_pow2(self.gk), NRB=nrb, KCHUNK=kchunk, EVEN_K=self.even_k,
                    MAGIC=self.gk <= _kk.MAGIC_MAX_GROUP, HAS_CROSS=cross, num_warps=rcfg.num_warps,
                    num_stages=rcfg.num_stages, **self._fp_fusion(rcfg.fp_fusion))
        if warmup:
            return _kk._residual_kernel.warmup(*args, grid=grid, **meta)
        _c.launch(_kk._residual_kernel, self.launcher)[grid](*args, **meta)


def int8_fallback_gemm(qa, da, qb, db, block_a=(32, 32), block_b=(32, 32), ra=None, dra=None, fa=None,
                       rb=None, drb=None, fb=None, *, fallback: str = "sparse",
                       config: Optional[GemmConfig] = None, residual: Optional[ResidualConfig] = None,
                       block_m: Optional[int] = None, block_n: Optional[int] = None,
                       num_warps: Optional[int] = None, num_stages: Optional[int] = None,
                       launcher=None, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``A @ B.T`` from block-scaled INT8 operands (DECODE scales), with optional second parts;
    the argument meanings are those of ``lowprec.methods.int8_fallback.int8_block_gemm_reference``.
    Summed in fp32; returned in ``out_dtype`` (fp32, or bf16 rounded once to nearest from the fp32
    sum: by the kernel as it stores C, except after the sparse passes, which add into an fp32 C).

    fallback: "sparse" (the first parts in the main kernel, then one pass per operand with a second
    part over its flagged K-groups only), "fused" (the second parts inside the main loop) or
    "tail" (the second parts after the main loop, over the flagged K-groups of each tile).
    config: a GemmConfig; block_m, block_n, num_warps, num_stages override fields of it (or of the
    default). Without any of them the configuration is tuned once per shape class on CUDA
    (``tuned_configs()``; LOWPREC_INT8_GEMM_AUTOTUNE=0 turns tuning off). launcher: None to launch
    here, or ``torch.library.wrap_triton`` inside a ``triton_op`` (``lowprec.methods.int8_ops``;
    pointer loads only, see ``_Gemm``); a shape class new to a trace is tuned then, on real
    operands of its shapes."""
    _require_triton(qa)
    one_of("fallback", fallback, FALLBACK_IMPLS)
    one_of("out_dtype", out_dtype, OUT_DTYPES)
    has_ra, has_rb = ra is not None, rb is not None
    passes = fallback == "sparse" and (has_ra or has_rb)
    # the sparse passes add into C: an fp32 one, rounded after them
    g = _Gemm(qa, da, qb, db, block_a, block_b, ra, dra, fa, rb, drb, fb, launcher=launcher, tail=fallback == "tail",
              out_dtype=torch.float32 if passes else out_dtype)
    c = torch.empty((g.M, g.N), dtype=g.out_dtype, device=g.dev)
    if g.M == 0 or g.N == 0:
        return c.to(out_dtype)
    if g.K == 0:
        return c.zero_().to(out_dtype)
    fused = fallback != "sparse"
    fused_a, fused_b = fused and has_ra, fused and has_rb
    over = {k: v for k, v in (("block_m", block_m), ("block_n", block_n), ("num_warps", num_warps),
                              ("num_stages", num_stages)) if v is not None}
    if config is None and not over:
        cfg = g.config()
    else:
        cfg = replace(config or _kt.default_config(g.gk, g.M, g.N), **over)
    g.launch_main(c, cfg, fused_a, fused_b, tail=fallback == "tail")
    if passes:
        rcfg = residual or _kt.default_residual_config(g.bms)
        if has_ra:
            g.launch_residual(c, "a", rcfg, cross=False)
        if has_rb:
            g.launch_residual(c, "b", rcfg, cross=has_ra)
    return c.to(out_dtype)


def selected_config(qa, qb, block_a=(32, 32), block_b=(32, 32)) -> GemmConfig:
    """The configuration ``int8_fallback_gemm`` uses for these operands without explicit tuning
    arguments (tuning the shape class first if it is new): for benchmarks to record."""
    n_kb = _cdiv(qa.shape[1], block_shape(block_a)[1])
    da = torch.ones((_cdiv(qa.shape[0], block_a[0]), n_kb), device=qa.device)
    db = torch.ones((_cdiv(qb.shape[0], block_b[0]), _cdiv(qb.shape[1], block_shape(block_b)[1])),
                    device=qb.device)
    return _Gemm(qa, da, qb, db, block_a, block_b, None, None, None, None, None, None).config()


def gemm_fallback_qtensors(fqa, fqb, **kw) -> torch.Tensor:
    """``A @ B.T`` from two ``lowprec.methods.int8_fallback.FallbackQTensor`` (reduction dimension last, as
    QLinear passes operands). With the sparse second-part pass (this function's default) or the
    tail an operand that may have fallback blocks passes its second part as it is: they read the
    flags on the device and cost next to nothing where none is set. The fused kernel would pay a
    branch per K-group for it, so there a second part is passed only where a flag is set (a host
    sync per operand)."""
    qa, da, ra, dra, fa = fqa.gemm_operands()
    qb, db, rb, drb, fb = fqb.gemm_operands()
    if kw.get("fallback", "sparse") == "fused":
        use_a = fqa.maybe_fallback and bool(fqa.mask.any())
        use_b = fqb.maybe_fallback and bool(fqb.mask.any())
    else:
        use_a, use_b = fqa.maybe_fallback, fqb.maybe_fallback
    return int8_fallback_gemm(qa, da, qb, db, fqa.block, fqb.block,
                              *((ra, dra, fa) if use_a else (None, None, None)),
                              *((rb, drb, fb) if use_b else (None, None, None)), **kw)
