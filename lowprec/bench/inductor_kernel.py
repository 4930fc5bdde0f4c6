"""One generated Inductor kernel of a committed profile, run on its own: as generated and in variants
that leave one part of its work out, to place its time before a change is built.

    python -m lowprec.bench.inductor_kernel --kernels results/bench/profiles/llama_1b_mor_block_e6882e4.kernels.txt \\
        --match _scaled_mm__to_copy --out results/bench/inductor_kernel_h200/mor_block_casts.csv

A profile's ``.kernels.txt`` (``lowprec.bench.e2e_step --profile-dir``) holds the source of the step's
largest Triton kernels with their launch metadata. This script compiles each kernel whose name holds
``--match`` with plain ``triton.jit`` on buffers of its signature's dtypes (sizes from the kernel's
own ``xnumel`` / ``r0_numel``; every buffer of that many elements; 16-bit inputs standard normal,
fp32 inputs uniform in [32, 64), as the GAM scales that MoR's casts read are), times it over a grid
of launch configurations (XBLOCK x R0_BLOCK x warps, the choices Inductor's heuristics pick from),
then times the variants at the fastest ``--top`` configurations:

* ``approx_div``: the correctly rounded division (``div_rn``, which the compiled blocks' eager
  numerics ask of Inductor for every division) as Triton's ``/`` (``div.full``, about 2 ulp);
* ``no_div``: the division left out (its numerator taken);
* ``no_transposed_store``: the store whose index runs along the reduced axis's transpose (x
  contiguous) left out.

Each row has the median time, the bandwidth of the bytes the kernel must move (its first input read
once, each output written once at the size its index gives), a plain ``clone`` of the first input
timed in the same run (the practical ceiling), and for variants whether their codes equal the
generated kernel's and how far their fp32 outputs moved. Variants measure where the time goes;
they are not kernels to run (they compute something else).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from lowprec.bench.common import (add_do_bench_args, bench_parser, do_bench_median, fail, gpu_provenance,
                                  jit_from_source, parse_names, parse_shapes, provenance_path, require_cuda_triton,
                                  write_provenance, write_rows)
from lowprec.errors import error_text

PROG = "inductor_kernel"
DEFAULT_KERNELS = "results/bench/profiles/llama_1b_mor_block_e6882e4.kernels.txt"
DEFAULT_CONFIGS = ",".join(f"{x}x{r}x{w}" for x in (1, 2, 4, 8, 16) for r in (512, 1024, 2048) for w in (4, 8)
                           if x * r <= 16384)
VARIANTS = ("approx_div", "no_div", "no_transposed_store")
FIELDS = ("kernel", "calls_per_step", "xnumel", "r0_numel", "variant", "xblock", "r0_block", "num_warps", "ms",
          "gbps", "clone_gbps", "share_of_clone", "codes_equal", "max_rel_diff")

_DTYPES = {"*bf16": "bfloat16", "*fp16": "float16", "*fp32": "float32", "*i32": "int32", "*i64": "int64",
           "*i8": "int8", "*u8": "uint8", "*i1": "bool", "*fp8e4nv": "float8_e4m3fn", "*fp8e5": "float8_e5m2"}
_DIV = re.compile(r"triton\.language\.div_rn\((\w+), (\w+)\)")
_TRANSPOSED_STORE = re.compile(r"^\s*tl\.store\(\w+ \+ \(x0 \+ \d+\*r0_\d+\).*\n", re.M)


class Kernel:
    """One kernel of a ``.kernels.txt`` file: its name, source, signature and sizes."""

    def __init__(self, header: str, body: str):
        m = re.match(r"# (\S+): ([\d.]+) ms in (\d+) calls", header)
        self.name, self.calls = (m.group(1), int(m.group(3))) if m else (header.split()[1].rstrip(":"), 0)
        jit = body.index("@triton.jit")
        meta = body[:jit]
        self.source = body[jit:]
        sig = re.search(r"'signature': (\{[^}]*\})", meta)
        if not sig:
            raise ValueError(f"{self.name}: no signature in its metadata")
        self.signature = ast.literal_eval(sig.group(1))
        self.fp_fusion = "'enable_fp_fusion': False" not in meta
        sizes = dict(re.findall(r"^\s*(xnumel|r0_numel) = (\d+)$", self.source, re.M))
        if "xnumel" not in sizes or "r0_numel" not in sizes:
            raise ValueError(f"{self.name}: not a reduction with constant sizes (xnumel, r0_numel)")
        self.xnumel, self.r0_numel = int(sizes["xnumel"]), int(sizes["r0_numel"])

    def variant_source(self, variant: str) -> str | None:
        """The kernel's source with one part left out, or None where it has no such part."""
        if variant == "as_generated":
            return self.source
        if variant in ("approx_div", "no_div"):
            new = _DIV.sub(r"(\1 / \2)" if variant == "approx_div" else r"(\1)", self.source)
        elif variant == "no_transposed_store":
            new = _TRANSPOSED_STORE.sub("", self.source)
        else:
            raise ValueError(variant)
        return new if new != self.source else None

    def store_sizes(self) -> dict:
        """Output pointer -> elements it is written at (full size where its index runs along r0)."""
        out = {}
        for ptr, index in re.findall(r"tl\.store\((\w+) \+ \(([^)]*)\)", self.source):
            out[ptr] = self.xnumel * self.r0_numel if "r0_" in index else self.xnumel
        return out


def read_kernels(path: Path, match: str) -> list:
    text = path.read_text()
    parts = re.split(r"^(# triton_\S+: .*)$", text, flags=re.M)
    kernels = []
    for header, body in zip(parts[1::2], parts[2::2]):
        if match in header.split(":")[0] and "@triton.jit" in body:
            try:
                kernels.append(Kernel(header, body))
            except ValueError as exc:
                print(f"# skipped: {exc}", flush=True)
    return kernels


