"""What the suite's hottest Triton kernels cost in instructions on the H100/H200 (sm_90), read from
their machine code on a machine without a GPU.

    python -m lowprec.bench.kernel_sass --kernel int8_gemm --groups 32,128 --out results/bench/int8_gemm_sass_sm90.csv
    python -m lowprec.bench.kernel_sass --kernel int8_gemm --variant tail_bf16 --out results/bench/int8_gemm_sass_sm90_tail.csv
    python -m lowprec.bench.kernel_sass --kernel mor_cast --out results/bench/mor_cast_sass_sm90.csv
    python -m lowprec.bench.kernel_sass --kernel mor_sub_values --out results/bench/mor_sub_values_sass_sm90.csv
    python -m lowprec.bench.kernel_sass --kernel mor_sub_errors --out results/bench/mor_sub_errors_sass_sm90.csv
    python -m lowprec.bench.kernel_sass --kernel mor_gemm --out results/bench/mor_gemm_sass_sm90.csv

A kernel is compiled by Triton for sm_90 (its own ptxas, no GPU), its machine code disassembled
(Triton's ``cuobjdump``) and its instructions counted by class. Static counts, not timings: an issue
slot per instruction and warp is the model, latency and the overlap with the tensor cores are not;
the GPU benchmarks time the same kernels. What it shows before a GPU minute is spent: spills,
per-element loads of values shared by a block, and work the compiler does twice.

``int8_gemm``: each tuning candidate of ``lowprec.kernels.int8_fallback_tuning`` (at a K-group, in
scale blocks of ``--block-rows`` rows on both sides), its hottest loop (the longest backward branch,
the K loop) counted. Per K-group the tensor cores multiply 32 to 256 products per output element;
what the CUDA cores add is the rescale of the int32 product (at least three instructions an element:
the accumulator's exact-add constant, its subtraction, the fused multiply-add with the scale) and
whatever the loop spends besides. At group 32 that rescale, not the tensor cores, paces the kernel
(``results/bench/profiles``' INT8 rows). Columns: ``config``, ``group``, ``block_rows``, ``tma``,
``loop_instructions`` (one iteration: ``k_groups`` K-groups), ``per_element_group`` (loop
instructions / (elements a thread holds x k_groups)), ``fp32`` (FADD, FMUL, FFMA), ``fmul``, ``int``
(IADD3, IMAD, LOP3, SHF, LEA, ISETP, VIADD and their uniform forms, ...), ``moves`` (MOV),
``global_loads`` (LDG, LDGSTS), ``spills`` (LDL, STL), ``mma`` (MMAs: warpgroup and warp),
``mma_in_flight`` (tensor-core products left running at the loop's waits, read from the TTGIR:
0 where each K-group's product is waited for before the next is issued, as the rescale of an int32
product forces in every Triton candidate, the software-pipelined one included; 1 in the Gluon
kernel's, ``_async``), ``registers``, ``shared`` and ``local`` bytes, ``error`` where a candidate
did not compile. ``--variant``: ``first_parts`` (the kernel as the tuner first times it, fp32 C) or
``tail_bf16`` (A's and B's second parts after the main loop, a bf16 C: the fallback recipe's
kernel in a training step; the Gluon candidates, which take no second part, left out): then
``variant`` names it, ``loop_instructions`` counts the main K loop (the first in code order) and
``tail_loops`` the tail's loops (instructions a flagged K-group: A's part, then B's with the cross
term).

``mor_cast``: MoR's cast-and-error pass (``lowprec.kernels.mor_quant._cast_error_kernel``, one
32 x 128 tile a program as the fast path launches it, bf16 operands, whole tiles) for each layout
it writes (``rows``, ``transposed``, ``both``; ``both_own_t``: both, the transposed codes from a
per-column grid of their own, per-channel MoR's operand quantized with its transpose), with the
hardware cast (``native``, the fast path's on the H200) or the written-out encoder, and with the
approximate division as CUDA runs it (``mor_quant._division``: the fast one) or the correctly
rounded one. Columns: those of the tile (``layouts``,
``own_t``, ``native``, ``approx_div``, ``tile``, ``num_warps``),
``instructions`` (the kernel's), ``per_element`` (instructions / elements a thread holds), the
classes above plus ``conversions`` (F2I, I2F, I2FP, F2F, F2FP, MUFU: conversions and special
functions, on slower pipes), ``global_stores`` (STG), ``shared_accesses`` (LDS, STS: a layout
conversion's traffic) and ``barriers``.

``mor_sub_values``: sub-tensor MoR's values pass (``lowprec.kernels.mor_subtensor_quant._values_kernel``,
its default step and warps, bf16 operands) for each choice a block can make (``e4m3``, ``e5m2``,
``bf16``): the kernel reads the choice per block at run time, so each row compiles a copy of its
source with the choice a constant, and counts the loop that block's program runs (``per_element``:
loop instructions / elements a thread holds per step).

``mor_sub_errors``: sub-tensor MoR's errors pass (``lowprec.kernels.mor_subtensor_quant._errors_kernel``,
its default step and warps, bf16 operands), with the block grid ``need`` (``need``: True, the fast
path's) or without: the loop a block that is read runs, counted as the values pass's (both formats'
codes, four correctly rounded divisions and two fp64 sums an element).

``mor_gemm``: the MoR GEMM (``lowprec.kernels.mor_gemm._mor_gemm_kernel``, tensor scales, at its
configuration for 8192^3) in each ``mode`` (``fixup``: after cuBLAS's FP8 product, the fast path's;
``triton``: the kernel's own FP8 loop too) for hp operands in ``bf16`` (activations, gradients) or
``fp32`` (master weights), read along K (``view`` ``rows``: row-major operands, the forward's) or
through transposed views (``transposed``: rows at unit stride, the backward's hp operands), as it
runs: the choices read on the device, whole tiles. One row per K loop (the
innermost loops that hold MMAs), ``loop`` numbering them in code order, which is the source's: the
FP8 loop first in the triton mode, then the BF16 loops (``_bf16_product``: A's codes with B's hp
values, A's hp values with B's codes, both hp). ``tile``: the configuration's tile and BF16 K-step.
``mma_in_flight``: the tensor-core products a loop keeps running while the next K-step loads (1 or 3
where pipelined; 0 where an operand converted in registers goes back to shared memory every K-step,
as an fp32 hp operand still does). ``loads``: ``pointer``, or ``tma`` (bf16 operands, the launch a
Hopper GPU makes: the configuration of ``tma``, tiles loaded through descriptors made on the device,
one E4M3 choice's codes too); in the fix-up the compiler then keeps the three TMA loops alone (A's
codes, B's codes, both hp: no pair that reaches them takes the pointer loops), and
``mma_in_flight`` stays blank where the IR's loops, the pointer loops among them, outnumber the
machine code's.

``fp8_roundtrip``: the reproducer of a ptxas miscompile (``lowprec.kernels.fp8_roundtrip``: a hardware
E4M3 cast whose codes are stored, with and without its values widened in registers), in a 1-D and a
2-D tile, assembled by the ptxas Triton uses for sm_90 or by ``--ptxas PATH`` (Triton's PTX, its ISA
version lowered to what that ptxas takes). Columns: ``tile``, ``register_decode``, ``ptxas`` (its CUDA
version), ``instructions``, ``byte_stores`` (the codes' STG.E.U8), ``byte_stores_from_stack_pointer``
(those whose data is R1), ``stack_pointer_reads`` (instructions that read R1 besides its load: the
kernel has no local memory, so R1 holds nothing but the stack pointer), ``registers``, ``local``.
"""

