"""Bandwidth benchmark of the fused GaussWS noise kernel (lowprec.kernels.gaussws_noise) on CUDA.

    python -m lowprec.kernels.bench_gaussws --out results/kernels/gaussws_noise_h200.csv

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
    p = argparse.ArgumentParser(prog="python -m lowprec.kernels.bench_gaussws", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="CSV path; <name>.provenance.json goes beside it")
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help=f"comma-separated log2(numel) in {min(SHAPES)}..{max(SHAPES)}")
    p.add_argument("--dtypes", default="bf16,fp32", help="master weight dtypes (default bf16,fp32)")
    p.add_argument("--tiles", default="4096,8192,16384", help="elements per program to try (kernel _TILE)")
    p.add_argument("--warps", default="4,8", help="num_warps values to try")
    p.add_argument("--rounds", type=int, default=10,
                   help="Philox rounds (10 is the method's; fewer only to see what the generator costs)")
    p.add_argument("--block", type=int, default=32, help="square block side (default 32)")
    p.add_argument("--b", type=int, default=6, help="bit-width b (does not change the work)")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warmup, ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition time, ms")
    p.add_argument("--check-max", type=int, default=26,
                   help="bit-exact check against the torch reference up to this log2(numel) (default 26)")
    p.add_argument("--ref-max", type=int, default=26, help="time the torch path up to this log2(numel)")
    return p.parse_args(argv)


def _fail(msg: str) -> NoReturn:
    print(f"bench_gaussws: {msg}", file=sys.stderr)
    sys.exit(2)


def _run(cmd, cwd=None):
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20)
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def _provenance(args, torch, triton) -> dict:
    dev = torch.cuda.current_device()
    here = Path(__file__).resolve().parent
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return {
        "utc_time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _run(["git", "rev-parse", "HEAD"], cwd=here),
        "git_dirty": bool(_run(["git", "status", "--porcelain"], cwd=here)),
        "gpu": torch.cuda.get_device_name(dev),
        "gpu_capability": ".".join(map(str, torch.cuda.get_device_capability(dev))),
        "driver": driver.splitlines()[0] if driver else None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "argv": sys.argv[1:],
        "timer": f"triton.testing.do_bench(warmup={args.warmup}, rep={args.rep}, return_mode='median')",
        "bytes": "W read once (2 or 4 B/elem) + W_c written once (2 B/elem)",
        "clone": "x.clone() of the same master weight: bytes = 2 * x.nbytes",
        "cast": "x.to(torch.bfloat16): the per-forward weight cast of BF16 autocast",
        "reference": "lowprec.gaussws.gaussws_reference(rng='generator'), the path without the kernel",
    }


def main(argv=None) -> int:
    args = _parse(argv)
    import torch

    if not torch.cuda.is_available():
        _fail("needs a CUDA device (torch.cuda.is_available() is False); the kernel's correctness tests "
              "run on CPU under TRITON_INTERPRET=1 (tests/test_kernels_gaussws.py), but timings there mean nothing")
    if os.environ.get("TRITON_INTERPRET") == "1":
        _fail("TRITON_INTERPRET=1 is set: interpreted kernels cannot be benchmarked; unset it")
    try:
        import triton
        import triton.testing
    except ImportError as exc:
        _fail(f"Triton is not importable ({exc})")

    from lowprec import gaussws as gw
    from lowprec.kernels import gaussws_noise as kg

    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        tiles = [int(s) for s in args.tiles.split(",") if s.strip()]
        warps = [int(s) for s in args.warps.split(",") if s.strip()]
    except ValueError:
        _fail("--sizes/--tiles/--warps: expected comma-separated integers")
    bad = [s for s in sizes if s not in SHAPES]
    if bad:
        _fail(f"--sizes: {bad} not in {min(SHAPES)}..{max(SHAPES)}")
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    names = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if not set(names) <= set(dtypes):
        _fail(f"--dtypes: choose from {sorted(dtypes)}")
    block = (args.block, args.block)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    prov = _provenance(args, torch, triton)
    prov_path = out.with_name(out.stem + ".provenance.json")
    prov_path.write_text(json.dumps(prov, indent=2) + "\n")
    print(f"# {prov['gpu']}  driver {prov['driver']}  torch {prov['torch']}  triton {prov['triton']}  "
          f"cuda {prov['cuda']}", flush=True)

    def bench(fn):
        return triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep, return_mode="median")

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
