"""GPU benchmark: the MoR GEMM's BF16 fix-up alone (``lowprec.kernels.mor_gemm.bf16_fixup``), the
kernel a BF16 choice pays on the fast path after the FP8 product, at the three GEMMs of a linear
layer and over launch configurations, against torch's BF16 GEMM of the same layout.

    PYTHONUNBUFFERED=1 python -m lowprec.bench.mor_fixup --shapes 8192x8192x8192 --out results/mor/fixup_h200.csv

A linear layer of ``tokens`` x ``in`` inputs and ``out`` features (``--shapes`` TOKENSxINxOUT) runs
fprop ``X W^T`` (both operands row-major along K), dgrad ``dY W`` (W read through its transpose)
and wgrad ``dY^T X`` (both through transposes: K is the token dimension), as
``lowprec.methods.mor_fast`` hands them to the fix-up. Per-tensor E4M3 codes and scales are MoR's
own of the bf16 operands (``lowprec.kernels.mor_quant.mor_quantize_e4m3``); each operand's choice is set through its error (0: E4M3, inf: BF16) for the
pairs ``--pairs`` (``bf16/bf16``: a plain BF16 GEMM; ``e4m3/bf16`` and ``bf16/e4m3``: one operand's
decoded codes; ``e4m3/e4m3``: the common case, every program returning at once). Each row: the
median time (do_bench), TFLOP/s, the ratio to torch's BF16 GEMM of the same layout (``x @ w.t()`` on
the same views), which loop ran (the kernel's ``info``) and, for a pair that multiplies, the largest
difference to a float64 GEMM of the chosen values relative to that GEMM's largest magnitude.

``--configs``: launch configurations ``BMxBNxBKwWsS`` with optional ``rR`` (a register cap,
``maxnreg``), ``pP`` (persistent programs an SM) and ``-notma`` (two BF16 choices on the pointer
loop), e.g. ``128x128x64w8s3r128p2``; ``default`` is the shape's own (``mor_gemm._config``). A configuration Triton cannot compile for the GPU is a row
with its error.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..errors import error_text
from .common import (Budget, add_do_bench_args, bench_parser, do_bench_median, fail, gpu_provenance,
                     parse_list, parse_names, parse_shapes, require_cuda_triton, write_budgeted_run)
from .mor_linear_arms import RAN

PROG = "lowprec.bench.mor_fixup"
LAYOUTS = ("fprop", "dgrad", "wgrad")
PAIRS = ("bf16/bf16", "e4m3/bf16", "bf16/e4m3", "e4m3/e4m3")
FIELDS = ("layout", "pair", "config", "tokens", "d_in", "d_out", "m", "n", "k", "ms", "tflops", "torch_bf16_ms",
          "vs_torch_bf16", "loop", "max_rel_diff", "error")
_CONFIG = re.compile(r"^(\d+)x(\d+)x(\d+)w(\d+)s(\d+)(?:r(\d+))?(?:p(\d+))?(-notma)?$")


def parse_config(text: str):
    """A ``--configs`` item as a ``GemmConfig`` (None for ``default``), or exit 2 naming it."""
    from lowprec.kernels.mor_gemm import GemmConfig

    if text == "default":
        return None
    m = _CONFIG.match(text)
    if not m:
        fail(PROG, f"--configs: {text!r} is not BMxBNxBKwWsS[rR][pP][-notma] (e.g. 128x128x64w8s3r128p2) or 'default'")
    bm, bn, bk, w, s, r, p, notma = m.groups()
    return GemmConfig(int(bm), int(bn), int(bk), int(bk), int(w), int(s), int(r) if r else None, int(p) if p else 2,
                      tma=not notma)


def _parse(argv):
    p = bench_parser(PROG, __doc__)
    p.add_argument("--shapes", default="8192x8192x8192", help="TOKENSxINxOUT linear layers (comma-separated)")
    p.add_argument("--layouts", default=",".join(LAYOUTS), help=f"subset of {LAYOUTS}")
    p.add_argument("--pairs", default=",".join(PAIRS), help=f"choices of (A, B), subset of {PAIRS}")
    p.add_argument("--configs", default="default", help="launch configurations (see above), comma-separated")
    p.add_argument("--budget-s", type=float, default=300, help="skip the remaining timings after this long")
    p.add_argument("--seed", type=int, default=0)
    add_do_bench_args(p)
    return p.parse_args(argv)


def _operand(kg, torch, hp, codes_base, scale, transposed: bool, e4m3: bool):
    codes = codes_base.t() if transposed else codes_base
    view = hp.t() if transposed else hp
    err = torch.tensor(0.0 if e4m3 else float("inf"), device=hp.device)
    return kg.MoROperand(view, codes, scale, tuple(view.shape), err, 0.0)


def _layout_operands(layout: str, x, w, dy):
    """(A source, A transposed, B source, B transposed) of ``A @ B.T`` for one GEMM of the layer."""
    return {"fprop": (x, False, w, False), "dgrad": (dy, False, w, True), "wgrad": (dy, True, x, True)}[layout]


def main(argv=None) -> int:
    args = _parse(argv)
    shapes = parse_shapes(PROG, "--shapes", args.shapes, form="TOKENSxINxOUT")
    layouts = parse_names(PROG, "--layouts", args.layouts, LAYOUTS)
    pairs = parse_names(PROG, "--pairs", args.pairs, PAIRS)
    configs = [(c, parse_config(c)) for c in parse_list(PROG, "--configs", args.configs, str.strip)]
    torch, _ = require_cuda_triton(PROG, "tests/test_kernels_mor_gemm.py")
    from lowprec.kernels import mor_gemm as kg
    from lowprec.kernels import mor_quant as kq

    bench, timer = do_bench_median(args.warmup, args.rep, args.cudagraph)
    prov = gpu_provenance(timer=timer)
    budget = Budget(args.budget_s)
    rows = []
    out = Path(args.out)
    try:
        for tokens, d_in, d_out in shapes:
            gen = torch.Generator(device="cuda").manual_seed(args.seed)
            x = torch.randn(tokens, d_in, device="cuda", generator=gen).to(torch.bfloat16)
            w = (torch.randn(d_out, d_in, device="cuda", generator=gen) * d_in ** -0.5).to(torch.bfloat16)
            dy = (torch.randn(tokens, d_out, device="cuda", generator=gen) * 1e-3).to(torch.bfloat16)
            fp8 = {name: kq.mor_quantize_e4m3(t, "tensor")[:2] for name, t in (("x", x), ("w", w), ("dy", dy))}
            names = {id(x): "x", id(w): "w", id(dy): "dy"}
            for layout in layouts:
                a_src, a_t, b_src, b_t = _layout_operands(layout, x, w, dy)
                av, bv = (a_src.t() if a_t else a_src), (b_src.t() if b_t else b_src)
                m, k = av.shape
                n = bv.shape[0]
                flops = 2 * m * n * k
                torch_ms = bench(lambda: av @ bv.t())
                for pair in pairs:
                    ea, eb = (p == "e4m3" for p in pair.split("/"))
                    ca, sa = fp8[names[id(a_src)]]
                    cb, sb = fp8[names[id(b_src)]]
                    a = _operand(kg, torch, a_src, ca, sa, a_t, ea)
                    b = _operand(kg, torch, b_src, cb, sb, b_t, eb)
                    ref = None
                    if not (ea and eb):
                        va = (a.codes.float() / sa) if ea else av.double()
                        vb = (b.codes.float() / sb) if eb else bv.double()
                        ref = va.double() @ vb.double().t()
                    for text, cfg in configs:
                        what = f"{tokens}x{d_in}x{d_out} {layout} {pair} {text}"
                        if not budget.allows(what):
                            continue
                        row = {"layout": layout, "pair": pair, "config": text, "tokens": tokens, "d_in": d_in,
                               "d_out": d_out, "m": m, "n": n, "k": k, "torch_bf16_ms": f"{torch_ms:.4f}"}
                        res = torch.zeros(m, n, dtype=torch.bfloat16, device="cuda")
                        info = torch.zeros(3, dtype=torch.int32, device="cuda")
                        try:
                            kg.bf16_fixup(a, b, res, info=info, config=cfg)
                            torch.cuda.synchronize()
                            row["loop"] = RAN.get(int(info[2]), str(int(info[2])))
                            if ref is not None:
                                row["max_rel_diff"] = f"{float((res.double() - ref).abs().max() / ref.abs().max()):.2e}"
                            ms = bench(lambda: kg.bf16_fixup(a, b, res, config=cfg))
                        except Exception as exc:  # a configuration that does not build is a finding
                            row["error"] = error_text(exc)
                            rows.append(row)
                            print(f"{what}: {row['error']}", flush=True)
                            continue
                        row.update(ms=f"{ms:.4f}", tflops=f"{flops / ms / 1e9:.1f}",
                                   vs_torch_bf16=f"{torch_ms / ms:.3f}")
                        rows.append(row)
                        print(f"{what:52s} {ms:8.4f} ms {flops / ms / 1e9:7.1f} TFLOP/s  x{torch_ms / ms:.3f} "
                              f"of torch bf16 ({torch_ms:.4f} ms)  loop {row['loop']}  diff {row.get('max_rel_diff', '-')}",
                              flush=True)
                    del a, b, ref
            del x, w, dy, fp8
            torch.cuda.empty_cache()
    finally:
        write_budgeted_run(out, FIELDS, rows, prov, budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
