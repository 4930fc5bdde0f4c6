"""GaussWS training overhead on one GPU: tokens/s and memory of a ~100M Llama2-style model, BF16 vs
GaussWS, measured in the same process with interleaved repeats.

    python -m lowprec.bench.gaussws_overhead --out results/gaussws/overhead_h200.csv

Arms (``--arms``; each row's ``baseline`` is the arm its overhead is measured against):
  bf16             plain model, bf16 autocast (the BF16 baseline)
  gaussws          the same model with GaussWS on every linear weight but the LM head, installed with
                   ``lowprec.methods.gaussws.apply_native`` (a parametrization; the layers keep their bf16
                   autocast GEMMs) and the fused Triton kernel drawing W_c once per optimizer step:
                   the paper's setting ("1.40% overhead on A100 in Llama2 tokens/s")
  gaussws_torch    as gaussws, W_c drawn by the torch path (torch.Generator + threshold sampler),
                   i.e. without the kernel
  bf16_qlinear     lowprec.convert with the bf16 recipe: the suite's emulation path (fp32 GEMMs of
                   bf16-rounded operands), which the CPU/emulated training runs use
  gaussws_qlinear  lowprec.convert with the gaussws recipe (same emulation path, kernel on CUDA)

One optimizer step = ``--accum`` micro-batches of (batch, seq) tokens, forward + backward under bf16
autocast, then AdamW. The first row whose method is not bf16 is the headline (gaussws vs bf16).
Memory: ``peak`` is torch.cuda.max_memory_allocated over training steps, ``steady`` the memory held
between steps (after optimizer.step and zero_grad(set_to_none=True)), both net of what was allocated
before the arm's model was built; extra bytes per parameter divide the difference to the baseline by
the number of noised weight elements (``extra_bytes_per_param`` is the steady one: the paper's "2 bytes
per parameter" is the cached W_c, while at the peak BF16 autocast holds bf16 weight copies of its own).
A provenance JSON goes beside the CSV.
"""

from __future__ import annotations

import statistics
import sys

from .common import bench_parser, fail, parse_names, require_cuda
from .train_step import MODEL, add_step_args, build_model, interleaved_tokens_per_s, optimizer, random_batches
from .train_step import step, write_results

PROG = "gaussws_overhead"

ARMS = {  # name: (path, baseline)
    "bf16": ("native", "bf16"),
    "gaussws": ("native", "bf16"),
    "gaussws_torch": ("native", "bf16"),
    "bf16_qlinear": ("qlinear", "bf16_qlinear"),
    "gaussws_qlinear": ("qlinear", "bf16_qlinear"),
}
FIELDS = ["model", "method", "baseline", "path", "noise_backend", "b", "block", "resample", "tokens_per_s",
          "tokens_per_s_reps", "step_ms", "overhead_pct", "peak_mem_gib", "steady_mem_gib",
          "extra_bytes_per_param", "extra_peak_bytes_per_param", "extra_steady_bytes_per_param",
          "analytic_extra_bytes_per_param",
          "n_params", "n_noised_params", "batch", "seq", "accum", "steps", "repeats"]


def _parse(argv):
    p = bench_parser("lowprec.bench.gaussws_overhead", __doc__, "CSV path; <name>.provenance.json goes beside it",
                     default="results/gaussws/overhead_h200.csv")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {list(ARMS)}")
    add_step_args(p, steps=20, warmup=5)
    p.add_argument("--b", type=int, default=6)
    p.add_argument("--block", type=int, default=32)
    p.add_argument("--resample", default="step", choices=("step", "microbatch"))
    return p.parse_args(argv)


def _build(arm: str, args):
    from ..methods.gaussws import apply_native, gaussws_recipe, noise_modules
    from ..linear import convert
    from ..recipes import RECIPES

    model = build_model()
    cfg = {"recipe": "gaussws", "b": args.b, "block": [args.block, args.block], "resample": args.resample}
    if arm == "gaussws":
        apply_native(model, {**cfg, "backend": "triton"})
    elif arm == "gaussws_torch":
        apply_native(model, {**cfg, "backend": "torch"})
    elif arm == "bf16_qlinear":
        convert(model, RECIPES["bf16"])
    elif arm == "gaussws_qlinear":
        convert(model, gaussws_recipe({**cfg, "backend": "triton"}))
    model.train()
    noised = sum(m.shape[0] * m.shape[1] for _, m in noise_modules(model))
    return model, optimizer(model), noised