from __future__ import annotations

import collections
import glob
import inspect
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple, Optional

from lowprec.errors import error_text

PROG = "kernel_sass"
_CLASSES = ("fp32", "fmul", "int", "moves", "global_loads", "spills", "mma")
FIELDS = {
    "int8_gemm": ("config", "group", "block_rows", "tma", "loop_instructions", "per_element_group", *_CLASSES,
                  "mma_in_flight", "registers", "shared", "local", "error", "variant", "tail_loops"),
    "mor_cast": ("layouts", "own_t", "native", "approx_div", "tile", "num_warps", "instructions", "per_element",
                 *_CLASSES,
                 "conversions", "global_stores", "shared_accesses", "barriers", "registers", "local", "error"),
    "mor_sub_values": ("choice", "step", "num_warps", "loop_instructions", "per_element", *_CLASSES, "conversions",
                       "global_stores", "shared_accesses", "barriers", "registers", "local", "error"),
    "mor_sub_errors": ("need", "step", "num_warps", "loop_instructions", "per_element", *_CLASSES, "conversions",
                       "registers", "local", "error"),
    "mor_gemm": ("mode", "hp", "view", "loads", "loop", "tile", "num_warps", "loop_instructions", *_CLASSES,
                 "conversions", "shared_accesses", "barriers", "mma_in_flight", "registers", "local", "error"),
    "fp8_roundtrip": ("tile", "register_decode", "ptxas", "instructions", "byte_stores",
                      "byte_stores_from_stack_pointer", "stack_pointer_reads", "registers", "local", "error"),
}

_INT_OPS = ("IADD3", "IMAD", "LOP3", "SHF", "LEA", "ISETP", "VIADD", "IABS", "SEL", "PRMT")
_LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s*(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


class Instruction(NamedTuple):
    address: int
    opcode: str      # with its modifiers, e.g. "FFMA.FTZ"
    operands: str

    @property
    def op(self) -> str:
        return self.opcode.split(".")[0]


def nvidia_tool(name: str) -> Optional[str]:
    """The path of an NVIDIA tool that Triton ships with its CUDA backend (``ptxas``, ``cuobjdump``),
    or None where this Triton has none."""
    try:
        import triton
    except ImportError:
        return None
    hits = glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name))
    return hits[0] if hits and os.access(hits[0], os.X_OK) else None


def disassemble(cubin: bytes) -> tuple[list, dict]:
    """A cubin's instructions in address order, and its resource usage (``registers``, ``local``
    bytes of its one function)."""
    tool = nvidia_tool("cuobjdump")
    if tool is None:
        raise RuntimeError("this Triton ships no cuobjdump (its CUDA backend's bin folder): nothing to disassemble")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        Path(path).write_bytes(cubin)
        sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True, check=True).stdout
    instrs = [Instruction(int(m.group(1), 16), m.group(2), m.group(3).strip())
              for m in map(_LINE.match, sass.splitlines()) if m]
    res = dict(re.findall(r"\b(REG|LOCAL):(\d+)", usage))
    return instrs, {"registers": int(res.get("REG", 0)), "local": int(res.get("LOCAL", 0))}


