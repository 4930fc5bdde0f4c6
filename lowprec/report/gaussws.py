"""GaussWS (arXiv 2505.11170) figures and tables beyond the loss curves and final losses.

    python -m lowprec.report.gaussws exactness-run --runs DIR --csv DIR/exactness.csv
    python -m lowprec.report.gaussws exactness --evals CSV... --csv ... --png ... --pdf ...
    python -m lowprec.report.gaussws overhead  --runs DIR... [--gpu CSV] --csv ... --md ...
    python -m lowprec.report.gaussws memory    --runs DIR... [--gpu CSV] --csv ... --md ...
    python -m lowprec.report.gaussws export    --evals CSV... --csv ... --md ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..io import write_text
from .figures import save_figure
from .runs import load_runs
from .tables import _fmt

B_RANGE = list(range(3, 13))


def _md(df: pd.DataFrame, digits: int = 4) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c], digits) if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- exactness (the 9-bit limit)

def exactness_table(weights: dict[str, torch.Tensor], block=(32, 32), seed: int = 0) -> pd.DataFrame:
    """Share of elements for which bf16(W + R*Delta) is exact, against b: the expectation over R's
    pmf and one sampled R, for each weight set."""
    from ..gaussws import exact_share, expected_exact_share

    rows = []
    for source, w in weights.items():
        for b in B_RANGE:
            rows.append({"source": source, "b": b, "kind": "expected", "share": expected_exact_share(w, b, block)})
            rows.append({"source": source, "b": b, "kind": "sampled", "share": exact_share(w, b, block, seed=seed)})
    df = pd.DataFrame(rows)
    peak = df[df.kind == "expected"].groupby("source")["share"].transform("max")
    df["is_peak"] = 0
    df.loc[df.kind == "expected", "is_peak"] = (df.loc[df.kind == "expected", "share"] == peak).astype(int)
    return df


def trained_weights(run_dirs: list[str]) -> dict[str, torch.Tensor]:
    """The linear-layer weights of finished runs, flattened per run into one (rows, 32k) matrix."""
    from ..evaluate import load_trained
    from ..linear import linear_layers

    out = {}
    for d in run_dirs:
        module, cfg, _ = load_trained(d)
        # the transformer blocks' linears, whether the run converted them (CPU) or not (GPU BF16)
        mats = [m.weight.detach().float() for *_, m, _ in linear_layers(module.model)]
        if mats:
            out[f"trained {cfg['model']['name']}"] = torch.cat([w.reshape(-1, 32) for w in mats if w.numel() % 32 == 0])
    return out


def plot_exactness(df: pd.DataFrame, outputs: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .figures import legend_below

    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for source, g in df.groupby("source", sort=False):
        e, s = g[g.kind == "expected"], g[g.kind == "sampled"]
        line, = ax.plot(e["b"], e["share"], marker="o", label=f"{source} (expected)")
        ax.plot(s["b"], s["share"], ls="--", marker="x", color=line.get_color(), alpha=0.6, label=f"{source} (one sample)")
    ax.axvline(9, color="grey", ls=":", lw=1)
    ax.text(9.1, ax.get_ylim()[0] + 0.01, "9 bits: the paper's limit", color="grey")
    ax.set_xlabel("noise bits b  (Δ = 2^ceil(log2 amax) · 2^(1-b))")
    ax.set_ylabel("share of elements with bf16(W + RΔ) exact")
    ax.set_title("Noise bits with a BF16 operator")
    legend_below(ax, ncol=2)
    save_figure(fig, outputs)


# --------------------------------------------------------------------------- overhead and memory

def overhead_table(runs, gpu_csv: str | None) -> pd.DataFrame:
    """tokens/s of every arm against BF16 on the same model (CPU training runs of this scale), plus
    the committed GPU measurement if there is one."""
    rows = []
    base = {r.model: r.provenance.get("mean_tokens_per_s") for r in runs if r.method == "bf16"}
    for r in runs:
        tps = r.provenance.get("mean_tokens_per_s")
        b = base.get(r.model)
        rows.append({"where": f"training runs ({(r.provenance.get('device') or {}).get('gpu') or 'CPU'})",
                     "model": r.model, "method": r.method, "tokens_per_s": tps,
                     "overhead_pct": 100 * (b / tps - 1) if tps and b else np.nan})
    df = pd.DataFrame(rows)
    if gpu_csv and Path(gpu_csv).is_file():
        g = pd.read_csv(gpu_csv)
        g["where"] = [f"H200 benchmark, {b}x{s} tokens/step, interleaved repeats" for b, s in zip(g["batch"], g["seq"])]
        df = pd.concat([df, g[["where", "model", "method", "tokens_per_s", "overhead_pct"]]], ignore_index=True)
    return df


def memory_table(runs, gpu_csv: str | None) -> pd.DataFrame:
    """Extra bytes per noised parameter: analytic for every arm, and the H200 measurement (memory
    held between steps, and at the peak) when it has been committed."""
    from ..gaussws import bytes_per_param

    rows, seen = [], set()
    for r in runs:
        if r.method not in seen:
            seen.add(r.method)
            rows.append({"where": "analytic", "method": r.method,
                         "extra_bytes_per_param": bytes_per_param(_method_cfg(r))})
    df = pd.DataFrame(rows)
    if gpu_csv and Path(gpu_csv).is_file():
        g = pd.read_csv(gpu_csv)
        for col, label in (("extra_bytes_per_param", "H200, held between steps"),
                           ("extra_peak_bytes_per_param", "H200, peak (torch.cuda.max_memory_allocated)")):
            if col in g:
                df = pd.concat([df, g.assign(where=label)[["where", "method", col]].rename(
                    columns={col: "extra_bytes_per_param"})], ignore_index=True)
    return df


def _method_cfg(run) -> dict:
    import yaml

    return yaml.safe_load((run.dir / "config.yaml").read_text())["method"]


# --------------------------------------------------------------------------- export

def export_table(eval_csvs: list[str]) -> pd.DataFrame:
    df = pd.concat([pd.read_csv(p) for p in eval_csvs], ignore_index=True)
    none = df[df["export"] == "none"].set_index(["model", "method", "seed"])["val_loss"]
    df["gap_vs_unexported"] = df["val_loss"] - df.set_index(["model", "method", "seed"]).index.map(none).to_numpy()
    return (df.groupby(["model", "method", "export"], sort=False)
              .agg(val_loss=("val_loss", "mean"), gap_vs_unexported=("gap_vs_unexported", "mean"), n=("seed", "count"))
              .reset_index())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["exactness-run", "exactness", "overhead", "memory", "export"])
    ap.add_argument("--runs", nargs="*", default=[])
    ap.add_argument("--evals", nargs="*", default=[])
    ap.add_argument("--gpu", default=None)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--md", default=None)
    ap.add_argument("--png", default=None)
    ap.add_argument("--pdf", default=None)
    args = ap.parse_args(argv)
    if args.what == "exactness-run":
        # per run, from its checkpoint, into the run folder: the figure is then redrawn from
        # committed files alone (checkpoints are not committed)
        df = exactness_table(trained_weights(args.runs))
    elif args.what == "exactness":
        g = torch.Generator().manual_seed(0)
        reference = exactness_table({"N(0, 0.02²)": torch.randn(512, 512, generator=g) * 0.02})
        df = pd.concat([reference, *(pd.read_csv(p) for p in args.evals)], ignore_index=True)
        plot_exactness(df, [p for p in (args.png, args.pdf) if p])
    elif args.what == "overhead":
        df = overhead_table(load_runs(args.runs), args.gpu)
    elif args.what == "memory":
        df = memory_table(load_runs(args.runs), args.gpu)
    else:
        df = export_table(args.evals)
    # a run's exactness.csv keeps full precision (shortest round-trip): the figure drawn from it
    # is the figure drawn from the weights
    write_text(args.csv, df.to_csv(index=False, float_format=None if args.what == "exactness-run" else "%.6g"))
    if args.md:
        write_text(args.md, _md(df))


if __name__ == "__main__":
    main()
