"""What the Triton kernel modules of ``lowprec.kernels`` share: the guarded Triton import, the
``@triton.jit`` helpers several kernels call, and the availability checks.

Interpreter mode: Triton decides at ``@triton.jit`` time whether a function is interpreted, so the
helpers here are fixed as interpreted or compiled when THIS module is imported, and a kernel module
binds them when it is imported. A kernel built in one mode cannot call helpers built in the other,
so set ``TRITON_INTERPRET=1`` before the first import of any ``lowprec.kernels`` module, or reload
this module and then the kernel modules, dependencies first (``reload_for_interpreter`` does that).
Only Triton builtins are used inside the helpers: triton.language's own @jit helpers (tl.max,
tl.sum, tl.cdiv, ...) are fixed when triton itself is imported, so they would break the interpreter
whenever triton was imported before the variable was set. (The reductions name triton.language's
combine functions, which the interpreter recognizes and never calls.)
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Optional

import torch


def import_triton():
    """(triton, triton.language, None), or (None, None, the exception) when Triton does not import
    (ImportError, or a broken install raising at import time). Kernel modules call this themselves,
    so that each one sees whether Triton imports at the moment it is imported."""
    try:
        import triton
        import triton.language as tl
    except Exception as exc:
        return None, None, exc
    return triton, tl, None


triton, tl, _TRITON_IMPORT_ERROR = import_triton()


if triton is not None:

    @triton.jit
    def _load_fp32(ptr, offs, mask, IN_KIND: tl.constexpr):
        # IN_KIND 0: fp32; 1: bf16 read as int16 words; 2: fp16 (see _in_kind). mask None: no mask
        # (a tile inside the tensor; unmasked loads vectorize).
        if mask is None:
            w = tl.load(ptr + offs)
        else:
            w = tl.load(ptr + offs, mask=mask, other=0)
        if IN_KIND == 1:
            # Widening bf16 is a 16-bit shift; doing it on the raw bits keeps subnormals exact in the
            # interpreter too (whose bf16 conversion does not).
            return (w.to(tl.int32) << 16).to(tl.float32, bitcast=True)
        else:
            return w.to(tl.float32)

    @triton.jit
    def _strided(row, col, s0, s1, LAYOUT: tl.constexpr):
        """Offsets row * s0 + col * s1 with the unit stride spelled out (LAYOUT from
        ``stride_layout``: 0 s1 == 1, 1 s0 == 1, 2 neither), so that the loads vectorize along it
        whatever the launcher specializes: a compiled graph's launch may pass strides as plain
        integers, and an unspecialized stride leaves every load a scalar one (sm_90: the INT8
        quantize pass's bf16 loads 2-byte where they are 16-byte, ``lowprec.bench.kernel_sass``)."""
        if LAYOUT == 0:
            return row * s0 + col
        elif LAYOUT == 1:
            return row + col * s1
        else:
            return row * s0 + col * s1

    # tl.reduce (a builtin) with triton.language's own combine functions, which are only named
    # here, never called in the interpreter: it reduces with numpy when it sees them (with any other
    # combine it folds element by element in Python, which set the pace of the CPU kernel tests);
    # compiled, they are maximum(a, b) and a + b. tl.max and tl.sum themselves are jit helpers
    # (see above).
    @triton.jit
    def _max_axis(x, axis: tl.constexpr):
        return tl.reduce(x, axis, tl.standard._elementwise_max)

    @triton.jit
    def _sum_axis(x, axis: tl.constexpr):
        return tl.reduce(x, axis, tl.standard._sum_combine)

    @triton.jit
    def _finite_abs(x):
        # NaN compares false, so NaN and +-Inf both drop out of an amax, as in block_amax.
        a = tl.abs(x)
        return tl.where(a < float("inf"), a, 0.0)

    @triton.jit
    def _mix32(x):
        """lowbias32 of uint32 words (``lowprec.numerics.rounding_stream.mix32``; uint32 products
        wrap modulo 2^32, as the hash wants)."""
        x = x ^ (x >> 16)
        x = x * 0x7FEB352D
        x = x ^ (x >> 15)
        x = x * 0x846CA68B
        return x ^ (x >> 16)

    @triton.jit
    def _stream_uniforms(key_ptr, part, idx):
        """``lowprec.numerics.rounding_stream.uniforms`` in a kernel: the U[0, 1) draws of the
        elements whose counters (row * cols + col of the 2-D operand, < 2^32) are ``idx``, under the
        key ``key_ptr[part]`` (an int64 holding a 32-bit word, made on the device): nothing is
        read from the host, and no tensor of draws is written."""
        k = tl.load(key_ptr + part).to(tl.uint32)
        step = (_mix32(k ^ 0x9E3779B9) & 0x7FFFFFFF) | 1
        h = _mix32(idx.to(tl.uint32) * step + k)
        return (h >> 8).to(tl.float32) * 5.9604644775390625e-08  # 2^-24

    @triton.jit
    def _grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
        """The output tile (pid_m, pid_n) of GEMM program ``pid``, GROUP_M row-tiles at a time, so
        that programs sharing B tiles run together (L2 reuse)."""
        n_pm = (M + BLOCK_M - 1) // BLOCK_M
        n_pn = (N + BLOCK_N - 1) // BLOCK_N
        per_group = GROUP_M * n_pn
        first_m = (pid // per_group) * GROUP_M
        group_rows = tl.minimum(n_pm - first_m, GROUP_M)
        return first_m + (pid % per_group) % group_rows, (pid % per_group) // group_rows

    @triton.jit
    def _round_bf16(x):
        """fp32 -> nearest bf16 (ties to even), kept in fp32; NaN stays NaN: the interpreter's own
        cast to bf16 truncates."""
        bits = x.to(tl.int32, bitcast=True)
        r = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
        return tl.where(x != x, x, r.to(tl.float32, bitcast=True))

    @triton.jit
    def _fp8_round(y, FMAX: tl.constexpr, MAN: tl.constexpr, EMIN: tl.constexpr, EMAX: tl.constexpr):
        """(code bits as uint8, fp32 value of the code) of y on an FP8 grid with MAN mantissa bits and
        normal binades [EMIN, EMAX], rounded half to even, saturating at +-FMAX (+-Inf too), NaN kept
        (code 0x7F with y's sign bit). Integer and fp32 arithmetic only: exact on any device and in
        the interpreter, whose own fp8 cast rounds ties away and truncates subnormals. The code is
        (e - emin) * 2^man + r for the binade e = clamp(floor(log2|y|), emin, emax) and
        r = round(|y| / 2^(e - man)): normals, subnormals and the carry into the next binade alike."""
        y = tl.where(y > FMAX, FMAX, y)  # where, not min/max: NaN must reach the encoder
        y = tl.where(y < -FMAX, -FMAX, y)
        bits = y.to(tl.int32, bitcast=True)
        neg = bits < 0
        isnan = y != y
        mag_bits = tl.where(isnan, 0, bits & 0x7FFFFFFF)  # NaN's payload would make r undefined
        # fp32 subnormals read as exponent -127 and are clamped to emin, like the reference
        e = tl.minimum(tl.maximum((mag_bits >> 23) - 127, EMIN), EMAX)
        inv_quantum = ((127 + MAN - e) << 23).to(tl.float32, bitcast=True)
        quantum = ((127 - MAN + e) << 23).to(tl.float32, bitcast=True)
        # |y| * 2^(man - e) is exact (a power-of-two factor); adding 2^23 rounds it half to even
        r = (mag_bits.to(tl.float32, bitcast=True) * inv_quantum + 8388608.0) - 8388608.0
        sign = tl.where(neg, 0x80, 0)
        code = (((e - EMIN) << MAN) + r.to(tl.int32)) | sign
        code = tl.where(isnan, 0x7F | sign, code)
        q = r * quantum
        q = tl.where(neg, -q, q)
        return code.to(tl.uint8), tl.where(isnan, y, q)

    @triton.jit
    def _fp8_value(y, MAN: tl.constexpr, EMIN: tl.constexpr):
        """The fp32 value of y's code on an FP8 grid with MAN mantissa bits and normal binades from
        EMIN, rounded half to even, for y already clamped to the grid's range (NaN stays NaN; -0.0
        comes back +0.0): two fp32 adds and three integer ops, no fp8 conversion. Adding
        C = 1.5 * 2^(e - MAN + 23), e = max(floor(log2|y|), EMIN), rounds y to a multiple of
        2^(e - MAN), which is C's ulp, ties to even (C is an even number of them); y + C stays in C's
        binade, and subtracting C is exact. Why not the hardware cast's value: see
        ``lowprec.kernels.mor_quant._cast_error_kernel``."""
        ebits = tl.maximum(y.to(tl.int32, bitcast=True) & 0x7F800000, (EMIN + 127) << 23)
        c = (ebits + (((23 - MAN) << 23) | 0x400000)).to(tl.float32, bitcast=True)
        return (y + c) - c

    @triton.jit
    def _e4m3_to_f32(c):
        """uint8 E4M3 bit patterns -> fp32 values, written out in integer ops (exact; NaN for
        0x7F/0xFF). The GEMMs decode with it where they need values, not fp8 bits (the MoR GEMM's
        BF16 loop, and every loop in the interpreter, which has no fp8 type): one of Triton's fp8
        conversions returned wrong values on an H200 with Triton 3.6 (see lowprec.kernels.mor_quant)."""
        ci = c.to(tl.int32)
        e = (ci >> 3) & 0xF
        m = ci & 0x7
        normal = ((e + 120) << 23) | (m << 20)                          # 2^(e-7) * (1 + m/8)
        sub = (m.to(tl.float32) * 0.001953125).to(tl.int32, bitcast=True)  # m * 2^-9
        mag = tl.where(e == 0, sub, normal)
        mag = tl.where((ci & 0x7F) == 0x7F, 0x7FC00000, mag)
        return (mag | ((ci & 0x80) << 24)).to(tl.float32, bitcast=True)

    @triton.jit
    def _block_grid(n_bcol, G: tl.constexpr, RP: tl.constexpr, K: tl.constexpr, CP: tl.constexpr):
        """A program of a kernel that holds G block-rows x K block-columns as a 4-D tile
        [G, RP, K, CP]: its (pid_r, pid_c), the row and column aranges r [1, RP, 1, 1] and
        c [1, 1, 1, CP], and the block indices brow [G, 1, 1, 1] and bcol [1, 1, K, 1]."""
        return _block_grid_at(tl.program_id(0), n_bcol, G, RP, K, CP)

    @triton.jit
    def _block_grid_at(pid, n_bcol, G: tl.constexpr, RP: tl.constexpr, K: tl.constexpr, CP: tl.constexpr):
        """``_block_grid`` for the tile numbered ``pid`` of its tensor (a grouped kernel's programs
        number the tiles of each of its tensors from 0)."""
        n_cgrp = (n_bcol + K - 1) // K
        pid_r = pid // n_cgrp
        pid_c = pid % n_cgrp
        g = tl.arange(0, G)[:, None, None, None]
        r = tl.arange(0, RP)[None, :, None, None]
        k = tl.arange(0, K)[None, None, :, None]
        c = tl.arange(0, CP)[None, None, None, :]
        return pid_r, pid_c, r, c, pid_r * G + g, pid_c * K + k


# ----------------------------------------------------------------------------------------------
# Availability


def is_interpreted(*fns) -> bool:
    """True if every one of the @triton.jit functions fns was built for the Triton interpreter."""
    return all(type(f).__name__ == "InterpretedFunction" for f in fns)


def interpreter_active() -> bool:
    """True if this module's helpers were built for the interpreter."""
    return triton is not None and is_interpreted(_load_fp32)


def available(interpreted: bool, device=None) -> bool:
    """Whether kernels built in this mode can run on `device` (default: CUDA if present, else CPU):
    anywhere when interpreted, else on CUDA only. The caller checks first that Triton imports."""
    if interpreted:
        return True
    if device is None:
        return torch.cuda.is_available()
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


def require_triton(module: str, fallback: str, import_error: Optional[BaseException], jit_fns: tuple,
                   device) -> None:
    """Raise a RuntimeError unless `module`'s kernels can run on `device`. jit_fns: the module's own
    kernel first, then the helpers it calls from other modules (empty when Triton did not import);
    they must all be interpreted or all compiled. fallback: the torch path to use instead."""
    if not jit_fns:
        raise RuntimeError(f"{module} needs Triton, which failed to import ({import_error!r}); "
                           f"use {fallback} (torch) instead")
    mine = is_interpreted(jit_fns[0])
    if any(is_interpreted(f) != mine for f in jit_fns[1:]):
        raise RuntimeError(f"{module} and the Triton helpers it calls were imported with different "
                           "TRITON_INTERPRET settings; reload lowprec.kernels._common, then the kernel "
                           "modules (lowprec.kernels._common.reload_for_interpreter)")
    if not mine and torch.device(device).type != "cuda":
        raise RuntimeError(f"Triton kernels need a CUDA tensor (got device {device}); for CPU tensors set "
                           f"TRITON_INTERPRET=1 before lowprec.kernels modules are first imported, or use "
                           f"{fallback}")


def reload_for_interpreter(*modules: str) -> None:
    """With TRITON_INTERPRET=1 set: rebuild this module and the named kernel modules (full names,
    dependencies first, e.g. "lowprec.kernels.quantize", "lowprec.kernels.int8_fallback_kernels") for
    the interpreter where they were imported before without it. Once one is reloaded, every later
    one that is loaded is reloaded too, so that it binds the new helpers. Modules not imported yet
    are left to their first import; nothing happens without the variable."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    stale = False
    for name in (__name__, *modules):
        mod = sys.modules.get(name)
        if mod is not None and (stale or not mod.interpreter_active()):
            importlib.reload(mod)
            stale = True


# ----------------------------------------------------------------------------------------------
# Host side


def launch(kernel, launcher=None):
    """The kernel to launch: itself, or through ``launcher`` (``torch.library.wrap_triton`` inside a
    ``triton_op``, whose launches a compiled graph traces and makes from Inductor's code)."""
    return kernel if launcher is None else launcher(kernel)


def tma_device(device: torch.device, interpreted: bool) -> bool:
    """Whether kernels may make TMA descriptors on ``device`` (``tl.make_tensor_descriptor``): a
    Triton that has it, and Hopper or later, or the interpreter (``interpreted``). Made on the
    device, descriptors also pass through a traced launch, which cannot carry host-made ones
    (torch's ``wrap_triton`` records no TMA metadata for them, and Inductor's compile fails)."""
    if triton is None or not hasattr(tl, "make_tensor_descriptor"):
        return False
    if interpreted:
        return True
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def _scratch(size: int, alignment: int, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def set_scratch_allocator() -> None:
    """Device-made descriptors live in global scratch memory that Triton asks an allocator for. Set
    before each launch that makes them: Triton keeps the allocator in a context variable, which a
    thread does not inherit (autograd runs the backward's launches on a thread of its own), and a
    ``triton_op`` called outside a compiled graph launches through ``wrap_triton`` with none
    (Inductor's code sets its own)."""
    if triton is not None and hasattr(triton, "set_allocator"):
        triton.set_allocator(_scratch)


def tma_readable(t: torch.Tensor) -> bool:
    """Whether a TMA descriptor can describe the 2-D tensor ``t`` as it is: its last dimension
    contiguous, its rows and its address on 16-byte boundaries. A traced launch sees fake tensors,
    which have no address: their offset into the storage, which the allocator aligns, stands for it."""
    from torch._subclasses.fake_tensor import is_fake

    size = t.element_size()
    address = t.storage_offset() * size if is_fake(t) else t.data_ptr()
    return t.stride(1) == 1 and (t.stride(0) * size) % 16 == 0 and address % 16 == 0


def _next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def stride_layout(x2d: torch.Tensor) -> int:
    """``_strided``'s LAYOUT for a 2-D tensor: 0 where its columns are at unit stride, 1 where its
    rows are, 2 where neither is."""
    return 0 if x2d.stride(1) == 1 else 1 if x2d.stride(0) == 1 else 2


def _in_kind(x: torch.Tensor):
    """(IN_KIND for _load_fp32, the tensor to pass): bf16 goes in as its raw int16 words."""
    if x.dtype == torch.float32:
        return 0, x
    if x.dtype == torch.bfloat16:
        return 1, x.view(torch.int16)
    return 2, x


def code_digest(*roots, package=None) -> str:
    """A digest of what these jit functions run: each one's code as its syntax tree writes it back
    (decorators included, docstrings and comments not) and, followed through its globals into the
    other modules of this package, every jit function it names and every number or string constant
    it reads (Triton's own functions are its version's, which records key on apart). Tuning records
    key on it, so that a comment, a docstring or a kernel nobody calls leaves them standing where a
    digest of whole files did not (a change to the INT8 quantize passes made the GEMM's stale).
    ``package``: the folder whose modules are followed (this package's by default)."""
    import ast
    import hashlib
    import inspect
    import textwrap
    from pathlib import Path

    here = Path(package or Path(__file__).parent).resolve()
    parts, seen, todo = [], set(), list(roots)
    while todo:
        fn = getattr(todo.pop(), "fn", None)
        if not inspect.isfunction(fn) or (fn.__module__, fn.__qualname__) in seen:
            continue
        if Path(inspect.getsourcefile(fn)).resolve().parent != here:
            continue
        seen.add((fn.__module__, fn.__qualname__))
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
                body[:] = body[1:] or [ast.Pass()]
        name = f"{Path(inspect.getsourcefile(fn)).stem}.{fn.__qualname__}"
        parts.append(f"{name}: {ast.unparse(tree)}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                obj = fn.__globals__.get(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                obj = getattr(fn.__globals__.get(node.value.id), node.attr, None)
            else:
                continue
            if isinstance(obj, (bool, int, float, str)):
                parts.append(f"{name} reads {ast.unparse(node)} = {obj!r}")
            elif inspect.isfunction(getattr(obj, "fn", None)):
                todo.append(obj)
    return hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()[:16]