def _loops(instrs: list) -> list:
    """Every loop's instructions: from a backward branch's target to the branch."""
    loops = []
    for ins in instrs:
        target = re.search(r"0x([0-9a-f]+)", ins.operands) if ins.op == "BRA" else None
        if target and int(target.group(1), 16) < ins.address:
            loops.append([i for i in instrs if int(target.group(1), 16) <= i.address <= ins.address])
    return loops


def hot_loop(instrs: list) -> list:
    """The instructions of the longest loop (nested loops count inside the one that holds them);
    empty for straight-line code."""
    return max(_loops(instrs), key=len, default=[])


def k_loops(instrs: list) -> list:
    """The innermost loops that hold an MMA (a GEMM's K loops, also inside a persistent loop over
    tiles), each a list of its instructions, in code order. A backward branch from code placed after
    the kernel's body into a loop (ptxas moves cold paths there) spans a range that starts inside
    that loop and ends past it: no loop, left out."""
    loops = [body for body in _loops(instrs) if counts(body)["mma"]]
    loops = [b for b in loops if not any(o[0].address < b[0].address <= o[-1].address < b[-1].address
                                         for o in loops)]
    inner = [b for b in loops if not any(o is not b and b[0].address <= o[0].address and o[-1].address <= b[-1].address
                                         for o in loops)]
    return sorted(inner, key=lambda b: b[0].address)


def mma_in_flight(ttgir: str) -> list:
    """Per K loop of a kernel's TTGIR (the innermost ``scf.for`` loops that hold a warpgroup MMA, in
    code order, as ``k_loops`` finds them in the machine code): the fewest warpgroup MMAs each wait
    in the loop leaves running (``ttng.warp_group_dot_wait``'s ``pendings``). 0 means a product waits
    for the one before it to finish, which is what an operand converted in registers and stored
    back to shared memory every K-step forces; a pipelined loop keeps one or more in flight while the
    next K-step's operands load; blank where the loop holds no such wait (a warp-specialized loop,
    whose waits are barriers between its partitions). Static, from the compiler's own IR: the SASS
    spells the same wait as a scoreboard count that is hard to tie to its MMA."""
    loops, stack = [], []
    for line in ttgir.splitlines():
        indent = len(line) - len(line.lstrip())
        if re.search(r"\bscf\.for\b", line):
            stack.append({"indent": indent, "inner": True, "dot": False, "pendings": []})
            continue
        if stack and line.strip().startswith("}") and indent == stack[-1]["indent"]:
            loop = stack.pop()
            if stack:
                stack[-1]["inner"] = False
            if loop["inner"] and loop["dot"]:
                loops.append(min(loop["pendings"], default=""))
            continue
        if stack:
            if "ttng.warp_group_dot " in line or "ttng.warp_group_dot %" in line:
                stack[-1]["dot"] = True
            m = re.search(r"ttng\.warp_group_dot_wait .*pendings = (\d+)", line)
            if m:
                stack[-1]["pendings"].append(int(m.group(1)))
    return loops


def counts(instrs: list) -> dict:
    """Instruction classes of a stretch of code (the columns of this module's tables)."""
    ops = collections.Counter(i.op[1:] if i.op.startswith("U") and i.op[1:] in _INT_OPS else i.op for i in instrs)
    return {
        "fp32": ops["FADD"] + ops["FMUL"] + ops["FFMA"],
        "fmul": ops["FMUL"],
        "int": sum(ops[o] for o in _INT_OPS),
        "moves": ops["MOV"],
        "global_loads": ops["LDG"] + ops["LDGSTS"],
        "spills": ops["LDL"] + ops["STL"],
        "mma": ops["HGMMA"] + ops["IGMMA"] + ops["QGMMA"] + ops["HMMA"] + ops["IMMA"],
        "conversions": sum(ops[o] for o in ("F2I", "I2F", "I2FP", "F2F", "F2FP", "MUFU")),
        "global_stores": ops["STG"],
        "shared_accesses": ops["LDS"] + ops["STS"],
        "barriers": ops["BAR"],
    }


def _measure(kernel: str, row: dict, build, loop) -> Optional[int]:
    """Fills ``row`` of table ``kernel`` with what ``build()`` compiles to: the instruction classes
    of its hot loop (``loop`` True; a callable: the loop it picks from the instructions) or of all
    its code, its registers, local and shared bytes (the pipeline's buffers too: the cubin lists
    static shared memory only). Returns the number of those instructions, or None with ``error`` set
    where it did not compile (a candidate Triton cannot build for sm_90 is a finding of the table)."""
    try:
        compiled = build()
    except Exception as exc:
        row["error"] = error_text(exc)
        return None
    instrs, usage = disassemble(compiled.asm["cubin"])
    code = (loop if callable(loop) else hot_loop)(instrs) if loop else instrs
    measured = {**counts(code), **usage, "shared": compiled.metadata.shared,
                "mma_in_flight": min((n for n in mma_in_flight(compiled.asm["ttgir"]) if n != ""), default="")}
    row.update({k: v for k, v in measured.items() if k in FIELDS[kernel]})
    return len(code)


