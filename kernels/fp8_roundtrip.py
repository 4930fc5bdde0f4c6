"""The smallest kernel that shows why the suite's FP8 kernels never widen a hardware cast in
registers: a ptxas miscompile on Hopper, and which ptxas has it.

``roundtrip`` casts fp32 to E4M3 with the hardware's RNE cast (scaled by a loaded scalar and
clamped with ``where``, as the MoR quantizer does), stores the codes' bytes, and with
``REGISTER_DECODE`` also widens the cast values to fp32 in registers; it then reads its own codes
back and decodes them. Triton's PTX for it is right: each pair of codes comes from one
``cvt.rn.satfinite.e4m3x2.f32``, whose low byte is stored, then its high byte. What ptxas makes of
it for sm_90 is not, where the decode is there: the decode's layout conversion stores the pairs to
shared memory two at a time, so ptxas merges two pairs into one 32-bit register
(``F2FP...PACK_AB_MERGE_C``), and the byte stores of the merged pair's codes then read R1, the
stack-pointer register, which the kernel loads from the constant bank and never writes, instead
of the cast's result: half of a thread's codes (4 of its 8 in the 1-D tile) are bytes of the stack
pointer. On the GPU: 32,973 of 66,041 codes wrong on an H100 and an H200, the decoded register
values right (``tests/test_gpu.py::test_triton_hardware_fp8_cast_reproducer``); from run to run a
tile's codes may also come out right (the 2-D tile's stores from R1 are predicated).

Which ptxas: the one Triton assembles sm_90 code with (``sm90_ptxas``). Triton 3.6 takes its
``ptxas`` of CUDA 12.8, Triton 3.9 its ``ptxas-blackwell`` of CUDA 13.4. Measured on the machine
code (``python -m lowprec.bench.kernel_sass --kernel fp8_roundtrip [--ptxas PATH]``; the ptxas of
CUDA 12.8 is the one in the triton==3.6.0 wheel, 12.9 the older one that Triton 3.9 ships,
``results/bench/fp8_roundtrip_sass_sm90*.csv``, Triton 3.9's PTX): CUDA 12.8 and 12.9 read the
stack pointer, CUDA 13.4 does not. Triton 3.6's PTX of the same kernel (made with the triton==3.6.0
wheel, which the GPU machines run) is the same instructions, and ptxas 12.8 reads R1 in it at the
same places (4 reads in the 1-D tile, 16 in the 2-D one; by hand, outside the table). The cast alone
(``REGISTER_DECODE`` off) is right under all three. So the fault is ptxas's, of CUDA 12, and the
suite's kernels keep to what is right under it: the MoR cast pass and ``fp8_cast='native'`` store a
hardware cast's bits alone and take the codes' values from fp32 adds
(``lowprec.kernels._common._fp8_value``).
"""

from __future__ import annotations

from . import _common as _c

triton, tl, _TRITON_IMPORT_ERROR = _c.import_triton()

# the first CUDA version whose ptxas is right on the reproducer (module doc; 12.8 and 12.9 measured bad)
FIRST_RIGHT = (13, 4)


def ptxas_version(path: str) -> str:
    """The CUDA version of a ptxas, such as "12.8" ("unknown" where it does not say)."""
    import re
    import subprocess

    text = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"release (\d+\.\d+)", text)
    return found.group(1) if found else "unknown"


def sm90_ptxas() -> tuple[str, str]:
    """(path, CUDA version) of the ptxas that this Triton assembles sm_90 code with."""
    from triton.backends.nvidia.compiler import get_ptxas

    path = get_ptxas(90).path
    return path, ptxas_version(path)


def garbles_fp8_bytes(cuda_version: str) -> bool:
    """Whether ptxas of this CUDA version garbles the reproducer's codes: CUDA 12 does (12.8 and 12.9
    measured), from 13.4 it does not; versions between were not measured and count as bad."""
    try:
        major, minor = (int(p) for p in cuda_version.split(".")[:2])
    except ValueError:
        return True
    return (major, minor) < FIRST_RIGHT


if triton is not None:

    @triton.jit
    def roundtrip(y_ptr, code_ptr, value_ptr, decoded_ptr, n, ROWS: tl.constexpr, COLS: tl.constexpr,
                  REGISTER_DECODE: tl.constexpr):
        """Codes of y * y[n] cast to E4M3 (RNE, clamped to +-448) to code_ptr; with REGISTER_DECODE
        their values widened in registers to value_ptr; then the codes read back, decoded, to
        decoded_ptr. One ROWS x COLS tile a program."""
        offs = tl.program_id(0) * ROWS * COLS + tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
        ok = offs < n
        y = tl.load(y_ptr + offs, mask=ok, other=0.0) * tl.load(y_ptr + n)  # times 1.0, as a scale
        y = tl.where(y > 448.0, 448.0, y)
        y = tl.where(y < -448.0, -448.0, y)
        c = y.to(tl.float8e4nv, fp_downcast_rounding="rtne")
        tl.store(code_ptr + offs, c.to(tl.uint8, bitcast=True), mask=ok)
        if REGISTER_DECODE:
            tl.store(value_ptr + offs, c.to(tl.float32), mask=ok)
        tl.debug_barrier()
        bits = tl.load(code_ptr + offs, mask=ok, other=0)  # the program's own stores
        tl.store(decoded_ptr + offs, bits.to(tl.float8e4nv, bitcast=True).to(tl.float32), mask=ok)
