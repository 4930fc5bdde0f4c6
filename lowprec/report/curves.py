"""Loss-curve figure: validation loss (and faint training loss) against tokens, one panel per model,
one line per method; the mean over seeds with a min-max band."""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from .figures import save_figure  # noqa: E402
from .runs import load_runs  # noqa: E402


def _seed_band(runs, column: str) -> pd.DataFrame:
    frames = [r.metrics[["tokens", column]].dropna().set_index("tokens")[column].rename(r.seed) for r in runs]
    wide = pd.concat(frames, axis=1).sort_index()
    return pd.DataFrame({"mean": wide.mean(axis=1), "lo": wide.min(axis=1), "hi": wide.max(axis=1)})


def plot(runs, title: str, outputs: list[str]) -> None:
    models = list(dict.fromkeys(r.model for r in runs))
    methods = list(dict.fromkeys(r.method for r in runs))
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 3.8), squeeze=False)
    colors = dict(zip(methods, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4))
    for ax, model in zip(axes[0], models):
        for method in methods:
            group = [r for r in runs if r.model == model and r.method == method]
            if not group:
                continue
            for col, style in (("train_loss", dict(alpha=0.3, lw=0.8)), ("val_loss", dict(lw=1.8))):
                if not any(col in r.metrics and r.metrics[col].notna().any() for r in group):
                    continue
                band = _seed_band([r for r in group if col in r.metrics], col)
                label = f"{method} (n={len(group)})" if col == "val_loss" else None
                ax.plot(band.index, band["mean"], color=colors[method], label=label, **style)
                if len(group) > 1 and col == "val_loss":
                    ax.fill_between(band.index, band["lo"], band["hi"], color=colors[method], alpha=0.15)
            diverged = [r for r in group if r.status == "diverged"]
            if diverged:
                ax.plot([], [], " ", label=f"{method}: {len(diverged)} diverged")
        ax.set_title(model)
        ax.set_xlabel("tokens")
        ax.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter())
        ax.set_ylabel("loss (val solid, train faint)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, outputs)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Loss curves against tokens from run folders.")
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("--out", nargs="+", required=True, help="output files (.png, .pdf)")
    args = ap.parse_args(argv)
    plot(load_runs(args.runs), args.title, args.out)


if __name__ == "__main__":
    main()
