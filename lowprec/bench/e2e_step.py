"""End-to-end training-step throughput of low-precision recipes against BF16 on one GPU: tokens/s of a
~100M Llama2-style (SwiGLU, i.e. GLU) model, every arm measured in the same process with interleaved
repeats (``lowprec.bench.train_step``).

    python -m lowprec.bench.e2e_step --out results/int8_fallback/e2e_h200.csv

Arms (``--arms``):
  bf16                    plain model under bf16 autocast: the BF16 baseline every ``speedup`` is against
  bf16_qlinear            lowprec.convert with the bf16 recipe: the suite's QLinear path with no low-precision
                          GEMM (fp32 GEMMs of bf16-rounded operands), i.e. the cost of the layer plumbing
  int8_block              the int8_fallback recipe with rule "none": block INT8 operands (Triton quantize
                          kernel) and every GEMM on the Triton block-scaled INT8 kernel, no fallback
  int8_fallback           the int8_fallback recipe with its defaults (absmax rule, tau 8): as int8_block,
                          X's block statistics and two-part quantization are Triton kernels too, and
                          fallback blocks of X add an INT8 product on their residual
  fp8_tensorwise_current  FP8 E4M3 current scaling through torch._scaled_mm, for reference

Quantization is included in every arm's step. ``fused_gemms_per_step`` counts the GEMMs that really ran on
the low-precision kernel in one step (0 would mean the arm measured only emulation). The headline is
int8_fallback against bf16 (the paper: 1.57x end to end on an RTX 4090, where INT8 tensor cores have 4x
the BF16 rate; on an H200 it is 2x, so the GEMM-only ceiling is 2x and the end-to-end one lower).
"""

from __future__ import annotations

import statistics
import sys

import torch

from .common import bench_parser, fail, parse_names, require_cuda
from .train_step import MODEL, add_step_args, build_model, interleaved_tokens_per_s, optimizer, random_batches
from .train_step import step, write_results

PROG = "e2e_step"
ARMS = ("bf16", "bf16_qlinear", "int8_block", "int8_fallback", "fp8_tensorwise_current")
FIELDS = ["model", "recipe", "path", "batch", "seq", "accum", "tokens_per_s", "tokens_per_s_reps", "step_ms",
          "bf16_tokens_per_s", "speedup", "speedup_vs_bf16_qlinear", "fused_gemms_per_step", "n_params",
          "steps", "repeats"]


def _parse(argv):
    p = bench_parser("lowprec.bench.e2e_step", __doc__, "CSV path; <name>.provenance.json goes beside it",
                     default="results/int8_fallback/e2e_h200.csv")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {list(ARMS)} (bf16 required)")
    add_step_args(p, steps=10, warmup=3)
    return p.parse_args(argv)


def _build(arm: str):
    from ..int8_fallback import int8_fallback_recipe
    from ..linear import convert
    from ..recipes import RECIPES

    model = build_model()
    if arm == "bf16_qlinear":
        convert(model, RECIPES["bf16"])
    elif arm == "int8_block":
        convert(model, int8_fallback_recipe({"rule": "none", "gemm": "kernel"}))
    elif arm == "int8_fallback":
        convert(model, int8_fallback_recipe({"gemm": "kernel"}))
    elif arm == "fp8_tensorwise_current":
        convert(model, RECIPES[arm])
    model.train()
    return model, optimizer(model)


class _GemmCounter:
    """Counts calls of the low-precision GEMM entry points during one step."""

    def __init__(self):
        from .. import linear
        from ..kernels import int8_fallback_gemm as kf
        self.n = 0
        self._patched = [(kf, "gemm_fallback_qtensors"), (linear, "scaled_mm")]

    def __enter__(self):
        self._saved = []
        for mod, name in self._patched:
            real = getattr(mod, name)
            self._saved.append((mod, name, real))

            def counting(*a, _real=real, **kw):
                self.n += 1
                return _real(*a, **kw)
            setattr(mod, name, counting)
        return self

    def __exit__(self, *exc):
        for mod, name, real in self._saved:
            setattr(mod, name, real)


def main(argv=None) -> int:
    args = _parse(argv)
    require_cuda(PROG)
    arms = parse_names(PROG, "--arms", args.arms, ARMS)
    if "bf16" not in arms:
        fail(PROG, "--arms: bf16 is the baseline every speedup is against; include it")
    from ..kernels import int8_fallback_gemm as kf
    if any(a.startswith("int8") for a in arms) and not kf.triton_available("cuda"):
        fail(PROG, "the int8 arms need the Triton INT8 kernel (triton importable, CUDA device)")

    batches = random_batches(args.batch, args.seq, args.accum)
    state, info = {}, {}
    for arm in arms:
        torch.cuda.empty_cache()
        model, opt = _build(arm)
        for _ in range(max(args.warmup - 1, 1)):
            step(model, opt, batches)
        with _GemmCounter() as counter:
            step(model, opt, batches)
        torch.cuda.synchronize()
        info[arm] = {"fused": counter.n, "n_params": sum(p.numel() for p in model.parameters())}
        if arm.startswith(("int8", "fp8")) and counter.n == 0:
            fail(PROG, f"arm {arm}: no GEMM ran on the low-precision kernel; the measurement would be emulation")
        state[arm] = (model, opt)
        print(f"# {arm}: {counter.n} low-precision GEMMs per step", flush=True)

    reps = interleaved_tokens_per_s(state, batches, args.steps, args.repeats)
    tokens = args.batch * args.seq * args.accum
    med = {arm: statistics.median(v) for arm, v in reps.items()}
    rows = []
    for arm in arms:
        rows.append({
            "model": MODEL["name"], "recipe": arm, "path": "native" if arm == "bf16" else "qlinear",
            "batch": args.batch, "seq": args.seq, "accum": args.accum,
            "tokens_per_s": f"{med[arm]:.0f}", "tokens_per_s_reps": ";".join(f"{v:.0f}" for v in reps[arm]),
            "step_ms": f"{tokens / med[arm] * 1e3:.2f}", "bf16_tokens_per_s": f"{med['bf16']:.0f}",
            "speedup": f"{med[arm] / med['bf16']:.3f}",
            "speedup_vs_bf16_qlinear": f"{med[arm] / med['bf16_qlinear']:.3f}" if "bf16_qlinear" in med else "",
            "fused_gemms_per_step": info[arm]["fused"], "n_params": info[arm]["n_params"],
            "steps": args.steps, "repeats": args.repeats,
        })
        print(f"{arm:24s} {med[arm]:12,.0f} tok/s  x{rows[-1]['speedup']} vs bf16", flush=True)

    write_results(args.out, FIELDS, rows, __doc__.strip().split("\n")[0],
                  expected_ceiling="H200 dense INT8 1979 TOPS vs BF16 989 TFLOPS: 2x on GEMMs alone (RTX 4090: 4x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
