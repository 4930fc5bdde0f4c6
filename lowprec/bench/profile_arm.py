"""Profile a few training steps of one arm (torch.profiler), to explain an overhead:

    python -m lowprec.bench.profile_arm --arm gaussws --steps 3
    python -m lowprec.bench.profile_arm --scale small --model nemotron --method mor_block [--compile]
    python -m lowprec.bench.profile_arm --scale medium --model nemotron --method mor_tensor --telemetry \
        --warmup 2 --steps 1    # a medium telemetry step takes ~3 s on an H100

``--arm`` takes an arm of the GaussWS overhead benchmark on its ~100M model; ``--method`` takes a
method of any experiment (``configs/experiments``) on a model at a scale, built and batched the way
``lowprec.train`` builds it (bf16 autocast around the forward, emulated GEMMs inside QLinear;
``--compile``: its blocks compiled, as ``train.compile`` trains them on the GPU; ``--telemetry``: every
step a telemetry step, eager as training runs those, to see what recording the numerics costs).
Prints the step time alone, the host syncs of one step (with where they happen), and the operators
with the most CPU and CUDA time.
"""

from __future__ import annotations

import argparse
import collections
import time
import traceback
import warnings


def _method_model(args):
    import torch

    from ..config import experiment_config, model_config, papers, scale_config
    from ..methods import apply_method
    from ..models import build_model

    methods = {}
    for paper in sorted(papers()):
        methods.update(experiment_config(paper).get("methods", {}))
    if args.method not in methods:
        raise SystemExit(f"profile_arm: --method: unknown method {args.method!r}; known: {sorted(methods)}")
    scale = scale_config(args.scale)
    vocab, batch, seq = scale["data"]["vocab_size"], scale["train"]["batch_size"], scale["train"]["seq_len"]
    torch.manual_seed(0)
    model = build_model(model_config(args.model, args.scale), vocab).cuda()
    method = {k: v for k, v in methods[args.method].items() if k != "train"}
    method["telemetry_every"] = 1 if args.telemetry else 0  # --telemetry: every step records
    telemetry = apply_method(model, method, "bf16-mixed")["telemetry"]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    if args.compile:
        from ..linear import compiled
        model = compiled(model)
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randint(0, vocab, (batch, seq), device="cuda", generator=gen)
    if telemetry is None:
        return model, opt, [(x, torch.roll(x, -1, 1))]

    def recording(*a, **k):  # a step of its own for the telemetry (it records each step's operands once)
        telemetry.frame()  # the last step's rows read from the device, as training reads them each step
        telemetry.clear()
        telemetry.step += 1
        return model(*a, **k)
    return recording, opt, [(x, torch.roll(x, -1, 1))]


def _gaussws_model(args):
    from . import gaussws_overhead as go
    from .train_step import random_batches

    bargs = go._parse([])
    model, opt, _ = go._build(args.arm, bargs)
    return model, opt, random_batches(bargs.batch, bargs.seq, 1)


def _syncs(step) -> collections.Counter:
    """Host syncs of one call of ``step``, keyed by the innermost lowprec frames that caused them."""
    import torch

    found = collections.Counter()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            orig = warnings.showwarning

            def show(message, *a, **k):
                frames = [f"{f.filename.rsplit('/lowprec/', 1)[-1]}:{f.lineno}"
                          for f in traceback.extract_stack()[:-1] if "/lowprec/" in f.filename]
                found[" < ".join(reversed(frames[-3:])) or "(outside lowprec)"] += 1

            warnings.showwarning = show
            step()
            torch.cuda.synchronize()
            warnings.showwarning = orig
        del caught
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return found


def main(argv=None) -> None:
    from .train_step import step

    ap = argparse.ArgumentParser(prog="python -m lowprec.bench.profile_arm", description=__doc__.split("\n")[0])
    ap.add_argument("--arm", default="gaussws", help="an arm of lowprec.bench.gaussws_overhead")
    ap.add_argument("--method", help="a method of configs/experiments (instead of --arm)")
    ap.add_argument("--model", default="llama2")
    ap.add_argument("--scale", default="small")
    ap.add_argument("--steps", type=int, default=3, help="steps timed, and profiled")
    ap.add_argument("--warmup", type=int, default=4,
                    help="steps before timing (compilation, tuning); a medium telemetry step takes ~3 s")
    ap.add_argument("--rows", type=int, default=25)
    ap.add_argument("--compile", action="store_true", help="--method: compile the blocks (train.compile)")
    ap.add_argument("--telemetry", action="store_true",
                    help="--method: every step records the method's numerics telemetry (as a telemetry step of "
                         "training does, eager)")
    args = ap.parse_args(argv)
    if args.telemetry and (args.compile or not args.method):
        ap.error("--telemetry takes --method, without --compile (telemetry steps run eager)")
    import torch

    model, opt, batches = _method_model(args) if args.method else _gaussws_model(args)
    for _ in range(args.warmup):
        step(model, opt, batches)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step(model, opt, batches)
    torch.cuda.synchronize()
    print(f"# step time alone: {(time.perf_counter() - t0) / args.steps * 1e3:.1f} ms")
    syncs = _syncs(lambda: step(model, opt, batches))
    print(f"# host syncs in one step: {sum(syncs.values())}")
    for where, n in syncs.most_common(12):
        print(f"#   {n:5d}  {where}")
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(args.steps):
            step(model, opt, batches)
        torch.cuda.synchronize()
    ka = prof.key_averages()
    print(ka.table(sort_by="self_cpu_time_total", row_limit=args.rows))
    print(ka.table(sort_by="self_cuda_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