def compile_sm90(fn, kinds: dict, constexprs: dict, aligned: tuple, num_warps: int, num_stages: int = 3,
                 fp_fusion: bool = True, gluon: bool = False):
    """A jit function (``gluon``: a Gluon one) compiled for sm_90: argument types from ``kinds``
    (the others constexprs, of which ``constexprs`` gives the values), the arguments in ``aligned``
    16-divisible, as Triton specializes pointers and sizes at launch."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if gluon:
        from triton.experimental.gluon._runtime import GluonASTSource as ASTSource
    names = list(inspect.signature(fn.fn).parameters)
    sig = {n: kinds.get(n, "constexpr") for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in aligned}
    src = ASTSource(fn, sig, constexprs={k: v for k, v in constexprs.items() if k in names}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": fp_fusion})


def _require_compiled_kernels() -> None:
    from lowprec.kernels import int8_fallback_kernels as kk
    from lowprec.kernels import mor_gemm as kg
    from lowprec.kernels import mor_quant as kq
    from lowprec.kernels import mor_subtensor_quant as ks

    if kk.interpreter_active() or kq.interpreter_active() or ks.interpreter_active() or kg.interpreter_active():
        raise RuntimeError("the kernels were built for the Triton interpreter (TRITON_INTERPRET=1): machine code "
                           "needs a process without it")


def compile_int8_gemm(cfg, group: int, block_rows: int, fused: bool = False, tail: bool = False,
                      out: str = "fp32"):
    """The INT8 GEMM kernel (``int8_fallback_kernels._gemm_kernel``) under launch configuration
    ``cfg`` (a ``GemmConfig``), compiled for sm_90: K-groups of ``group``, scale blocks of
    ``block_rows`` rows on both operands, K a multiple of the group, pointers and sizes 16-aligned
    (as Triton specializes them at launch), ``fused``: with both second parts, in the loop or with
    ``tail`` after it; C of dtype ``out`` ("fp32" or "bf16")."""
    from lowprec.kernels import int8_fallback_kernels as kk
    from lowprec.kernels.int8_fallback_gemm import _TAIL_KCHUNK, _blocks_met

    _require_compiled_kernels()
    if cfg.async_mma:
        return compile_int8_gemm_async(cfg, group, block_rows)
    kinds = dict.fromkeys(("a_ptr", "b_ptr", "ra_ptr", "fa_ptr", "rb_ptr", "fb_ptr"), "*i8")
    kinds.update(dict.fromkeys(("da_ptr", "db_ptr", "dra_ptr", "drb_ptr"), "*fp32"), c_ptr=f"*{out}")
    kinds.update(dict.fromkeys(("M", "N", "K", "n_kb"), "i32"))
    const = dict(BMS=block_rows, BNS=block_rows, GK=group, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                 BLOCK_K=group, KG=cfg.k_groups, GROUP_M=cfg.group_m, EVEN_K=True, MAGIC=cfg.magic,
                 USE_TMA=cfg.tma, HAS_RA=fused, HAS_RB=fused, WS=cfg.warp_specialize,
                 PIPE=cfg.pipelined and not (fused and not tail), TAIL=tail and fused,
                 NRB=_blocks_met(cfg.block_m, block_rows), NCB=_blocks_met(cfg.block_n, block_rows),
                 KCHUNK=_TAIL_KCHUNK)
    return compile_sm90(kk._gemm_kernel, kinds, const, ("a_ptr", "b_ptr", "da_ptr", "db_ptr", "c_ptr", "M", "N", "K"),
                        cfg.num_warps, cfg.num_stages, cfg.fp_fusion)


def compile_int8_gemm_async(cfg, group: int, block_rows: int):
    """The Gluon INT8 GEMM of asynchronous MMAs (``int8_gemm_async._gemm_kernel``) as
    ``compile_int8_gemm`` compiles the Triton one: descriptors of ``cfg``'s tile and the group."""
    from triton.experimental.gluon import language as gl

    from lowprec.kernels import int8_gemm_async as ka

    kinds = {name: f"tensordesc<i8[{rows}, {group}],{gl.NVMMASharedLayout.get_default_for([rows, group], gl.int8)!r}>"
             for name, rows in (("a_desc", cfg.block_m), ("b_desc", cfg.block_n))}
    kinds.update(dict.fromkeys(("da_ptr", "db_ptr", "c_ptr"), "*fp32"), M="i32", N="i32", n_kb="i32")
    const = dict(BMS=block_rows, BNS=block_rows, GK=group, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                 STAGES=cfg.num_stages, GROUP_M=cfg.group_m)
    return compile_sm90(ka._gemm_kernel, kinds, const, ("da_ptr", "db_ptr", "c_ptr", "M", "N"), cfg.num_warps,
                        cfg.num_stages, cfg.fp_fusion, gluon=True)


def _async_k_loop(instrs: list) -> list:
    return next((body for body in k_loops(instrs) if not counts(body)["global_stores"]), [])


INT8_VARIANTS = ("first_parts", "tail_bf16")


