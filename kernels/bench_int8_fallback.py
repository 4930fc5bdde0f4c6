"""Throughput of the block-scaled INT8 GEMM with fallback (lowprec.kernels.int8_fallback_gemm) on CUDA.

    python -m lowprec.kernels.bench_int8_fallback --out results/int8_fallback/gemm_h200.csv

Two sweeps over square GEMMs M = N = K (default 2048, 4096, 8192, the paper's figure dims):

* group: throughput against the quantization group size along K (default 32, 64, 128, 256), with
  no block falling back: the form of the paper's figure (b), "Throughput with varying Group Size K"
  (RTX 4090 there; whatever GPU runs this here).
* ratio: throughput against the share of A blocks that fall back (default 0 to 50 %), at the
  groups in --ratio-groups, with the fallback blocks spread at random ("random") or as whole
  block-rows, i.e. tokens ("rows").

Each row is one timing (triton.testing.do_bench, median). Baselines measured in the same run, same
shape: BF16 ``torch.matmul`` (cuBLAS), ``torch._int_mm`` (cuBLAS INT8, B column-major, no scales:
the reachable INT8 ceiling) and our kernel without fallback (kind ``int8_block``). Columns:
``tflops`` is the useful rate 2MNK / t; ``tops_issued`` counts the extra INT8 products the kernel
really issues (a tile issues one whenever any of its row-blocks falls back at that K-step, so
``tile_ratio`` >= ``fallback_ratio``). ``quantize_fallback`` rows time the quantize pass on a BF16
A (one pass with an in-kernel threshold, and with a mask), as GB/s of the bytes it must move.
``max_rel_err`` (unless --no-check): the kernel's output against the float64 product of the
dequantized operands, max |diff| / max |exact|. A JSON provenance file is written beside the CSV.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from lowprec.bench.common import (add_do_bench_args, bench_parser, do_bench_median, fail, gpu_provenance,
                                  parse_int_list, parse_list, require_cuda_triton, write_provenance)

PROG = "bench_int8_fallback"

DEFAULT_SIZES = "2048,4096,8192"
DEFAULT_GROUPS = "32,64,128,256"
DEFAULT_RATIOS = "0,0.01,0.02,0.05,0.1,0.2,0.5"

FIELDS = [
    "sweep", "kind", "M", "N", "K", "group", "block_rows", "pattern", "fallback_target", "fallback_ratio",
    "tile_ratio", "block_m", "block_n", "ms", "tflops", "tops_issued", "gbps", "speedup_vs_bf16",
    "speedup_vs_int_mm", "speedup_vs_int8_block", "max_rel_err",
]


def _parse(argv):
    p = bench_parser("lowprec.kernels.bench_int8_fallback", __doc__)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"square GEMM sizes (default {DEFAULT_SIZES})")
    p.add_argument("--groups", default=DEFAULT_GROUPS, help=f"K-group sizes (default {DEFAULT_GROUPS})")
    p.add_argument("--ratios", default=DEFAULT_RATIOS, help=f"fallback shares of A blocks (default {DEFAULT_RATIOS})")
    p.add_argument("--ratio-groups", default="32,128", help="groups for the ratio sweep (default 32,128)")
    p.add_argument("--patterns", default="random,rows", help="where fallback blocks sit: random,rows")
    p.add_argument("--block-rows", type=int, default=32,
                   help="rows per scale block of A and B (default 32: Jetfire's 32x32 at group 32)")
    p.add_argument("--sweeps", default="group,ratio,quantize", help="subset of group,ratio,quantize")
    p.add_argument("--block-m", type=int, default=None, help="tuning: output tile rows (default 128)")
    p.add_argument("--block-n", type=int, default=None, help="tuning: output tile columns (default 128)")
    p.add_argument("--num-warps", type=int, default=None, help="tuning: num_warps (default 8)")
    p.add_argument("--num-stages", type=int, default=None, help="tuning: num_stages (default 3, 2 above group 128)")
    add_do_bench_args(p)
    p.add_argument("--no-check", action="store_true", help="skip the float64 accuracy check")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _provenance(timer: str) -> dict:
    return gpu_provenance(
        timer=timer,
        operands="A (M, K) and B (N, K) int8 codes uniform in [-127, 127], K contiguous; decode scales "
                 "uniform in [0.5, 1.5) / 127 per (block_rows x group) block; fallback residual codes "
                 "random in flagged A blocks, zero elsewhere",
        tflops="2*M*N*K / time (useful work); tops_issued adds 2*M*N*K*tile_ratio for the extra products",
        baselines={"bf16": "torch.matmul(a_bf16, b_bf16.t())",
                   "int_mm": "torch._int_mm(a_int8, b_int8.t()) (B column-major), int32 out, no scales"},
        paper_reference="arXiv 2503.08040 figure (b): throughput vs group size K on RTX 4090, dims 2048/4096/8192",
    )


def main(argv=None) -> int:
    args = _parse(argv)
    torch, _ = require_cuda_triton(PROG, "tests/test_kernels_int8_fallback.py")
    from lowprec.kernels import int8_fallback_gemm as kf

    sizes = parse_int_list(PROG, "--sizes", args.sizes)
    groups = parse_int_list(PROG, "--groups", args.groups)
    ratios = parse_list(PROG, "--ratios", args.ratios, float)
    ratio_groups = parse_int_list(PROG, "--ratio-groups", args.ratio_groups)
    patterns = parse_list(PROG, "--patterns", args.patterns, str)
    sweeps = set(parse_list(PROG, "--sweeps", args.sweeps, str))
    if not set(patterns) <= {"random", "rows"}:
        fail(PROG, f"--patterns: unknown pattern in {patterns}")
    if not sweeps <= {"group", "ratio", "quantize"}:
        fail(PROG, f"--sweeps: unknown sweep in {sorted(sweeps)}")
    if any(not 0.0 <= r <= 1.0 for r in ratios):
        fail(PROG, "--ratios: shares must be within [0, 1]")
    br = args.block_rows
    tune = {"block_m": args.block_m, "block_n": args.block_n, "num_warps": args.num_warps,
            "num_stages": args.num_stages}
    bm, bn, _, _ = kf._gemm_config(1 << 20, 1 << 20, 128, args.block_m, args.block_n, None, None)

    out = Path(args.out)
    bench, timer = do_bench_median(args.warmup, args.rep)
    write_provenance(out.with_suffix(".json"), _provenance(timer))

    gen = torch.Generator(device="cuda").manual_seed(args.seed)

    def scales(rows, nkb):
        return (torch.rand(rows, nkb, device="cuda", generator=gen) + 0.5) / 127.0

    def flags_for(ratio, pattern, n_brow, nkb):
        n = n_brow * nkb
        f = torch.zeros(n_brow, nkb, dtype=torch.int8, device="cuda")
        if pattern == "rows":
            k = int(ratio * n_brow + 0.5)
            f[torch.randperm(n_brow, device="cuda", generator=gen)[:k]] = 1
        else:
            k = int(ratio * n + 0.5)
            f.view(-1)[torch.randperm(n, device="cuda", generator=gen)[:k]] = 1
        return f

    def tile_ratio(f):
        # a tile of bm rows issues the extra product if any of its row-blocks is flagged
        rows_per_tile = max(bm // br, 1)
        n_tiles = -(-f.shape[0] // rows_per_tile)
        pad = n_tiles * rows_per_tile - f.shape[0]
        ff = torch.nn.functional.pad(f.float(), (0, 0, 0, pad)).reshape(n_tiles, rows_per_tile, -1)
        return float(ff.amax(dim=1).mean())

    def check(y, qa, da, qb, db, ra=None, dra=None, fa=None, group=None):
        if args.no_check:
            return ""

        def deq(q, d, rows):
            full = d.double().repeat_interleave(rows, 0)[: q.shape[0]].repeat_interleave(group, 1)
            return q.double() * full[:, : q.shape[1]]

        a = deq(qa, da, br)
        if ra is not None:
            dra_eff = torch.where(fa.bool(), dra, torch.zeros_like(dra))
            a = a + deq(ra, dra_eff, br)
        exact = a @ deq(qb, db, br).t()
        err = float((y.double() - exact).abs().max() / exact.abs().max())
        del a, exact
        return f"{err:.2e}"

    rows = []
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()

        def emit(row):
            full = {k: row.get(k, "") for k in FIELDS}
            writer.writerow(full)
            fh.flush()
            rows.append(full)
            print(f"{full['sweep']:8s} {full['kind']:18s} {full['M']:>5} g={full['group']!s:>4} "
                  f"{full['pattern']:>6} rho={full['fallback_ratio']!s:>6} {float(full['ms']):9.4f} ms "
                  f"{full['tflops']:>8} TOPS  x{full['speedup_vs_bf16'] or '-'} vs bf16  "
                  f"err {full['max_rel_err'] or '-'}",
                  flush=True)

        for S in sizes:
            M = N = K = S
            a16 = torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16)
            b16 = torch.randn(N, K, device="cuda", generator=gen).to(torch.bfloat16)
            qa = torch.randint(-127, 128, (M, K), device="cuda", generator=gen, dtype=torch.int8)
            qb = torch.randint(-127, 128, (N, K), device="cuda", generator=gen, dtype=torch.int8)
            flop = 2.0 * M * N * K
            t_bf16 = bench(lambda: torch.matmul(a16, b16.t()))
            t_int = bench(lambda: torch._int_mm(qa, qb.t()))
            base = dict(M=M, N=N, K=K, block_rows=br, block_m=bm, block_n=bn)
            emit({**base, "sweep": "baseline", "kind": "bf16_matmul", "ms": f"{t_bf16:.5f}",
                  "tflops": f"{flop / t_bf16 / 1e9:.1f}", "speedup_vs_bf16": "1.00",
                  "speedup_vs_int_mm": f"{t_int / t_bf16:.2f}"})
            emit({**base, "sweep": "baseline", "kind": "int_mm", "ms": f"{t_int:.5f}",
                  "tflops": f"{flop / t_int / 1e9:.1f}", "speedup_vs_bf16": f"{t_bf16 / t_int:.2f}",
                  "speedup_vs_int_mm": "1.00"})

            no_fb = {}
            for g in sorted(set(groups) | (set(ratio_groups) if "ratio" in sweeps else set())):
                nkb = -(-K // g)
                da, db = scales(-(-M // br), nkb), scales(-(-N // br), nkb)

                def run_plain():
                    return kf.int8_fallback_gemm(qa, da, qb, db, (br, g), (br, g), **tune)

                y = run_plain()
                err = check(y, qa, da, qb, db, group=g)
                del y
                t = bench(run_plain)
                no_fb[g] = t
                if "group" in sweeps and g in groups:
                    emit({**base, "sweep": "group", "kind": "int8_block", "group": g, "fallback_target": 0,
                          "fallback_ratio": 0, "tile_ratio": 0, "ms": f"{t:.5f}", "tflops": f"{flop / t / 1e9:.1f}",
                          "tops_issued": f"{flop / t / 1e9:.1f}", "speedup_vs_bf16": f"{t_bf16 / t:.2f}",
                          "speedup_vs_int_mm": f"{t_int / t:.2f}", "speedup_vs_int8_block": "1.00",
                          "max_rel_err": err})
                if "ratio" not in sweeps or g not in ratio_groups:
                    continue
                ra = torch.randint(-127, 128, (M, K), device="cuda", generator=gen, dtype=torch.int8)
                dra = scales(-(-M // br), nkb) / 254.0
                for pattern in patterns:
                    for ratio in ratios:
                        fa = flags_for(ratio, pattern, -(-M // br), nkb)
                        # residual codes only where flagged, as the quantizer writes them
                        ra_f = torch.where(fa.repeat_interleave(br, 0)[:M].repeat_interleave(g, 1)[:, :K].bool(),
                                           ra, torch.zeros_like(ra))

                        def run_fb():
                            return kf.int8_fallback_gemm(qa, da, qb, db, (br, g), (br, g), ra_f, dra, fa, **tune)

                        y = run_fb()
                        err = check(y, qa, da, qb, db, ra_f, dra, fa, group=g)
                        del y
                        t = bench(run_fb)
                        actual = float(fa.float().mean())
                        tr = tile_ratio(fa)
                        emit({**base, "sweep": "ratio", "kind": "int8_fallback", "group": g, "pattern": pattern,
                              "fallback_target": ratio, "fallback_ratio": f"{actual:.4f}", "tile_ratio": f"{tr:.4f}",
                              "ms": f"{t:.5f}", "tflops": f"{flop / t / 1e9:.1f}",
                              "tops_issued": f"{flop * (1 + tr) / t / 1e9:.1f}",
                              "speedup_vs_bf16": f"{t_bf16 / t:.2f}", "speedup_vs_int_mm": f"{t_int / t:.2f}",
                              "speedup_vs_int8_block": f"{no_fb[g] / t:.2f}", "max_rel_err": err})
                        del ra_f, fa
                del ra, dra, da, db
                torch.cuda.empty_cache()

            if "quantize" in sweeps:
                for g in sorted(set(ratio_groups)):
                    block = (br, g)
                    if kf._next_pow2(br) * kf._next_pow2(g) > kf._MAX_BLOCK_ELEMS:
                        continue
                    thr = torch.tensor(3.0, device="cuda")  # a few % of Gaussian blocks exceed it
                    mask = torch.rand(-(-M // br), -(-K // g), device="cuda", generator=gen) < 0.05
                    nbytes = a16.numel() * 2 + 2 * a16.numel() + 8 * mask.numel() + mask.numel()
                    for mode, kw in (("threshold", {"threshold": thr}), ("mask", {"mask": mask})):
                        t = bench(lambda: kf.quantize_fallback_int8(a16, block, **kw))
                        emit({**base, "sweep": "quantize", "kind": f"quantize_fallback_{mode}", "group": g,
                              "ms": f"{t:.5f}", "gbps": f"{nbytes / t / 1e6:.1f}"})
            del a16, b16, qa, qb
            torch.cuda.empty_cache()
    print(f"# wrote {out} ({len(rows)} rows) and {out.with_suffix('.json')}")
    bad = [r for r in rows if r["max_rel_err"] and float(r["max_rel_err"]) > 1e-4]
    if bad:
        print(f"# WARNING: {len(bad)} rows differ from the float64 product by more than 1e-4", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
