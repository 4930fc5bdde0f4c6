"""CPU step time of each recipe's emulation against fp32, on the tiny models.

    python -m lowprec.bench.recipe_step_time --out results/bench/recipe_step_time_cpu.csv

One training step (forward, backward, AdamW) on a fixed batch of the tiny scale's shape; the
median over repeats, fp32 (no swap) measured in the same process as the headline ratio.  Writes the
CSV and a provenance JSON beside it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from .. import provenance
from ..config import model_config, scale_config
from ..io import write_json, write_text
from .common import provenance_path


def step_time(model_name: str, recipe: str | None, batch: int, seq: int, vocab: int, repeats: int,
              warmup: int = 2) -> float:
    import torch

    from ..methods import apply_method
    from ..models import build_model, causal_lm_loss

    torch.manual_seed(0)
    model = build_model(model_config(model_name, "tiny"), vocab)
    if recipe is not None:
        apply_method(model, {"recipe": recipe}, "32-true")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, vocab, (batch, seq))
    y = torch.roll(x, -1, 1)
    times = []
    for i in range(warmup + repeats):
        t0 = time.perf_counter()
        loss = causal_lm_loss(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m lowprec.bench.recipe_step_time", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="results/bench/recipe_step_time_cpu.csv")
    ap.add_argument("--models", nargs="+", default=["gpt2", "llama2", "nemotron"])
    ap.add_argument("--recipes", nargs="+", help="default: every built-in recipe (lowprec.recipes.RECIPES)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    import torch

    from ..recipes import RECIPES

    recipes = args.recipes or list(RECIPES)
    torch.set_num_threads(args.threads)
    t = scale_config("tiny")
    batch, seq, vocab = t["train"]["batch_size"], t["train"]["seq_len"], t["data"]["vocab_size"]
    rows = ["model,recipe,step_ms,fp32_step_ms,ratio_vs_fp32"]
    for m in args.models:
        base = step_time(m, None, batch, seq, vocab, args.repeats)
        for r in recipes:
            st = step_time(m, r, batch, seq, vocab, args.repeats)
            rows.append(f"{m},{r},{st * 1e3:.2f},{base * 1e3:.2f},{st / base:.3f}")
            print(rows[-1], flush=True)
    out = Path(args.out)
    write_text(out, "\n".join(rows) + "\n")
    write_json(provenance_path(out), {
        **provenance.collect(), "time": provenance.now(), "threads": args.threads, "repeats": args.repeats,
        "shape": {"batch": batch, "seq_len": seq, "vocab": vocab}, "what": __doc__.strip().split("\n")[0]})


if __name__ == "__main__":
    main()