def main(argv=None) -> int:
    args = _parse(argv)
    torch = require_cuda(PROG)
    arms = parse_names(PROG, "--arms", args.arms, ARMS)
    for a in arms:
        if ARMS[a][1] not in arms:
            fail(PROG, f"--arms: {a} is measured against {ARMS[a][1]}, which is not in the list")
    from ..methods.gaussws import bytes_per_param, noise_modules
    from ..kernels import gaussws_noise as kg
    if any(a in ("gaussws", "gaussws_qlinear") for a in arms) and not kg.triton_available("cuda"):
        fail(PROG, "the gaussws arms need the Triton kernel (triton importable, CUDA device)")

    batches = random_batches(args.batch, args.seq, args.accum)
    tokens = args.batch * args.seq * args.accum

    # Phase 1, one arm after another: build, warm up (Triton compiles, cuBLAS picks kernels), memory.
    state, info = {}, {}
    for arm in arms:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        model, opt, noised = _build(arm, args)
        for _ in range(max(args.warmup - 2, 1)):
            step(model, opt, batches)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        for _ in range(2):
            step(model, opt, batches)
        torch.cuda.synchronize()
        backends = {m.last_backend for _, m in noise_modules(model)}
        info[arm] = {
            "peak": torch.cuda.max_memory_allocated() - base,
            "steady": torch.cuda.memory_allocated() - base,
            "noised": noised,
            "n_params": sum(p.numel() for p in model.parameters()),
            "noise_backend": ",".join(sorted(b for b in backends if b)) or "",
        }
        state[arm] = (model, opt)
        print(f"# {arm}: peak {info[arm]['peak'] / 2**30:.2f} GiB, steady {info[arm]['steady'] / 2**30:.2f} GiB, "
              f"noise backend {info[arm]['noise_backend'] or '-'}", flush=True)

    # Phase 2: interleaved timed repeats
    reps = interleaved_tokens_per_s(state, batches, args.steps, args.repeats)

    rows = []
    for arm in arms:
        path, base_arm = ARMS[arm]
        tps = statistics.median(reps[arm])
        base_tps = statistics.median(reps[base_arm])
        i, bi = info[arm], info[base_arm]
        noised = i["noised"] or None
        is_noise = arm.startswith("gaussws")
        steady_extra = f"{(i['steady'] - bi['steady']) / noised:.3f}" if noised else ""
        rows.append({
            "model": MODEL["name"], "method": arm, "baseline": base_arm, "path": path,
            "noise_backend": i["noise_backend"],
            "b": args.b if is_noise else "", "block": f"{args.block}x{args.block}" if is_noise else "",
            "resample": args.resample if is_noise else "",
            "tokens_per_s": f"{tps:.0f}", "tokens_per_s_reps": ";".join(f"{v:.0f}" for v in reps[arm]),
            "step_ms": f"{tokens / tps * 1e3:.2f}", "overhead_pct": f"{(base_tps / tps - 1) * 100:.2f}",
            "peak_mem_gib": f"{i['peak'] / 2**30:.3f}", "steady_mem_gib": f"{i['steady'] / 2**30:.3f}",
            "extra_peak_bytes_per_param": f"{(i['peak'] - bi['peak']) / noised:.3f}" if noised else "",
            "extra_bytes_per_param": steady_extra, "extra_steady_bytes_per_param": steady_extra,
            "analytic_extra_bytes_per_param": f"{bytes_per_param():.3f}" if is_noise else "",
            "n_params": i["n_params"], "n_noised_params": i["noised"], "batch": args.batch, "seq": args.seq,
            "accum": args.accum, "steps": args.steps, "repeats": args.repeats,
        })
        print(f"{arm:16s} {tps:12,.0f} tok/s  overhead {rows[-1]['overhead_pct']:>7s}% vs {base_arm:13s} "
              f"peak {rows[-1]['peak_mem_gib']} GiB  steady {rows[-1]['steady_mem_gib']} GiB  "
              f"extra B/param peak {rows[-1]['extra_peak_bytes_per_param'] or '-'} "
              f"steady {rows[-1]['extra_steady_bytes_per_param'] or '-'}", flush=True)

    write_results(args.out, FIELDS, rows, __doc__.strip().split("\n")[0],
                  tf32={"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32})
    return 0


if __name__ == "__main__":
    sys.exit(main())
