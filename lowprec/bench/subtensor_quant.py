"""Sub-tensor MoR's quantization of one operand on the GPU, as a ~1B training step quantizes its
operands (bf16, 128x128 blocks, two-way): the torch ops that Inductor fuses (``quantize: torch``)
against the Triton passes of ``lowprec.kernels.mor_subtensor_quant`` (``quantize: kernel``, what
the default ``auto`` runs on CUDA), each compiled as training runs it and each delivering what the step's GEMMs read (values
and the E4M3 codes in both layouts: the backward multiplies the transposes), and each kernel pass
launched alone (stats; errors as training runs them, over the blocks whose choice reads the sums,
and over every block; values), to show where the time goes (``--configs``: each pass also with
other steps and warps per program, ``lowprec.kernels.mor_subtensor_quant.PassConfig``).
``x.clone()`` of the same tensor runs in the same run: ``ratio_vs_clone`` is the share of the
memory bound reached.

    python -m lowprec.bench.subtensor_quant --out results/bench/subtensor_quant_h200.csv

``error_block_share``: the share of blocks whose choice reads the error sums
(``lowprec.methods.mor.subtensor_error_blocks``) in this run's input. Every row's ``equal`` says
whether that path's values, scales and choices are the torch path's, bit for bit (NaN compared by
position).
"""

from __future__ import annotations

import sys
from pathlib import Path

from lowprec.bench.common import (Budget, add_do_bench_args, bench_parser, do_bench_median, fresh_compilation,
                                  gpu_provenance, parse_shapes, require_cuda_triton, write_budgeted_run,
                                  provenance_path, write_provenance)

PROG = "lowprec.bench.subtensor_quant"
FIELDS = ("rows", "cols", "path", "ms", "gb_per_s", "ratio_vs_clone", "ratio_vs_torch", "equal", "error_block_share")
# the ~1B step's operands (lowprec.bench.e2e_step's llama_1b: 16384 tokens, d_model 2048, ffn 5632):
# activations and their gradients, then weights
DEFAULT_SHAPES = "16384x2048,16384x5632,2048x2048,5632x2048,2048x5632"
BLOCK = (128, 128)
# --configs: each pass also with these (step, num_warps), its default (kq.DEFAULT_CONFIGS) left out
CONFIGS = ((1024, 4), (2048, 4), (4096, 4), (1024, 8), (2048, 8), (4096, 8))


