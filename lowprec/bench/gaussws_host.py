"""Host time of GaussWS's weight transforms in one training step of a compiled model: the draws of
W_c for every linear weight and the eager backward of their identity gradient, one transform at a
time (``GaussWSWeight.__call__``: an autograd node and a cast per weight) against all at once
(``GaussWSWeight.forward_many``, what ``lowprec.linear.compiled`` calls: the W_c's detached, their
gradient inside the compiled blocks' graphs, so nothing of it on the host), with the noise kernel's
launches stubbed out.

    python -m lowprec.bench.gaussws_host --shape llama_100m --out results/gaussws/host_cpu.csv

Why: at 98 M with CUDA graphs the GPU runs a step's blocks in about the time the host takes to
issue the step, so the transforms' Python (a launch, an autograd node and a cast per weight) set
GaussWS's pace (``results/bench/profiles/llama_100m_gaussws_cudagraphs_6f637f6.txt``). What is
timed is the host's work alone: Python, argument checks, the autograd graph; each stubbed launch
would add the launcher's own cost (one per weight against one per tiling), and the weights are
small (a sixteenth of the shape's sides), since nothing here depends on their size. On a machine
without CUDA the kernel runs under the Triton interpreter (TRITON_INTERPRET=1 is set here when no
GPU is present), whose launches are stubbed the same way. Rows: path, weights, median host
milliseconds a step over ``--steps`` steps (``--warmup`` untimed), the repeats.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from .common import bench_parser, fail, write_rows

PROG = "gaussws_host"
FIELDS = ["shape", "path", "weights", "host_ms", "host_ms_reps", "commit"]
PATHS = ("one_at_a_time", "forward_many")


class _NoLaunch:
    """A jitted kernel whose launches do nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def linear_weight_shapes(model: dict) -> list:
    """The stored shapes of the linear weights that converting the model swaps
    (``lowprec.linear.linear_layers``: every one but the LM head), read from the model built on
    the meta device."""
    import torch

    from ..linear import linear_layers
    from ..models import build_model
    from .train_step import VOCAB
    with torch.device("meta"):
        built = build_model(model, VOCAB)
    return [tuple(layer.weight.shape) for _, _, _, layer, _ in linear_layers(built)]


def time_paths(shapes: list, steps: int, warmup: int, device) -> dict:
    """{path: host seconds per step, one per timed step} for GaussWS (b=6) on weights of ``shapes``."""
    import torch

    from ..kernels import gaussws_noise as kg
    from ..methods import gaussws as gw

    real = kg._gaussws_kernel, kg._gaussws_group_kernel
    kg._gaussws_kernel = kg._gaussws_group_kernel = _NoLaunch()
    try:
        ts = [gw.GaussWSWeight(s, seed=i, b=6, backend="triton").to(device) for i, s in enumerate(shapes)]
        for t in ts:
            t.stable_output = True
        ws = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
        grads = [torch.randn(s, dtype=torch.bfloat16, device=device) for s in shapes]
        dtypes = [torch.bfloat16] * len(ts)
        calls = {"one_at_a_time": lambda: [t(w, torch.bfloat16) for t, w in zip(ts, ws)],
                 "forward_many": lambda: gw.GaussWSWeight.forward_many(ts, ws, dtypes)}
        out = {}
        for path in PATHS:
            times = []
            for i in range(warmup + steps):
                gw.mark_step()  # a new optimizer step: every transform draws
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                got = calls[path]()
                # the eager autograd nodes a path leaves on the host (forward_many's W_c's come
                # detached: their identity gradient is part of the compiled blocks' graphs)
                linked = [(y, g) for y, g in zip(got, grads) if y.requires_grad]
                if linked:
                    torch.autograd.backward(*map(list, zip(*linked)))
                elapsed = time.perf_counter() - t0
                if i >= warmup:
                    times.append(elapsed)
                for w in ws:
                    w.grad = None
            out[path] = times
        return out
    finally:
        kg._gaussws_kernel, kg._gaussws_group_kernel = real


def _parse(argv):
    from .e2e_step import SHAPES
    p = bench_parser(f"lowprec.bench.{PROG}", __doc__, default="results/gaussws/host_cpu.csv")
    p.add_argument("--shape", default="llama_100m", choices=list(SHAPES))
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    if args.steps < 1 or args.warmup < 0:
        fail(PROG, f"--steps must be >= 1 and --warmup >= 0, got {args.steps} and {args.warmup}")
    import torch
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from .. import provenance
    from ..io import provenance_path, write_json
    from .e2e_step import SHAPES

    shapes = [(o // 16, i // 16) for o, i in linear_weight_shapes(SHAPES[args.shape]["model"])]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    from ..kernels import gaussws_noise as kg
    if not kg.triton_available(device):
        fail(PROG, f"the GaussWS kernel cannot run on {device} (Triton missing, or imported before "
                   "TRITON_INTERPRET=1 on a machine without CUDA)")
    commit = provenance.git_commit()
    rows = []
    for path, times in time_paths(shapes, args.steps, args.warmup, device).items():
        rows.append({"shape": args.shape, "path": path, "weights": len(shapes),
                     "host_ms": round(statistics.median(times) * 1e3, 3),
                     "host_ms_reps": ";".join(f"{t * 1e3:.3f}" for t in times), "commit": commit})
        print(f"{args.shape} {path:14s} {len(shapes)} weights: {rows[-1]['host_ms']:.2f} ms of host time a step")
    write_rows(Path(args.out), FIELDS, rows)
    write_json(provenance_path(Path(args.out)), {
        **provenance.collect(), "time": provenance.now(), "argv": sys.argv[1:] if argv is None else list(argv),
        "what": __doc__.strip().split("\n")[0], "device": str(device),
        "note": "kernel launches stubbed: the host's Python and autograd work only"})
    print(f"# wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
