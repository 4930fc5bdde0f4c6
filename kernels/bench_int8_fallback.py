"""Throughput of the block-scaled INT8 GEMM with fallback (lowprec.kernels.int8_fallback_gemm) on CUDA.

    python -m lowprec.kernels.bench_int8_fallback --out results/int8_fallback/gemm_h200.csv

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
  configuration and the fused implementation. Kind ``ablation``, column ``variant``.
* quantize: the quantize pass on a BF16 A (one pass with an in-kernel threshold, and with a mask),
  as GB/s of the bytes it must move.
* ws (opt-in, last, after the summary): the tuned configuration with the loop warp-specialized
  (``tl.range(warp_specialize=True)``; documented for Blackwell, tried on what runs this).

Each timed row is one triton.testing.do_bench median. Baselines measured in the same run, same
shape: BF16 ``torch.matmul`` (cuBLAS), ``torch._int_mm`` (cuBLAS INT8, B column-major, no scales:
the reachable INT8 ceiling) and our kernel without fallback (kind ``int8_block``). Columns:
``tflops`` is the useful rate 2MNK / t; ``tops_issued`` counts the extra INT8 products the fused
kernel issues (a tile issues one whenever any of its row-blocks falls back at that K-step, so
``tile_ratio`` >= ``fallback_ratio``; the sparse pass issues them per 32-row block). ``config``:
the main kernel's launch configuration (tuned once per shape class unless --block-m etc. fix it),
``residual_config`` that of the second-part pass. ``max_rel_err`` (unless --no-check): the output
against the float64 product of the dequantized operands, max |diff| / max |exact|. Written beside
the CSV: the provenance JSON (with the tuned configurations) and <stem>_tune.csv, every
configuration the tuner timed. The last lines printed are a summary against the goals.
"""

from __future__ import annotations

import csv
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

from lowprec.bench.common import (add_do_bench_args, bench_parser, do_bench_median, fail, gpu_provenance,
                                  parse_int_list, parse_list, require_cuda_triton, write_provenance)

PROG = "bench_int8_fallback"

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

FIELDS = [
    "sweep", "kind", "M", "N", "K", "group", "block_rows", "pattern", "fallback_target", "fallback_ratio",
    "tile_ratio", "block_m", "block_n", "ms", "tflops", "tops_issued", "gbps", "speedup_vs_bf16",
    "speedup_vs_int_mm", "speedup_vs_int8_block", "max_rel_err",
    # added with the tuned kernel
    "impl", "config", "residual_config", "variant", "bitwise_equal",
]


def _parse(argv):
    p = bench_parser("lowprec.kernels.bench_int8_fallback", __doc__)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"square GEMM sizes (default {DEFAULT_SIZES})")
    p.add_argument("--groups", default=DEFAULT_GROUPS, help=f"K-group sizes (default {DEFAULT_GROUPS})")
    p.add_argument("--ratios", default=DEFAULT_RATIOS, help=f"fallback shares of A blocks (default {DEFAULT_RATIOS})")
    p.add_argument("--ratio-groups", default="128,32", help="groups for the ratio sweep (default 128,32)")
    p.add_argument("--patterns", default="random,rows", help="where fallback blocks sit: random,rows")
    p.add_argument("--impls", default="sparse,fused", help="second-part implementations timed (default sparse,fused)")
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK list for the shapes sweep")
    p.add_argument("--shape-group", type=int, default=128, help="K-group of the shapes sweep (default 128)")
    p.add_argument("--shape-ratio", type=float, default=0.05, help="fallback share timed in the shapes sweep")
    p.add_argument("--ablation-groups", default="128,32", help="groups of the ablation sweep (default 128,32)")
    p.add_argument("--block-rows", type=int, default=32,
                   help="rows per scale block of A and B (default 32: Jetfire's 32x32 at group 32)")
    p.add_argument("--sweeps", default="check,group,ratio,quantize", help=f"subset of {','.join(SWEEPS)}")
    p.add_argument("--block-m", type=int, default=None, help="fix the output tile rows (no tuning)")
    p.add_argument("--block-n", type=int, default=None, help="fix the output tile columns (no tuning)")
    p.add_argument("--num-warps", type=int, default=None, help="fix num_warps (no tuning)")
    p.add_argument("--num-stages", type=int, default=None, help="fix num_stages (no tuning)")
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


def _shape_list(text):
    out = []
    for item in parse_list(PROG, "--shapes", text, str):
        try:
            m, n, k = (int(v) for v in item.lower().split("x"))
        except ValueError:
            fail(PROG, f"--shapes: {item!r} is not MxNxK")
        if min(m, n, k) < 1:
            fail(PROG, f"--shapes: {item!r} has an empty dimension")
        out.append((m, n, k))
    return out


