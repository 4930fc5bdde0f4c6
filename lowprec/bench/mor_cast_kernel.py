"""Speed of MoR's cast-and-error pass (``lowprec.kernels.mor_quant.mor_cast_error``) over its launch
configurations and its division, against Inductor's fusion of the same torch ops (per-channel MoR's
path; per-tensor and per-block MoR's with ``LOWPREC_MOR_CAST_KERNEL=0``), on the 1 B step's operands.

    python -m lowprec.bench.mor_cast_kernel --out results/bench/mor_cast_kernel_h200.csv

Per operand dtype (``--dtypes``: bf16, training's activations and gradients, by default; fp32, a
master weight's, which the fast path keeps off the pass: ``mor_fast._cast_on_kernel``), shape
(``ROWSxCOLS``; a trailing ``t``: the operand is the transposed view of a row-major (COLS, ROWS)
tensor, as the weight gradient's X^T and dY^T are) and MoR partition, the rows are:

* ``inductor``: ``lowprec.methods.mor_fast.mor_operand`` compiled as the training blocks compile it
  (``EAGER_NUMERICS``) with the pass off (``mor_fast.CAST_KERNEL``; per-channel MoR's default path):
  amax, scales, codes, error, and the backward's transposed codes where the partition's transpose
  reuses them (the copy Inductor fuses);
* ``kernel_path``: the same with the Triton pass (per-tensor and per-block MoR's default path, at
  its default launch);
* ``scales``: the compiled amax and scales alone (``gemm.encode_scales``), which the pass takes
  (per channel both grids, the rows' and the columns');
* ``kernel``: the pass alone at each ``--configs`` launch (tile rows x columns x warps) and
  division (``rn``: correctly rounded, ``approx``: the fast path's, ``mor_quant._division``;
  per channel, the transpose's codes with their own scales, as the fast path writes them with
  ``mor_fast.CHANNEL_WITH_TRANSPOSE``), with its bandwidth (x read
  once, each layout of codes written once) against a ``clone`` of x timed in the same run, and
  whether its codes equal the default path's and how far its error is from the fast path's torch
  form (``mor_fast.operand_error``, eager).
"""

from __future__ import annotations

import sys
from pathlib import Path

from lowprec.bench.common import (add_do_bench_args, bench_parser, do_bench_median, gpu_provenance,
                                  parse_list, parse_names, parse_shapes, provenance_path, require_cuda_triton,
                                  write_provenance, write_rows)
from lowprec.errors import error_text

PROG = "mor_cast_kernel"
DEFAULT_SHAPES = "16384x5632,16384x2048,5632x16384t,2048x16384t"
PARTITIONS = ("block", "tensor", "channel")
DEFAULT_CONFIGS = "32x128x4,64x128x4,64x128x8,128x128x8,32x256x4,64x256x8"
DIVS = ("rn", "approx")
DTYPES = ("bf16", "fp32")
FIELDS = ("dtype", "shape", "transposed_view", "partition", "layouts", "arm", "tile", "num_warps", "div", "ms",
          "gbps", "clone_gbps", "share_of_clone", "speedup_vs_inductor", "codes_equal", "error_rel_diff")


def _shapes(text: str) -> list:
    out = []
    for item in parse_list(PROG, "--shapes", text, str.strip):
        view = item.endswith("t")
        [(rows, cols)] = parse_shapes(PROG, "--shapes", item.rstrip("t"), dims=2)
        out.append((rows, cols, view))
    return out