def int8_gemm_row(cfg, group: int, block_rows: int, variant: str = "first_parts") -> dict:
    """This module's table row for one configuration (``error`` set where it did not compile)."""
    row = {"config": cfg.label(), "group": group, "block_rows": block_rows, "tma": cfg.tma, "variant": variant}
    tail = variant == "tail_bf16"

    def main_and_tail(instrs):  # the main K loop comes first in code order, the tail's after it
        loops = k_loops(instrs)
        row["tail_loops"] = "/".join(str(len(b)) for b in loops[1:])
        return loops[0] if loops else []

    # the asynchronous kernel takes two K-groups a loop iteration; its longest loop holds the tile's
    # store (the last groups and the epilogue), so its K loop is the one that stores nothing
    loop, groups = (_async_k_loop, 2) if cfg.async_mma else (main_and_tail if tail else True, cfg.k_groups)
    n = _measure("int8_gemm", row, lambda: compile_int8_gemm(cfg, group, block_rows, fused=tail, tail=tail,
                                                             out="bf16" if tail else "fp32"), loop=loop)
    if n is not None:
        elements = cfg.block_m * cfg.block_n / (32 * cfg.num_warps)
        row.update(loop_instructions=n, per_element_group=round(n / (elements * groups), 2))
    return row


MOR_CAST_LAYOUTS = ("rows", "transposed", "both")


def mor_cast_row(layouts: str, native: bool, approx_div: bool, tile: Optional[tuple] = None,
                 num_warps: int = 4, own_t: bool = False) -> dict:
    """This module's table row for MoR's cast-and-error pass over whole tiles of a bf16 operand
    with per-row scales (128x128 GAM blocks, or one scale), as ``mor_quant.mor_cast_error`` launches it;
    ``own_t``: the transposed codes from a grid of their own, per column (per-channel MoR's operand
    quantized with its transpose)."""
    from lowprec.kernels import mor_quant as kq

    _require_compiled_kernels()
    bm, bn = tile or kq.CAST_TILE
    row = {"layouts": layouts, "native": native, "approx_div": approx_div, "tile": f"{bm}x{bn}", "num_warps": num_warps,
           "own_t": own_t}
    code = "*fp8e4nv" if native else "*u8"
    kinds = {"x_ptr": "*i16", "s_ptr": "*fp32", "err_ptr": "*fp32", "nz_ptr": "*i32", "codes_ptr": code,
             "codes_t_ptr": code, "st_ptr": "*fp32", "err_t_ptr": "*fp32",
             **dict.fromkeys(("sxr", "sxc", "ssr", "ssc", "M", "N", "SBR", "SBC", "n_tc", "sstr", "sstc", "SBR_T",
                              "SBC_T"), "i32")}
    const = dict(BM=bm, BN=bn, SCALE_BY_ROW=True, ROWS=layouts != "transposed", TRANSPOSED=layouts != "rows",
                 OWN_T=own_t, SCALE_T_BY_ROW=False, IN_KIND=1, NATIVE=native,
                 DIV=kq._division(approx_div, compiled_for_cuda=True), WIDE=False, X_LAYOUT=0, EVEN=True)
    aligned = ("x_ptr", "s_ptr", "codes_ptr", "codes_t_ptr", "err_ptr", "nz_ptr", "st_ptr", "err_t_ptr", "sxr", "M",
               "N", "n_tc")
    n = _measure("mor_cast", row, lambda: compile_sm90(kq._cast_error_kernel, kinds, const, aligned, num_warps),
                 loop=False)
    if n is not None:
        row.update(instructions=n, per_element=round(n / (bm * bn / (32 * num_warps)), 1))
    return row


MOR_SUB_CHOICES = ("e4m3", "e5m2", "bf16")  # lowprec.methods.mor's codes 0, 1, 2
_RUNTIME_CHOICE = "choice = tl.load(choice_ptr + pid).to(tl.int32)"


def _values_kernel_with_choice(choice: int):
    """A copy of the values pass whose blocks all make ``choice`` (a constant where the kernel
    loads it), compiled in its module's namespace."""
    from lowprec.bench.common import jit_from_source
    from lowprec.kernels import mor_subtensor_quant as kq

    source = inspect.getsource(kq._values_kernel.fn)
    indent = source[:len(source) - len(source.lstrip())]
    source = "\n".join(line[len(indent):] for line in source.splitlines())
    if _RUNTIME_CHOICE not in source:
        raise RuntimeError("the values pass no longer loads its block's choice as kernel_sass expects: update "
                           "_RUNTIME_CHOICE")
    return jit_from_source(source.replace(_RUNTIME_CHOICE, f"choice = {int(choice)}"), "_values_kernel",
                           dict(vars(kq)))


def mor_sub_values_row(choice: str) -> dict:
    """This module's table row for the sub-tensor values pass over blocks that all chose ``choice``."""
    kinds = {"x_ptr": "*i16", "choice_ptr": "*i8", "s4_ptr": "*fp32", "s5_ptr": "*fp32", "values_ptr": "*i16",
             "e4m3_ptr": "*u8", "values_t_ptr": "*i16", "e4m3_t_ptr": "*u8",
             **dict.fromkeys(("M", "N", "sxr", "sxc", "BR", "BC", "n_bcol"), "i32")}
    aligned = ("x_ptr", "values_ptr", "e4m3_ptr", "values_t_ptr", "e4m3_t_ptr", "M", "N", "sxr", "BR", "BC")
    return _mor_sub_row("values", {"choice": choice},
                        lambda kq: _values_kernel_with_choice(MOR_SUB_CHOICES.index(choice)), kinds, aligned, {})


