"""Cross-method matrix figure: the final validation-loss gap to the baseline method as a heat map,
method x model, each cell labelled with its value (the same numbers as the matrix in
``final_loss.md``, from ``lowprec.report.tables.summarize``)."""

from __future__ import annotations

import argparse

import matplotlib
import numpy as np
import pandas as pd

from .figures import figure_size, pyplot, save_figure, suptitle
from .runs import final_losses, load_runs
from .tables import summarize

plt = pyplot()


def gap_grid(table: pd.DataFrame) -> pd.DataFrame:
    """Methods (rows, in run order) x models (columns) of ``delta_vs_baseline``; NaN where no run completed."""
    grid = table.pivot(index="method", columns="model", values="delta_vs_baseline")
    return grid.reindex(index=list(dict.fromkeys(table["method"])), columns=list(dict.fromkeys(table["model"])))


def plot(table: pd.DataFrame, baseline: str, title: str, outputs: list[str]) -> None:
    if "delta_vs_baseline" not in table:
        raise ValueError(f"no gap to the baseline: no run of method {baseline!r}")
    grid = gap_grid(table)
    diverged = table.set_index(["method", "model"])["diverged"]
    values = grid.to_numpy(dtype=float)
    # symmetric color scale around 0 so that the sign reads from the hue
    span = np.nanmax(np.abs(values)) if np.isfinite(values).any() else 1.0
    span = span or 1.0
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="0.85")
    fig, ax = plt.subplots(figsize=figure_size(2.6 + 1.3 * grid.shape[1], 1.2 + 0.32 * grid.shape[0]))
    im = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=-span, vmax=span, aspect="auto")
    for i, method in enumerate(grid.index):
        for j, model in enumerate(grid.columns):
            v = values[i, j]
            label = "–" if np.isnan(v) else ("0" if method == baseline else f"{v:+.4f}")
            n_div = int(diverged.get((method, model), 0) or 0)
            if n_div:
                label += f"\n{n_div} diverged"
            dark = not np.isnan(v) and abs(v) > 0.6 * span
            ax.text(j, i, label, ha="center", va="center", color="white" if dark else "black")
    ax.set_xticks(range(grid.shape[1]), grid.columns)
    ax.set_yticks(range(grid.shape[0]), grid.index)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    ax.grid(False)
    for side in ax.spines.values():
        side.set_visible(False)
    fig.colorbar(im, ax=ax, label=f"val loss − {baseline}")
    if title:
        suptitle(fig, title)
    save_figure(fig, outputs)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Heat map of the final validation-loss gap to the baseline, method x model.")
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("--out", nargs="+", required=True, help="output files (.png, .pdf)")
    args = ap.parse_args(argv)
    table = summarize(final_losses(load_runs(args.runs)), args.baseline)
    plot(table, args.baseline, args.title, args.out)


if __name__ == "__main__":
    main()
