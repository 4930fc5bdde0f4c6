"""Throughput of the block-scaled Triton GEMM (``lowprec.kernels.block_fp8_gemm``) on the GEMMs of a
~1B training step: both operand dtypes it takes (E4M3 codes, as blockwise FP8's weight gradient;
BF16 values on a code grid, as sub-tensor MoR's operands), 128x128 scale blocks on both sides,
each operand K-contiguous or a transposed view (as a backward GEMM gets it), launched directly and
through the compiled ``lowprec::block_scaled_mm_cuda`` operator (as training launches it), in the
default and a few other tile configurations; BF16 codes also through ``fp8_tiles`` with every tile
flagged (sub-tensor MoR's FP8 launch). BF16 ``torch.matmul`` and FP8 rowwise
``torch._scaled_mm`` run on the same shapes in the same run; ratios are against that BF16.

    python -m lowprec.bench.block_scaled_gemm --out results/bench/block_scaled_gemm_h200.csv

Each row's ``max_rel_err`` is against the fp32 product of the dequantized operands (the kernel
must agree to fp32 summation order whatever the configuration).
"""

from __future__ import annotations

import sys
from pathlib import Path

from lowprec.bench.common import (Budget, add_do_bench_args, bench_parser, do_bench_median, fail, fresh_compilation,
                                  gpu_provenance, parse_names, parse_shapes, require_cuda_triton, write_budgeted_run,
                                  provenance_path, write_provenance)
from lowprec.errors import error_text

PROG = "lowprec.bench.block_scaled_gemm"
FIELDS = ("M", "N", "K", "dtype", "layout", "launch", "config", "ms", "tflops", "ratio_vs_bf16",
          "scaled_mm_rowwise_ratio_vs_bf16", "max_rel_err")
