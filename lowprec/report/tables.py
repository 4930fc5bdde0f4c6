"""Final-loss tables: mean, spread and n over seeds, and the gap to the baseline method."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from ..io import write_text
from .markdown import fmt_cell, markdown
from .runs import final_losses, load_runs


def summarize(per_run: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    rows = []
    for (model, method), g in per_run.groupby(["model", "method"], sort=False):
        ok = g[g["status"] == "completed"]["final_val_loss"].dropna()
        rows.append({
            "model": model, "method": method, "n": int(len(g)), "diverged": int((g["status"] == "diverged").sum()),
            "val_loss_mean": float(ok.mean()) if len(ok) else np.nan,
            "val_loss_std": float(ok.std(ddof=1)) if len(ok) > 1 else np.nan,
            "tokens": int(g["tokens"].max()) if g["tokens"].notna().any() else None,
            "tokens_per_s": float(g["tokens_per_s"].mean()) if g["tokens_per_s"].notna().any() else np.nan,
            "numerics": g["numerics"].iloc[0],
        })
    table = pd.DataFrame(rows)
    if baseline is not None and len(table):
        base = table[table["method"] == baseline].set_index("model")["val_loss_mean"]
        table["delta_vs_baseline"] = table["val_loss_mean"] - table["model"].map(base)
        table["delta_pct"] = 100 * table["delta_vs_baseline"] / table["model"].map(base)
    return table


def to_markdown(table: pd.DataFrame, baseline: str | None) -> str:
    cols = ["model", "method", "n", "diverged", "val loss (mean)", "std", "Δ vs " + (baseline or "–"),
            "Δ %", "tokens", "tokens/s", "numerics"]
    return markdown(cols, ([
        r["model"], r["method"], str(r["n"]), str(r["diverged"]), fmt_cell(r["val_loss_mean"]),
        fmt_cell(r["val_loss_std"]), fmt_cell(r.get("delta_vs_baseline", np.nan)),
        fmt_cell(r.get("delta_pct", np.nan), 2), fmt_cell(r["tokens"]), fmt_cell(r["tokens_per_s"], 0),
        fmt_cell(r["numerics"]),
    ] for _, r in table.iterrows()))


def matrix_markdown(table: pd.DataFrame, baseline: str | None) -> str:
    """Method x model grid of the mean final validation loss (Δ to the baseline in brackets)."""
    models = list(dict.fromkeys(table["model"]))
    rows = []
    for method, g in table.groupby("method", sort=False):
        cells = []
        for m in models:
            r = g[g["model"] == m]
            if r.empty:
                cells.append("–")
                continue
            r = r.iloc[0]
            delta = r.get("delta_vs_baseline", np.nan)
            extra = f" ({delta:+.3f})" if baseline and method != baseline and not pd.isna(delta) else ""
            div = f", {r['diverged']} diverged" if r["diverged"] else ""
            cells.append(fmt_cell(r["val_loss_mean"]) + extra + div)
        rows.append([method, *cells])
    return markdown(["method", *models], rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Final validation-loss table from run folders.")
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--baseline", default=None)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--md", required=True)
    args = ap.parse_args(argv)
    table = summarize(final_losses(load_runs(args.runs)), args.baseline)
    write_text(args.csv, table.to_csv(index=False, float_format="%.6g"))
    md = to_markdown(table, args.baseline)
    if table["model"].nunique() > 1 and table["method"].nunique() > 1:
        md += "\nFinal validation loss, method x model (Δ to " + str(args.baseline) + "):\n\n" + \
            matrix_markdown(table, args.baseline)
    write_text(args.md, md)


if __name__ == "__main__":
    main()