def _cpu_timer(fn) -> float:
    """Median ms of three calls after one: the interpreter dry run (tests), where timings mean nothing."""
    fn()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[1]


class _Bench:
    """Operands, timing, float64 checks and the rows written, for one run."""

    def __init__(self, args, torch, kf, writer, fh, dev="cuda"):
        self.args, self.torch, self.kf, self.dev = args, torch, kf, dev
        self.writer, self.fh, self.rows = writer, fh, []
        self.bench = do_bench_median(args.warmup, args.rep)[0] if dev == "cuda" else _cpu_timer
        self.gen = torch.Generator(device=dev).manual_seed(args.seed)
        self.br = args.block_rows
        self.fixed = {k: v for k, v in (("block_m", args.block_m), ("block_n", args.block_n),
                                        ("num_warps", args.num_warps), ("num_stages", args.num_stages))
                      if v is not None}
        self.t0 = time.time()
        self.skipped = []
        self.failures = []

    # -- plumbing
    def over_budget(self, what: str) -> bool:
        b = self.args.budget_s
        if b is not None and time.time() - self.t0 > b:
            self.skipped.append(what)
            print(f"# budget: skipped {what}", flush=True)
            return True
        return False

    def emit(self, row):
        full = {k: row.get(k, "") for k in FIELDS}
        self.writer.writerow(full)
        self.fh.flush()
        self.rows.append(full)
        ms = f"{float(full['ms']):9.4f} ms" if full["ms"] != "" else " " * 12
        print(f"{full['sweep']:8s} {full['kind']:20s} {full['M']:>5}x{full['N']:>5}x{full['K']:>5} "
              f"g={full['group']!s:>4} {full['pattern']:>6} rho={full['fallback_ratio']!s:>6} {ms} "
              f"{full['tflops']:>7} TOPS x{full['speedup_vs_bf16'] or '-'} bf16 "
              f"{full['variant'] or full['impl']} {full['config']} err {full['max_rel_err'] or '-'}"
              f"{' bitwise=' + full['bitwise_equal'] if full['bitwise_equal'] else ''}", flush=True)

    def guarded(self, what, fn):
        """Run one measurement; an exception is reported and recorded, and the run goes on."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - one variant failing must not lose the others
            msg = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            print(f"# FAILED {what}: {msg}", flush=True)
            traceback.print_exc(limit=4)
            self.failures.append(f"{what}: {msg}")
            self.sync()
            return None

    def sync(self):
        if self.dev == "cuda":
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()

    def elapsed(self) -> float:
        return time.time() - self.t0

    # -- operands
    def codes(self, rows, k):
        return self.torch.randint(-127, 128, (rows, k), device=self.dev, generator=self.gen, dtype=self.torch.int8)

    def scales(self, rows, nkb):
        return (self.torch.rand(rows, nkb, device=self.dev, generator=self.gen) + 0.5) / 127.0

    def flags_for(self, ratio, pattern, n_brow, nkb):
        torch = self.torch
        f = torch.zeros(n_brow, nkb, dtype=torch.int8, device=self.dev)
        if pattern == "rows":
            k = int(ratio * n_brow + 0.5)
            f[torch.randperm(n_brow, device=self.dev, generator=self.gen)[:k]] = 1
        else:
            n = n_brow * nkb
            k = int(ratio * n + 0.5)
            f.view(-1)[torch.randperm(n, device=self.dev, generator=self.gen)[:k]] = 1
        return f

    def masked(self, r, f, rows, g):
        """Residual codes only where flagged, as the quantizer writes them."""
        full = f.repeat_interleave(rows, 0)[: r.shape[0]].repeat_interleave(g, 1)[:, : r.shape[1]].bool()
        return self.torch.where(full, r, self.torch.zeros_like(r))

    def tile_ratio(self, f, bm):
        # a tile of bm rows issues the extra product if any of its row-blocks is flagged
        rows_per_tile = max(bm // self.br, 1)
        n_tiles = -(-f.shape[0] // rows_per_tile)
        pad = n_tiles * rows_per_tile - f.shape[0]
        ff = self.torch.nn.functional.pad(f.float(), (0, 0, 0, pad)).reshape(n_tiles, rows_per_tile, -1)
        return float(ff.amax(dim=1).mean())

    def rel_err(self, y, qa, da, qb, db, g, ra=None, dra=None, fa=None):
        if self.args.no_check:
            return ""
        torch, br = self.torch, self.br

        def deq(q, d):
            full = d.double().repeat_interleave(br, 0)[: q.shape[0]].repeat_interleave(g, 1)
            return q.double() * full[:, : q.shape[1]]

        a = deq(qa, da)
        if ra is not None:
            a += deq(ra, torch.where(fa.bool(), dra, torch.zeros_like(dra)))
        exact = a @ deq(qb, db).t()
        del a
        err = float((y.double() - exact).abs().max() / exact.abs().max())
        del exact
        return f"{err:.2e}"

    def gemm(self, qa, da, qb, db, g, *second, **kw):
        if self.fixed and "config" not in kw:
            kw = {**self.fixed, **kw}
        return self.kf.int8_fallback_gemm(qa, da, qb, db, (self.br, g), (self.br, g), *second, **kw)

    def config_label(self, qa, qb, g, **kw):
        kf = self.kf
        if "config" in kw:
            return kw["config"].label()
        if self.fixed:
            return replace(kf.default_config(g), **self.fixed).label()
        return kf.selected_config(qa, qb, (self.br, g), (self.br, g)).label()


# ----------------------------------------------------------------------------------------------
# check sweep


def _check_sweep(b: _Bench, groups, ratio_groups):
    """Every variant against the torch reference before timing anything. Everything these checks
    and the timed sweeps launch in a configuration known beforehand is compiled here first, in
    parallel threads."""
    torch, kf = b.torch, b.kf
    from lowprec.methods.int8_fallback import int8_block_gemm_reference as ref

    def eff(d, f):
        return torch.where(f.bool(), d, torch.zeros_like(d))

    def sparse_ref(A, B, blk, pa, pb):
        y = ref(*A, *B, blk, blk)
        if pa[0] is not None:
            y = y + ref(pa[0], eff(pa[1], pa[2]), *B, blk, blk)
        if pb[0] is not None:
            y = y + ref(*A, pb[0], eff(pb[1], pb[2]), blk, blk, *pa)
        return y

    def record(shape, g, kind, variant, got, want, exact_required, config="", residual=""):
        bitwise = bool(torch.equal(got, want))
        rel = float((got.double() - want.double()).abs().max() / want.double().abs().max())
        ok = bitwise if exact_required else rel <= 1e-5
        b.emit({"sweep": "check", "kind": kind, "M": shape[0], "N": shape[1], "K": shape[2], "group": g,
                "block_rows": b.br, "variant": variant, "config": config, "residual_config": residual,
                "max_rel_err": f"{rel:.2e}", "bitwise_equal": str(bitwise).lower()})
        if not ok:
            b.failures.append(f"check {kind} {variant} {shape} g={g}: bitwise={bitwise} rel={rel:.2e}")

    def operands(shape, g, ratio):
        M, N, K = shape
        nkb = -(-K // g)
        qa, qb = b.codes(M, K), b.codes(N, K)
        da, db = b.scales(-(-M // b.br), nkb), b.scales(-(-N // b.br), nkb)
        fa, fb = b.flags_for(ratio, "random", da.shape[0], nkb), b.flags_for(ratio, "random", db.shape[0], nkb)
        ra, rb = b.masked(b.codes(M, K), fa, b.br, g), b.masked(b.codes(N, K), fb, b.br, g)
        return (qa, da), (qb, db), (ra, da / 254, fa), (rb, db / 254, fb)

    # (M, N, K), group, check the second parts, check every tuning candidate. K = 4096 and M, N
    # multiples of 16 specialize the kernels as the timed shapes do: the tuner reuses these builds.
    cpu = b.dev != "cuda"
    shapes = [(((32, 32, 4 * g) if cpu else (256, 256, 4096)), g, g in ratio_groups, True) for g in groups]
    # tiles that do not divide M, N; 17 K-groups
    shapes.append((((40, 24, 17 * 8) if cpu else (200, 136, 544)), 8 if cpu else 32, True, False))
    rdef, rnofma = kf.ResidualConfig(), kf.ResidualConfig(fp_fusion=False)
    plans, warm = [], []
    for shape, g, with_fallback, all_candidates in shapes:
        A, B, pa, pb = operands(shape, g, 0.2)
        blk = (b.br, g)
        gm = kf._Gemm(*A, *B, blk, blk, *pa, *pb)
        c = torch.empty(shape[:2], device=b.dev)
        nofma = replace(kf.default_config(g), fp_fusion=False)
        cands = kf.candidate_configs(g, tma=gm.tma_usable) if all_candidates else []
        warm += [(gm, c, cfg, False, False) for cfg in [nofma, *cands]]
        if with_fallback:
            warm += [(gm, c, nofma, fa_, fb_) for fa_, fb_ in ((True, False), (False, True), (True, True))]
            warm += [(gm, c, rc, side, cross) for rc in (rnofma, rdef)
                     for side, cross in (("a", False), ("b", False), ("b", True))]
        plans.append((shape, g, with_fallback, A, B, pa, pb, blk, nofma, cands))

    def warm_one(item):
        gm, c, cfg, x, y = item
        if isinstance(cfg, kf.ResidualConfig):
            return gm.launch_residual(c, x, cfg, y, warmup=True)
        return gm.launch_main(c, cfg, x, y, warmup=True)

    t = time.time()
    kf._precompile(warm_one, warm)
    print(f"# compiled {len(warm)} kernel variants in {time.time() - t:.0f} s", flush=True)

    for shape, g, with_fallback, A, B, pa, pb, blk, nofma, cands in plans:
        if b.over_budget(f"check {shape} g={g}"):
            continue
        want = ref(*A, *B, blk, blk)
        b.guarded(f"check main nofma {shape} g={g}", lambda: record(
            shape, g, "int8_block", "no FMA contraction: bit for bit",
            kf.int8_fallback_gemm(*A, *B, blk, blk, config=nofma), want, True, nofma.label()))
        for cfg in cands:
            b.guarded(f"check {cfg.label()} g={g}", lambda: record(
                shape, g, "int8_block", "tuning candidate, to 1e-5",
                kf.int8_fallback_gemm(*A, *B, blk, blk, config=cfg), want, False, cfg.label()))
        if not with_fallback:
            continue
        for impl in kf.FALLBACK_IMPLS:
            for sides in ("a", "b", "ab"):
                sa = pa if "a" in sides else (None, None, None)
                sb = pb if "b" in sides else (None, None, None)
                w = sparse_ref(A, B, blk, sa, sb) if impl == "sparse" else ref(*A, *B, blk, blk, *sa, *sb)
                b.guarded(f"check {impl} {sides} {shape} g={g}", lambda: record(
                    shape, g, f"int8_fallback_{impl}", f"second parts of {sides}, no FMA contraction: bit for bit",
                    kf.int8_fallback_gemm(*A, *B, blk, blk, *sa, *sb, fallback=impl, config=nofma,
                                          residual=rnofma), w, True, nofma.label(),
                    rnofma.label() if impl == "sparse" else ""))
    b.sync()


# ----------------------------------------------------------------------------------------------
# timed sweeps


def _baselines(b: _Bench, sweep, M, N, K, extra=None, emit=True):
    torch = b.torch
    a16 = torch.randn(M, K, device=b.dev, generator=b.gen).to(torch.bfloat16)
    b16 = torch.randn(N, K, device=b.dev, generator=b.gen).to(torch.bfloat16)
    qa, qb = b.codes(M, K), b.codes(N, K)
    flop = 2.0 * M * N * K
    t_bf16 = b.bench(lambda: torch.matmul(a16, b16.t()))
    t_int = b.bench(lambda: torch._int_mm(qa, qb.t()))
    base = dict(M=M, N=N, K=K, block_rows=b.br, **(extra or {}))
    if not emit:
        return qa, qb, t_bf16, t_int
    b.emit({**base, "sweep": sweep, "kind": "bf16_matmul", "ms": f"{t_bf16:.5f}",
            "tflops": f"{flop / t_bf16 / 1e9:.1f}", "speedup_vs_bf16": "1.00", "speedup_vs_int_mm": f"{t_int / t_bf16:.2f}"})
    b.emit({**base, "sweep": sweep, "kind": "int_mm", "ms": f"{t_int:.5f}", "tflops": f"{flop / t_int / 1e9:.1f}",
            "speedup_vs_bf16": f"{t_bf16 / t_int:.2f}", "speedup_vs_int_mm": "1.00"})
    return qa, qb, t_bf16, t_int


def _time_row(b: _Bench, row, fn, flop, t_bf16, t_int, t_block=None, issued=1.0):
    t = b.bench(fn)
    out = {**row, "ms": f"{t:.5f}", "tflops": f"{flop / t / 1e9:.1f}", "tops_issued": f"{flop * issued / t / 1e9:.1f}",
           "speedup_vs_bf16": f"{t_bf16 / t:.2f}", "speedup_vs_int_mm": f"{t_int / t:.2f}",
           "speedup_vs_int8_block": f"{t_block / t:.2f}" if t_block else ""}
    b.emit(out)
    return t


def _square_sweeps(b: _Bench, S, groups, ratios, ratio_groups, patterns, impls, sweeps):
    kf = b.kf
    M = N = K = S
    flop = 2.0 * M * N * K
    qa, qb, t_bf16, t_int = _baselines(b, "baseline", M, N, K)
    default_impl = kf.FALLBACK_IMPLS[0]
    timed_groups = sorted(set(groups if "group" in sweeps else [])
                          | set(ratio_groups if "ratio" in sweeps else []))
    # the headline groups first, so a budget cut drops the extras
    timed_groups.sort(key=lambda g: (g not in (128, 32), g))
    for g in timed_groups:
        if b.over_budget(f"{S}^3 g={g}"):
            continue
        nkb = -(-K // g)
        da, db = b.scales(-(-M // b.br), nkb), b.scales(-(-N // b.br), nkb)
        blk = (b.br, g)

        def run_plain():
            return b.gemm(qa, da, qb, db, g)

        y = b.guarded(f"int8_block {S} g={g}", run_plain)
        if y is None:
            continue
        err = b.rel_err(y, qa, da, qb, db, g)
        del y
        cfg = b.config_label(qa, qb, g)
        sel = b.kf.selected_config(qa, qb, blk, blk) if not b.fixed else replace(kf.default_config(g), **b.fixed)
        base = dict(M=M, N=N, K=K, group=g, block_rows=b.br, block_m=sel.block_m, block_n=sel.block_n, config=cfg)
        # a group timed for the other sweeps only is not a point of the figure
        sweep = "group" if "group" in sweeps and g in groups else "group_extra"
        t_block = _time_row(b, {**base, "sweep": sweep, "kind": "int8_block", "fallback_target": 0,
                                "fallback_ratio": 0, "tile_ratio": 0, "speedup_vs_int8_block": "1.00",
                                "max_rel_err": err}, run_plain, flop, t_bf16, t_int)
        if "ratio" in sweeps and g in ratio_groups:
            ra = b.codes(M, K)
            dra = b.scales(-(-M // b.br), nkb) / 254.0
            for ratio in ratios:
                for pattern in patterns:
                    if ratio == 0 and pattern != patterns[0]:
                        continue  # no block falls back: the pattern does not matter
                    if b.over_budget(f"ratio {S} g={g} {pattern} {ratio}"):
                        continue
                    fa = b.flags_for(ratio, pattern, -(-M // b.br), nkb)
                    ra_f = b.masked(ra, fa, b.br, g)
                    actual = float(fa.float().mean())
                    tr = b.tile_ratio(fa, sel.block_m)
                    for impl in impls:
                        def run_fb(impl=impl):
                            return b.gemm(qa, da, qb, db, g, ra_f, dra, fa, fallback=impl)

                        y = b.guarded(f"{impl} {S} g={g} {pattern} {ratio}", run_fb)
                        if y is None:
                            continue
                        err = b.rel_err(y, qa, da, qb, db, g, ra_f, dra, fa)
                        del y
                        kind = "int8_fallback" if impl == default_impl else f"int8_fallback_{impl}"
                        issued = 1 + (tr if impl == "fused" else actual)
                        _time_row(b, {**base, "sweep": "ratio", "kind": kind, "impl": impl, "pattern": pattern,
                                      "fallback_target": ratio, "fallback_ratio": f"{actual:.4f}",
                                      "tile_ratio": f"{tr:.4f}", "max_rel_err": err,
                                      "residual_config": kf.ResidualConfig().label() if impl == "sparse" else ""},
                                  run_fb, flop, t_bf16, t_int, t_block, issued)
        b.sync()
    return qa, qb, t_bf16, t_int


def _ablation_sweep(b: _Bench, S, groups):
    """At S^3: the tuned configuration, then one change at a time; then the second parts at 5 %
    random blocks in several pass configurations and in the fused loop. Built in parallel first."""
    kf, torch = b.kf, b.torch
    qa, qb, t_bf16, t_int = _baselines(b, "ablation", S, S, S, emit=False)
    M = N = K = S
    flop = 2.0 * M * N * K
    for g in groups:
        if b.over_budget(f"ablation g={g}"):
            return
        nkb = -(-K // g)
        da, db = b.scales(-(-M // b.br), nkb), b.scales(-(-N // b.br), nkb)
        fa = b.flags_for(0.05, "random", -(-M // b.br), nkb)
        ra = b.masked(b.codes(M, K), fa, b.br, g)
        dra = b.scales(-(-M // b.br), nkb) / 254.0
        sel = kf.selected_config(qa, qb, (b.br, g), (b.br, g))
        tma_ok = kf._tma_usable(qa, qb, g)
        variants = [("tuned", sel),
                    ("conversion instead of the add trick", replace(sel, magic=False)),
                    ("descriptor loads toggled", replace(sel, tma=not sel.tma)),
                    ("half the K-groups per iteration", replace(sel, k_groups=max(1, sel.k_groups // 2))),
                    ("twice the K-groups per iteration", replace(sel, k_groups=sel.k_groups * 2)),
                    ("no tile grouping (group_m 1)", replace(sel, group_m=1)),
                    ("group_m 16", replace(sel, group_m=16)),
                    ("one more stage", replace(sel, num_stages=sel.num_stages + 1)),
                    ("no FMA contraction", replace(sel, fp_fusion=False))]
        seen, todo = set(), []
        for name, cfg in variants:
            if cfg in seen or (cfg.tma and not tma_ok) or kf._smem(cfg, g) > 228 * 1024:
                continue
            seen.add(cfg)
            todo.append((name, "block", cfg, None))
        rdef = kf.ResidualConfig()
        for name, rcfg in (("sparse pass, default", rdef),
                           ("sparse pass, 64-row programs", replace(rdef, block_r=64)),
                           ("sparse pass, 256-wide tiles", replace(rdef, block_y=256)),
                           ("sparse pass, one tile per program", replace(rdef, programs=1 << 30)),
                           ("sparse pass, 1024 programs", replace(rdef, programs=1024)),
                           ("sparse pass, 8 warps", replace(rdef, num_warps=8, block_y=256))):
            todo.append((name, "sparse", sel, rcfg))
        todo.append(("fused loop", "fused", sel, None))
        gm = kf._Gemm(qa, da, qb, db, (b.br, g), (b.br, g), ra, dra, fa, None, None, None)
        c = torch.empty((M, N), device=b.dev)

        def warm(item):
            name, kind, cfg, rcfg = item
            if kind == "sparse":
                return gm.launch_residual(c, "a", rcfg, False, warmup=True)
            return gm.launch_main(c, cfg, kind == "fused", False, warmup=True)

        kf._precompile(warm, todo)
        base = dict(M=M, N=N, K=K, group=g, block_rows=b.br, sweep="ablation")
        t_block = None
        for name, kind, cfg, rcfg in todo:
            if b.over_budget(f"ablation g={g} {name}"):
                return
            if kind == "block":
                fn = (lambda cfg=cfg: b.gemm(qa, da, qb, db, g, config=cfg))
                row = {**base, "kind": "int8_block", "variant": name, "config": cfg.label(), "fallback_target": 0,
                       "fallback_ratio": 0}
            else:
                fn = (lambda kind=kind, cfg=cfg, rcfg=rcfg: b.gemm(qa, da, qb, db, g, ra, dra, fa, fallback=kind,
                                                                   config=cfg, residual=rcfg))
                row = {**base, "kind": "int8_fallback", "impl": kind, "variant": name, "config": cfg.label(),
                       "pattern": "random", "fallback_target": 0.05,
                       "fallback_ratio": f"{float(fa.float().mean()):.4f}",
                       "residual_config": rcfg.label() if rcfg else ""}
            if b.guarded(f"ablation g={g} {name}", fn) is None:
                continue
            t = b.guarded(f"ablation g={g} {name} timing",
                          lambda: _time_row(b, row, fn, flop, t_bf16, t_int, t_block))
            if name == "tuned" and t:
                t_block = t
                b.rows[-1]["speedup_vs_int8_block"] = "1.00"
        b.sync()


def _shapes_sweep(b: _Bench, shapes, g, ratio):
    kf = b.kf
    for M, N, K in shapes:
        if b.over_budget(f"shape {M}x{N}x{K}"):
            continue
        flop = 2.0 * M * N * K
        out = b.guarded(f"baselines {M}x{N}x{K}", lambda: _baselines(b, "shapes", M, N, K, {"group": g}))
        if out is None:
            continue
        qa, qb, t_bf16, t_int = out
        nkb = -(-K // g)
        da, db = b.scales(-(-M // b.br), nkb), b.scales(-(-N // b.br), nkb)

        def run_plain():
            return b.gemm(qa, da, qb, db, g)

        y = b.guarded(f"int8_block {M}x{N}x{K}", run_plain)
        if y is None:
            continue
        err = b.rel_err(y, qa, da, qb, db, g)
        del y
        base = dict(M=M, N=N, K=K, group=g, block_rows=b.br, config=b.config_label(qa, qb, g))
        t_block = _time_row(b, {**base, "sweep": "shapes", "kind": "int8_block", "fallback_target": 0,
                                "fallback_ratio": 0, "max_rel_err": err}, run_plain, flop, t_bf16, t_int)
        if ratio > 0:
            fa = b.flags_for(ratio, "random", -(-M // b.br), nkb)
            ra = b.masked(b.codes(M, K), fa, b.br, g)
            dra = b.scales(-(-M // b.br), nkb) / 254.0

            def run_fb():
                return b.gemm(qa, da, qb, db, g, ra, dra, fa)

            y = b.guarded(f"int8_fallback {M}x{N}x{K}", run_fb)
            if y is not None:
                err = b.rel_err(y, qa, da, qb, db, g, ra, dra, fa)
                del y
                _time_row(b, {**base, "sweep": "shapes", "kind": "int8_fallback", "impl": kf.FALLBACK_IMPLS[0],
                              "pattern": "random", "fallback_target": ratio,
                              "fallback_ratio": f"{float(fa.float().mean()):.4f}", "max_rel_err": err,
                              "residual_config": kf.ResidualConfig().label()},
                          run_fb, flop, t_bf16, t_int, t_block, 1 + ratio)
        b.sync()


def _quantize_sweep(b: _Bench, S, ratio_groups):
    torch, kf = b.torch, b.kf
    a16 = torch.randn(S, S, device=b.dev, generator=b.gen).to(torch.bfloat16)
    for g in sorted(set(ratio_groups)):
        block = (b.br, g)
        if kf._next_pow2(b.br) * kf._next_pow2(g) > kf._MAX_BLOCK_ELEMS:
            continue
        thr = torch.tensor(3.0, device=b.dev)  # a few % of Gaussian blocks exceed it
        mask = torch.rand(-(-S // b.br), -(-S // g), device=b.dev, generator=b.gen) < 0.05
        nbytes = a16.numel() * 2 + 2 * a16.numel() + 8 * mask.numel() + mask.numel()
        for mode, kw in (("threshold", {"threshold": thr}), ("mask", {"mask": mask})):
            t = b.bench(lambda: kf.quantize_fallback_int8(a16, block, **kw))
            b.emit({"M": S, "N": S, "K": S, "block_rows": b.br, "sweep": "quantize",
                    "kind": f"quantize_fallback_{mode}", "group": g, "ms": f"{t:.5f}",
                    "gbps": f"{nbytes / t / 1e6:.1f}"})


def _ws_sweep(b: _Bench, g):
    """The warp-specialized loop, last: a compiler path documented for other GPUs."""
    kf, S = b.kf, b.largest
    if b.fixed or b.over_budget("ws"):
        return
    qa, qb, t_bf16, t_int = _baselines(b, "ws", S, S, S)
    nkb = -(-S // g)
    da, db = b.scales(-(-S // b.br), nkb), b.scales(-(-S // b.br), nkb)
    sel = kf.selected_config(qa, qb, (b.br, g), (b.br, g))
    for cfg in (replace(sel, warp_specialize=True), replace(sel, warp_specialize=True, tma=True)):
        if cfg.tma and not kf._tma_usable(qa, qb, g):
            continue
        fn = (lambda cfg=cfg: b.gemm(qa, da, qb, db, g, config=cfg))
        y = b.guarded(f"ws {cfg.label()}", fn)
        if y is None:
            continue
        err = b.rel_err(y, qa, da, qb, db, g)
        b.guarded(f"ws {cfg.label()} timing", lambda: _time_row(
            b, {"M": S, "N": S, "K": S, "group": g, "block_rows": b.br, "sweep": "ablation", "kind": "int8_block",
                "variant": "warp-specialized loop", "config": cfg.label(), "max_rel_err": err},
            fn, 2.0 * S ** 3, t_bf16, t_int))


# ----------------------------------------------------------------------------------------------
# summary and outputs


def _summary(b: _Bench) -> list:
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
    abl = [r for r in rows if r["sweep"] == "ablation"]
    for g in dict.fromkeys(r["group"] for r in abl):
        parts = [f"{r['variant']} {r['speedup_vs_int8_block']}" for r in abl if r["group"] == g]
        lines.append(f"ablation g{g} (speed vs the tuned int8_block): " + "; ".join(parts))
    checks = [r for r in b.rows if r["sweep"] == "check"]
    if checks:
        exact = [r for r in checks if "bit for bit" in r["variant"]]
        lines.append(f"# checks: {len(checks)}; bit for bit where required: "
                     f"{sum(r['bitwise_equal'] == 'true' for r in exact)}/{len(exact)}; "
                     f"largest relative difference {max(float(r['max_rel_err']) for r in checks):.2e}")
    for t in b.kf.tuned_configs():
        lines.append(f"# tuned {t['M_class']}x{t['N_class']}x{t['K_class']} g{t['group']}: {t['config']} "
                     f"{t['ms']:.4f} ms")
    lines += [f"# skipped (budget): {s}" for s in b.skipped]
    lines += [f"# FAILED: {f}" for f in b.failures]
    lines.append(f"# elapsed {b.elapsed():.0f} s")
    return lines


def _write_tune_log(path: Path, log: list) -> None:
    from lowprec.kernels.int8_fallback_gemm import _KEY_FIELDS

    fields = [*_KEY_FIELDS, "config", "ms", "regs", "spills", "shared", "error"]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for row in log:
            w.writerow({k: row.get(k, "") for k in fields})


def main(argv=None, _device: str = "cuda") -> int:
    """_device \"cpu\": a dry run under the Triton interpreter for the tests (timings mean nothing)."""
    args = _parse(argv)
    sweeps = set(parse_list(PROG, "--sweeps", args.sweeps, str))
    if not sweeps <= set(SWEEPS):
        fail(PROG, f"--sweeps: unknown sweep in {sorted(sweeps)}; known: {', '.join(SWEEPS)}")
    sizes = parse_int_list(PROG, "--sizes", args.sizes)
    groups = parse_int_list(PROG, "--groups", args.groups)
    ratios = parse_list(PROG, "--ratios", args.ratios, float)
    ratio_groups = parse_int_list(PROG, "--ratio-groups", args.ratio_groups)
    ablation_groups = parse_int_list(PROG, "--ablation-groups", args.ablation_groups)
    patterns = parse_list(PROG, "--patterns", args.patterns, str)
    impls = parse_list(PROG, "--impls", args.impls, str)
    shapes = _shape_list(args.shapes) if "shapes" in sweeps else []
    if not set(patterns) <= {"random", "rows"}:
        fail(PROG, f"--patterns: unknown pattern in {patterns}")
    if not set(impls) <= {"sparse", "fused"} or not impls:
        fail(PROG, f"--impls: expected a subset of sparse,fused, got {impls}")
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
    prov_path, tune_path = out.with_suffix(".json"), out.with_name(out.stem + "_tune.csv")
    if _device == "cuda":
        prov = _provenance(do_bench_median(args.warmup, args.rep)[1])
    else:
        prov = {"gpu": None, "driver": None, "torch": torch.__version__, "triton": "interpreter",
                "cuda": None, "argv": sys.argv[1:], "timer": "perf_counter (interpreter dry run: no timing meaning)"}
    write_provenance(prov_path, prov)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        b = _Bench(args, torch, kf, writer, fh, _device)
        b.largest = max(sizes)
        try:
            if "check" in sweeps and not args.no_check:
                _check_sweep(b, groups, ratio_groups)
            for S in sorted(sizes, reverse=True):  # the headline size first
                if b.over_budget(f"size {S}"):
                    continue
                b.guarded(f"size {S}", lambda: _square_sweeps(b, S, groups, ratios, ratio_groups, patterns, impls,
                                                              sweeps))
                if "quantize" in sweeps:
                    b.guarded(f"quantize {S}", lambda: _quantize_sweep(b, S, ratio_groups))
                b.sync()
            if shapes:
                _shapes_sweep(b, shapes, args.shape_group, args.shape_ratio)
            if "ablation" in sweeps and not b.fixed:
                b.guarded("ablation", lambda: _ablation_sweep(b, max(sizes), ablation_groups))
        finally:
            prov["tuned_configs"] = kf.tuned_configs()
            prov["tuning_log"] = str(tune_path.name)
            prov["elapsed_s"] = round(b.elapsed(), 1)
            write_provenance(prov_path, prov)
            _write_tune_log(tune_path, kf.tuning_log())
            for line in _summary(b):
                print(line, flush=True)
        if "ws" in sweeps:
            print("# ws: the warp-specialized loop (after the summary: a compiler path documented for Blackwell)",
                  flush=True)
            b.guarded("ws", lambda: _ws_sweep(b, 128))
    print(f"# wrote {out} ({len(b.rows)} rows), {prov_path} and {tune_path}")
    bad = [r for r in b.rows if r["sweep"] != "check" and r["max_rel_err"] and float(r["max_rel_err"]) > 1e-4]
    if bad:
        print(f"# WARNING: {len(bad)} rows differ from the float64 product by more than 1e-4", file=sys.stderr)
    return 1 if bad or b.failures else 0


if __name__ == "__main__":
    sys.exit(main())
