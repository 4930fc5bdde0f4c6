"""The random stream of stochastic rounding: a key per quantized operand, made on the device from
the layer's call counter, and per-element uniforms hashed from the key and the element's index.

Why not a ``torch.Generator`` seeded on the host: a seed that depends on the call count has to read
the counter on the host (a device sync per call on CUDA), and ``torch.compile`` cannot trace a
generator. Here everything is integer tensor arithmetic, so an emulated step, a compiled step and
the CPU all draw the same bits for the same key, and nothing waits for the device.

Keys are 0-d int64 tensors holding a 32-bit word. ``call_key`` mixes a layer's key (from the run
seed and the layer's name) with its call counter and the process's rank (``next_call_key_`` makes
it and advances the counter); ``operand_key`` mixes in
the operand's slot (GEMM and operand), ``part_key`` a part index (INT8 fallback rounds its two parts with
independent draws). ``uniforms(key, (rows, cols))``: element (r, c) of the 2-D operand, in the
orientation it enters its GEMM, gets the counter i = r * cols + c and the value
``(h >> 8) / 2^24`` with ``h = mix32((i * s + key) mod 2^32)``, ``s`` an odd step drawn from the
key (``mix32(key ^ C)``, low 31 bits, odd), where ``mix32`` is Wellons' "lowbias32" integer hash
(two multiplies, three xor-shifts, a bijection of 32-bit words): U[0, 1) with 24-bit resolution,
every value exact in fp32. Each key walks the hash's input space on its own stride and offset, as a
counter-based generator does; one hash per element keeps an eager CPU step's cost near torch's
own generator's (the emulation runs it on every stochastically rounded operand).

The arithmetic stays defined in int64: words are kept in [0, 2^32), and the multipliers are taken
below 2^31 in magnitude (0x846CA68B as 0x846CA68B - 2^32, the same residue mod 2^32), so no product
overflows. Native uint32 arithmetic gets the same bits: an eager CPU call takes numpy's (several
times faster than int64 tensor ops), and so could a kernel.
"""

from __future__ import annotations

from typing import Union

import numpy as np
import torch

M32 = 0xFFFFFFFF
_C1 = 0x7FEB352D
_C2 = 0x846CA68B - (1 << 32)
_SECOND_WORD = 0x9E3779B9  # decorrelates the second key word from the first

Key = Union[int, torch.Tensor]


def mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 of int64 tensors holding 32-bit words (a bijection of [0, 2^32)); ``x`` is left
    as it is (the first step makes a new tensor, the rest work in it: eager CPU steps are memory
    passes)."""
    x = x ^ (x >> 16)
    x.mul_(_C1).bitwise_and_(M32)
    x.bitwise_xor_(x >> 15)
    x.mul_(_C2).bitwise_and_(M32)
    return x.bitwise_xor_(x >> 16)


def _word(v: Key, device=None) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return v.to(torch.int64) & M32
    return torch.tensor(int(v) & M32, dtype=torch.int64, device=device)


def absorb(key: Key, word: int) -> torch.Tensor:
    """``key`` with a host word mixed in: a new key, unrelated to ``key`` and to other words'."""
    k = _word(key)
    return mix32(k ^ mix32(torch.full_like(k, int(word) & M32)))


def call_key(layer_key: torch.Tensor, count: torch.Tensor, rank: int = 0) -> torch.Tensor:
    """The key of one forward call of a layer: its key, its call counter (an int64 tensor, before
    this call's increment) and the process's rank (each rank rounds its own shard of the gradient,
    and equal draws on every rank would not average out in the all-reduce)."""
    c = count.to(torch.int64)
    k = mix32(_word(layer_key) ^ mix32(c & M32))
    k = mix32(k ^ mix32((c >> 32) & M32))
    return absorb(k, rank)