def _compile(source: str, name: str):
    """The kernel function of `source` under plain triton.jit (Inductor's runtime helpers in scope)."""
    import triton
    import triton.language as tl
    from torch._inductor.runtime import triton_helpers
    from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math

    scope = {"triton": triton, "tl": tl, "triton_helpers": triton_helpers, "tl_math": tl_math, "libdevice": libdevice}
    return jit_from_source("import triton\nimport triton.language as tl\n" + source, name, scope)


def _buffers(k: Kernel, torch, dev):
    n = k.xnumel * k.r0_numel
    args = {}
    for ptr, kind in k.signature.items():
        if not kind.startswith("*"):
            continue
        if kind not in _DTYPES:
            raise ValueError(f"{k.name}: argument {ptr} of type {kind} is not handled")
        dtype = getattr(torch, _DTYPES[kind])
        if ptr.startswith("in"):
            if dtype in (torch.bfloat16, torch.float16):
                t = torch.randn(n, device=dev, dtype=dtype)
            elif dtype == torch.float32:
                t = torch.rand(n, device=dev) * 32 + 32
            else:
                t = torch.zeros(n, device=dev, dtype=dtype)
        else:
            t = torch.zeros(n, device=dev, dtype=dtype)
        args[ptr] = t
    return args


def main(argv=None) -> int:
    p = bench_parser(PROG, __doc__)
    p.add_argument("--kernels", default=DEFAULT_KERNELS, help="a profile's .kernels.txt")
    p.add_argument("--match", default="triton_red", help="time the kernels whose name contains this")
    p.add_argument("--configs", default=DEFAULT_CONFIGS, help="XBLOCKxR0_BLOCKxWARPS launch configurations")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"subset of {','.join(VARIANTS)}")
    p.add_argument("--top", type=int, default=3, help="variants are timed at this many fastest configurations")
    add_do_bench_args(p)
    args = p.parse_args(argv)
    path = Path(args.kernels)
    if not path.is_file():
        fail(PROG, f"--kernels: no file {path}")
    variants = parse_names(PROG, "--variants", args.variants, VARIANTS)
    configs = parse_shapes(PROG, "--configs", args.configs, form="XBLOCKxR0_BLOCKxWARPS")
    kernels = read_kernels(path, args.match)
    if not kernels:
        fail(PROG, f"--match: no reduction kernel of {path} has {args.match!r} in its name")
    torch, triton = require_cuda_triton(PROG)
    bench, timer = do_bench_median(args.warmup, args.rep, args.cudagraph)
    dev = torch.device("cuda")
    rows = []
    for k in kernels:
        bufs = _buffers(k, torch, dev)
        first = next(iter(bufs.values()))
        clone_ms = bench(lambda: first.clone())
        clone_gbps = 2 * first.numel() * first.element_size() / clone_ms / 1e6
        moved = first.numel() * first.element_size() + sum(
            n * bufs[ptr].element_size() for ptr, n in k.store_sizes().items())

        def run(fn, xb, rb, w):
            fn[(triton.cdiv(k.xnumel, xb),)](*bufs.values(), k.xnumel, k.r0_numel, XBLOCK=xb, R0_BLOCK=rb,
                                             num_warps=w, enable_fp_fusion=k.fp_fusion)

        def outputs():
            return {p: t.clone() for p, t in bufs.items() if p.startswith("out")}

        def row(variant, cfg, ms, ref=None):
            r = {"kernel": k.name, "calls_per_step": k.calls, "xnumel": k.xnumel, "r0_numel": k.r0_numel,
                 "variant": variant, "xblock": cfg[0], "r0_block": cfg[1], "num_warps": cfg[2], "ms": f"{ms:.4f}",
                 "gbps": f"{moved / ms / 1e6:.0f}", "clone_gbps": f"{clone_gbps:.0f}",
                 "share_of_clone": f"{moved / ms / 1e6 / clone_gbps:.3f}"}
            if ref is not None:
                got = outputs()
                codes = [torch.equal(got[p], ref[p]) for p in got if got[p].element_size() == 1]
                rel = [float(((got[p] - ref[p]).abs() / ref[p].abs().clamp_min(1e-30)).max())
                       for p in got if got[p].dtype == torch.float32]
                r["codes_equal"] = all(codes) if codes else ""
                r["max_rel_diff"] = f"{max(rel):.3g}" if rel else ""
            rows.append(r)
            print(",".join(str(r.get(f, "")) for f in FIELDS), flush=True)

        base = _compile(k.source, k.name)
        timed = []
        for cfg in configs:
            try:
                run(base, *cfg)
                torch.cuda.synchronize()
                ms = bench(lambda cfg=cfg: run(base, *cfg))
            except Exception as exc:  # noqa: BLE001 - a configuration the compiler refuses is skipped
                print(f"# {k.name} {cfg}: {error_text(exc, 160)}", flush=True)
                continue
            timed.append((ms, cfg))
            row("as_generated", cfg, ms)
        for ms0, cfg in sorted(timed)[:args.top]:
            run(base, *cfg)
            ref = outputs()
            for variant in variants:
                src = k.variant_source(variant)
                if src is None:
                    continue
                fn = _compile(src, k.name)
                run(fn, *cfg)
                torch.cuda.synchronize()
                ms = bench(lambda: run(fn, *cfg))
                row(variant, cfg, ms, ref)
    out = Path(args.out)
    write_rows(out, FIELDS, rows)
    write_provenance(provenance_path(out), gpu_provenance(timer=timer, kernels_file=str(path)))
    print(f"# wrote {out} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
