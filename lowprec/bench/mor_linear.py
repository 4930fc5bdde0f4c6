"""GPU benchmark: a MoR linear layer's forward + backward, decision included, against a BF16
linear and an FP8 (E4M3, per-tensor current scaling) linear, after a correctness check of the MoR
GEMM kernel on the same GPU.

    PYTHONUNBUFFERED=1 python -m lowprec.bench.mor_linear --hidden 8192 --out results/mor/linear_h200.csv

A square linear layer (hidden x hidden weight) on ``--tokens`` tokens runs its three GEMMs:
fprop Y = X W^T, dgrad dX = dY W, wgrad dW = dY^T X. X, W, dY are bf16. Per configuration the CSV
records the median step time (triton.testing.do_bench), the time spent before the GEMMs
(quantization and, for MoR, the decision), its share of the step, the GEMM time alone on
pre-quantized operands, TFLOP/s, the speed-up over BF16 and the ratio to FP8 current scaling,
which GEMMs ran in FP8 and on what, every operand's MoR error and format, whether the quantization
kernel's codes, scales and error equal the torch reference (lowprec.methods.mor) for X, and for MoR the
time before the GEMMs beyond FP8 current scaling's own quantization (decide_extra_ms and its share
of the step: what deciding costs). The ``_fast`` rows time the whole step only (the compiled path
fuses quantization with the rest): their ratio to FP8 current scaling and their deciding cost are
against ``fp8_current_fast``, the same path.

Methods:
  bf16             three BF16 matmuls
  fp8_current      X, W, dY quantized once to E4M3 with per-tensor current scaling
                   (lowprec.kernels.quantize), codes transposed for the backward GEMMs, three
                   torch._scaled_mm calls with bf16 output (the fp8_tensorwise_current recipe)
  mor_<p>          QLinear's path: every GEMM quantizes its two operand views
                   (MoRQuantizer.fused_gemm: lowprec.kernels.mor_quant, transposed views read
                   through their strides) and multiplies them with lowprec.kernels.mor_gemm, which
                   reads the decisions on the device (no host sync); fp32 output, as fused_gemm
                   returns. Six quantizations per step.
  mor_<p>_once     the same kernels arranged as fp8_current is: X, W, dY quantized and decided once,
                   the backward GEMMs reading transposed copies of their codes, bf16 output (tensor
                   and square-block partitions; per-row scales differ between a tensor and its
                   transpose, so channel quantizes the six views). A transposed view's decision is
                   its tensor's: the same error up to fp32 summation order.
  fp8_current_fast, mor_<p>_fast
                   the training path: one converted QLinear (fp32 master weight, bf16 autocast),
                   forward and backward under torch.compile on the fast path (lowprec.gemm.FastPlan;
                   MoR: the FP8 GEMM on cuBLAS and the Triton fix-up, lowprec.methods.mor_fast),
                   step time only; what lowprec.bench.e2e_step and the workflow train with
  mor_<p>_hostsync the previous implementation: each decision read by the host (one sync per
                   operand), per-tensor / per-row E4M3 GEMMs on torch._scaled_mm, block-scaled ones
                   in BF16 after upcasting.
``--thresholds 0.045,0`` also times the all-BF16 path (a threshold of 0 rejects any error):
Gaussian data gives E4M3 everywhere (error ~2.3 %).

Before the timings, ``check`` rows (printed and written to <out>_check.csv) compare the GEMM kernel
with float64 GEMMs of the emulation's values (torch reference quantization) for every partition and
format combination, on both backends, and QLinear's fused path with the emulated one (forward and
both gradients) including a step under torch.cuda.set_sync_debug_mode("error"). After the layer
timings, the GEMM alone (<out>_gemm.csv): torch BF16, torch._scaled_mm tensorwise, and the MoR
kernel per partition, backend and accumulation, FP8 and BF16 loops. ``--budget-s`` skips what is
left once the run has taken that long (the skipped rows are listed). A summary table is printed
last. A JSON provenance file (GPU, driver, CUDA, torch, triton, git commit, UTC time) is written
beside the CSV.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from lowprec.bench.common import (Budget, add_do_bench_args, bench_parser, do_bench_median, fail, gpu_provenance,
                                  parse_int_list, parse_list, parse_names, provenance_path, require_cuda_triton,
                                  write_provenance, write_rows)
from lowprec.bench.mor_linear_arms import (DEVICE, RAN, DeviceMoRLinear, FastPathLinear, Fp8CurrentLinear,
                                           HostSyncMoRLinear,
                                           bf16_step, data)
from lowprec.bench.mor_linear_checks import CHECK_FIELDS, CHECK_SHAPES, check_kernel, check_qlinear, matches_reference
from lowprec.errors import error_text

PROG = "mor_linear"

DEFAULT_HIDDEN = "8192"
DEFAULT_TOKENS = 8192
MOR_PARTITIONS = ("tensor", "block", "channel")

FIELDS = [
    "method", "partition", "scale", "block", "threshold", "tokens", "hidden", "backend", "out_dtype", "step_ms",
    "quant_ms", "quant_share", "gemm_ms", "tflops", "speedup_vs_bf16", "vs_fp8_current", "fp8_gemms", "formats",
    "rel_err_x", "rel_err_w", "rel_err_dy", "matches_ref", "decide_extra_ms", "decide_extra_share",
]
GEMM_FIELDS = ["variant", "partition", "backend", "fp8_accum", "loop", "m", "n", "k", "ms", "tflops",
               "vs_scaled_mm_tensorwise", "vs_bf16"]


def _parse(argv):
    p = bench_parser(f"lowprec.bench.{PROG}", __doc__)
    p.add_argument("--hidden", default=DEFAULT_HIDDEN, help=f"comma-separated hidden sizes (default {DEFAULT_HIDDEN})")
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help=f"tokens per step (default {DEFAULT_TOKENS})")
    p.add_argument("--partitions", default=",".join(MOR_PARTITIONS), help="MoR partitions to time")
    p.add_argument("--block", default="128x128", help="square block for partition block (default 128x128)")
    p.add_argument("--scale", default="gam", choices=("gam", "e8", "fp32"), help="MoR scale rule (default gam)")
    p.add_argument("--thresholds", default="0.045,0", help="comma-separated MoR thresholds (default 0.045,0)")
    add_do_bench_args(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, default=300.0,
                   help="skip the remaining timings once the run has taken this long (default 300)")
    p.add_argument("--precompile", type=int, default=3,
                   help="processes that compile the timed kernels while the checks run (default 3, one per "
                        "partition; 0: compile on first use)")
    p.add_argument("--no-check", action="store_true", help="skip the correctness checks")
    p.add_argument("--no-hostsync", action="store_true", help="skip the previous (host-sync) MoR arms")
    p.add_argument("--no-gemm", action="store_true", help="skip the GEMM-alone timings")
    return p.parse_args(argv)


def _provenance(timer: str) -> dict:
    return gpu_provenance(timer=timer, flops="3 GEMMs x 2 * tokens * hidden^2",
                          data="X, dY ~ N(0, 1), W ~ N(0, 0.02^2), bf16")


_GEMM_VARIANTS = [("tensor", "triton", "precise"), ("tensor", "triton", "fast"), ("tensor", "scaled_mm", "precise"),
                  ("block", "triton", "precise"), ("block", "scaled_mm", "precise"),
                  ("channel", "triton", "precise"), ("channel", "scaled_mm", "precise")]


def _warm(part: str, block, scale: str, tokens: int, hidden: list, thresholds: list, seed: int) -> None:
    """Runs once, untimed, everything the timings will run for one partition, so that its Triton
    kernels are compiled (into Triton's on-disk cache) in a process of its own while the main one
    runs the checks: compiling takes longer than timing here."""
    import torch
    from lowprec.methods import mor
    from lowprec.kernels import mor_gemm as kg

    for h in hidden:
        x, w, dy = data(torch, tokens, h, seed)
        if part == "tensor":
            Fp8CurrentLinear().step(x, w, dy)
        for mode in ("once", "layer"):
            for th in thresholds:
                lin = DeviceMoRLinear(part, block, scale, th, mode)
                lin.step(x, w, dy)
                lin.gemms(lin.operands(x, w, dy))
        if h == hidden[0]:
            for p, backend, accum in _GEMM_VARIANTS:
                if p == part:
                    q = mor.MoRQuantizer(p, block, scale)
                    oa, ob = q.gemm_operand(x), q.gemm_operand(w)
                    for th in (1.0, 0.0):
                        kg.mor_gemm(oa._replace(threshold=th), ob._replace(threshold=th), out_dtype=torch.bfloat16,
                                    fp8_accum=accum, backend=backend)
        torch.cuda.synchronize()
        del x, w, dy
        torch.cuda.empty_cache()


def _start_warmers(args, partitions, block, hidden, thresholds) -> list:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    procs = [ctx.Process(target=_warm, args=(p, block, args.scale, args.tokens, hidden, thresholds, args.seed),
                         name=f"warm-{p}") for p in partitions[:args.precompile]]
    for pr in procs:
        pr.start()
    return procs


def _join_warmers(procs: list, budget) -> None:
    for pr in procs:
        pr.join(timeout=max(budget.seconds - budget.elapsed(), 1.0))
        if pr.is_alive():
            pr.terminate()
            pr.join()
        print(f"# {pr.name}: exit code {pr.exitcode}, {budget.elapsed():.0f} s so far", flush=True)


def _gemm_rows(torch, bench, kg, x, w, block, scale, budget) -> list:
    """The GEMM alone at (tokens, hidden, hidden): torch BF16, torch._scaled_mm tensorwise, and the
    MoR kernel per partition / backend / accumulation, FP8 loop (threshold 1) and BF16 loop (0)."""
    from lowprec.methods import mor
    m, k = x.shape
    n = w.shape[0]
    flops = 2 * m * n * k
    rows = []

    def add(variant, ms, **kw):
        rows.append({"variant": variant, "m": m, "n": n, "k": k, "ms": ms, **kw})

    add("torch_bf16", bench(lambda: x @ w.t()))
    a8, sa = mor.MoRQuantizer("tensor").gemm_operand(x)[1:3]
    b8, sb = mor.MoRQuantizer("tensor").gemm_operand(w)[1:3]
    ia, ib = sa.reciprocal().reshape(()), sb.reciprocal().reshape(())
    add("scaled_mm_tensorwise", bench(lambda: torch._scaled_mm(a8, b8.t(), scale_a=ia, scale_b=ib,
                                                               out_dtype=torch.bfloat16)), backend="cublas")
    add("scaled_mm_tensorwise_fast", bench(lambda: torch._scaled_mm(a8, b8.t(), scale_a=ia, scale_b=ib,
                                                                    out_dtype=torch.bfloat16, use_fast_accum=True)),
        backend="cublas", fp8_accum="fast")
    for part, backend, accum in _GEMM_VARIANTS:
        q = mor.MoRQuantizer(part, block, scale)
        oa, ob = q.gemm_operand(x), q.gemm_operand(w)
        for th, loop in ((1.0, "fp8"), (0.0, "bf16")):
            name = f"mor_{part}_{backend}_{accum}_{loop}"
            if not budget.allows(f"gemm {name}"):
                continue
            info = torch.zeros(3, dtype=torch.int32, device=DEVICE)
            args = (oa._replace(threshold=th), ob._replace(threshold=th))
            kw = dict(out_dtype=torch.bfloat16, fp8_accum=accum, backend=backend, info=info)
            try:
                ms = bench(lambda: kg.mor_gemm(*args, **kw))
                ran = RAN.get(int(info[2]), "?")
            except Exception as exc:
                print(f"# gemm {name}: {error_text(exc, 300)}", flush=True)
                continue
            add(name, ms, partition=part, backend=backend, fp8_accum=accum, loop=ran)
        del oa, ob
    ref = next(r["ms"] for r in rows if r["variant"] == "scaled_mm_tensorwise")
    bf = rows[0]["ms"]
    for r in rows:
        r["tflops"] = f"{flops / r['ms'] / 1e9:.1f}"
        r["vs_scaled_mm_tensorwise"] = f"{ref / r['ms']:.3f}"
        r["vs_bf16"] = f"{bf / r['ms']:.3f}"
        r["ms"] = f"{r['ms']:.4f}"
    return rows


def main(argv=None) -> int:
    args = _parse(argv)
    torch, _ = require_cuda_triton(PROG, "tests/test_kernels_mor.py, tests/test_kernels_mor_gemm.py")
    if not hasattr(torch, "_scaled_mm"):
        fail(PROG, f"torch {torch.__version__} has no torch._scaled_mm")
    if torch.cuda.get_device_capability() < (8, 9):
        fail(PROG, f"FP8 GEMMs need compute capability >= 8.9, got {torch.cuda.get_device_capability()}")
    from lowprec.kernels import mor_gemm as kg
    from lowprec.kernels import mor_quant as km

    hidden = parse_int_list(PROG, "--hidden", args.hidden)
    thresholds = parse_list(PROG, "--thresholds", args.thresholds, float)
    try:
        br, bc = (int(v) for v in args.block.lower().split("x"))
    except ValueError as exc:
        fail(PROG, f"bad --block: {exc}")
    if any(h % 16 for h in hidden) or args.tokens % 16:
        fail(PROG, "hidden sizes and tokens must be multiples of 16 (cuBLASLt FP8 GEMMs)")
    partitions = parse_names(PROG, "--partitions", args.partitions, MOR_PARTITIONS)
    block = (br, bc)
    budget = Budget(args.budget_s)

    out = Path(args.out)
    bench, timer = do_bench_median(args.warmup, args.rep, args.cudagraph)
    write_provenance(provenance_path(out), _provenance(timer))
    # compile the timed arms' kernels in parallel with the checks (nothing is timed meanwhile)
    warmers = _start_warmers(args, partitions, block, hidden, thresholds) if args.precompile else []

    checks = []
    if not args.no_check:
        for backend, shape, floor in CHECK_SHAPES:
            check_kernel(torch, kg, checks, block, args.scale, shape, backend, floor)
        check_qlinear(torch, checks, block, args.scale)
        write_rows(out.with_name(out.stem + "_check.csv"), CHECK_FIELDS, checks)
        for r in checks:
            print(f"check {'PASS' if r['ok'] else 'FAIL'} {r['check']:40s} {r['partition']:8s} {r['backend']:9s} "
                  f"{r['formats']:24s} ran={r['ran']} sqnr={r['sqnr_db']} dB (floor {r['floor_db']})", flush=True)
        print(f"# checks: {sum(r['ok'] for r in checks)}/{len(checks)} pass, {budget.elapsed():.0f} s so far",
              flush=True)

    _join_warmers(warmers, budget)
    all_rows, gemm_rows = [], []
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        for h in hidden:
            x, w, dy = data(torch, args.tokens, h, args.seed)
            flops = 3 * 2 * args.tokens * h * h
            base = {"tokens": args.tokens, "hidden": h}
            rows = []

            def emit(row):
                row.update(base)
                rows.append(row)
                _finish(row, flops, rows)
                writer.writerow({k: row.get(k, "") for k in FIELDS})
                fh.flush()
                print(_line(row), flush=True)

            bf16_ms = bench(lambda: bf16_step(x, w, dy))
            emit({"method": "bf16", "step_ms": bf16_ms, "quant_ms": 0.0, "gemm_ms": bf16_ms, "fp8_gemms": 0,
                  "backend": "torch", "out_dtype": "bf16"})
            fp8 = Fp8CurrentLinear()
            ops = fp8.operands(x, w, dy)
            emit({"method": "fp8_current", "partition": "tensor", "scale": "fp32", "backend": "scaled_mm",
                  "out_dtype": "bf16", "step_ms": bench(lambda: fp8.step(x, w, dy)),
                  "quant_ms": bench(lambda: fp8.operands(x, w, dy)), "gemm_ms": bench(lambda: fp8.gemms(ops)),
                  "fp8_gemms": 3})
            del ops
            # the training path, compiled: what the end-to-end benchmark and the workflow run
            fast_arms = [("fp8_current_fast", "tensor", None, {"recipe": "fp8_tensorwise_current"})]
            fast_arms += [(f"mor_{part}_fast", part, th, {"recipe": "mor", "partition": part, "threshold": th,
                                                           **({"block": list(block)} if part == "block" else {})})
                          for part in partitions for th in thresholds]
            for name, part, th, method in fast_arms:
                if not budget.allows(f"h={h} {name} th={th}"):
                    continue
                try:
                    lin = FastPathLinear(method, h)
                    lin.step(x, w, dy)  # compiles
                    emit({"method": name, "partition": part, "threshold": "" if th is None else th,
                          "backend": "fast_path", "out_dtype": "bf16", "step_ms": bench(lambda: lin.step(x, w, dy))})
                except Exception as exc:  # one broken arm must not cost the others
                    print(f"# error in {name}: {error_text(exc, 500)}", flush=True)
                lin = None
                torch.cuda.empty_cache()

            for part in partitions:
                match = "" if args.no_check else str(matches_reference(torch, km, x, part, block, args.scale))
                common = {"partition": part, "scale": args.scale, "block": f"{br}x{bc}" if part == "block" else "",
                          "matches_ref": match}
                for mode, suffix, out_dtype in (("once", "_once", "bf16"), ("layer", "", "fp32")):
                    for th in thresholds:
                        name = f"mor_{part}{suffix} th={th}"
                        if not budget.allows(f"h={h} {name}"):
                            continue
                        try:
                            lin = DeviceMoRLinear(part, block, args.scale, th, mode)
                            ops = lin.operands(x, w, dy)
                            step_ms = bench(lambda: lin.step(x, w, dy))
                            emit({**common, "method": f"mor_{part}{suffix}", "threshold": th,
                                  "out_dtype": out_dtype, "step_ms": step_ms,
                                  "quant_ms": bench(lambda: lin.operands(x, w, dy)),
                                  "gemm_ms": bench(lambda: lin.gemms(ops)), **lin.summary(ops)})
                        except Exception as exc:  # one broken arm must not cost the others
                            print(f"# error in {name}: {error_text(exc, 500)}", flush=True)
                        ops = None
                        torch.cuda.empty_cache()

            if not args.no_gemm and h == hidden[0]:
                gemm_rows = _gemm_rows(torch, bench, kg, x, w, block, args.scale, budget)
                write_rows(out.with_name(out.stem + "_gemm.csv"), GEMM_FIELDS, gemm_rows)
                for r in gemm_rows:
                    print(f"gemm {r['variant']:42s} {r.get('loop', ''):10s} {r['ms']:>8s} ms {r['tflops']:>7s} TFLOP/s  "
                          f"x{r['vs_scaled_mm_tensorwise']} of scaled_mm tensorwise", flush=True)

            if not args.no_hostsync:
                for part in partitions:
                    if not budget.allows(f"h={h} mor_{part}_hostsync"):
                        continue
                    try:
                        lin = HostSyncMoRLinear(part, block, args.scale, thresholds[0])
                        ops = lin.operands(x, w, dy)
                        emit({"method": f"mor_{part}_hostsync", "partition": part, "scale": args.scale,
                              "block": f"{br}x{bc}" if part == "block" else "", "threshold": thresholds[0],
                              "backend": "host", "out_dtype": "bf16", "step_ms": bench(lambda: lin.step(x, w, dy)),
                              "quant_ms": bench(lambda: lin.operands(x, w, dy)),
                              "gemm_ms": bench(lambda: lin.gemms(ops)), **lin.summary(ops)})
                    except Exception as exc:
                        print(f"# error in mor_{part}_hostsync: {error_text(exc, 500)}", flush=True)
                    ops = None
                    torch.cuda.empty_cache()
            all_rows.extend(rows)
            del x, w, dy
            torch.cuda.empty_cache()

    print(f"# wrote {out}, {provenance_path(out)} and the _check / _gemm CSVs beside it; "
          f"{budget.elapsed():.0f} s", flush=True)
    if budget.skipped:
        print(f"# skipped for the budget: {'; '.join(budget.skipped)}", flush=True)
    _summary(all_rows, gemm_rows, checks)
    return 0


def _finish(row: dict, flops: int, rows: list) -> None:
    """Ratios to the BF16 row and to FP8 current scaling's row on the same path (``fp8_current`` for
    the layer arms, ``fp8_current_fast`` for the ``_fast`` ones) of the same hidden size (rows holds
    this one too). A ``_fast`` row has its step time only: the compiled training path fuses the
    quantization with the rest, so what deciding costs is its step minus FP8 current scaling's."""
    fast = row["method"].endswith("_fast")
    row["_step"], row["_quant"] = row["step_ms"], row.get("quant_ms")
    bf = next(r["_step"] for r in rows if r["method"] == "bf16")
    fp8 = next((r for r in rows if r["method"] == ("fp8_current_fast" if fast else "fp8_current")), None)
    if row["method"].startswith("mor") and fp8 is not None:
        # what deciding costs beyond FP8 current scaling's own quantization (amax, scale, cast)
        extra = row["_step"] - fp8["_step"] if fast else row["_quant"] - fp8["_quant"]
        row["decide_extra_ms"] = f"{extra:.4f}"
        row["decide_extra_share"] = f"{extra / row['step_ms']:.4f}"
    if row["_quant"] is not None:
        row["quant_share"] = f"{row['quant_ms'] / row['step_ms']:.4f}"
    row["tflops"] = f"{flops / row['step_ms'] / 1e9:.1f}"
    row["speedup_vs_bf16"] = f"{bf / row['step_ms']:.3f}"
    row["vs_fp8_current"] = f"{(fp8['_step'] if fp8 is not None else row['step_ms']) / row['step_ms']:.3f}"
    for k in ("step_ms", "quant_ms", "gemm_ms"):
        if isinstance(row.get(k), float):
            row[k] = f"{row[k]:.4f}"
    for k in ("rel_err_x", "rel_err_w", "rel_err_dy"):
        if isinstance(row.get(k), float):
            row[k] = f"{row[k]:.6f}"


