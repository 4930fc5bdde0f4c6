"""Loss-curve figure: small multiples of the runs' losses against tokens.

One column per panel (a group of at most ``figures.MAX_ARMS`` methods, drawn with their reference,
the baseline), one row per model; each cell holds the loss (thick: validation, the mean over seeds
with its min-max band; thin: training, a moving mean) and, under it, the validation loss minus the
reference's, seed by seed (a seed gives every arm the same initial weights and batches), averaged.
Panels come from the experiment's ``figure_panels`` (``configs/experiments/<paper>.yaml``); methods
that no panel names are grouped by recipe family.
"""

from __future__ import annotations

import argparse

import matplotlib.ticker
import pandas as pd

from . import figures
from .figures import pyplot, save_figure
from .runs import load_runs

plt = pyplot()

PANEL_COLUMNS = 3       # panels side by side; more wrap into another row of panels
FOCUS_FROM = 0.2        # the loss axis spans the values after this share of the tokens
SMOOTH_POINTS = 8       # the training loss's moving mean spans 1/8 of its logged points


class Panel:
    def __init__(self, title: str, reference: str | None, arms: list[str]):
        self.title, self.reference, self.arms = title, reference, arms

    def __repr__(self):
        return f"Panel({self.title!r}, {self.reference!r}, {self.arms!r})"


def panels(methods: list[str], recipes: dict[str, str], baseline: str | None,
           spec: list[dict] | None = None, max_arms: int = figures.MAX_ARMS) -> list[Panel]:
    """The panels of ``methods`` (in run order): those of ``spec`` (``figure_panels``: title, methods
    and an optional reference, default the baseline) with the methods present, then the remaining
    methods by recipe family, small families packed together, each panel at most ``max_arms`` arms
    besides its reference (a larger group is cut into balanced parts)."""
    base = baseline if baseline in methods else None
    out, used = [], {base}

    def add(title, reference, arms):
        parts = figures.balanced_chunks(arms, max_arms)
        for i, part in enumerate(parts):
            out.append(Panel(title + (f" ({i + 1}/{len(parts)})" if len(parts) > 1 else ""), reference, part))

    for p in spec or []:
        ref = p.get("reference") if p.get("reference") in methods else base
        arms = [m for m in p["methods"] if m in methods and m != ref and m not in used]
        used.update(arms)
        if arms:
            used.add(ref)
            add(p["title"], ref, arms)
    families = {}
    for m in methods:
        if m not in used:
            families.setdefault(figures.method_family(recipes[m]), []).append(m)
    packed = []  # (titles, arms): families that fit one panel share it while there is room
    for fam, arms in families.items():
        if len(arms) > max_arms:
            add(fam, base, arms)
        elif packed and len(packed[-1][1]) + len(arms) <= max_arms:
            packed[-1][0].append(fam)
            packed[-1][1].extend(arms)
        else:
            packed.append(([fam], list(arms)))
    for titles, arms in packed:
        add(", ".join(titles), base, arms)
    if not out and base:
        out.append(Panel(base, base, []))
    return out


def _val(run) -> pd.Series:
    m = run.metrics
    if "val_loss" not in m:
        return pd.Series(dtype=float)
    return m[["tokens", "val_loss"]].dropna().groupby("tokens")["val_loss"].last()


def _train(run) -> pd.Series:
    m = run.metrics
    if "train_loss" not in m:
        return pd.Series(dtype=float)
    return m[["tokens", "train_loss"]].dropna().groupby("tokens")["train_loss"].last()


def _band(series: list[pd.Series]) -> pd.DataFrame:
    wide = pd.concat(series, axis=1).sort_index()
    return pd.DataFrame({"mean": wide.mean(axis=1), "lo": wide.min(axis=1), "hi": wide.max(axis=1)}).dropna()