def measure(m: int, n: int, view: bool, partition: str, configs: list, divs: list, bench, device,
            dtype: str = "bf16") -> list:
    """The rows of one operand dtype, shape and partition (module docstring); ``bench(fn)`` -> ms."""
    import torch

    from lowprec.gemm import TRANSPOSABLE, FP8Operand, encode_scales, kind_block
    from lowprec.kernels import mor_quant as kq
    from lowprec.linear import EAGER_NUMERICS
    from lowprec.methods import mor_fast
    from lowprec.methods.mor import MoRQuantizer, e4m3_spec

    torch.manual_seed(0)
    base = torch.randn((n, m) if view else (m, n), device=device)
    base = (base * torch.logspace(-3, 2, base.shape[1], device=device)).to(
        torch.bfloat16 if dtype == "bf16" else torch.float32)
    x2d = base.t() if view else base
    clone_ms = bench(lambda: base.clone())
    clone_gbps = 2 * base.numel() * base.element_size() / clone_ms / 1e6
    q = MoRQuantizer(partition=partition)
    spec = e4m3_spec(partition, q.block, q.scale, cols=n)
    kind = mor_fast._kind(spec)
    # per channel, as the fast path quantizes an operand whose transpose a backward GEMM takes: the
    # transpose's codes from the same read, with scales of their own (x's columns')
    own_t = partition == "channel" and mor_fast.CHANNEL_WITH_TRANSPOSE
    both = kind in TRANSPOSABLE or own_t
    layouts = "both" if both else ("transposed" if view else "rows")
    common = {"dtype": dtype, "shape": f"{m}x{n}", "transposed_view": view, "partition": partition,
              "layouts": layouts + (" (own scales)" if own_t else "")}
    rows = []

    def row(arm, ms, base_ms=None, **kw):
        r = {**common, "arm": arm, "ms": f"{ms:.4f}", **kw}
        if base_ms:
            r["speedup_vs_inductor"] = f"{base_ms / ms:.3f}"
        rows.append(r)
        print(",".join(str(r.get(f, "")) for f in FIELDS), flush=True)

    def compiled(on: bool):
        mor_fast.CAST_KERNEL = on
        torch._dynamo.reset()
        fn = torch.compile(lambda t: mor_fast.mor_operand(q, t, both), options=dict(EAGER_NUMERICS))
        op = fn(x2d)
        return fn, (op.fp8.codes, op.fp8.codes_t if both else None)

    default = mor_fast.CAST_KERNEL
    try:
        fn, (ref_codes, ref_codes_t) = compiled(False)
        if both and ref_codes_t is None:  # the default path leaves the transposed copy to the GEMM
            ref_codes_t = ref_codes.t().contiguous()
        ref_err = float(mor_fast.operand_error(base, FP8Operand.of(x2d, spec, kind), transposed=view))
        t_ind = bench(lambda: fn(x2d))
        row("inductor", t_ind)
        if x2d.is_cuda:
            fn, _ = compiled(True)
            row("kernel_path", bench(lambda: fn(x2d)), t_ind)
    finally:
        mor_fast.CAST_KERNEL = default
    torch._dynamo.reset()
    spec_t = e4m3_spec(partition, q.block, q.scale, cols=m)
    scales_fn = torch.compile(lambda t: (encode_scales(t, spec), encode_scales(t.t(), spec_t) if own_t else None),
                              options=dict(EAGER_NUMERICS))
    scale, scale_t = scales_fn(x2d)
    row("scales", bench(lambda: scales_fn(x2d)), t_ind)
    if own_t:
        grid, block, grid_t, block_t = mor_fast.own_transpose_grids(scale, scale_t, kind, (m, n), view)
    else:
        grid, block = mor_fast._base_grid(scale, kind_block(kind, (m, n)), view)
        grid_t = block_t = None
    moved = base.numel() * (base.element_size() + (2 if both else 1))
    for bm, bn, warps in configs:
        for div in divs:
            def run(bm=bm, bn=bn, warps=warps, div=div):
                return kq.mor_cast_error(base, grid, block, layouts, tile=(bm, bn), num_warps=warps,
                                         approx_div=div == "approx", scale_t=grid_t, block_t=block_t)
            try:
                codes_b, codes_bt, err, nz, err_bt = run()
                ms = bench(run)
            except Exception as exc:  # noqa: BLE001 - a launch the device refuses is reported, skipped
                print(f"# {m}x{n} {partition} {bm}x{bn}x{warps} {div}: {error_text(exc, 160)}", flush=True)
                continue
            codes, codes_t = (codes_bt, codes_b) if view else (codes_b, codes_bt)
            same = torch.equal(codes.view(torch.uint8), ref_codes.view(torch.uint8))
            if both:
                same = same and torch.equal(codes_t.view(torch.uint8), ref_codes_t.view(torch.uint8))
            # x2d's error: with a grid of the transpose's own over a transposed view, the pass's
            # second sums (its base's transpose is x2d), as mor_fast._with_own_transpose reads them
            err_x = err_bt if own_t and view else err
            total = float(err_x.double().sum() / nz.sum().clamp_min(1))
            row("kernel", ms, t_ind, tile=f"{bm}x{bn}", num_warps=warps, div=div,
                gbps=f"{moved / ms / 1e6:.0f}", clone_gbps=f"{clone_gbps:.0f}",
                share_of_clone=f"{moved / ms / 1e6 / clone_gbps:.3f}", codes_equal=same,
                error_rel_diff=f"{abs(total - ref_err) / max(abs(ref_err), 1e-30):.2e}")
    return rows


def main(argv=None) -> int:
    p = bench_parser(PROG, __doc__)
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="operand shapes ROWSxCOLS[t] (t: a transposed view)")
    p.add_argument("--partitions", default="block,tensor", help=f"subset of {','.join(PARTITIONS)}")
    p.add_argument("--configs", default=DEFAULT_CONFIGS, help="the pass's launches, ROWSxCOLSxWARPS")
    p.add_argument("--divs", default=",".join(DIVS), help=f"subset of {','.join(DIVS)}")
    p.add_argument("--dtypes", default="bf16", help=f"operand dtypes, a subset of {','.join(DTYPES)}")
    add_do_bench_args(p)
    args = p.parse_args(argv)
    shapes = _shapes(args.shapes)
    partitions = parse_names(PROG, "--partitions", args.partitions, PARTITIONS)
    configs = parse_shapes(PROG, "--configs", args.configs, form="ROWSxCOLSxWARPS")
    divs = parse_names(PROG, "--divs", args.divs, DIVS)
    dtypes = parse_names(PROG, "--dtypes", args.dtypes, DTYPES)
    torch, _ = require_cuda_triton(PROG)
    bench, timer = do_bench_median(args.warmup, args.rep, args.cudagraph)
    rows = []
    for dtype in dtypes:
        for m, n, view in shapes:
            for partition in partitions:
                rows += measure(m, n, view, partition, configs, divs, bench, torch.device("cuda"), dtype)
    out = Path(args.out)
    write_rows(out, FIELDS, rows)
    write_provenance(provenance_path(out), gpu_provenance(timer=timer))
    print(f"# wrote {out} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
