"""GaussWS (arXiv 2505.11170) figures and tables beyond the loss curves and final losses.

    python -m lowprec.report.gaussws exactness-run --runs DIR --csv DIR/exactness.csv [--blocks 32x32 1x32]
    python -m lowprec.report.gaussws exactness --evals CSV... --csv ... --md ... --png ... --pdf ... [--blocks ...]
    python -m lowprec.report.gaussws overhead  --runs DIR... [--gpu CSV] --csv ... --md ...
    python -m lowprec.report.gaussws memory    --runs DIR... [--gpu CSV] --csv ... --md ...
    python -m lowprec.report.gaussws export    --evals CSV... --csv ... --md ...
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..io import write_text
from .figures import figure_size, legend_below, pyplot, save_figure, suptitle
from .runs import load_runs
from .markdown import markdown_lines, markdown_table

if TYPE_CHECKING:  # the table and figure jobs start without torch; the exactness ones import it
    import torch

B_RANGE = list(range(3, 13))


# --------------------------------------------------------------------------- exactness (the 9-bit limit)

# Block shapes of Delta that the analysis compares, (out, in) rows x cols. The paper does not give
# its shape: 32x32 is the method's default (lowprec.methods.gaussws.GAUSSWS_KEYS), 1x32 (32 along the
# input dimension, as MX blocks) is what the brief's exactness numbers (0.994 at b=9) were made with.
BLOCKS = ("32x32", "1x32")
REFERENCE = "N(0, 0.02²)"


def parse_block(text: str) -> tuple[int, int]:
    """"32x32" -> (32, 32); a clear error for anything else."""
    rows, sep, cols = str(text).partition("x")
    if not (sep and rows.isdigit() and cols.isdigit() and int(rows) >= 1 and int(cols) >= 1):
        raise ValueError(f"block shape must be ROWSxCOLS with positive integers (e.g. 32x32, 1x32), got {text!r}")
    return int(rows), int(cols)


def exactness_table(weights: dict, blocks=BLOCKS, seed: int = 0) -> pd.DataFrame:
    """Share of elements for which bf16(W + R*Delta) is exact, against b, per weight set (a 2-D
    tensor or a list of (out, in) matrices) and block shape: the expectation over R's pmf (with the
    std of one draw) and one sampled R; the peak b per (source, block, kind) and its lead."""
    from ..methods.gaussws import exactness_rows

    rows = []
    for source, w in weights.items():
        for block in blocks:
            rows += exactness_rows(w, B_RANGE, parse_block(block), source=source, seed=seed)
    return pd.DataFrame(rows, columns=["source", "block", "operator", "b", "kind", "share", "std", "is_peak", "lead"])


def trained_weights(run_dirs: list[str]) -> dict[str, list[torch.Tensor]]:
    """The transformer blocks' linear weights of finished runs, per run, each in (out, in) layout
    (GPT2's Conv1D weights transposed), so that a block is a block of one weight matrix."""
    from ..evaluate import load_trained
    from ..linear import linear_layers

    out = {}
    for d in run_dirs:
        module, cfg, _ = load_trained(d, device="cpu")  # the weights alone: no forward pass
        # the transformer blocks' linears, whether the run converted them (CPU) or not (GPU BF16)
        mats = [(m.weight.t() if transposed else m.weight).detach().float()
                for *_, m, transposed in linear_layers(module.model)]
        if mats:
            out[f"trained {cfg['model']['name']}"] = mats
    return out


def read_exactness(paths) -> pd.DataFrame:
    """Per-run exactness.csv files; one written before the block shape was a column (it blocked a
    flattened weight, neither shape) is an error that names it."""
    frames = []
    for p in paths:
        df = pd.read_csv(p)
        if "block" not in df:
            raise ValueError(f"{p}: no 'block' column (an exactness.csv from before the block shape was an "
                             "option); compute it again from the run's checkpoint (exactness-run)")
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _expected(df: pd.DataFrame) -> pd.DataFrame:
    """Mean expected share per (source, block, b) over the runs that share a source (seeds)."""
    e = df[df["kind"] == "expected"]
    return e.groupby(["source", "block", "b"], sort=False)["share"].mean().reset_index()


def exactness_markdown(df: pd.DataFrame) -> str:
    """b x (source, block shape) expected shares, the peak of each column in bold, and the peak's
    lead over the runner-up."""
    e = _expected(df)
    cols = list(dict.fromkeys(zip(e["source"], e["block"])))
    grid = e.set_index(["source", "block", "b"])["share"].sort_index()
    peaks = {c: grid[c].idxmax() for c in cols}
    rows = []
    for b in sorted(e["b"].unique()):
        cells = []
        for c in cols:
            v = grid.get((*c, b))
            cells.append("–" if v is None else (f"**{v:.4f}**" if peaks[c] == b else f"{v:.4f}"))
        rows.append([b, *cells])
    lines = markdown_lines(["b", *(f"{src}, {blk}" for src, blk in cols)], rows)
    leads = []
    for c in cols:
        top = grid[c].sort_values(ascending=False)
        leads.append(f"{c[0]}, {c[1]}: b = {top.index[0]}, {top.iloc[0] - top.iloc[1]:.4f} above b = {top.index[1]}")
    lines += ["", "Expected share of exact elements (over R's distribution); peak per column in bold. "
              "Peak and lead over the runner-up: " + "; ".join(leads) + "."]
    return "\n".join(lines) + "\n"


def plot_exactness(df: pd.DataFrame, outputs: list[str]) -> None:
    """One panel per block shape: the expected share (solid) and one sampled R (dashed) per source."""
    plt = pyplot()
    blocks = list(dict.fromkeys(df["block"]))
    fig, axes = plt.subplots(1, len(blocks), figsize=figure_size(3.5 * len(blocks), 4.2), sharey=True,
                             squeeze=False)
    mean = df.groupby(["block", "source", "kind", "b"], sort=False)["share"].mean().reset_index()
    for ax, block in zip(axes[0], blocks):
        g_block = mean[mean["block"] == block]
        for source, g in g_block.groupby("source", sort=False):
            e, s = g[g.kind == "expected"], g[g.kind == "measured"]
            line, = ax.plot(e["b"], e["share"], marker="o", label=f"{source} (expected)")
            ax.plot(s["b"], s["share"], ls="--", marker="x", color=line.get_color(), alpha=0.6,
                    label=f"{source} (one sample)")
        ax.axvline(9, color="grey", ls=":", lw=1)
        ax.text(8.9, 0.02, "the paper's limit: 9 bits", color="grey", ha="right", transform=ax.get_xaxis_transform())
        ax.set_xlabel("noise bits b")
        ax.set_title(f"{block} blocks of Δ")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("share with bf16(W + RΔ) exact")
    legend_below(axes[0][0], ncol=2)
    suptitle(fig, "Noise bits with a BF16 operator (Δ = 2^ceil(log2 amax) · 2^(1-b))")
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
    from ..methods.gaussws import bytes_per_param

    rows, seen = [], set()
    for r in runs:
        if r.method not in seen:
            seen.add(r.method)
            rows.append({"where": "analytic", "method": r.method,
                         "extra_bytes_per_param": bytes_per_param(r.config["method"])})
    df = pd.DataFrame(rows)
    if gpu_csv and Path(gpu_csv).is_file():
        g = pd.read_csv(gpu_csv)
        for col, label in (("extra_bytes_per_param", "H200, held between steps"),
                           ("extra_peak_bytes_per_param", "H200, peak (torch.cuda.max_memory_allocated)")):
            if col in g:
                df = pd.concat([df, g.assign(where=label)[["where", "method", col]].rename(
                    columns={col: "extra_bytes_per_param"})], ignore_index=True)
    return df


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
    ap.add_argument("--blocks", nargs="+", default=list(BLOCKS),
                    help="exactness: block shapes of Delta, ROWSxCOLS of the (out, in) layout (default: %(default)s)")
    args = ap.parse_args(argv)
    blocks = [f"{r}x{c}" for r, c in map(parse_block, args.blocks)]
    if args.what == "exactness-run":
        # per run, from its checkpoint, into the run folder: the figure is then redrawn from
        # committed files alone (checkpoints are not committed)
        df = exactness_table(trained_weights(args.runs), blocks)
    elif args.what == "exactness":
        import torch
        g = torch.Generator().manual_seed(0)
        reference = exactness_table({REFERENCE: torch.randn(512, 512, generator=g) * 0.02}, blocks)
        runs = read_exactness(args.evals)
        if len(runs) and set(blocks) - set(runs["block"]):
            raise ValueError(f"--evals files hold block shapes {sorted(set(runs['block']))}; asked for {blocks}: "
                             "compute them again with the same --blocks")
        df = pd.concat([reference, runs[runs["block"].isin(blocks)]] if len(runs) else [reference], ignore_index=True)
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
        write_text(args.md, exactness_markdown(df) if args.what == "exactness" else markdown_table(df))


if __name__ == "__main__":
    main()