def _parse(argv):
    p = bench_parser(PROG, __doc__)
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="ROWSxCOLS list (default: the ~1B step's operands)")
    p.add_argument("--configs", action="store_true", help="also time each pass with EXTRA_CONFIGS (step, warps)")
    p.add_argument("--budget-s", type=float, default=None, help="start nothing new after this many seconds")
    add_do_bench_args(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    shapes = parse_shapes(PROG, "--shapes", args.shapes, dims=2)
    torch, _ = require_cuda_triton(PROG, "tests/test_kernels_mor_subtensor.py")
    from lowprec.kernels import mor_subtensor_quant as kq
    from lowprec.linear import EAGER_NUMERICS
    from lowprec.methods.mor import (SubTensorMoRQuantizer, dynamic_range, subtensor_choice, subtensor_error_blocks,
                                     subtensor_scales)
    from lowprec.methods.mor_subtensor_fast import subtensor_operand

    q_torch, q_kernel = (SubTensorMoRQuantizer(BLOCK, quantize=q) for q in ("torch", "kernel"))

    def step_operands(q, x):
        """What a step's GEMMs read of one operand: values and E4M3 codes, in both layouts."""
        op = subtensor_operand(q, x)
        t = op.t()
        e4m3 = op.e4m3 if op.e4m3 is not None else op.values.to(torch.float8_e4m3fn)
        e4m3_t = t.e4m3 if t.e4m3 is not None else t.values.to(torch.float8_e4m3fn)
        return op.values, t.values.contiguous(), e4m3, e4m3_t.contiguous(), op.scale, op.choice

    bench, timer = do_bench_median(args.warmup, args.rep, args.cudagraph)
    out = Path(args.out)
    prov = gpu_provenance(timer=timer, block=list(BLOCK), mode="two_way", scale="fp32", eager_numerics=EAGER_NUMERICS)
    write_provenance(provenance_path(out), prov)
    budget, rows = Budget(args.budget_s), []
    try:
        for M, N in shapes:
            if not budget.allows(f"{M}x{N}"):
                continue
            g = torch.Generator(device="cuda").manual_seed(0)
            x = (torch.randn(M, N, device="cuda", generator=g)
                 * torch.logspace(-3, 2, N, device="cuda")).to(torch.bfloat16)
            gb = x.numel() * x.element_size() / 1e9
            t_clone = bench(lambda: x.clone())
            fresh_compilation()
            compiled = torch.compile(step_operands, options=EAGER_NUMERICS, dynamic=False)
            paths = {name: lambda q=q: compiled(q, x) for name, q in (("torch_compiled", q_torch),
                                                                      ("kernel_compiled", q_kernel))}
            ref = paths["torch_compiled"]()
            amax, amin, bad = kq.block_stats(x, BLOCK)
            s = subtensor_scales(amax, "fp32")
            dr = dynamic_range(amax, amin, bad)
            need = subtensor_error_blocks(dr)
            share = f"{float(need.float().mean()):.3f}"
            err = kq.block_errors(x, BLOCK, s["e4m3"], s["e5m2"], need=need)
            choice = subtensor_choice(dr, err[0], err[1], "two_way")
            runs = {  # row label -> (the pass's DEFAULT_CONFIGS key, its call with a config)
                "kernel_stats_pass": ("stats", lambda cfg: kq.block_stats(x, BLOCK, config=cfg)),
                "kernel_errors_pass": ("errors", lambda cfg: kq.block_errors(x, BLOCK, s["e4m3"], s["e5m2"],
                                                                             config=cfg, need=need)),
                "kernel_errors_pass_every_block": ("errors", lambda cfg: kq.block_errors(x, BLOCK, s["e4m3"],
                                                                                         s["e5m2"], config=cfg)),
                "kernel_values_pass": ("values", lambda cfg: kq.block_values(x, BLOCK, choice, s["e4m3"], s["e5m2"],
                                                                             config=cfg))}
            passes = {}
            for label, (key, run) in runs.items():
                others = [kq.PassConfig(*c) for c in CONFIGS if c != tuple(kq.DEFAULT_CONFIGS[key])]
                for cfg in [None] + others * args.configs:
                    tag = "" if cfg is None else f"[step={cfg.step},warps={cfg.num_warps}]"
                    passes[label + tag] = lambda run=run, cfg=cfg: run(cfg)
            t_torch = None
            for name, fn in {**paths, **passes}.items():
                got = fn()
                same = ""
                if name in paths:  # values in both layouts, scales, choices (E4M3 codes: only E4M3 blocks read)
                    same = str(all(torch.equal(got[i].nan_to_num(7.0), ref[i].nan_to_num(7.0)) for i in (0, 1, 4, 5)))
                t = bench(fn)
                t_torch = t if name == "torch_compiled" else t_torch
                rows.append({"rows": M, "cols": N, "path": name, "ms": f"{t:.4f}", "gb_per_s": f"{gb / t * 1e3:.0f}",
                             "ratio_vs_clone": f"{t_clone / t:.3f}", "ratio_vs_torch": f"{t_torch / t:.3f}",
                             "equal": same, "error_block_share": share})
                print(f"{M:6d}x{N:5d} {name:40s} {t:8.3f} ms  {rows[-1]['gb_per_s']:>6s} GB/s  "
                      f"x{rows[-1]['ratio_vs_torch']} torch  equal={same}", flush=True)
            del x, ref
    finally:
        write_budgeted_run(out, FIELDS, rows, prov, budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