# One operator reads the counter and advances it; the key is made from what it returned in traced
# ops, which Inductor fuses into one kernel. Reading the counter in traced ops instead would let the
# compiled graph recompute the key in the backward from the counter buffer, which by then holds the
# next call's count; and the whole key inside the operator cost about fifty eager kernel launches per
# forward call (the host time of a compiled step of a small model).
@torch.library.custom_op("lowprec::take_count_", mutates_args=("count",))
def take_count_(count: torch.Tensor, advance: bool) -> torch.Tensor:
    """A copy of the counter's value; then the counter + 1 if ``advance`` (a training call)."""
    value = count.clone()
    if advance:
        count.add_(1)
    return value


@take_count_.register_fake
def _(count, advance):
    return torch.empty_like(count)


# On CUDA: the same as a triton_op, one kernel whose launch Inductor makes from its own code; the
# opaque operator is a Python call and two eager launches per layer and forward call (host time that
# sets the pace of host-bound compiled steps; lowprec.kernels.buffer_updates).
@torch.library.triton_op("lowprec::take_count_cuda_", mutates_args=("count",))
def take_count_cuda_(count: torch.Tensor, advance: bool) -> torch.Tensor:
    """``take_count_`` on a CUDA device where Triton runs."""
    from ..kernels import buffer_updates as kb
    value = torch.empty_like(count)
    kb.take_count(count, value, advance, launcher=torch.library.wrap_triton)
    return value


def next_call_key_(layer_key: torch.Tensor, count: torch.Tensor, rank: int, advance: bool) -> torch.Tensor:
    """``call_key`` of the counter's value; the counter + 1 if ``advance`` (``take_count_``, on its
    Triton kernel where the counter is on a CUDA device Triton runs on)."""
    from ..kernels import buffer_updates as kb
    take = take_count_cuda_ if kb.takes_kernel(count) else take_count_
    return call_key(layer_key, take(count, advance), rank)


def operand_key(key: torch.Tensor, slot: int) -> torch.Tensor:
    """The key of one operand of a call's GEMMs (``slot``: its index in ``lowprec.recipes.SLOTS``)."""
    return absorb(key, 1 + slot)


def part_key(key: Key, part: int) -> torch.Tensor:
    """Part 0 is the key itself (what a one-part quantization draws); others are mixed."""
    return _word(key) if part == 0 else absorb(key, 0x100 + part)


MAX_ELEMENTS = 1 << 32  # the counter is one 32-bit word


def uniforms(key: Key, shape, device=None) -> torch.Tensor:
    """U[0, 1) fp32 draws for a 2-D operand of ``shape`` (module docstring)."""
    rows, cols = shape
    if rows * cols > MAX_ELEMENTS:
        raise ValueError(f"rounding_stream.uniforms: {rows} x {cols} elements; a stream has at most 2^32")
    dev = key.device if isinstance(key, torch.Tensor) and device is None else device
    k0 = _word(key, dev)
    step = (mix32(k0 ^ _SECOND_WORD) & 0x7FFFFFFF) | 1  # odd, below 2^31: i * step stays in int64
    if torch.device(dev or "cpu").type == "cpu" and not torch.compiler.is_compiling():
        return _uniforms_numpy(int(k0), int(step), rows, cols)  # reading a CPU key costs nothing
    x = torch.arange(rows * cols, dtype=torch.int64, device=dev).reshape(rows, cols) * step
    h = mix32(x.add_(k0).bitwise_and_(M32))
    return h.bitwise_right_shift_(8).to(torch.float32).mul_(2.0 ** -24)


def _uniforms_numpy(key: int, step: int, rows: int, cols: int) -> torch.Tensor:
    """``uniforms`` in numpy's uint32 arithmetic, which wraps modulo 2^32 as the hash wants: the same
    bits as the torch ops at a fraction of their cost in an eager CPU step (32-bit lanes, in place)."""
    x = np.arange(rows * cols, dtype=np.uint32)
    x *= np.uint32(step)
    x += np.uint32(key)
    x ^= x >> 16
    x *= np.uint32(_C1)
    x ^= x >> 15
    x *= np.uint32(_C2 & M32)
    x ^= x >> 16
    u = (x >> 8).astype(np.float32)
    u *= np.float32(2.0 ** -24)
    return torch.from_numpy(u.reshape(rows, cols))