def seed_gaps(group, reference) -> pd.DataFrame:
    """Validation loss minus the reference's at the same tokens: per seed against the reference run
    of that seed (against the reference's mean when it has no run of that seed), then the mean and
    min-max over seeds."""
    refs = {r.seed: _val(r) for r in reference}
    ref_mean = _band(list(refs.values()))["mean"] if refs else pd.Series(dtype=float)
    diffs = [(_val(r) - refs.get(r.seed, ref_mean)).dropna().rename(r.seed) for r in group]
    diffs = [d for d in diffs if len(d)]
    return _band(diffs) if diffs else pd.DataFrame(columns=["mean", "lo", "hi"])


def _smooth(s: pd.Series) -> pd.Series:
    window = max(1, round(len(s) / SMOOTH_POINTS))
    return s.rolling(window, min_periods=1, center=True).mean()


def _focus(ax, values: list[pd.Series]) -> None:
    """Limit the loss axis to the values after the first FOCUS_FROM of the tokens: the early drop
    would otherwise flatten the differences between arms."""
    pts = pd.concat([v for v in values if len(v)]) if any(len(v) for v in values) else pd.Series(dtype=float)
    if pts.empty:
        return
    late = pts[pts.index >= FOCUS_FROM * pts.index.max()]
    if len(late) < 2:
        return
    lo, hi = float(late.min()), float(late.max())
    pad = 0.08 * (hi - lo) if hi > lo else 0.01 * abs(hi) or 0.01
    ax.set_ylim(lo - pad, hi + pad)


def _label(method: str, group, seeds: int | None) -> str:
    """The method, with its number of seeds where it differs from the figure's ``seeds``, and its
    diverged runs."""
    diverged = sum(r.status == "diverged" for r in group)
    extra = [f"{len(group)} seed{'s' * (len(group) != 1)}"] if len(group) != seeds else []
    extra += [f"{diverged} diverged"] if diverged else []
    return method + (f" ({', '.join(extra)})" if extra else "")


def _draw_cell(ax, ax_gap, panel: Panel, runs_of: dict, styles: dict, seeds: int | None) -> list:
    shown = ([panel.reference] if panel.reference else []) + panel.arms
    plotted = []
    for method in shown:
        group = runs_of.get(method, [])
        if not group:
            continue
        st = styles[method]
        train = [_train(r) for r in group if len(_train(r))]
        if train:
            t = _smooth(_band(train)["mean"])
            ax.plot(t.index, t.values, color=st["color"], linestyle=st["linestyle"], lw=0.7, alpha=0.75)
            plotted.append(t)
        val = [v for v in (_val(r) for r in group) if len(v)]
        if val:
            b = _band(val)
            ax.plot(b.index, b["mean"], color=st["color"], linestyle=st["linestyle"], marker=st["marker"],
                    lw=1.6, label=_label(method, group, seeds))
            if len(val) > 1:
                ax.fill_between(b.index, b["lo"], b["hi"], color=st["color"], alpha=0.15, lw=0)
            plotted.append(b["mean"])
        else:
            ax.plot([], [], color=st["color"], linestyle=st["linestyle"], label=_label(method, group, seeds))
        if method != panel.reference and panel.reference in runs_of:
            g = seed_gaps(group, runs_of[panel.reference])
            if len(g):
                ax_gap.plot(g.index, g["mean"], color=st["color"], linestyle=st["linestyle"], marker=st["marker"], lw=1.3)
                if len(group) > 1:
                    ax_gap.fill_between(g.index, g["lo"], g["hi"], color=st["color"], alpha=0.15, lw=0)
    ax_gap.axhline(0, color=figures.REFERENCE_COLOR, lw=0.9)
    _focus(ax, plotted)
    return plotted


def layout(pans: list[Panel], models: list[str]) -> tuple[list[list[tuple[Panel, str]]], bool]:
    """(rows of cells (panel, model), whether the models are the columns). Two or three models: one
    column per model, one row per panel, the panel's legend right of its row. Otherwise one row per
    model and group of PANEL_COLUMNS panels, each panel's legend above its cell in the group's
    first row."""
    if 1 < len(models) <= PANEL_COLUMNS:
        return [[(p, m) for m in models] for p in pans], True
    chunks = [pans[i:i + PANEL_COLUMNS] for i in range(0, len(pans), PANEL_COLUMNS)]
    return [[(p, m) for p in chunk] for chunk in chunks for m in models], False


