"""Profile a few training steps of one arm of a benchmark (torch.profiler), to explain an overhead:

    python -m lowprec.bench.profile_arm --arm gaussws --steps 3

Prints the operators with the most CPU and CUDA time.
"""

from __future__ import annotations

import argparse

import torch


def main(argv=None) -> None:
    from . import gaussws_overhead as go

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arm", default="gaussws")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=25)
    args = ap.parse_args(argv)
    bargs = go._parse([])
    model, opt, _ = go._build(args.arm, bargs)
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randint(0, go.VOCAB, (bargs.batch, bargs.seq), device="cuda", generator=gen)
    batches = [(x, torch.roll(x, -1, 1))]
    for _ in range(4):
        go._step(model, opt, batches)
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(args.steps):
            go._step(model, opt, batches)
        torch.cuda.synchronize()
    ka = prof.key_averages()
    print(ka.table(sort_by="self_cpu_time_total", row_limit=args.rows))
    print(ka.table(sort_by="self_cuda_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