DEFAULT_SHAPES = "16384x2048x2048,16384x5632x2048,16384x2048x5632,2048x2048x16384,5632x2048x16384"
LAYOUTS = ("k_contiguous", "a_transposed_view", "b_transposed_view")
DTYPES = ("bf16", "e4m3")
BLOCK = (128, 128)
# (block_m, block_n, block_k, num_warps, num_stages); the default configuration always runs too
EXTRA_CONFIGS = ((128, 128, 128, 8, 3), (128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (256, 128, 64, 8, 3))


def _parse(argv):
    p = bench_parser(PROG, __doc__)
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK list (default: the ~1B step's GEMMs)")
    p.add_argument("--dtypes", default=",".join(DTYPES), help=f"subset of {','.join(DTYPES)}")
    p.add_argument("--layouts", default=",".join(LAYOUTS), help=f"subset of {','.join(LAYOUTS)}")
    p.add_argument("--configs", action="store_true", help="also time EXTRA_CONFIGS (K-contiguous, direct launch)")
    p.add_argument("--budget-s", type=float, default=None, help="start nothing new after this many seconds")
    add_do_bench_args(p)
    return p.parse_args(argv)


def _shapes(text: str) -> list:
    shapes = parse_shapes(PROG, "--shapes", text)
    bad = [s for s in shapes if s[2] % BLOCK[1]]
    if bad:
        fail(PROG, f"--shapes: K must be a multiple of {BLOCK[1]}, got {bad}")
    return shapes


def _operand(torch, rows, k, dtype, transposed, gen):
    """Codes (rows, K) of `dtype` with an fp32 encode-scale grid over BLOCK; a transposed view of a
    (K, rows) tensor when `transposed`."""
    vals = torch.randn(rows, k, device="cuda", generator=gen) * 64
    codes = vals.to(torch.float8_e4m3fn) if dtype == "e4m3" else vals.to(torch.float8_e4m3fn).to(torch.bfloat16)
    if transposed:
        codes = codes.t().contiguous().t()
    scales = torch.rand(-(-rows // BLOCK[0]), k // BLOCK[1], device="cuda", generator=gen) + 0.5
    return codes, scales


def main(argv=None) -> int:
    args = _parse(argv)
    shapes = _shapes(args.shapes)
    dtypes = parse_names(PROG, "--dtypes", args.dtypes, DTYPES)
    layouts = parse_names(PROG, "--layouts", args.layouts, LAYOUTS)
    torch, _ = require_cuda_triton(PROG, "tests/test_kernels_block_fp8_gemm.py")
    from lowprec.gemm import block_scaled_mm_cuda, dequantized
    from lowprec.kernels import block_fp8_gemm as kg

    bench, timer = do_bench_median(args.warmup, args.rep, args.cudagraph)
    out = Path(args.out)
    prov = gpu_provenance(timer=timer, block=list(BLOCK))
    write_provenance(provenance_path(out), prov)
    budget, rows = Budget(args.budget_s), []

    def op(a, sa, b, sb):
        return block_scaled_mm_cuda(a, sa, list(BLOCK), b, sb, list(BLOCK), torch.bfloat16)

    gen = torch.Generator(device="cuda").manual_seed(0)
    try:
        for M, N, K in shapes:
            flop = 2.0 * M * N * K
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
            t_bf16 = bench(lambda: torch.matmul(x, w.t()))
            x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
            sx, sw = torch.ones(M, 1, device="cuda"), torch.ones(1, N, device="cuda")
            t_rw = bench(lambda: torch._scaled_mm(x8, w8.t(), sx, sw, out_dtype=torch.bfloat16))
            base = dict(M=M, N=N, K=K, scaled_mm_rowwise_ratio_vs_bf16=f"{t_bf16 / t_rw:.3f}")
            rows.append({**base, "dtype": "bf16", "layout": "k_contiguous", "launch": "torch.matmul",
                         "ms": f"{t_bf16:.4f}", "tflops": f"{flop / t_bf16 / 1e9:.1f}", "ratio_vs_bf16": "1.000"})
            del x, w, x8, w8
            for dtype in dtypes:
                for layout in layouts:
                    if not budget.allows(f"{M}x{N}x{K} {dtype} {layout}"):
                        continue
                    a, sa = _operand(torch, M, K, dtype, layout == "a_transposed_view", gen)
                    b, sb = _operand(torch, N, K, dtype, layout == "b_transposed_view", gen)
                    want = dequantized(a, sa, BLOCK) @ dequantized(b, sb, BLOCK).t()
                    fresh_compilation()
                    compiled = torch.compile(op, dynamic=False)
                    launches = [("direct", "default", lambda: kg.block_scaled_mm(a, sa, BLOCK, b, sb, BLOCK,
                                                                                 torch.bfloat16)),
                                ("compiled_op", "default", lambda: compiled(a, sa, b, sb))]
                    if dtype == "bf16" and layout == "k_contiguous":
                        # sub-tensor MoR's split with every block-row flagged all-E4M3 (the codes are
                        # E4M3's): the FP8 launch computes every tile, the BF16 one none
                        tiles = (a.to(torch.float8_e4m3fn), torch.ones(sa.shape[0], dtype=torch.int8, device="cuda"),
                                 b.to(torch.float8_e4m3fn), torch.ones(sb.shape[0], dtype=torch.int8, device="cuda"))
                        launches.append(("direct", "fp8_tiles_all", lambda: kg.block_scaled_mm(
                            a, sa, BLOCK, b, sb, BLOCK, torch.bfloat16, fp8_tiles=tiles)))
                    if args.configs and layout == "k_contiguous":
                        for c in EXTRA_CONFIGS:
                            cfg = kg.BlockConfig(*c)
                            launches.append(("direct", "x".join(map(str, c)),
                                             lambda cfg=cfg: kg.block_scaled_mm(a, sa, BLOCK, b, sb, BLOCK,
                                                                                torch.bfloat16, config=cfg)))
                    for launch, label, fn in launches:
                        try:
                            got = fn().float()
                            err = float((got - want).abs().max() / want.abs().max())
                            t = bench(fn)
                        except Exception as exc:  # noqa: BLE001 - a configuration the compiler refuses
                            print(f"# {M}x{N}x{K} {dtype} {layout} {launch} {label}: {error_text(exc, 160)}", flush=True)
                            continue
                        rows.append({**base, "dtype": dtype, "layout": layout, "launch": launch, "config": label,
                                     "ms": f"{t:.4f}", "tflops": f"{flop / t / 1e9:.1f}",
                                     "ratio_vs_bf16": f"{t_bf16 / t:.3f}", "max_rel_err": f"{err:.2e}"})
                        r = rows[-1]
                        print(f"{M:6d}x{N:5d}x{K:5d} {dtype:5s} {layout:18s} {launch:12s} {label:16s} "
                              f"{r['tflops']:>7s} TFLOP/s  x{r['ratio_vs_bf16']} bf16  err {r['max_rel_err']}",
                              flush=True)
                    del a, b, want
    finally:
        write_budgeted_run(out, FIELDS, rows, prov, budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