def plot(runs, title: str, outputs: list[str], baseline: str | None = None, spec: list[dict] | None = None) -> None:
    models = list(dict.fromkeys(r.model for r in runs))
    methods = list(dict.fromkeys(r.method for r in runs))
    recipes = {r.method: r.recipe for r in runs}
    rows, model_columns = layout(panels(methods, recipes, baseline, spec), models)
    ncols = max(len(r) for r in rows)
    if model_columns:  # a legend column on the right
        width = 0.5 + ncols * (2.3 if ncols < 3 else 1.75) + 1.7
        height = len(rows) * 2.45 + 0.9
    else:  # legends above the first row of each group of panels
        width = max(4.5, 0.4 + 2.25 * ncols)  # one panel alone is drawn as wide as a column of text
        legends = [len(r[0][0].arms) + 2 for r in rows if r[0][1] == models[0]]
        height = len(rows) * 2.45 + sum(0.14 * n + 0.15 for n in legends) + 0.75
    fig = plt.figure(figsize=figures.figure_size(width, height))
    grid = fig.add_gridspec(2 * len(rows), ncols, height_ratios=[1.55, 0.9] * len(rows))
    by_key = {}
    for r in runs:
        by_key.setdefault((r.method, r.model), []).append(r)
    counts = {len(g) for g in by_key.values()}
    seeds = counts.pop() if len(counts) == 1 else None  # the figure's number of seeds, where all arms share it
    for i, row in enumerate(rows):
        for j in range(ncols):
            ax = fig.add_subplot(grid[2 * i, j])
            ax_gap = fig.add_subplot(grid[2 * i + 1, j], sharex=ax)
            if j >= len(row):
                ax.set_visible(False)
                ax_gap.set_visible(False)
                continue
            panel, model = row[j]
            shown = ([panel.reference] if panel.reference else []) + panel.arms
            styles = figures.arm_styles([(m, recipes[m]) for m in shown], panel.reference)
            _draw_cell(ax, ax_gap, panel, {m: by_key.get((m, model), []) for m in shown}, styles, seeds)
            ax.tick_params(labelbottom=False)
            ax_gap.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter())
            ax_gap.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
            ax_gap.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(3))
            ax_gap.set_xlabel("tokens")
            if model_columns and i == 0:
                ax.set_title(model)
            if j == 0:
                ax.set_ylabel("loss" if model_columns or len(models) == 1 else f"{model}: loss")
            if j == 0 or panel.reference != row[j - 1][0].reference:
                ax_gap.set_ylabel(f"val − {panel.reference}" if panel.reference else "")
            if model_columns and j == len(row) - 1:
                ax.legend(loc="center left", bbox_to_anchor=(1.05, 0.3), title=panel.title, handlelength=2.6,
                          borderaxespad=0)
            elif not model_columns and model == models[0]:
                ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.02), title=panel.title, handlelength=2.6,
                          borderaxespad=0)
    band = f"mean over {seeds} seeds, band: min-max" if seeds and seeds > 1 else "band: min-max over seeds"
    if seeds == 1:
        band = "one seed"
    note = (f"thick: validation loss ({band}); thin: training loss (moving mean); "
            "lower axes: validation loss minus the reference")
    figures.suptitle(fig, title + "\n" + note)
    save_figure(fig, outputs)


def experiment_panels(paper: str) -> tuple[str | None, list[dict] | None]:
    """(baseline, figure_panels) of the paper's experiment config."""
    from ..config import experiment_config

    exp = experiment_config(paper)
    return exp.get("baseline"), exp.get("figure_panels")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Loss curves against tokens from run folders.")
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("--out", nargs="+", required=True, help="output files (.png, .pdf)")
    args = ap.parse_args(argv)
    runs = load_runs(args.runs)
    baseline, spec = experiment_panels(runs[0].paper)
    plot(runs, args.title, args.out, baseline, spec)


if __name__ == "__main__":
    main()
