"""Throughput of the block-scaled INT8 GEMM with fallback (lowprec.kernels.int8_fallback_gemm) on CUDA.

    python -m lowprec.bench.int8_gemm --out results/int8_fallback/gemm_h200.csv

Sweeps (--sweeps, run in this order; square GEMMs M = N = K over --sizes, default 2048,4096,8192,
the paper's figure dims):

* check: every variant against the torch reference on small shapes, before anything is timed:
  without FMA contraction (``fp_fusion=False``) bit for bit (main kernel; both second-part
  implementations, each in its own order of sums; a ragged shape), and every tuning candidate
  with contraction to 1e-5 relative. Rows of kind ``check``; a failure makes the exit code 1.
* group: throughput against the quantization group size along K (default 32, 64, 128, 256), with
  no block falling back: the form of the paper's figure (b), "Throughput with varying Group Size K"
  (RTX 4090 there; whatever GPU runs this here).
* ratio: throughput against the share of A blocks that fall back (default 0 to 50 %), at the
  groups in --ratio-groups, with the fallback blocks spread at random ("random") or as whole
  block-rows, i.e. tokens ("rows"), for each second-part implementation in --impls (kind
  ``int8_fallback`` for the default one, ``int8_fallback_<impl>`` for the others).
* shapes: the GEMMs of a training step (--shapes, M x N x K; default those of the ~1B Llama-style
  model at 16384 tokens: forward / input gradient with K, N in {2048, 5632}, weight gradients with
  K = 16384) at --shape-group, with BF16 and ``torch._int_mm`` on the same shapes, and the
  fallback GEMM at --shape-ratio random blocks.
* ablation: at the largest size and --ablation-groups, the tuned configuration against one change
  at a time (int-to-float conversion instead of the add trick, K-groups per iteration, descriptor
  loads, tile order, no FMA contraction) and, at 5 % random fallback, the second-part pass
  configuration, the fused implementation and the tail. Kind ``ablation``, column ``variant``;
  its own BF16 and ``torch._int_mm`` timings, which its ratios divide by, in rows of their kinds.
* quantize: the quantize pass on a BF16 A (one pass with an in-kernel threshold at the blocks'
  95th amax percentile, with a 5 % mask, and as training runs it: the threshold, the rounding
  stream drawn in the kernel, the codes' transposes written too), as GB/s of the bytes it must
  move; --quant-chunks times the training pass again at other chunk shapes.
* ws (opt-in, last, after the summary): the tuned configuration with the loop warp-specialized
  (``tl.range(warp_specialize=True)``; documented for Blackwell, tried on what runs this).

Each timed row is one triton.testing.do_bench median. Baselines measured in the same run, same
shape: BF16 ``torch.matmul`` (cuBLAS), ``torch._int_mm`` (cuBLAS INT8, B column-major, no scales:
the reachable INT8 ceiling) and our kernel without fallback (kind ``int8_block``). Columns:
``tflops`` is the useful rate 2MNK / t; ``tops_issued`` counts the extra INT8 products the fused
and the tail issue (a tile issues one whenever any of its row-blocks falls back at that K-step,
so ``tile_ratio`` >= ``fallback_ratio``; the sparse pass issues them per 32-row block). ``config``:
the main kernel's launch configuration (tuned once per shape class unless --block-m etc. fix it),
``residual_config`` that of the second-part pass. ``max_rel_err`` (unless --no-check): the output
against the float64 product of the dequantized operands, max |diff| / max |exact|. Written beside
the CSV: the provenance JSON (with the tuned configurations) and <stem>_tune.csv, every
configuration the tuner timed. The last lines printed are a summary against the goals.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from lowprec.bench.common import (add_do_bench_args, bench_parser, do_bench_median, fail, gpu_provenance,
                                  parse_int_list, parse_list, parse_names, parse_shapes, require_cuda_triton,
                                  provenance_path, write_provenance, write_rows)
from lowprec.bench.int8_gemm_runner import FIELDS, Bench
from lowprec.bench.int8_gemm_sweeps import (ablation_sweep, check_sweep, quantize_sweep, shapes_sweep,
                                            square_sweeps, ws_sweep)

PROG = "int8_gemm"

DEFAULT_SIZES = "2048,4096,8192"
DEFAULT_GROUPS = "32,64,128,256"
DEFAULT_RATIOS = "0,0.01,0.02,0.05,0.1,0.2,0.5"
# the ~1B model (hidden 2048, GLU 5632) at 16384 tokens: forward and input gradient (M = tokens),
# weight gradients (K = tokens)
DEFAULT_SHAPES = ("16384x2048x2048,16384x5632x2048,16384x2048x5632,16384x5632x5632,"
                  "2048x2048x16384,5632x2048x16384,2048x5632x16384")
SWEEPS = ("check", "group", "ratio", "shapes", "ablation", "quantize", "ws")
# goals of the kernel (ratio to BF16 torch.matmul in the same run): (sweep, group, fallback share) -> ratio
GOALS = {("group", 128, 0.0): 1.6, ("ratio", 128, 0.05): 1.45, ("ratio", 128, 0.1): 1.3, ("group", 32, 0.0): 1.1,
         ("shapes", 128, 0.0): 1.4}


def _parse(argv):
    p = bench_parser(f"lowprec.bench.{PROG}", __doc__)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"square GEMM sizes (default {DEFAULT_SIZES})")
    p.add_argument("--groups", default=DEFAULT_GROUPS, help=f"K-group sizes (default {DEFAULT_GROUPS})")
    p.add_argument("--ratios", default=DEFAULT_RATIOS, help=f"fallback shares of A blocks (default {DEFAULT_RATIOS})")
    p.add_argument("--ratio-groups", default="128,32", help="groups for the ratio sweep (default 128,32)")
    p.add_argument("--patterns", default="random,rows", help="where fallback blocks sit: random,rows")
    p.add_argument("--impls", default="sparse,fused,tail",
                   help="second-part implementations timed (default sparse,fused,tail)")
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK list for the shapes sweep")
    p.add_argument("--shape-group", type=int, default=128, help="K-group of the shapes sweep (default 128)")
    p.add_argument("--shape-ratio", type=float, default=0.05, help="fallback share timed in the shapes sweep")
    p.add_argument("--ablation-groups", default="128,32", help="groups of the ablation sweep (default 128,32)")
    p.add_argument("--block-rows", type=int, default=32,
                   help="rows per scale block of A and B (default 32: Jetfire's 32x32 at group 32)")
    p.add_argument("--quant-chunks", default="",
                   help="quantize sweep: also time the training pass at these chunk shapes, ELEMENTSxCOLUMNS "
                        "(the elements a program holds at once, the most columns they span)")
    p.add_argument("--sweeps", default="check,group,ratio,quantize", help=f"subset of {','.join(SWEEPS)}")
    p.add_argument("--block-m", type=int, default=None, help="fix the output tile rows (no tuning)")
    p.add_argument("--block-n", type=int, default=None, help="fix the output tile columns (no tuning)")
    p.add_argument("--num-warps", type=int, default=None, help="fix num_warps (no tuning)")
    p.add_argument("--num-stages", type=int, default=None, help="fix num_stages (no tuning)")
    p.add_argument("--async-mma", action="store_true",
                   help="time the Gluon kernel of asynchronous MMAs (lowprec.kernels.int8_gemm_async; Hopper) "
                        "in the tile --block-m etc. fix (default 128x128, 8 warps, 4 stages), no tuning")
    p.add_argument("--budget-s", type=float, default=None,
                   help="start no timing after this many seconds (the summary still prints)")
    add_do_bench_args(p)
    p.add_argument("--no-check", action="store_true", help="skip the float64 accuracy checks and the check sweep")
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


# ----------------------------------------------------------------------------------------------
# summary and outputs


def _summary(b: Bench) -> list:
    """Lines: the headline measurements against their goals, the training shapes, the ablations
    (speed relative to the tuned configuration), checks, tuned configurations, skips and failures."""
    lines = ["", "# ---- summary (x: ratio to BF16 torch.matmul in this run; goal + met, - not) ----"]
    rows = [r for r in b.rows if r["ms"] != "" and r["speedup_vs_bf16"]]
    big = max((int(r["M"]) for r in rows if r["sweep"] in ("group", "group_extra", "ratio")), default=None)

    def goal_mark(r):
        g, rho = int(r["group"]), float(r["fallback_target"] or 0)
        goal = GOALS.get(("group" if rho == 0 and r["sweep"] != "shapes" else r["sweep"], g, rho))
        return "" if goal is None else f"{goal:.2f}" + ("+" if float(r["speedup_vs_bf16"]) >= goal else "-")

    lines.append(f"{'what':44s} {'TOP/s':>7} {'x':>5} {'x_int_mm':>8} {'goal':>6}  config")
    for r in rows:
        if r["sweep"] not in ("baseline", "group", "group_extra", "ratio") or int(r["M"]) != big:
            continue
        what = (f"{r['kind']} {big}^3" + (f" g{r['group']}" if r["group"] != "" else "")
                + (f" {r['pattern']} {float(r['fallback_target']) * 100:g}%" if r["pattern"] else ""))
        mark = goal_mark(r) if r["kind"].startswith("int8") else ""
        lines.append(f"{what:44s} {r['tflops']:>7} {r['speedup_vs_bf16']:>5} {r['speedup_vs_int_mm']:>8} "
                     f"{mark:>6}  {r['config']}")
    shape_rows = [r for r in rows if r["sweep"] == "shapes"]
    for key in dict.fromkeys((r["M"], r["N"], r["K"]) for r in shape_rows):
        by = {r["kind"]: r for r in shape_rows if (r["M"], r["N"], r["K"]) == key}
        blk, fb = by.get("int8_block"), by.get("int8_fallback")
        lines.append(f"shape {'x'.join(map(str, key)):18s} bf16 {by['bf16_matmul']['tflops'] if 'bf16_matmul' in by else '-':>6} TF"
                     f"  int_mm x{by['int_mm']['speedup_vs_bf16'] if 'int_mm' in by else '-'}"
                     f"  block x{blk['speedup_vs_bf16'] if blk else '-'} {goal_mark(blk) if blk else ''}"
                     f"  fallback {float(fb['fallback_target']) * 100:g}% x{fb['speedup_vs_bf16']}" if fb else "")
        if blk:
            lines[-1] += f"  {blk['config']}"
    abl = [r for r in rows if r["sweep"] == "ablation" and r["kind"].startswith("int8")]
    for g in dict.fromkeys(r["group"] for r in abl):
        parts = [f"{r['variant']} {r['speedup_vs_int8_block']}" for r in abl if r["group"] == g]
        lines.append(f"ablation g{g} (speed vs the tuned int8_block): " + "; ".join(parts))
    checks = [r for r in b.rows if r["sweep"] == "check"]
    if checks:
        exact = [r for r in checks if "bit for bit" in r["variant"]]
        lines.append(f"# checks: {len(checks)}; bit for bit where required: "
                     f"{sum(r['bitwise_equal'] == 'true' for r in exact)}/{len(exact)}; "
                     f"largest relative difference {max(float(r['max_rel_err']) for r in checks):.2e}")
    for t in b.kt.tuned_configs():
        lines.append(f"# tuned {t['M_class']}x{t['N_class']}x{t['K_class']} g{t['group']}: {t['config']} "
                     f"{t['ms']:.4f} ms")
    lines += [f"# skipped (budget): {s}" for s in b.budget.skipped]
    lines += [f"# FAILED: {f}" for f in b.failures]
    lines.append(f"# elapsed {b.elapsed():.0f} s")
    return lines


def main(argv=None, _device: str = "cuda") -> int:
    """_device \"cpu\": a dry run under the Triton interpreter for the tests (timings mean nothing)."""
    args = _parse(argv)
    sweeps = set(parse_names(PROG, "--sweeps", args.sweeps, SWEEPS))
    sizes = parse_int_list(PROG, "--sizes", args.sizes)
    groups = parse_int_list(PROG, "--groups", args.groups)
    ratios = parse_list(PROG, "--ratios", args.ratios, float)
    ratio_groups = parse_int_list(PROG, "--ratio-groups", args.ratio_groups)
    ablation_groups = parse_int_list(PROG, "--ablation-groups", args.ablation_groups)
    quant_chunks = parse_shapes(PROG, "--quant-chunks", args.quant_chunks, dims=2) if args.quant_chunks else []
    patterns = parse_names(PROG, "--patterns", args.patterns, ("random", "rows"))
    impls = parse_names(PROG, "--impls", args.impls, ("sparse", "fused", "tail"))
    shapes = parse_shapes(PROG, "--shapes", args.shapes) if "shapes" in sweeps else []
    if not impls:
        fail(PROG, "--impls: give at least one of sparse,fused,tail")
    if any(not 0.0 <= r <= 1.0 for r in ratios) or not 0.0 <= args.shape_ratio <= 1.0:
        fail(PROG, "--ratios / --shape-ratio: shares must be within [0, 1]")
    if not sizes:
        fail(PROG, "--sizes: give at least one size")
    if _device == "cuda":
        torch, _ = require_cuda_triton(PROG, "tests/test_kernels_int8_fallback.py")
    else:
        import torch
    from lowprec.kernels import int8_fallback_gemm as kf

    if _device != "cuda" and not kf.interpreter_active():
        fail(PROG, "a CPU dry run needs the kernels built for the Triton interpreter (TRITON_INTERPRET=1)")
    out = Path(args.out)
    prov_path, tune_path = provenance_path(out), out.with_name(out.stem + "_tune.csv")
    if _device == "cuda":
        prov = _provenance(do_bench_median(args.warmup, args.rep, args.cudagraph)[1])
    else:
        prov = {"gpu": None, "driver": None, "torch": torch.__version__, "triton": "interpreter",
                "cuda": None, "argv": sys.argv[1:], "timer": "perf_counter (interpreter dry run: no timing meaning)"}
    write_provenance(prov_path, prov)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        b = Bench(args, torch, kf, writer, fh, _device)
        b.largest = max(sizes)
        try:
            if "check" in sweeps and not args.no_check:
                check_sweep(b, groups, ratio_groups)
            for S in sorted(sizes, reverse=True):  # the headline size first
                if b.over_budget(f"size {S}"):
                    continue
                b.guarded(f"size {S}", lambda: square_sweeps(b, S, groups, ratios, ratio_groups, patterns, impls,
                                                              sweeps))
                if "quantize" in sweeps:
                    b.guarded(f"quantize {S}", lambda: quantize_sweep(b, S, ratio_groups, quant_chunks))
                b.sync()
            if shapes:
                shapes_sweep(b, shapes, args.shape_group, args.shape_ratio)
            if "ablation" in sweeps and not b.fixed:
                b.guarded("ablation", lambda: ablation_sweep(b, max(sizes), ablation_groups))
        finally:
            prov["tuned_configs"] = b.kt.tuned_configs()
            prov["tuning_log"] = str(tune_path.name)
            prov["elapsed_s"] = round(b.elapsed(), 1)
            write_provenance(prov_path, prov)
            write_rows(tune_path, b.kt.TUNE_LOG_FIELDS, b.kt.tuning_log())
            for line in _summary(b):
                print(line, flush=True)
        if "ws" in sweeps:
            print("# ws: the warp-specialized loop (after the summary: a compiler path documented for Blackwell)",
                  flush=True)
            b.guarded("ws", lambda: ws_sweep(b, 128))
    print(f"# wrote {out} ({len(b.rows)} rows), {prov_path} and {tune_path}")
    bad = [r for r in b.rows if r["sweep"] != "check" and r["max_rel_err"] and float(r["max_rel_err"]) > 1e-4]
    if bad:
        print(f"# WARNING: {len(bad)} rows differ from the float64 product by more than 1e-4", file=sys.stderr)
    return 1 if bad or b.failures else 0


if __name__ == "__main__":
    sys.exit(main())
