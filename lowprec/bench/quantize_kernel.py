"""Bandwidth benchmark of the Triton quantize kernels (lowprec.kernels.quantize) on CUDA.

    python -m lowprec.bench.quantize_kernel --out results/kernels/quantize_h200.csv

Scaling ``block_t`` is ``quantize_fp8_with_transpose`` (the 1x128 blocks of x and of x.T from one read,
the pair a blockwise-FP8 training step quantizes for each activation and gradient); its bytes count
both codes and both scale grids, its check compares both with the reference.

For every kernel configuration and size it records the median time from triton.testing.do_bench,
the achieved bandwidth (bytes the kernel must read and write), the same for a plain x.clone() of
the input measured in the same run (the practical bandwidth ceiling), the torch reference
(lowprec.numerics.quantize, then the conversion to the native dtype), and whether the kernel's
codes and scales equal the reference's at that size. A JSON provenance file is written beside the
CSV (<name>.provenance.json).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from lowprec.bench.common import (add_do_bench_args, bench_parser, do_bench_median, gpu_provenance, parse_int_list,
                                  parse_names, provenance_path, require_cuda_triton, write_provenance)

PROG = "quantize_kernel"

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
                           ("block", (128, 128)), ("block", (1, 32)), ("block", (32, 32)), ("block_t", (1, 128)))
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
    p = bench_parser(f"lowprec.bench.{PROG}", __doc__)
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help=f"comma-separated log2(numel) from {min(SHAPES)}..{max(SHAPES)} (default {DEFAULT_SIZES})")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp32", "fp16"), help="input dtype (default bf16)")
    p.add_argument("--fmts", default="e4m3,e5m2,int8", help="comma-separated subset of e4m3,e5m2,int8")
    add_do_bench_args(p)
    p.add_argument("--no-reference", action="store_true", help="skip timing the torch reference")
    p.add_argument("--no-check", action="store_true", help="skip the bit-exact comparison with the reference")
    p.add_argument("--scalings", default="delayed,tensor,channel,block,block_t",
                   help="comma-separated subset of delayed,tensor,channel,block,block_t")
    p.add_argument("--tile", type=int, default=None,
                   help="tuning: elements one program holds (default lowprec.kernels.quantize._TILE)")
    p.add_argument("--num-warps", type=int, default=None,
                   help="tuning: num_warps of the block kernels, block and block_t (default by tile / block size)")
    p.add_argument("--strip", type=int, default=None,
                   help="tuning (block_t): sweep each 128x128 tile in column strips this wide (default: whole)")
    p.add_argument("--row-span", type=int, default=None,
                   help="tuning: contiguous columns a program covers for narrow blocks (default _MIN_ROW_SPAN)")
    return p.parse_args(argv)


def _provenance(args, timer: str) -> dict:
    return gpu_provenance(
        timer=timer,
        bytes="input read + codes written + scales written (+ noise read for stochastic rounding; "
              "+ a second input read for current 'tensor' scaling, whose amax pass reads x once more; "
              "block_t: both codes and both scale grids written)",
        clone="x.clone() of the same input: bytes = 2 * x.nbytes",
        tiling={"tile": args.tile, "row_span": args.row_span, "num_warps": args.num_warps,
                "block_t_strip": args.strip},
    )


def main(argv=None) -> int:
    args = _parse(argv)
    torch, _ = require_cuda_triton(PROG, "tests/test_kernels_quantize.py")

    from lowprec.kernels import quantize as kq
    from lowprec.numerics import QuantSpec, compute_scale, quantize, to_torch_dtype

    sizes = parse_int_list(PROG, "--sizes", args.sizes, allowed=SHAPES)
    fmts = parse_names(PROG, "--fmts", args.fmts, ("e4m3", "e5m2", "int8"))
    scalings = set(parse_names(PROG, "--scalings", args.scalings, ("delayed", "tensor", "channel", "block", "block_t")))
    if args.tile is not None:
        kq._TILE = args.tile
    if args.row_span is not None:
        kq._MIN_ROW_SPAN = args.row_span
    if args.num_warps is not None:
        kq._NUM_WARPS = kq._ROWS_COLS_WARPS = args.num_warps
    kq._ROWS_COLS_STRIP = args.strip
    args.tile, args.row_span = kq._TILE, kq._MIN_ROW_SPAN  # recorded in the provenance
    native_ok = torch.cuda.get_device_capability() >= (8, 9)
    in_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[args.dtype]

    out = Path(args.out)
    bench, timer = do_bench_median(args.warmup, args.rep, args.cudagraph)
    write_provenance(provenance_path(out), _provenance(args, timer))

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
                pair = scaling == "block_t"  # x and x.T in (1, 128) blocks from one read
                spec = QuantSpec(fmt, "block" if pair else scaling, block=block,
                                 rounding="stochastic" if stochastic else "nearest")
                # Delayed scaling's amax comes from history; any fixed value below x's own max
                # exercises saturation too.
                amax = torch.tensor(3.0, device="cuda") if scaling == "delayed" else None
                scale = compute_scale(x, spec, amax=amax) if amax is not None else None
                nz = noise if stochastic else None
                kw = {"fp8_cast": cast} if fmt != "int8" else {}

                def run_kernel():
                    if pair:
                        return kq.quantize_fp8_with_transpose(x, fmt, block[1], **kw)
                    return kq.quantize_spec(x, spec, scale=scale, noise=nz, **kw)

                outs = run_kernel()
                ms = bench(run_kernel)
                nbytes = x.numel() * x.element_size() + sum(t.numel() * t.element_size() for t in outs)
                if stochastic:
                    nbytes += noise.numel() * 4
                if scaling == "tensor":
                    nbytes += x.numel() * x.element_size()
                gbps = nbytes / ms / 1e6

                ref_ms, match = None, None
                if not (args.no_reference and args.no_check):
                    dtype = to_torch_dtype(fmt)

                    def run_ref():
                        refs = []
                        for view in ((x, x.t()) if pair else (x,)):
                            q = quantize(view, spec, noise=nz, amax=amax)
                            refs += [q.codes.to(torch.float32).to(dtype), q.scale]
                        return refs

                    if not args.no_check:
                        refs = run_ref()
                        match = all(_equal_codes(torch, got, want) if i % 2 == 0 else torch.equal(got, want)
                                    for i, (got, want) in enumerate(zip(outs, refs)))
                        del refs
                    if not args.no_reference:
                        ref_ms = bench(run_ref)
                del outs
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
    print(f"# wrote {out} ({len(rows)} rows) and {provenance_path(out)}")
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