def _share(row: dict, key: str) -> str:
    """A share column as a percentage, or blank where the row has none (a ``_fast`` row's quant_share)."""
    return f"{float(row[key]):.1%}" if row.get(key) else ""


def _line(row: dict) -> str:
    return (f"h={row['hidden']:6d} {row['method']:18s} th={row.get('threshold', ''):<6} "
            f"step {row['step_ms']:>8s} ms  quant {row.get('quant_ms', '-'):>8s} ms ({_share(row, 'quant_share')})  "
            f"gemm {row.get('gemm_ms', '-'):>8s} ms  x{row['speedup_vs_bf16']} vs bf16  x{row['vs_fp8_current']} vs fp8  "
            f"fp8 gemms {row.get('fp8_gemms', '-')} ({row.get('backend', '')})  ref={row.get('matches_ref') or '-'}")


def _summary(rows: list, gemm_rows: list, checks: list) -> None:
    """The tables to read first: the checks' tally, the GEMM alone, and every layer arm with its
    step, deciding share and ratios."""
    if checks:
        bad = [f"{r['check']} {r['partition']} {r['backend']} {r['formats']}" for r in checks if not r["ok"]]
        print(f"\n# checks: {len(checks) - len(bad)}/{len(checks)} pass" + (f"; FAILED: {'; '.join(bad)}" if bad else ""))
    if gemm_rows:
        print("\n# GEMM alone (ms; ratio to torch._scaled_mm tensorwise, >1 = faster)")
        for r in gemm_rows:
            print(f"{r['variant']:42} {r.get('loop', ''):10} {r['ms']:>8} {r['vs_scaled_mm_tensorwise']:>7}")
    print("\n# summary: forward + backward step (ms), time before the GEMMs, ratios (>1 = faster)")
    print("# share: time before the GEMMs / step; extra: that time minus fp8_current's, / step "
          "(a _fast row: its step minus fp8_current_fast's, / step)")
    print(f"{'hidden':>6} {'method':18} {'th':>6} {'out':>4} {'step':>8} {'quant':>8} {'share':>6} {'extra':>6} "
          f"{'vs bf16':>8} {'vs fp8':>7} {'fp8 gemms':>9}  backend")
    for r in rows:
        print(f"{r['hidden']:>6} {r['method']:18} {str(r.get('threshold', '')):>6} {r.get('out_dtype', ''):>4} "
              f"{r['step_ms']:>8} {r.get('quant_ms', ''):>8} {_share(r, 'quant_share'):>6} "
              f"{_share(r, 'decide_extra_share'):>6} {r['speedup_vs_bf16']:>8} {r['vs_fp8_current']:>7} "
              f"{r.get('fp8_gemms', ''):>9}  {r.get('backend', '')}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
