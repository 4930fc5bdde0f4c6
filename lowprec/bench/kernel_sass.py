"""What the INT8 GEMM's main loop costs in instructions on the H100/H200 (sm_90), read from its
machine code on a machine without a GPU.

    python -m lowprec.bench.kernel_sass --groups 32,128 --out results/bench/int8_gemm_sass_sm90.csv

Each tuning candidate of ``lowprec.kernels.int8_fallback_tuning`` (at a K-group, in scale blocks of
``--block-rows`` rows on both sides) is compiled by Triton for sm_90 (its own ptxas, no GPU), its
machine code disassembled (Triton's ``cuobjdump``), and the kernel's hottest loop -- the longest
backward branch, the K loop -- counted by instruction. Per K-group, the tensor cores multiply 32
to 256 products per output element; what the CUDA cores add is the rescale of the int32 product
(at least three instructions per element: the accumulator's exact-add constant, its subtraction,
the fused multiply-add with the scale) and whatever the loop spends besides. At group 32 that
rescale, not the tensor cores, paces the kernel (``results/bench/profiles``'s INT8 rows), so the
instructions per element and K-group are its cost model, and spills (local loads and stores in
the loop) and per-element scale loads show here before a GPU minute is spent on them.

Columns: the candidate's ``config`` label, ``group``, ``block_rows``, ``loop_instructions`` (one
loop iteration: ``k_groups`` K-groups), ``per_element_group`` (loop instructions / (elements a
thread holds x k_groups)), the counts of ``fp32`` (FADD, FMUL, FFMA), ``fmul``, ``int`` (IADD3,
IMAD, LOP3, SHF, LEA, ISETP, VIADD and their uniform forms), ``moves`` (MOV), ``global_loads``
(LDG, LDGSTS), ``spills`` (LDL, STL), ``mma`` (warpgroup MMAs), and the kernel's ``registers``,
``shared`` and ``local`` bytes; ``error`` where a candidate did not compile. Static counts, not
timings: an issue slot per instruction and warp is the model, latency and the tensor cores'
overlap are not (the GPU benchmark ``lowprec.bench.int8_gemm`` times the same candidates).
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

PROG = "kernel_sass"
FIELDS = ("config", "group", "block_rows", "tma", "loop_instructions", "per_element_group", "fp32", "fmul", "int",
          "moves", "global_loads", "spills", "mma", "registers", "shared", "local", "error")

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
    """A cubin's instructions in address order, and its resource usage (``registers``, ``shared``,
    ``local`` bytes of its one function)."""
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
    res = dict(re.findall(r"\b(REG|SHARED|LOCAL):(\d+)", usage))
    return instrs, {"registers": int(res.get("REG", 0)), "shared": int(res.get("SHARED", 0)),
                    "local": int(res.get("LOCAL", 0))}


def hot_loop(instrs: list) -> list:
    """The instructions of the longest loop: from a backward branch's target to the branch (nested
    loops count inside the one that holds them); empty for straight-line code."""
    best: list = []
    for ins in instrs:
        if ins.op != "BRA":
            continue
        target = re.search(r"0x([0-9a-f]+)", ins.operands)
        if target and int(target.group(1), 16) < ins.address:
            body = [i for i in instrs if int(target.group(1), 16) <= i.address <= ins.address]
            if len(body) > len(best):
                best = body
    return best


def loop_counts(loop: list) -> dict:
    """Instruction classes of a loop body (the columns of this module's table)."""
    ops = collections.Counter(i.op.lstrip("U") if i.op.startswith("U") and i.op[1:] in _INT_OPS else i.op
                              for i in loop)
    return {
        "loop_instructions": len(loop),
        "fp32": ops["FADD"] + ops["FMUL"] + ops["FFMA"],
        "fmul": ops["FMUL"],
        "int": sum(ops[o] for o in _INT_OPS),
        "moves": ops["MOV"],
        "global_loads": ops["LDG"] + ops["LDGSTS"],
        "spills": ops["LDL"] + ops["STL"],
        "mma": ops["HGMMA"] + ops["IGMMA"] + ops["QGMMA"],
    }


def _require_compiled_kernels() -> None:
    from lowprec.kernels import int8_fallback_kernels as kk

    if kk.interpreter_active():
        raise RuntimeError("the kernels were built for the Triton interpreter (TRITON_INTERPRET=1): machine code "
                           "needs a process without it")


def compile_int8_gemm(cfg, group: int, block_rows: int, fused: bool = False):
    """The INT8 GEMM kernel (``int8_fallback_kernels._gemm_kernel``) under launch configuration
    ``cfg`` (a ``GemmConfig``), compiled for sm_90: K-groups of ``group``, scale blocks of
    ``block_rows`` rows on both operands, K a multiple of the group, pointers and sizes 16-aligned
    (as Triton specializes them at launch), ``fused``: with both second parts in the loop."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from lowprec.kernels import int8_fallback_kernels as kk

    _require_compiled_kernels()
    names = list(inspect.signature(kk._gemm_kernel.fn).parameters)
    kinds = dict.fromkeys(("a_ptr", "a_desc", "b_ptr", "b_desc", "ra_ptr", "fa_ptr", "rb_ptr", "fb_ptr"), "*i8")
    kinds.update(dict.fromkeys(("da_ptr", "db_ptr", "dra_ptr", "drb_ptr", "c_ptr"), "*fp32"))
    kinds.update(dict.fromkeys(("M", "N", "K", "n_kb"), "i32"))
    sig = {n: kinds.get(n, "constexpr") for n in names}
    if cfg.tma:
        sig["a_desc"] = f"tensordesc<i8[{cfg.block_m}, {group}]>"
        sig["b_desc"] = f"tensordesc<i8[{cfg.block_n}, {group}]>"
    const = dict(BMS=block_rows, BNS=block_rows, GK=group, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                 BLOCK_K=group, KG=cfg.k_groups, GROUP_M=cfg.group_m, EVEN_K=True, MAGIC=cfg.magic,
                 USE_TMA=cfg.tma, HAS_RA=fused, HAS_RB=fused, WS=cfg.warp_specialize, PIPE=cfg.pipelined)
    aligned = ("a_ptr", "b_ptr", "da_ptr", "db_ptr", "c_ptr", "M", "N", "K")
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in aligned}
    src = ASTSource(kk._gemm_kernel, sig, constexprs={k: v for k, v in const.items() if k in names}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
                                   "enable_fp_fusion": cfg.fp_fusion})


def int8_gemm_row(cfg, group: int, block_rows: int) -> dict:
    """This module's table row for one configuration (``error`` set where it did not compile)."""
    row = {"config": cfg.label(), "group": group, "block_rows": block_rows, "tma": cfg.tma}
    try:
        kernel = compile_int8_gemm(cfg, group, block_rows)
    except Exception as exc:  # a candidate Triton cannot build for sm_90 is a finding of the table
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
        return row
    instrs, usage = disassemble(kernel.asm["cubin"])
    counts = loop_counts(hot_loop(instrs))
    elements = cfg.block_m * cfg.block_n / (32 * cfg.num_warps)
    row.update(counts, **usage)
    row["shared"] = kernel.metadata.shared  # the pipeline's buffers too (the cubin lists static shared memory only)
    row["per_element_group"] = round(counts["loop_instructions"] / (elements * cfg.k_groups), 2)
    return row


def main(argv=None) -> int:
    from lowprec.bench.common import bench_parser, fail, parse_int_list, write_rows
    from lowprec.io import provenance_path, write_json

    p = bench_parser(PROG, __doc__)
    p.add_argument("--groups", default="32,128", help="K-groups (comma-separated)")
    p.add_argument("--block-rows", default="32,128",
                   help="scale-block rows, one per group in --groups (Jetfire's 32 x 32 blocks, the fallback's 128 x 128)")
    p.add_argument("--configs", default="",
                   help="only the candidates whose label contains one of these (comma-separated); default all")
    args = p.parse_args(argv)
    groups = parse_int_list(PROG, "--groups", args.groups)
    rows_per = parse_int_list(PROG, "--block-rows", args.block_rows)
    if len(rows_per) != len(groups):
        fail(PROG, f"--block-rows: one per group ({len(groups)}), got {len(rows_per)}")
    if nvidia_tool("cuobjdump") is None:
        fail(PROG, "this Triton ships no cuobjdump in its CUDA backend: install a Triton wheel built with it")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        fail(PROG, "TRITON_INTERPRET is set: machine code needs the compiler, unset it")
    from lowprec import provenance
    from lowprec.kernels import int8_fallback_tuning as kt

    wanted = [w for w in args.configs.split(",") if w]
    rows = []
    for group, block_rows in zip(groups, rows_per):
        for cfg in kt.candidate_configs(group, tma=True):
            if wanted and not any(w in cfg.label() for w in wanted):
                continue
            row = int8_gemm_row(cfg, group, block_rows)
            rows.append(row)
            print(", ".join(f"{k}={row[k]}" for k in FIELDS if row.get(k) not in (None, "")), flush=True)
    out = Path(args.out)
    write_rows(out, FIELDS, rows)
    import triton

    write_json(provenance_path(out), {
        **provenance.collect(), "time": provenance.now(), "argv": sys.argv[1:] if argv is None else list(argv),
        "target": "sm_90 (H100/H200), compiled by Triton without a GPU", "triton": triton.__version__,
        "kernel": "lowprec.kernels.int8_fallback_kernels._gemm_kernel", "what": __doc__.strip().splitlines()[0]})
    print(f"wrote {out} ({len(rows)} configurations)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
