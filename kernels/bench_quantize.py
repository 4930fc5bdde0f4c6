"""Bandwidth benchmark of the Triton quantize kernels (lowprec.kernels.quantize) on CUDA.

    python -m lowprec.kernels.bench_quantize --out results/kernels/quantize_h200.csv

For every kernel configuration and size it records the median time from triton.testing.do_bench,
the achieved bandwidth (bytes the kernel must read and write), the same for a plain x.clone() of
the input measured in the same run (the practical bandwidth ceiling), the torch reference
(lowprec.numerics.quantize, then the conversion to the native dtype), and whether the kernel's
codes and scales equal the reference's at that size. A JSON provenance file is written beside the
CSV (same name, .json).
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

# (rows, cols) per log2(numel): square-ish from 2^24 up, 4096 rows below so that per-row and
# (128, 128) tilings still have thousands of programs.
SHAPES = {
    20: (4096, 256), 21: (4096, 512), 22: (4096, 1024), 23: (4096, 2048), 24: (4096, 4096),
    25: (8192, 4096), 26: (8192, 8192), 27: (16384, 8192), 28: (16384, 16384),
}
DEFAULT_SIZES = "20,22,24,26,28"

# (fmt, scaling, block, fp8_cast, stochastic). "delayed" is the per-tensor kernel with a given
# scale; "tensor" adds the amax pass of current scaling.
CONFIGS = [
    (fmt, scaling, block, cast, False)
    for fmt in ("e4m3", "e5m2")
    for scaling, block in (("delayed", None), ("tensor", None), ("channel", None), ("block", (1, 128)),
                           ("block", (128, 128)), ("block", (1, 32)), ("block", (32, 32)))
    for cast in ("native", "emulated")
] + [
    ("int8", scaling, block, "-", False)
    for scaling, block in (("delayed", None), ("tensor", None), ("channel", None), ("block", (1, 128)),
                           ("block", (128, 128)), ("block", (1, 32)), ("block", (32, 32)))
] + [
    ("int8", "delayed", None, "-", True),
    ("int8", "block", (1, 128), "-", True),
]

FIELDS = [
    "fmt", "scaling", "block", "fp8_cast", "rounding", "in_dtype", "rows", "cols", "numel",
    "bytes", "kernel_ms", "kernel_gbps", "clone_ms", "clone_gbps", "bw_ratio_vs_clone",
    "time_ratio_vs_clone", "ref_ms", "speedup_vs_ref", "matches_ref",
]


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m lowprec.kernels.bench_quantize", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="CSV path; the provenance JSON goes beside it")
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help=f"comma-separated log2(numel) from {min(SHAPES)}..{max(SHAPES)} (default {DEFAULT_SIZES})")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp32", "fp16"), help="input dtype (default bf16)")
    p.add_argument("--fmts", default="e4m3,e5m2,int8", help="comma-separated subset of e4m3,e5m2,int8")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warmup, ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition time, ms")
    p.add_argument("--no-reference", action="store_true", help="skip timing the torch reference")
    p.add_argument("--no-check", action="store_true", help="skip the bit-exact comparison with the reference")
    p.add_argument("--scalings", default="delayed,tensor,channel,block",
                   help="comma-separated subset of delayed,tensor,channel,block")
    p.add_argument("--tile", type=int, default=None,
                   help="tuning: elements one program holds (default lowprec.kernels.quantize._TILE)")
    p.add_argument("--num-warps", type=int, default=None, help="tuning: num_warps of the block kernel (default by tile size)")
    p.add_argument("--row-span", type=int, default=None,
                   help="tuning: contiguous columns a program covers for narrow blocks (default _MIN_ROW_SPAN)")
    return p.parse_args(argv)


def _fail(msg: str) -> NoReturn:
    print(f"bench_quantize: {msg}", file=sys.stderr)
    sys.exit(2)


def _git_commit():
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _driver():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def _provenance(args, torch, triton) -> dict:
    dev = torch.cuda.current_device()
    return {
        "utc_time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "gpu": torch.cuda.get_device_name(dev),
        "gpu_capability": ".".join(map(str, torch.cuda.get_device_capability(dev))),
        "driver": _driver(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "argv": sys.argv[1:],
        "timer": f"triton.testing.do_bench(warmup={args.warmup}, rep={args.rep}, return_mode='median')",
        "bytes": "input read + codes written + scales written (+ noise read for stochastic rounding; "
                 "+ a second input read for current 'tensor' scaling, whose amax pass reads x once more)",
        "clone": "x.clone() of the same input: bytes = 2 * x.nbytes",
        "tiling": {"tile": args.tile, "row_span": args.row_span, "num_warps": args.num_warps},
    }


def main(argv=None) -> int:
    args = _parse(argv)
    import torch

    if not torch.cuda.is_available():
        _fail("needs a CUDA device (torch.cuda.is_available() is False); the kernels' correctness "
              "tests run on CPU under TRITON_INTERPRET=1, but timings there mean nothing")
    if os.environ.get("TRITON_INTERPRET") == "1":
        _fail("TRITON_INTERPRET=1 is set: interpreted kernels cannot be benchmarked; unset it")
    try:
        import triton
        import triton.testing
    except ImportError as exc:
        _fail(f"Triton is not importable ({exc})")

    from lowprec.kernels import quantize as kq
    from lowprec.numerics import QuantSpec, compute_scale, quantize, to_torch_dtype

    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        _fail(f"--sizes: expected comma-separated integers, got {args.sizes!r}")
    bad = [s for s in sizes if s not in SHAPES]
    if bad:
        _fail(f"--sizes: {bad} not in {min(SHAPES)}..{max(SHAPES)}")
    fmts = [f.strip() for f in args.fmts.split(",") if f.strip()]
    if not set(fmts) <= {"e4m3", "e5m2", "int8"}:
        _fail(f"--fmts: unknown format in {fmts}")
    scalings = {c.strip() for c in args.scalings.split(",") if c.strip()}
    if args.tile is not None:
        kq._TILE = args.tile
    if args.row_span is not None:
        kq._MIN_ROW_SPAN = args.row_span
    if args.num_warps is not None:
        kq._NUM_WARPS = args.num_warps
    args.tile, args.row_span = kq._TILE, kq._MIN_ROW_SPAN  # recorded in the provenance
    native_ok = torch.cuda.get_device_capability() >= (8, 9)
    in_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[args.dtype]

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    prov = _provenance(args, torch, triton)
    out.with_suffix(".json").write_text(json.dumps(prov, indent=2) + "\n")
    print(f"# {prov['gpu']}  torch {prov['torch']}  triton {prov['triton']}  cuda {prov['cuda']}", flush=True)

    def bench(fn):
        return triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep, return_mode="median")

    rows = []
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        for log2n in sizes:
            m, n = SHAPES[log2n]
            gen = torch.Generator(device="cuda").manual_seed(log2n)
            x = torch.randn(m, n, device="cuda", generator=gen).to(in_dtype)
            noise = None
            clone_ms = bench(lambda: x.clone())
            clone_bytes = 2 * x.numel() * x.element_size()
            clone_gbps = clone_bytes / clone_ms / 1e6
            for fmt, scaling, block, cast, stochastic in CONFIGS:
                if fmt not in fmts or scaling not in scalings or (cast == "native" and not native_ok):
                    continue
                if stochastic and noise is None:
                    noise = torch.rand(m, n, device="cuda", generator=gen)
                spec = QuantSpec(fmt, scaling, block=block, rounding="stochastic" if stochastic else "nearest")
                # Delayed scaling's amax comes from history; any fixed value below x's own max
                # exercises saturation too.
                amax = torch.tensor(3.0, device="cuda") if scaling == "delayed" else None
                scale = compute_scale(x, spec, amax=amax) if amax is not None else None
                nz = noise if stochastic else None
                kw = {"fp8_cast": cast} if fmt != "int8" else {}

                def run_kernel():
                    return kq.quantize_spec(x, spec, scale=scale, noise=nz, **kw)

                codes, scales = run_kernel()
                ms = bench(run_kernel)
                nbytes = x.numel() * x.element_size() + codes.numel() * codes.element_size() + scales.numel() * 4
                if stochastic:
                    nbytes += noise.numel() * 4
                if scaling == "tensor":
                    nbytes += x.numel() * x.element_size()
                gbps = nbytes / ms / 1e6

                ref_ms, match = None, None
                if not (args.no_reference and args.no_check):
                    dtype = to_torch_dtype(fmt)

                    def run_ref():
                        q = quantize(x, spec, noise=nz, amax=amax)
                        return q.codes.to(torch.float32).to(dtype), q.scale

                    if not args.no_check:
                        ref_codes, ref_scales = run_ref()
                        match = _equal_codes(torch, codes, ref_codes) and torch.equal(scales, ref_scales)
                        del ref_codes, ref_scales
                    if not args.no_reference:
                        ref_ms = bench(run_ref)
                del codes, scales
                torch.cuda.empty_cache()
                row = {
                    "fmt": fmt, "scaling": scaling, "block": "x".join(map(str, block)) if block else "",
                    "fp8_cast": cast, "rounding": "stochastic" if stochastic else "nearest",
                    "in_dtype": args.dtype, "rows": m, "cols": n, "numel": m * n, "bytes": nbytes,
                    "kernel_ms": f"{ms:.5f}", "kernel_gbps": f"{gbps:.1f}",
                    "clone_ms": f"{clone_ms:.5f}", "clone_gbps": f"{clone_gbps:.1f}",
                    "bw_ratio_vs_clone": f"{gbps / clone_gbps:.3f}", "time_ratio_vs_clone": f"{ms / clone_ms:.3f}",
                    "ref_ms": f"{ref_ms:.5f}" if ref_ms is not None else "",
                    "speedup_vs_ref": f"{ref_ms / ms:.2f}" if ref_ms is not None else "",
                    "matches_ref": "" if match is None else str(bool(match)),
                }
                writer.writerow(row)
                fh.flush()
                rows.append(row)
                print(f"{fmt:5s} {scaling:8s} {row['block']:8s} {cast:8s} {row['rounding']:10s} "
                      f"{m:6d}x{n:<6d} {ms:9.4f} ms {gbps:8.1f} GB/s  x{gbps / clone_gbps:.2f} of clone"
                      f"  ref {row['ref_ms'] or '-':>10s} ms  match={row['matches_ref'] or '-'}", flush=True)
            del x, noise
            torch.cuda.empty_cache()
    mismatches = [r for r in rows if r["matches_ref"] == "False"]
    print(f"# wrote {out} ({len(rows)} rows) and {out.with_suffix('.json')}")
    if mismatches:
        print(f"# WARNING: {len(mismatches)} configurations differ from the torch reference", file=sys.stderr)
        return 1
    return 0


def _equal_codes(torch, got, want) -> bool:
    if got.dtype == torch.int8:
        return torch.equal(got, want)
    gn, wn = got.float().isnan(), want.float().isnan()
    return torch.equal(gn, wn) and torch.equal(got.view(torch.uint8)[~gn], want.view(torch.uint8)[~wn])


if __name__ == "__main__":
    sys.exit(main())
