"""The ptxas miscompile behind the FP8 register-decode fault (lowprec.kernels.fp8_roundtrip), read
from machine code compiled for sm_90 on this machine (no GPU): which instructions read the
stack-pointer register, and that the ptxas versions the module names as bad and right are so."""

from lowprec.bench import kernel_sass as ks
from lowprec.bench.kernel_sass import Instruction


def test_stack_pointer_reads_are_the_instructions_that_take_r1_as_a_source():
    code = [Instruction(0x00, "LDC", " R1, c[0x0][0x28]"),            # its load: a write
            Instruction(0x10, "PRMT", " R16, R1, 0x9910, RZ"),
            Instruction(0x20, "STG.E.U8", " desc[UR8][R2.64], R1"),   # a store: every operand is read
            Instruction(0x30, "IMAD.MOV.U32", " R11, RZ, RZ, R16"),
            Instruction(0x40, "STG.E.U8", " desc[UR8][R2.64+0x1], R17"),
            Instruction(0x50, "MOV", " R1, R12"),                      # R1 written, not read
            Instruction(0x60, "IADD3", " R10, R12, R13, RZ")]
    assert [i.address for i in ks.stack_pointer_reads(code)] == [0x10, 0x20]


# the reproducer's table under the ptxas Triton uses for sm_90 and under the older one this Triton
# also ships (CUDA 12.x takes older PTX: kernel_sass.assemble lowers its version), in a process
# without the interpreter (other test files build the kernels for it)
_ROWS_PROBE = """
import json, sys
from lowprec.bench import kernel_sass as ks
from lowprec.kernels import fp8_roundtrip as kr
if kr.triton is None or ks.nvidia_tool("cuobjdump") is None:
    print("SKIP"); sys.exit()
print(json.dumps([ks.fp8_roundtrip_rows(p) for p in (None, ks.nvidia_tool("ptxas"))]))
"""


def test_the_ptxas_of_cuda_12_stores_fp8_codes_from_the_stack_pointer_and_13_does_not():
    """Where the module's rule says a ptxas garbles the codes, the register-decode variant's byte
    stores read R1 and the cast alone never does; where it says right, none does."""
    import json

    from conftest import compiled_probe
    from lowprec.kernels.fp8_roundtrip import garbles_fp8_bytes

    for rows in json.loads(compiled_probe(_ROWS_PROBE, "needs Triton's CUDA backend tools (cuobjdump)")):
        assert [r.get("error") for r in rows] == [None] * 4 and len({r["ptxas"] for r in rows}) == 1
        for r in rows:
            bad = r["register_decode"] and garbles_fp8_bytes(r["ptxas"])
            assert (r["byte_stores_from_stack_pointer"] > 0) == bad, r
            assert (r["stack_pointer_reads"] > 0) == bad and r["local"] == 0, r
            assert r["byte_stores"] == (8 if r["tile"] == "1x1024" else 32), r


def test_garbles_fp8_bytes_by_cuda_version():
    from lowprec.kernels.fp8_roundtrip import garbles_fp8_bytes

    assert garbles_fp8_bytes("12.8") and garbles_fp8_bytes("12.9") and garbles_fp8_bytes("unknown")
    assert not garbles_fp8_bytes("13.4") and not garbles_fp8_bytes("14.0")
