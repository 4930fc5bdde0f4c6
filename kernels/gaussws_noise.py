"""Fused GaussWS noise kernel: W_c = bf16(W + R * Delta) in one read of W and one write of W_c.

API::

    gaussws_noise(w, b=6, block=(32, 32), seed=0) -> w_c            # bf16, w's shape
    gaussws_noise_ex(w, b, block, seed, return_r=False, return_delta=False, return_bits=False)
        -> NoiseResult(w_c, r, delta, bits)                          # r int8, delta fp32 grid, bits int32
    gaussws_noise_group(ws, b, block, seeds, outs=None) -> [w_c, ...]   # several weights, one launch
    triton_available(device=None), interpreter_active(), supports_block(block)

w: 2-D fp32 or bf16 (the master weight in its stored layout); block (rows, cols) with rows
divisible by 4 (the GaussWS default 32x32, or 16x16, 64x64, ...); b: an int in 1..24, or a tensor
of such integers with the block grid's shape (learnable b, already rounded and clamped); w must not
be empty; seed: up to 62 bits (the Philox
key is its two 31-bit halves, ``lowprec.methods.gaussws.philox_key``).

Semantics are ``lowprec.methods.gaussws.gaussws_reference`` with ``rng="philox"``, bit for bit:

* bits: Philox4x32-10 (the generator behind ``tl.randint4x``, written out here with Triton builtins
  only, see below); element (r, c) takes output r % 4 of counter (r // 4) * cols + c. One Philox call
  thus serves four rows, and a program processes each block as four row-interleaved lanes.
* R from one 32-bit word u: sign = bit 0, |R| = number of thresholds that u >> 1 reaches
  (``lowprec.methods.gaussws.THRESHOLDS``).
* Delta = 2^(ceil(log2 amax) + 1 - b) from the amax's exponent and mantissa bits; amax over finite
  elements (NaN, +-Inf ignored); Delta = 0 for amax 0 / subnormal and for exponents below -126.
* W_c = bf16_rne(fp32(W + R * Delta)); NaN stays NaN (the written-out cast gives 0x7FC0, the
  hardware cast 0x7FFF, torch 0x7FC0 or 0xFFFF depending on its code path: compare NaN positions),
  +-Inf stays +-Inf.

Interpreter notes (as in ``kernels/quantize.py``): bf16 input is read as raw 16-bit words and widened
with a shift (``lowprec.kernels._common``, whose jit helpers the kernel calls); under the interpreter the fp32 -> bf16 cast is written out as integer RNE (on CUDA
the hardware ``cvt.rn.bf16.f32`` is used, ``bf16_cast="emulated"`` forces the integer path there
too). The kernel uses only Triton builtins (``tl.umulhi``, ``tl.mul``, ``tl.reduce``...), never
triton.language's own @jit helpers (``tl.randint4x``, ``tl.max``), which are fixed as compiled or
interpreted when triton is first imported and break the interpreter if that happened before
TRITON_INTERPRET=1 was set. Set TRITON_INTERPRET=1 before importing this module (and _common) to run
on CPU, or reload both (``_common.reload_for_interpreter``).

Cost model (why the layout): per element the kernel moves 4 (fp32) or 2 (bf16) bytes in and 2 out,
and spends a quarter of a Philox4x32-10 call (~70 integer ops / 4) plus ~15 ops for R, the add and
the cast, so on an H100/H200 it sits near the memory/integer-throughput balance; ``rounds`` (Philox
rounds, default 10) is exposed for the benchmark only.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Sequence, Union

import torch

from lowprec.methods.gaussws.sampler import PHILOX_ROUNDS, THRESHOLDS, philox_key
from lowprec.methods.gaussws.step import block_pair, check_b
from lowprec.numerics.checks import nonempty, one_of

from . import _common as _c
from ._common import _cdiv, _next_pow2

triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()

__all__ = ["gaussws_noise", "gaussws_noise_ex", "gaussws_noise_group", "GROUP_COLUMNS", "NoiseResult", "triton_available", "interpreter_active",
           "supports_block"]

# Elements (all four lanes) one program holds; tuning knobs for the benchmark.
_TILE = 8192
_MIN_ROW_SPAN = 128  # contiguous columns per row segment a program should cover
_NUM_WARPS: Optional[int] = None
_MAX_BLOCK_ELEMS = 16384  # one block must fit a program (128 x 128)
_BF16_CASTS = ("auto", "native", "emulated")
_FORCE_WIDE = False  # tests: take the int64 offset/counter path on small tensors

T0, T1, T2 = THRESHOLDS
_JIT_FNS: tuple = ()  # the kernel and the _common helper it calls (mode checks)


if triton is not None:
    from ._common import _block_grid_at, _finite_abs, _load_fp32, _max_axis

    @triton.jit
    def _philox(c0, c1, k0, k1, ROUNDS: tl.constexpr):
        # Philox4x32 (Salmon et al. 2011) on counters (c0, c1, 0, 0): the round of Random123 and of
        # triton.language.random, spelled with builtins so that the interpreter runs it.
        c2 = c0 * 0
        c3 = c0 * 0
        for _ in tl.static_range(ROUNDS):
            a0 = c0
            a2 = c2
            c0 = tl.umulhi(0xCD9E8D57, a2) ^ c1 ^ k0
            c2 = tl.umulhi(0xD2511F53, a0) ^ c3 ^ k1
            c1 = tl.mul(a2, 0xCD9E8D57, sanitize_overflow=False)
            c3 = tl.mul(a0, 0xD2511F53, sanitize_overflow=False)
            k0 = tl.add(k0, 0x9E3779B9, sanitize_overflow=False)
            k1 = tl.add(k1, 0xBB67AE85, sanitize_overflow=False)
        return c0, c1, c2, c3

    @triton.jit
    def _lane(x, u, d4, out_ptr, r_ptr, bits_ptr, offs, mask, T0: tl.constexpr, T1: tl.constexpr,
              T2: tl.constexpr, WRITE_R: tl.constexpr, WRITE_BITS: tl.constexpr, NATIVE_BF16: tl.constexpr):
        # (u >> 1) >= T  <=>  u >= 2T for even 2T: unsigned compares on u save the shift
        mag = (u >= 2 * T0).to(tl.int32) + (u >= 2 * T1).to(tl.int32) + (u >= 2 * T2).to(tl.int32)
        r = tl.where((u & 1) != 0, -mag, mag)
        # r * Delta is exact (|r| <= 3, Delta a power of two), so a fused multiply-add rounds the same
        y = x + r.to(tl.float32) * d4
        if NATIVE_BF16:
            h = y.to(tl.bfloat16).to(tl.int16, bitcast=True)
        else:
            bits = y.to(tl.uint32, bitcast=True)
            rounded = bits + 0x7FFF + ((bits >> 16) & 1)  # RNE on the dropped 16 bits
            h = tl.where(y != y, 0x7FC0, (rounded >> 16).to(tl.int32)).to(tl.int16)
        tl.store(out_ptr + offs, h, mask=mask)
        if WRITE_R:
            tl.store(r_ptr + offs, r.to(tl.int8), mask=mask)
        if WRITE_BITS:
            tl.store(bits_ptr + offs, u.to(tl.int32, bitcast=True), mask=mask)

    @triton.jit
    def _noise_tile(
        pid, w_ptr, out_ptr, b_ptr, delta_ptr, r_ptr, bits_ptr,
        M, N, n_brow, n_bcol, k0, k1, B_CONST,
        Q: tl.constexpr, QP: tl.constexpr, BC: tl.constexpr, CP: tl.constexpr,
        G: tl.constexpr, K: tl.constexpr, IN_KIND: tl.constexpr, B_GRID: tl.constexpr,
        WRITE_DELTA: tl.constexpr, WRITE_R: tl.constexpr, WRITE_BITS: tl.constexpr,
        NATIVE_BF16: tl.constexpr, WIDE: tl.constexpr, ROUNDS: tl.constexpr,
        T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr,
    ):
        """Tile ``pid`` of one tensor: G block-rows x K block-columns of (4Q, BC) blocks, each block
        held as four lanes [G, QP, K, CP] of rows 4q + lane (lane l uses Philox output l of counter
        q*N + col)."""
        pid_r, pid_c, j, c, brow, bcol = _block_grid_at(pid, n_bcol, G, QP, K, CP)
        col = bcol * BC + c
        ok = (j < Q) & (c < BC) & (col < N) & (brow < n_brow)
        if WIDE:  # offsets or counters past 2^31
            quad = brow.to(tl.int64) * Q + j
        else:
            quad = brow * Q + j
        row0 = quad * 4
        offs = row0 * N + col
        m0 = ok & (row0 < M)
        m1 = ok & (row0 + 1 < M)
        m2 = ok & (row0 + 2 < M)
        m3 = ok & (row0 + 3 < M)
        x0 = _load_fp32(w_ptr, offs, m0, IN_KIND)
        x1 = _load_fp32(w_ptr, offs + N, m1, IN_KIND)
        x2 = _load_fp32(w_ptr, offs + 2 * N, m2, IN_KIND)
        x3 = _load_fp32(w_ptr, offs + 3 * N, m3, IN_KIND)

        a = tl.maximum(tl.maximum(_finite_abs(x0), _finite_abs(x1)), tl.maximum(_finite_abs(x2), _finite_abs(x3)))
        amax = _max_axis(_max_axis(a, 3), 1)  # [G, K]

        gr = pid_r * G + tl.arange(0, G)[:, None]
        gc = pid_c * K + tl.arange(0, K)[None, :]
        gmask = (gr < n_brow) & (gc < n_bcol)
        if B_GRID:
            bb = tl.load(b_ptr + gr * n_bcol + gc, mask=gmask, other=0)
        else:
            bb = B_CONST
        abits = amax.to(tl.int32, bitcast=True)
        e_field = (abits >> 23) & 0xFF
        n = e_field - 127 + ((abits & 0x7FFFFF) != 0).to(tl.int32) + 1 - bb
        good = (e_field > 0) & (n >= -126)
        n = tl.minimum(tl.maximum(n, -126), 127)
        delta = tl.where(good, ((n + 127) << 23).to(tl.float32, bitcast=True), 0.0)
        if WRITE_DELTA:
            tl.store(delta_ptr + gr * n_bcol + gc, delta, mask=gmask)
        d4 = delta[:, None, :, None]

        ctr = quad * N + col
        if WIDE:
            c0 = (ctr & 0xFFFFFFFF).to(tl.uint32)
            c1 = (ctr >> 32).to(tl.uint32)
        else:
            c0 = ctr.to(tl.uint32, bitcast=True)
            c1 = c0 * 0
        u0, u1, u2, u3 = _philox(c0, c1, k0.to(tl.uint32), k1.to(tl.uint32), ROUNDS)

        _lane(x0, u0, d4, out_ptr, r_ptr, bits_ptr, offs, m0, T0, T1, T2, WRITE_R, WRITE_BITS, NATIVE_BF16)
        _lane(x1, u1, d4, out_ptr, r_ptr, bits_ptr, offs + N, m1, T0, T1, T2, WRITE_R, WRITE_BITS, NATIVE_BF16)
        _lane(x2, u2, d4, out_ptr, r_ptr, bits_ptr, offs + 2 * N, m2, T0, T1, T2, WRITE_R, WRITE_BITS, NATIVE_BF16)
        _lane(x3, u3, d4, out_ptr, r_ptr, bits_ptr, offs + 3 * N, m3, T0, T1, T2, WRITE_R, WRITE_BITS, NATIVE_BF16)

    # k0/k1/B_CONST: values of 1 must not turn into constexprs (they are used as tensors)
    @triton.jit(do_not_specialize=["k0", "k1", "B_CONST"])
    def _gaussws_kernel(
        w_ptr, out_ptr, b_ptr, delta_ptr, r_ptr, bits_ptr,
        M, N, n_brow, n_bcol, k0, k1, B_CONST,
        Q: tl.constexpr, QP: tl.constexpr, BC: tl.constexpr, CP: tl.constexpr,
        G: tl.constexpr, K: tl.constexpr, IN_KIND: tl.constexpr, B_GRID: tl.constexpr,
        WRITE_DELTA: tl.constexpr, WRITE_R: tl.constexpr, WRITE_BITS: tl.constexpr,
        NATIVE_BF16: tl.constexpr, WIDE: tl.constexpr, ROUNDS: tl.constexpr,
        T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr,
    ):
        _noise_tile(tl.program_id(0), w_ptr, out_ptr, b_ptr, delta_ptr, r_ptr, bits_ptr,
                    M, N, n_brow, n_bcol, k0, k1, B_CONST, Q, QP, BC, CP, G, K, IN_KIND, B_GRID,
                    WRITE_DELTA, WRITE_R, WRITE_BITS, NATIVE_BF16, WIDE, ROUNDS, T0, T1, T2)

    @triton.jit
    def _gaussws_group_kernel(
        table_ptr, tensor_of_ptr, WIDTH: tl.constexpr, ALIGNED: tl.constexpr,
        Q: tl.constexpr, QP: tl.constexpr, BC: tl.constexpr, CP: tl.constexpr,
        G: tl.constexpr, K: tl.constexpr, IN_KIND: tl.constexpr,
        NATIVE_BF16: tl.constexpr, WIDE: tl.constexpr, ROUNDS: tl.constexpr,
        T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr,
    ):
        """The tiles of several tensors in one launch: program p draws tile p - first of tensor
        tensor_of[p], whose row of the table (WIDTH int64 columns, ``GROUP_COLUMNS``) gives its
        addresses, sizes, key, b and first program. Fixed b, W_c only. ALIGNED: every weight's rows
        and both addresses are multiples of 16 elements / bytes, said to the compiler (what the
        single launch learns from its arguments), so that loads and stores vectorize."""
        pid = tl.program_id(0)
        row = table_ptr + tl.load(tensor_of_ptr + pid).to(tl.int64) * WIDTH
        if IN_KIND == 0:
            w_ptr = tl.load(row + 0).to(tl.pointer_type(tl.float32))
        else:
            w_ptr = tl.load(row + 0).to(tl.pointer_type(tl.int16))
        out_ptr = tl.load(row + 1).to(tl.pointer_type(tl.int16))
        M = tl.load(row + 2).to(tl.int32)
        N = tl.load(row + 3).to(tl.int32)
        n_brow = tl.load(row + 4).to(tl.int32)
        n_bcol = tl.load(row + 5).to(tl.int32)
        k0 = tl.load(row + 6).to(tl.int32)
        k1 = tl.load(row + 7).to(tl.int32)
        b = tl.load(row + 8).to(tl.int32)
        first = tl.load(row + 9).to(tl.int32)
        if ALIGNED:
            w_ptr = tl.multiple_of(w_ptr, 16)
            out_ptr = tl.multiple_of(out_ptr, 16)
            N = tl.multiple_of(N, 16)
        _noise_tile(pid - first, w_ptr, out_ptr, out_ptr, out_ptr, out_ptr, out_ptr,
                    M, N, n_brow, n_bcol, k0, k1, b, Q, QP, BC, CP, G, K, IN_KIND, False,
                    False, False, False, NATIVE_BF16, WIDE, ROUNDS, T0, T1, T2)

    _JIT_FNS = (_gaussws_kernel, _gaussws_group_kernel, _load_fp32)


# ----------------------------------------------------------------------------------------------


def interpreter_active() -> bool:
    """True if the kernel (and the helpers it calls) were built for the Triton interpreter
    (TRITON_INTERPRET=1 at import)."""
    return bool(_JIT_FNS) and _c.is_interpreted(*_JIT_FNS)


def triton_available(device=None) -> bool:
    """Whether the kernel can run on `device` (default: CUDA if present, else CPU)."""
    return triton is not None and _c.available(interpreter_active(), device)


def supports_block(block) -> bool:
    """Blocks the kernel handles: rows divisible by 4 (four rows share a Philox call) and the padded
    block within one program's tile."""
    br, bc = block
    return br % 4 == 0 and br >= 4 and bc >= 1 and 4 * _next_pow2(br // 4) * _next_pow2(bc) <= _MAX_BLOCK_ELEMS


@functools.lru_cache(maxsize=256)  # a model's few weight shapes, asked at every draw
def _tiling_items(br: int, bc: int, n_brow: int, n_bcol: int) -> tuple:
    return tuple(sorted(_tiling(br, bc, n_brow, n_bcol).items()))


def _tiling(br: int, bc: int, n_brow: int, n_bcol: int) -> dict:
    q = br // 4
    qp, cp = _next_pow2(q), _next_pow2(bc)
    per_block = 4 * qp * cp
    k = min(_next_pow2(n_bcol), max(_MIN_ROW_SPAN // cp, 1), max(_TILE // per_block, 1))
    g = min(_next_pow2(n_brow), max(_TILE // (per_block * k), 1))
    return dict(Q=q, QP=qp, BC=bc, CP=cp, K=k, G=g)


class NoiseResult(NamedTuple):
    w_c: torch.Tensor
    r: Optional[torch.Tensor]
    delta: Optional[torch.Tensor]
    bits: Optional[torch.Tensor]


def _checked_weight(w, name: str = "w", device_checked: bool = False) -> torch.Tensor:
    """w, contiguous, after its checks (``device_checked``: Triton's availability on its device
    was checked already, for a group of weights on one device)."""
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise ValueError(f"{name} must be a 2-D tensor")
    nonempty(w, name)
    if w.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"{name} must be float32 or bfloat16, got {w.dtype}")
    if not device_checked:
        _c.require_triton("lowprec.kernels.gaussws_noise", "lowprec.methods.gaussws.gaussws_reference",
                          _TRITON_IMPORT_ERROR, _JIT_FNS, w.device)
    return w.contiguous()


def _checked_block(block) -> tuple[int, int]:
    br, bc = block_pair(block)
    if not supports_block((br, bc)):
        raise ValueError(f"block {(br, bc)}: rows must be a multiple of 4 and a block at most "
                         f"{_MAX_BLOCK_ELEMS} elements (padded); use lowprec.methods.gaussws.gaussws_reference")
    return br, bc


def _philox_key_of(seed: int) -> tuple[int, int]:
    if not 0 <= int(seed) < 2**62:
        raise ValueError(f"seed must be in [0, 2^62), got {seed}")
    return philox_key(int(seed))


def _native_cast(bf16_cast: str) -> bool:
    one_of("bf16_cast", bf16_cast, _BF16_CASTS)
    if bf16_cast == "native" and interpreter_active():
        raise ValueError("bf16_cast='native' is not available under the Triton interpreter")
    return bf16_cast == "native" or (bf16_cast == "auto" and not interpreter_active())


def _output(w: torch.Tensor, out: Optional[torch.Tensor], name: str = "out") -> torch.Tensor:
    """``out`` checked as W_c's destination for w, or a new bf16 tensor."""
    if out is None:
        return torch.empty(w.shape, dtype=torch.bfloat16, device=w.device)
    if (out.dtype != torch.bfloat16 or out.shape != w.shape or out.device != w.device
            or not out.is_contiguous()):
        raise ValueError(f"{name} must be a contiguous bfloat16 tensor of shape {tuple(w.shape)} on {w.device}, "
                         f"got {out.dtype} {tuple(out.shape)} on {out.device}")
    return out


def _wide(M: int, N: int, br: int) -> bool:
    """Offsets or Philox counters past int32 (the kernel's int64 path)."""
    quads = _cdiv(M, br) * (br // 4)
    return _FORCE_WIDE or max(M * N, (quads + 1) * N * 4) >= 2**31 - 1


def _num_warps(t: dict) -> int:
    return _NUM_WARPS or (8 if 4 * t["G"] * t["QP"] * t["K"] * t["CP"] >= 4096 else 4)


def gaussws_noise_ex(w: torch.Tensor, b: Union[int, torch.Tensor] = 6, block=(32, 32), seed: int = 0, *,
                     return_r: bool = False, return_delta: bool = False, return_bits: bool = False,
                     rounds: int = PHILOX_ROUNDS, bf16_cast: str = "auto",
                     check_b_values: bool = True, out: Optional[torch.Tensor] = None) -> NoiseResult:
    """W_c plus, on request, R (int8), the Delta grid (fp32) and the raw Philox words (int32).
    b is checked as ``lowprec.methods.gaussws.check_b`` does (check_b_values=False leaves a grid's values
    unread: reading them would wait for the device). ``out``: a contiguous bf16 tensor of w's shape on
    its device that W_c is written into (and returned as), in place of a new one."""
    w = _checked_weight(w)
    b = check_b(b, read_tensor=check_b_values)
    br, bc = _checked_block(block)
    k0, k1 = _philox_key_of(seed)
    native = _native_cast(bf16_cast)

    M, N = w.shape
    n_brow, n_bcol = _cdiv(M, br), _cdiv(N, bc)
    dev = w.device
    if isinstance(b, torch.Tensor):
        if tuple(b.shape) != (n_brow, n_bcol):
            raise ValueError(f"b grid shape {tuple(b.shape)} != block grid {(n_brow, n_bcol)}")
        b_arg, b_const, b_grid = b.to(device=dev, dtype=torch.int32).contiguous(), 0, True
    else:
        b_arg, b_const, b_grid = None, int(b), False

    out = _output(w, out)
    delta = torch.empty((n_brow, n_bcol), dtype=torch.float32, device=dev) if return_delta else None
    r = torch.empty((M, N), dtype=torch.int8, device=dev) if return_r else None
    bits = torch.empty((M, N), dtype=torch.int32, device=dev) if return_bits else None

    in_kind, w_arg = _c._in_kind(w)
    out_arg = out.view(torch.int16)
    dummy = out_arg  # never read or written when the matching flag is off
    t = _tiling(br, bc, n_brow, n_bcol)
    grid = (_cdiv(n_brow, t["G"]) * _cdiv(n_bcol, t["K"]),)
    _gaussws_kernel[grid](
        w_arg, out_arg, b_arg if b_grid else dummy, delta if delta is not None else dummy,
        r if r is not None else dummy, bits if bits is not None else dummy,
        M, N, n_brow, n_bcol, k0, k1, b_const,
        IN_KIND=in_kind, B_GRID=b_grid, WRITE_DELTA=delta is not None,
        WRITE_R=r is not None, WRITE_BITS=bits is not None, NATIVE_BF16=native, WIDE=_wide(M, N, br),
        ROUNDS=int(rounds), T0=T0, T1=T1, T2=T2, num_warps=_num_warps(t), **t,
    )
    return NoiseResult(out, r, delta, bits)


# A grouped launch's table: one int64 row per weight.
GROUP_COLUMNS = ("w", "out", "rows", "cols", "block_rows", "block_cols", "k0", "k1", "b", "first_program")


@functools.lru_cache(maxsize=32)
def _tensor_of(programs: tuple, device: torch.device) -> torch.Tensor:
    """Program -> weight index of a grouped launch whose weights take ``programs`` programs each
    (kept: the same model draws the same group at every step)."""
    counts = torch.tensor(programs)
    return torch.repeat_interleave(torch.arange(len(programs), dtype=torch.int32), counts).to(device)


def _on_device(t: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """A host tensor's copy on ``dev`` that the host does not wait for: a copy from pageable memory
    makes torch wait for the whole stream (``memcpy_and_sync``), so a table sent at every step would
    hold each training step until the GPU had run the last, and leave it idle while the host
    launches the next. Pinned memory from torch's caching host allocator, which keeps the block
    until the copy has run, makes it a queued copy."""
    if dev.type != "cuda":
        return t.to(dev)
    return t.pin_memory().to(dev, non_blocking=True)


def gaussws_noise_group(ws: Sequence[torch.Tensor], b: Union[int, Sequence[int]], block, seeds: Sequence[int], *,
                        outs: Optional[Sequence[Optional[torch.Tensor]]] = None, rounds: int = PHILOX_ROUNDS,
                        bf16_cast: str = "auto") -> list[torch.Tensor]:
    """W_c of several weights, each bit for bit ``gaussws_noise(ws[i], b[i], block, seeds[i],
    out=outs[i])``, in one launch per tiling (weights whose block grids tile alike share one: every
    linear weight of a transformer, typically): a training step's draws cost one launch instead of
    one per layer, where the host's launches set the pace. b: a fixed b for all or one per weight
    (learnable b grids take ``gaussws_noise_ex``); the weights share a device."""
    if not ws:
        return []
    # Triton's availability asked once, for the first weight's device; the others must share it
    ws = [_checked_weight(w, f"ws[{i}]", device_checked=i > 0) for i, w in enumerate(ws)]
    dev = ws[0].device
    if any(w.device != dev for w in ws):
        devices = sorted({str(w.device) for w in ws})
        raise ValueError(f"gaussws_noise_group: the weights must share a device, got {devices}")
    n = len(ws)
    bs = [b] * n if isinstance(b, (int, float)) and not isinstance(b, bool) else list(b)
    if len(seeds) != n or len(bs) != n or (outs is not None and len(outs) != n):
        raise ValueError(f"gaussws_noise_group: {n} weights need as many seeds, b values and outs, got "
                         f"{len(seeds)} seeds, {len(bs)} b values, {None if outs is None else len(outs)} outs")
    bs = [check_b(v) for v in bs]
    br, bc = _checked_block(block)
    native = _native_cast(bf16_cast)
    results = [_output(w, None if outs is None else outs[i], f"outs[{i}]") for i, w in enumerate(ws)]
    groups: dict = {}  # (tiling, IN_KIND) -> weight indices
    for i, w in enumerate(ws):
        M, N = w.shape
        groups.setdefault((_tiling_items(br, bc, _cdiv(M, br), _cdiv(N, bc)), _c._in_kind(w)[0]), []).append(i)
    for (items, in_kind), members in groups.items():
        t = dict(items)
        rows, programs, first = [], [], 0
        for i in members:
            M, N = ws[i].shape
            n_brow, n_bcol = _cdiv(M, br), _cdiv(N, bc)
            count = _cdiv(n_brow, t["G"]) * _cdiv(n_bcol, t["K"])
            k0, k1 = _philox_key_of(seeds[i])
            rows.append([ws[i].data_ptr(), results[i].data_ptr(), M, N, n_brow, n_bcol, k0, k1, int(bs[i]), first])
            programs.append(count)
            first += count
        table = _on_device(torch.tensor(rows, dtype=torch.int64), dev)
        wide = any(_wide(*ws[i].shape, br) for i in members)
        aligned = all(ws[i].shape[1] % 16 == 0 and ws[i].data_ptr() % 16 == 0 and results[i].data_ptr() % 16 == 0
                      for i in members)
        _gaussws_group_kernel[(first,)](
            table, _tensor_of(tuple(programs), dev), WIDTH=len(GROUP_COLUMNS), ALIGNED=aligned, IN_KIND=in_kind,
            NATIVE_BF16=native, WIDE=wide, ROUNDS=int(rounds), T0=T0, T1=T1, T2=T2, num_warps=_num_warps(t), **t,
        )
    return results


def gaussws_noise(w: torch.Tensor, b: Union[int, torch.Tensor] = 6, block=(32, 32), seed: int = 0,
                  **kw) -> torch.Tensor:
    """W_c = bf16(W + R * Delta) for a 2-D fp32/bf16 weight (see the module docstring)."""
    return gaussws_noise_ex(w, b, block, seed, **kw).w_c