def mor_sub_errors_row(need: bool) -> dict:
    """This module's table row for the sub-tensor errors pass over blocks that are read, with the
    block grid ``need`` or without."""
    kinds = {"x_ptr": "*i16", "s4_ptr": "*fp32", "s5_ptr": "*fp32", "need_ptr": "*i8", "err_ptr": "*fp64",
             **dict.fromkeys(("M", "N", "sxr", "sxc", "BR", "BC", "n_bcol", "n_blocks"), "i32")}
    aligned = ("x_ptr", "err_ptr", "M", "N", "sxr", "BR", "BC")
    return _mor_sub_row("errors", {"need": need}, lambda kq: kq._errors_kernel, kinds, aligned, {"HAS_NEED": need})


def _mor_sub_row(which: str, label: dict, kernel, kinds: dict, aligned: tuple, constants: dict) -> dict:
    """The row of one of sub-tensor MoR's passes (``which``: its ``DEFAULT_CONFIGS`` key) at its
    default step and warps: ``label``, the step, and the loop's instructions (``kernel(module)``
    gives the kernel compiled, with ``constants``)."""
    from lowprec.kernels import mor_subtensor_quant as kq

    _require_compiled_kernels()
    cfg = kq.DEFAULT_CONFIGS[which]
    tc = min(128, cfg.step)
    tr = max(cfg.step // tc, 1)
    row = {**label, "step": f"{tr}x{tc}", "num_warps": cfg.num_warps}
    # a row-major operand, its unit column stride spelled out by X_LAYOUT (the stride itself a plain
    # integer, as a compiled graph's launch may pass it)
    n = _measure(f"mor_sub_{which}", row, lambda: compile_sm90(
        kernel(kq), kinds, dict(TR=tr, TC=tc, IN_KIND=1, X_LAYOUT=0, **constants), aligned, cfg.num_warps), loop=True)
    if n is not None:
        row.update(loop_instructions=n, per_element=round(n / (tr * tc / (32 * cfg.num_warps)), 1))
    return row


def mor_gemm_rows(mode: str, hp: str, view: str = "rows", loads: str = "pointer") -> list:
    """This module's table rows for the MoR GEMM's K loops in one mode, for hp operands of dtype
    ``hp`` read through ``view`` (``rows`` or ``transposed``), on whole tiles, on pointer loads or
    (``loads="tma"``: bf16 operands, codes in the view's layout) on TMA loads."""
    base, build = _mor_gemm_build(mode, hp, view, loads)
    try:
        compiled = build()
    except Exception as exc:
        return [{**base, "error": error_text(exc)}]
    instrs, usage = disassemble(compiled.asm["cubin"])
    loops = k_loops(instrs)
    in_flight = mma_in_flight(compiled.asm["ttgir"])
    if len(in_flight) != len(loops):  # the two views disagree on the loops: say nothing rather than pair them wrongly
        in_flight = [""] * len(loops)
    return [{**base, "loop": i, "loop_instructions": len(body), "mma_in_flight": in_flight[i],
             **{k: v for k, v in {**counts(body), **usage}.items() if k in FIELDS["mor_gemm"]}}
            for i, body in enumerate(loops)]


def compile_mor_gemm(mode: str, hp: str, view: str = "rows", loads: str = "pointer"):
    """The MoR GEMM as ``mor_gemm_rows`` compiles it for sm_90 (Triton's compiled kernel: its
    ``asm`` holds the TTIR, TTGIR and cubin)."""
    return _mor_gemm_build(mode, hp, view, loads)[1]()


def _mor_gemm_build(mode: str, hp: str, view: str, loads: str) -> tuple:
    """The table's fixed columns for a MoR GEMM compile, and the compile itself (a callable)."""
    from lowprec.kernels import mor_gemm as kg

    _require_compiled_kernels()
    fixup = mode == "fixup"
    tma = loads == "tma"
    if tma and hp != "bf16":
        raise ValueError("loads='tma': the TMA loop takes bf16 operands only")
    cfg = kg._config(8192, 8192, 8192, [], hp == "fp32", True, fixup, tma)
    base = {"mode": mode, "hp": hp, "view": view, "loads": loads, "num_warps": cfg.num_warps,
            "tile": f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k16}"}
    ptr = {"bf16": "*bf16", "fp32": "*fp32"}[hp]
    # the unit strides are constants at launch, as Triton specializes a 1: along K for row-major
    # operands, along the rows for transposed views
    unit = {"rows": ("s_ack", "s_ahk", "s_bck", "s_bhk"), "transposed": ("s_acm", "s_ahm", "s_bcn", "s_bhn")}[view]
    strides = ("s_acm", "s_ack", "s_ahm", "s_ahk", "s_bcn", "s_bck", "s_bhn", "s_bhk")
    kinds = {**dict.fromkeys(("ac_ptr", "bc_ptr"), "*fp8e4nv"), **dict.fromkeys(("ah_ptr", "bh_ptr"), ptr),
             **dict.fromkeys(("as_ptr", "ae_ptr", "bs_ptr", "be_ptr", "c_ptr"), "*fp32"),
             "info_ptr": "*i32", "cnt_ptr": "*i32", "thr_a": "fp32", "thr_b": "fp32",
             **dict.fromkeys(("cnt_row s_cnt M N K s_asr s_asc a_br a_bc s_bsr s_bsc b_br b_bc").split(), "i32"),
             **{k: "i32" for k in strides if k not in unit}}
    const = dict(A_KSTEP=False, B_KSTEP=False, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K8=cfg.block_k8,
                 BLOCK_K16=cfg.block_k16, GROUP_M=kg._GROUP_M, PROMOTE=cfg.block_k8, EVEN=True, EVEN16=True,
                 WHOLE_MN=True, OUT_BF16=True, FIXUP=fixup, TMA=tma, TMA_CODES=tma, COUNT=fixup, INTERP=False,
                 **dict.fromkeys(("A_T", "B_T", "AC_T", "BC_T"), tma and view == "transposed"),
                 **dict.fromkeys(unit, 1))
    aligned = ("ac_ptr", "bc_ptr", "ah_ptr", "bh_ptr", "c_ptr", "M", "N", "K",
               *(k for k in strides if k not in unit))
    return base, lambda: compile_sm90(kg._mor_gemm_kernel, kinds, const, aligned, cfg.num_warps, cfg.num_stages)


def _mor_gemm_rows(prog: str, args, wanted: list) -> list:
    return [(lambda mode=mode, hp=hp, view=view, loads=loads: mor_gemm_rows(mode, hp, view, loads))
            for mode in ("fixup", "triton") for hp in ("bf16", "fp32") for view in ("rows", "transposed")
            for loads in (("pointer", "tma") if hp == "bf16" else ("pointer",))
            if not wanted or mode in wanted]


def _int8_gemm_rows(prog: str, args, wanted: list) -> list:
    from lowprec.bench.common import fail, parse_int_list
    from lowprec.kernels import int8_fallback_tuning as kt

    groups = parse_int_list(prog, "--groups", args.groups)
    rows_per = parse_int_list(prog, "--block-rows", args.block_rows)
    if len(rows_per) != len(groups):
        fail(prog, f"--block-rows: one per group ({len(groups)}), got {len(rows_per)}")
    variant = args.variant
    if variant not in INT8_VARIANTS:
        fail(prog, f"--variant: one of {', '.join(INT8_VARIANTS)}, got {variant!r}")
    return [(lambda cfg=cfg, group=group, block_rows=block_rows: int8_gemm_row(cfg, group, block_rows, variant))
            for group, block_rows in zip(groups, rows_per)
            for cfg in kt.candidate_configs(group, tma=True, async_mma=variant == "first_parts")
            if not wanted or any(w in cfg.label() for w in wanted)]


def _mor_cast_rows(prog: str, args, wanted: list) -> list:
    # "both_own_t": both layouts, the transposed codes from a per-column grid of their own (per channel)
    variants = [(lay, False) for lay in MOR_CAST_LAYOUTS] + [("both", True)]
    return [(lambda lay=lay, own_t=own_t, native=native, approx=approx: mor_cast_row(lay, native, approx, own_t=own_t))
            for lay, own_t in variants for native in (True, False) for approx in (True, False)
            if not wanted or lay + ("_own_t" if own_t else "") in wanted]


def _mor_sub_values_rows(prog: str, args, wanted: list) -> list:
    return [(lambda choice=choice: mor_sub_values_row(choice)) for choice in MOR_SUB_CHOICES
            if not wanted or choice in wanted]


def _mor_sub_errors_rows(prog: str, args, wanted: list) -> list:
    return [(lambda need=need: mor_sub_errors_row(need)) for need in (True, False)
            if not wanted or ("need" if need else "no_need") in wanted]


# ----------------------------------------------------------------------------------------------
# fp8_roundtrip: the ptxas miscompile


_STORE_OPS = ("STG", "STS", "ST", "STL", "RED", "ATOM", "ATOMG")


def stack_pointer_reads(instrs: list) -> list:
    """The instructions that read R1 (a store's every operand; another's all but its first, the
    destination): where a kernel has no local memory R1 holds the stack pointer alone."""
    out = []
    for ins in instrs:
        ops = [o.strip() for o in ins.operands.split(",")]
        sources = ops if ins.op in _STORE_OPS else ops[1:]
        if any(re.search(r"\bR1\b", o) for o in sources):
            out.append(ins)
    return out


def assemble(ptx: str, ptxas: str) -> bytes:
    """``ptx`` assembled for sm_90a by another ``ptxas``; where it refuses the PTX ISA version Triton
    wrote, with the highest version it names."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp, "k.ptx"), Path(tmp, "k.cubin")
        for _ in range(2):
            src.write_text(ptx)
            run = subprocess.run([ptxas, "-arch=sm_90a", "-o", str(out), str(src)], capture_output=True, text=True)
            if run.returncode == 0:
                return out.read_bytes()
            older = re.search(r"Unsupported \.version \S+; current version is '([\d.]+)'", run.stderr)
            if not older:
                break
            ptx = re.sub(r"^\.version \S+", f".version {older.group(1)}", ptx, count=1, flags=re.M)
    raise RuntimeError(f"{ptxas}: {(run.stderr.strip().splitlines() or [f'exit {run.returncode}'])[0]}")


def fp8_roundtrip_rows(ptxas: Optional[str] = None) -> list:
    """This module's rows for the ptxas reproducer (``lowprec.kernels.fp8_roundtrip.roundtrip``)."""
    from lowprec.kernels import fp8_roundtrip as kr

    if kr.triton is None:
        raise RuntimeError(f"Triton does not import: {kr._TRITON_IMPORT_ERROR}")
    if kr._c.is_interpreted(kr.roundtrip):
        raise RuntimeError("lowprec.kernels.fp8_roundtrip was built for the Triton interpreter (TRITON_INTERPRET=1): "
                           "machine code needs a process without it")
    version = kr.ptxas_version(ptxas) if ptxas else kr.sm90_ptxas()[1]
    kinds = {"y_ptr": "*fp32", "code_ptr": "*u8", "value_ptr": "*fp32", "decoded_ptr": "*fp32", "n": "i32"}
    rows = []
    for r, c in ((1, 1024), (32, 128)):
        for decode in (False, True):
            row = {"tile": f"{r}x{c}", "register_decode": decode, "ptxas": version}
            try:
                k = compile_sm90(kr.roundtrip, kinds, dict(ROWS=r, COLS=c, REGISTER_DECODE=decode),
                                 ("y_ptr", "code_ptr", "value_ptr", "decoded_ptr"), num_warps=4)
                instrs, usage = disassemble(assemble(k.asm["ptx"], ptxas) if ptxas else k.asm["cubin"])
            except Exception as exc:
                rows.append({**row, "error": error_text(exc)})
                continue
            stores = [i for i in instrs if i.opcode.startswith(("STG.E.U8", "STG.E.S8"))]
            rows.append({**row, **usage, "instructions": len(instrs), "byte_stores": len(stores),
                         "byte_stores_from_stack_pointer": sum(i.operands.split(",")[-1].strip() == "R1"
                                                               for i in stores),
                         "stack_pointer_reads": len(stack_pointer_reads(instrs))})
    return rows


def _fp8_roundtrip_rows(prog: str, args, wanted: list) -> list:
    return [lambda: fp8_roundtrip_rows(args.ptxas)]


_JOBS = {"int8_gemm": _int8_gemm_rows, "mor_cast": _mor_cast_rows, "mor_sub_values": _mor_sub_values_rows,
         "mor_sub_errors": _mor_sub_errors_rows, "mor_gemm": _mor_gemm_rows, "fp8_roundtrip": _fp8_roundtrip_rows}


def main(argv=None) -> int:
    from lowprec.bench.common import bench_parser, fail, write_rows
    from lowprec.io import provenance_path, write_json

    p = bench_parser(PROG, __doc__)
    p.add_argument("--kernel", default="int8_gemm", choices=tuple(FIELDS), help="which kernel's table")
    p.add_argument("--groups", default="32,128", help="int8_gemm: K-groups (comma-separated)")
    p.add_argument("--block-rows", default="32,128",
                   help="int8_gemm: scale-block rows, one per group in --groups (Jetfire's 32 x 32 blocks, the "
                        "fallback's 128 x 128)")
    p.add_argument("--variant", default="first_parts",
                   help=f"int8_gemm: the kernel variant, one of {', '.join(INT8_VARIANTS)} (see above)")
    p.add_argument("--configs", default="",
                   help="only the int8_gemm candidates whose label contains one of these, or the mor_cast layouts "
                        "or mor_sub_values choices or mor_sub_errors needs (need, no_need) or mor_gemm modes named "
                        "(comma-separated); default all")
    p.add_argument("--ptxas", default=None,
                   help="fp8_roundtrip: assemble with this ptxas instead of the one Triton uses for sm_90")
    args = p.parse_args(argv)
    wanted = [w for w in args.configs.split(",") if w]
    jobs = _JOBS[args.kernel](PROG, args, wanted)
    if nvidia_tool("cuobjdump") is None:
        fail(PROG, "this Triton ships no cuobjdump in its CUDA backend: install a Triton wheel built with it")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        fail(PROG, "TRITON_INTERPRET is set: machine code needs the compiler, unset it")
    import triton

    from lowprec import provenance

    fields = FIELDS[args.kernel]
    rows = []
    for job in jobs:
        got = job()
        for row in got if isinstance(got, list) else [got]:  # a job gives a row, or one row per loop
            rows.append(row)
            print(", ".join(f"{k}={row[k]}" for k in fields if row.get(k) not in (None, "")), flush=True)
    out = Path(args.out)
    write_rows(out, fields, rows)
    kernel = {"int8_gemm": "lowprec.kernels.int8_fallback_kernels._gemm_kernel",
              "mor_cast": "lowprec.kernels.mor_quant._cast_error_kernel",
              "mor_sub_values": "lowprec.kernels.mor_subtensor_quant._values_kernel",
              "mor_sub_errors": "lowprec.kernels.mor_subtensor_quant._errors_kernel",
              "mor_gemm": "lowprec.kernels.mor_gemm._mor_gemm_kernel",
              "fp8_roundtrip": "lowprec.kernels.fp8_roundtrip.roundtrip"}[args.kernel]
    write_json(provenance_path(out), {
        **provenance.collect(), "time": provenance.now(), "argv": sys.argv[1:] if argv is None else list(argv),
        "target": "sm_90 (H100/H200), compiled by Triton without a GPU", "triton": triton.__version__,
        "kernel": kernel, "what": __doc__.strip().splitlines()[0],
        **({"ptxas": sorted({r["ptxas"] for r in rows}),
            "ptxas_from": "--ptxas" if args.ptxas else "Triton's for sm_90"} if args.kernel == "fp8_roundtrip" else {})})
    print(f"wrote {out} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
