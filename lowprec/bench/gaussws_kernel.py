"""Bandwidth benchmark of the fused GaussWS noise kernel (lowprec.kernels.gaussws_noise) on CUDA.

    python -m lowprec.bench.gaussws_kernel --out results/kernels/gaussws_noise_h200.csv

For each weight size (2^20 .. 2^28 parameters, square-ish shapes), master dtype (bf16, fp32) and
tiling configuration (elements per program, num_warps) it records the median time from
triton.testing.do_bench, the achieved bandwidth (W read once + W_c written once, bf16), and, measured
in the same run on the same tensor, x.clone() (the practical bandwidth ceiling) and x.to(bf16) (what
BF16 autocast spends on the weight each forward). matches_ref says whether the kernel's W_c equals the
torch reference fed the same Philox words, bit for bit (NaN-free inputs). ref_ms times the torch path
that runs without the kernel (torch.Generator bits). A provenance JSON goes beside the CSV
(<name>.provenance.json). The aim is >= 0.8 of clone bandwidth at large sizes; the best
configuration per (size, dtype) is marked best=1.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from lowprec.bench.common import (add_do_bench_args, bench_parser, do_bench_median, gpu_provenance, parse_int_list,
                                  parse_names, provenance_path, require_cuda_triton, write_provenance)

PROG = "gaussws_kernel"

SHAPES = {
    20: (1024, 1024), 21: (1024, 2048), 22: (2048, 2048), 23: (2048, 4096), 24: (4096, 4096),
    25: (4096, 8192), 26: (8192, 8192), 27: (8192, 16384), 28: (16384, 16384),
}
DEFAULT_SIZES = ",".join(str(s) for s in SHAPES)

FIELDS = [
    "in_dtype", "rows", "cols", "numel", "block", "b", "tile", "num_warps", "rounds", "bytes",
    "kernel_ms", "kernel_gbps", "clone_ms", "clone_gbps", "bw_ratio_vs_clone", "time_ratio_vs_clone",
    "cast_ms", "time_ratio_vs_cast", "ref_ms", "speedup_vs_ref", "matches_ref", "best",
]


def _parse(argv):
    p = bench_parser(f"lowprec.bench.{PROG}", __doc__, "CSV path; <name>.provenance.json goes beside it")
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help=f"comma-separated log2(numel) in {min(SHAPES)}..{max(SHAPES)}")
    p.add_argument("--dtypes", default="bf16,fp32", help="master weight dtypes (default bf16,fp32)")
    p.add_argument("--tiles", default="4096,8192,16384", help="elements per program to try (kernel _TILE)")
    p.add_argument("--warps", default="4,8", help="num_warps values to try")
    p.add_argument("--rounds", type=int, default=10,
                   help="Philox rounds (10 is the method's; fewer only to see what the generator costs)")
    p.add_argument("--block", type=int, default=32, help="square block side (default 32)")
    p.add_argument("--b", type=int, default=6, help="bit-width b (does not change the work)")
    add_do_bench_args(p)
    p.add_argument("--check-max", type=int, default=26,
                   help="bit-exact check against the torch reference up to this log2(numel) (default 26)")
    p.add_argument("--ref-max", type=int, default=26, help="time the torch path up to this log2(numel)")
    return p.parse_args(argv)


def _provenance(timer: str) -> dict:
    from lowprec.provenance import git_dirty

    return gpu_provenance(
        git_dirty=git_dirty(),
        timer=timer,
        bytes="W read once (2 or 4 B/elem) + W_c written once (2 B/elem)",
        clone="x.clone() of the same master weight: bytes = 2 * x.nbytes",
        cast="x.to(torch.bfloat16): the per-forward weight cast of BF16 autocast",
        reference="lowprec.methods.gaussws.gaussws_reference(rng='generator'), the path without the kernel",
    )


def main(argv=None) -> int:
    args = _parse(argv)
    torch, _ = require_cuda_triton(PROG, "tests/test_kernels_gaussws.py")

    from lowprec.methods import gaussws as gw
    from lowprec.kernels import gaussws_noise as kg

    sizes = parse_int_list(PROG, "--sizes", args.sizes, allowed=SHAPES)
    tiles = parse_int_list(PROG, "--tiles", args.tiles)
    warps = parse_int_list(PROG, "--warps", args.warps)
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    names = parse_names(PROG, "--dtypes", args.dtypes, tuple(dtypes))
    block = (args.block, args.block)

    out = Path(args.out)
    bench, timer = do_bench_median(args.warmup, args.rep, args.cudagraph)
    prov_path = provenance_path(out)
    write_provenance(prov_path, _provenance(timer))

    rows, mismatches = [], 0
    for log2n in sizes:
        m, n = SHAPES[log2n]
        for dname in names:
            gen = torch.Generator(device="cuda").manual_seed(log2n)
            x = (torch.randn(m, n, device="cuda", generator=gen) * 0.02).to(dtypes[dname])
            clone_ms = bench(lambda: x.clone())
            cast_ms = bench(lambda: x.to(torch.bfloat16)) if x.dtype != torch.bfloat16 else float("nan")
            clone_gbps = 2 * x.numel() * x.element_size() / clone_ms / 1e6
            nbytes = x.numel() * (x.element_size() + 2)
            match = ""
            if log2n <= args.check_max:
                seed = 12345 + log2n
                res = kg.gaussws_noise_ex(x, args.b, block, seed, rounds=args.rounds)
                if args.rounds == gw.PHILOX_ROUNDS:
                    ref = gw.gaussws_reference(x, args.b, block, seed=seed, rng="philox")[0]
                    match = str(torch.equal(res.w_c.view(torch.int16), ref.view(torch.int16)))
                    mismatches += match == "False"
                    del ref
                del res
                torch.cuda.empty_cache()
            ref_ms = float("nan")
            if log2n <= args.ref_max:
                ref_ms = bench(lambda: gw.gaussws_reference(x, args.b, block, seed=1, rng="generator"))
                torch.cuda.empty_cache()
            group = []
            for tile in tiles:
                for nw in warps:
                    kg._TILE, kg._NUM_WARPS = tile, nw
                    ms = bench(lambda: kg.gaussws_noise(x, args.b, block, 7, rounds=args.rounds))
                    gbps = nbytes / ms / 1e6
                    row = {
                        "in_dtype": dname, "rows": m, "cols": n, "numel": m * n, "block": f"{block[0]}x{block[1]}",
                        "b": args.b, "tile": tile, "num_warps": nw, "rounds": args.rounds, "bytes": nbytes,
                        "kernel_ms": f"{ms:.5f}", "kernel_gbps": f"{gbps:.1f}",
                        "clone_ms": f"{clone_ms:.5f}", "clone_gbps": f"{clone_gbps:.1f}",
                        "bw_ratio_vs_clone": f"{gbps / clone_gbps:.3f}", "time_ratio_vs_clone": f"{ms / clone_ms:.3f}",
                        "cast_ms": "" if cast_ms != cast_ms else f"{cast_ms:.5f}",
                        "time_ratio_vs_cast": "" if cast_ms != cast_ms else f"{ms / cast_ms:.3f}",
                        "ref_ms": "" if ref_ms != ref_ms else f"{ref_ms:.5f}",
                        "speedup_vs_ref": "" if ref_ms != ref_ms else f"{ref_ms / ms:.1f}",
                        "matches_ref": match, "best": 0, "_ms": ms,
                    }
                    group.append(row)
                    print(f"{dname:4s} {m:6d}x{n:<6d} tile {tile:6d} warps {nw:2d}  {ms:9.4f} ms {gbps:8.1f} GB/s"
                          f"  x{gbps / clone_gbps:.2f} of clone  match={match or '-'}", flush=True)
            min(group, key=lambda r: r["_ms"])["best"] = 1
            rows.extend(group)
            del x
            torch.cuda.empty_cache()

    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    print(f"# wrote {out} ({len(rows)} rows) and {prov_path}")
    for r in rows:
        if r["best"]:
            print(f"# best {r['in_dtype']:4s} 2^{int(r['numel']).bit_length() - 1}: tile {r['tile']} warps "
                  f"{r['num_warps']}  x{r['bw_ratio_vs_clone']} of clone")
    if mismatches:
        print(f"# WARNING: {mismatches} sizes differ from the torch reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
