"""INT8 with block fallback (arXiv 2503.08040): figures and tables beyond the loss curves and the
final-loss table.

    python -m lowprec.report.int8_fallback outliers-run --runs BF16_RUN --csv RUN/outliers.csv --ccdf RUN/outlier_ccdf.csv
    python -m lowprec.report.int8_fallback outliers   --evals outliers.csv... --ccdfs outlier_ccdf.csv... --csv --md --contrast-csv --contrast-md --png --pdf
    python -m lowprec.report.int8_fallback fallback   --runs RUN... --heatmap-method M --csv --summary-csv --summary-md --png --pdf --sweep-png --sweep-pdf
    python -m lowprec.report.int8_fallback gaps       --runs RUN... --csv --md
    python -m lowprec.report.int8_fallback finetune   --runs FT_RUN... --csv --md --png --pdf
    python -m lowprec.report.int8_fallback throughput --gemm GEMM_CSV --csv --md --png --pdf

outliers: the trained models run on validation batches; each linear layer's input is cut into the
fallback blocks and ``block_absmax_stats`` describes it, per GEMM call (one batch), then over
batches (per run, into the run folder, since it needs the checkpoint; then across runs). fallback: the fallback ratio per layer over training from the runs' telemetry (a heat map)
and per arm (a sweep figure against the loss gap). throughput: the committed GPU GEMM benchmark
(``lowprec.bench.int8_gemm``) in the form of the paper's throughput figure
(``lowprec.report.int8_throughput``).
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import write_text
from ..telemetry import TELEMETRY_FILE, read_telemetry
from .figures import MAX_HEIGHT, MIN_FONT, WIDTH, legend_below, pyplot, save_figure, suptitle
from .runs import final_losses, load_runs
from .markdown import markdown_table
from .tables import summarize, to_markdown

# Which input a linear layer reads, by module-name suffix; layers with one role in one transformer
# block share their input (q/k/v, gate/up) and are measured once.
ROLES = {
    "self_attn.q_proj": "attn_in", "self_attn.k_proj": "attn_in", "self_attn.v_proj": "attn_in",
    "self_attn.o_proj": "attn_out", "mlp.gate_proj": "ffn_in", "mlp.up_proj": "ffn_in",
    "mlp.down_proj": "ffn_down",
    "attn.c_attn": "attn_in", "attn.c_proj": "attn_out", "mlp.c_fc": "ffn_in", "mlp.c_proj": "ffn_down",
}
ROLE_ORDER = ("attn_in", "attn_out", "ffn_in", "ffn_down", "other")
ROLE_TITLES = {"attn_in": "q/k/v input", "attn_out": "attention output-projection input",
               "ffn_in": "MLP input (gate/up, c_fc)", "ffn_down": "MLP down-projection input",
               "other": "other"}
# model family -> the activation class the paper contrasts
FAMILY_CLASS = {"llama": "glu", "gpt2": "gpt2", "nemotron": "relu2"}
TAUS = (4.0, 8.0, 16.0)
# block absmax / median ratios at which the outlier figure's distribution is stored: 8 per octave
# from 1/4 to 1024, powers of two exact (thresholds such as tau = 8 are grid points)
CCDF_GRID = tuple(0.25 * 2.0 ** (k / 8) for k in range(97))


def linear_role(name: str) -> tuple[int, str]:
    """(transformer block index, role) of a linear layer's module name; -1 when not in a block."""
    m = re.search(r"\.(\d+)\.", f".{name}.")
    block = int(m.group(1)) if m else -1
    role = next((r for suffix, r in ROLES.items() if name.endswith(suffix)), "other")
    return block, role


# --------------------------------------------------------------------------- outliers

def capture_outlier_stats(model, batches, block=(32, 32), taus=TAUS):
    """Run ``model`` on ``batches`` ((x, y) token pairs) and describe every linear layer's input
    with ``block_absmax_stats``, once per (transformer block, role) and batch.

    Returns (rows, ratios): rows are dicts (block, role, linears, batch, and the stats),
    ratios maps (block, role) to the block amax / median ratios of all batches, for the figure."""
    import torch

    from ..methods.int8_fallback import block_absmax_stats
    from ..linear import linear_layers

    layers = list(linear_layers(model))
    module_name = {id(module): name for _, _, name, module, _ in layers}
    sharing = {}  # (block, role) -> the linears that read this input
    for _, _, name, _, _ in layers:
        sharing.setdefault(linear_role(name), []).append(name)
    rows, ratios, seen = [], {}, set()
    state = {"batch": 0}

    def hook(module, args):
        key = linear_role(module_name[id(module)])
        if (state["batch"], key) in seen:
            return
        seen.add((state["batch"], key))
        x = args[0].detach()
        s = block_absmax_stats(x.reshape(-1, x.shape[-1]), block, taus)
        ratios.setdefault(key, []).append(s.pop("ratios"))
        rows.append({"block": key[0], "role": key[1], "linears": ",".join(sharing[key]),
                     "batch": state["batch"], **s})

    handles = [module.register_forward_pre_hook(hook) for _, _, _, module, _ in layers]
    try:
        model.eval()
        with torch.no_grad():
            for i, (x, _) in enumerate(batches):
                state["batch"] = i
                model(input_ids=x)
    finally:
        for h in handles:
            h.remove()
    return rows, {k: torch.cat(v) for k, v in ratios.items()}


def aggregate_outliers(rows: list[dict], taus=TAUS) -> pd.DataFrame:
    """Per (block, role) over batches: typical values as means, the extreme as the max, and the
    hot-block layout (at tau = 8) weighted by each batch's number of hot blocks."""
    df = pd.DataFrame(rows)
    out = []
    for (blk, role), g in df.groupby(["block", "role"], sort=True):
        r = {"block": int(blk), "role": role, "linears": g["linears"].iloc[0], "batches": len(g),
             "blocks_per_call": int(g["n_blocks"].iloc[0]),
             "median_block_amax": g["median_block_amax"].mean(),
             "max_over_median": g["max_over_median"].max(),
             "p99_over_median": g["p99_over_median"].mean(),
             "kurtosis": g["kurtosis"].mean()}
        for tau in taus:
            r[f"share_above_{tau:g}"] = g[f"share_above_{tau:g}"].mean()
        hot = g["share_above_8"] * g["n_blocks"]
        for kind in ("rowwise", "colwise", "isolated"):
            r[f"{kind}_8"] = float((g[f"{kind}_8"] * hot).sum() / hot.sum()) if hot.sum() > 0 else math.nan
        out.append(r)
    table = pd.DataFrame(out)
    table["role"] = pd.Categorical(table["role"], ROLE_ORDER, ordered=True)
    return table.sort_values(["block", "role"]).assign(role=lambda t: t["role"].astype(str))


def outlier_contrast(table: pd.DataFrame) -> pd.DataFrame:
    """Per role and statistic: the GLU models' value against GPT2's (magnitudes: the largest over
    layers; the share of hot blocks: the mean over layers) and their ratio."""
    stats = {"max_over_median": "max", "p99_over_median": "max", "kurtosis": "max", "share_above_8": "mean"}
    rows = []
    for role in [r for r in ROLE_ORDER if r in set(table["role"])]:
        t = table[table["role"] == role]
        for stat, how in stats.items():
            v = {c: getattr(t[t["class"] == c][stat], how)() for c in ("glu", "gpt2")}
            rows.append({"role": role, "stat": stat, "over_layers": how, "glu": v["glu"], "gpt2": v["gpt2"],
                         "glu_over_gpt2": v["glu"] / v["gpt2"] if v["gpt2"] and not math.isnan(v["gpt2"]) else math.nan})
    return pd.DataFrame(rows)


def ccdf_table(ratios: dict) -> pd.DataFrame:
    """Per (block, role): the number of blocks measured and the share whose absmax / median ratio
    exceeds each r of ``CCDF_GRID``. The grid keeps the distribution small enough to store in the
    run folder, so that the figure can be redrawn without the checkpoint."""
    grid = np.asarray(CCDF_GRID)
    rows = []
    for (blk, role), r in sorted(ratios.items()):
        r = np.sort(r.double().numpy())
        share = 1.0 - np.searchsorted(r, grid, side="right") / max(len(r), 1)
        rows += [{"block": blk, "role": role, "n_blocks": len(r), "r": g, "share_above": v}
                 for g, v in zip(grid, share)]
    return pd.DataFrame(rows, columns=["block", "role", "n_blocks", "r", "share_above"])


def pooled_ccdf(ccdf: pd.DataFrame) -> pd.DataFrame:
    """Per model, role and r: the share of all its layers' blocks above r (weighted by blocks)."""
    w = ccdf.assign(hot=ccdf["share_above"] * ccdf["n_blocks"])
    g = w.groupby(["model", "class", "role", "r"], sort=False)[["hot", "n_blocks"]].sum()
    return (g["hot"] / g["n_blocks"]).rename("share_above").reset_index()


def plot_outliers(ccdf: pd.DataFrame, tau: float, outputs: list[str]) -> None:
    """Share of blocks whose absmax exceeds r x the median block absmax, against r: one panel per
    role (two by two), one line per model (pooled over layers and batches), the fallback threshold
    tau as a vertical line; one legend under the panels."""
    import matplotlib.ticker

    plt = pyplot()

    pooled = pooled_ccdf(ccdf)
    roles = [r for r in ROLE_ORDER if r in set(pooled["role"])]
    ncols = 2 if len(roles) > 1 else 1
    nrows = max(1, math.ceil(len(roles) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(WIDTH if ncols == 2 else 4.0, 0.9 + 2.5 * nrows),
                             squeeze=False, sharex=True, sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    models = list(dict.fromkeys(zip(pooled["model"], pooled["class"])))
    # the x axis reaches past tau, so that its line and label stay inside the panels
    top = max(float(pooled.loc[pooled["share_above"] > 0, "r"].max()) if (pooled["share_above"] > 0).any() else 1.0,
              tau) * 2.0
    for k, ax in enumerate(axes.ravel()):
        if k >= len(roles):
            ax.set_visible(False)
            continue
        role = roles[k]
        for i, (model, cls) in enumerate(models):
            g = pooled[(pooled["role"] == role) & (pooled["model"] == model)]
            g = g[g["share_above"] > 0].sort_values("r")
            if len(g):
                ax.step(g["r"], g["share_above"], where="post", color=colors[i % len(colors)],
                        label=model if model == cls else f"{model} ({cls.upper()})")
        ax.axvline(tau, color="0.35", ls=":", lw=1.2, label=f"fallback threshold τ = {tau:g}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(right=top)
        for axis in (ax.xaxis, ax.yaxis):  # 1-2-5 labels as plain numbers: the ranges span few decades
            axis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(ROLE_TITLES[role])
        ax.grid(alpha=0.3, which="both")
        if k % ncols == 0:
            ax.set_ylabel("share of 32x32 blocks above")
        if k >= len(roles) - ncols:
            ax.set_xlabel("block absmax / median block absmax")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=len(labels))
    suptitle(fig, "Outlier blocks in the linear-layer inputs of the trained BF16 models (validation batches)")
    save_figure(fig, outputs)


def outliers_run(run_dir: str, n_batches: int | None = None, block=(32, 32)):
    """(per-layer table, CCDF table) of one finished run, each with its model and class; reads the
    run's final checkpoint, so under reuse_runs the two files in the run folder are the inputs."""
    from ..evaluate import evaluation_batches, load_trained

    module, cfg, data = load_trained(run_dir)
    rows, ratios = capture_outlier_stats(module.model, evaluation_batches(module, cfg, data, n_batches), block)
    if not rows:
        raise ValueError(f"{run_dir}: no linear layer inputs captured")
    cls = FAMILY_CLASS.get(cfg["model"]["family"], cfg["model"]["family"])
    tag = {"model": cfg["model"]["name"], "class": cls}
    return aggregate_outliers(rows).assign(**tag), ccdf_table(ratios).assign(**tag)


def _front(df: pd.DataFrame, cols=("model", "class")) -> pd.DataFrame:
    return df[[*cols, *[c for c in df.columns if c not in cols]]]


# --------------------------------------------------------------------------- fallback ratio

def _method_settings(cfg: dict) -> dict:
    from ..methods.int8_fallback import DEFAULTS

    m = cfg["method"]
    rule = m.get("rule", DEFAULTS["rule"])
    knob = {"absmax": ("tau", m.get("tau", DEFAULTS["tau"])), "dynamic": ("tau", m.get("tau", DEFAULTS["tau"])),
            "topk": ("rho", m.get("rho", DEFAULTS["rho"])),
            "error": ("error_threshold", m.get("error_threshold", DEFAULTS["error_threshold"]))}.get(rule, ("", None))
    return {"rule": rule, "knob": knob[0], "knob_value": knob[1]}


def fallback_telemetry(runs) -> pd.DataFrame:
    """Long table of the fallback slots' telemetry rows of every int8_fallback run: model, method,
    seed, step, layer, gemm, operand, rule, n_blocks, n_fallback, fallback_ratio, threshold."""
    cols = ["step", "layer", "gemm", "operand", "rule", "n_blocks", "n_fallback", "fallback_ratio",
            "fallback_threshold"]
    frames = []
    for r in runs:
        cfg = r.config
        if cfg["method"].get("recipe") != "int8_fallback":
            continue
        path = Path(r.dir) / TELEMETRY_FILE
        tel = read_telemetry(r.dir)
        if tel is None:
            raise FileNotFoundError(f"{path}: no telemetry; set telemetry_every for method {r.method!r}")
        missing = [c for c in cols if c not in tel]
        if missing:
            raise ValueError(f"{path}: telemetry without column(s) {missing}")
        tel = tel[tel["rule"] != "none"][cols]  # slots where fallback is on
        frames.append(tel.assign(model=r.model, method=r.method, seed=r.seed))
    if not frames:
        return pd.DataFrame(columns=["model", "method", "seed", *cols])
    df = pd.concat(frames, ignore_index=True)
    return df[["model", "method", "seed", *cols]]


def _ratio(tel: pd.DataFrame) -> float:
    """Blocks in two parts over blocks, over every telemetry row given (steps, layers, slots)."""
    return tel["n_fallback"].sum() / tel["n_blocks"].sum()


def fallback_summary(runs, tel: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Per model and method: the fallback ratio (blocks in two parts / blocks, over every telemetry
    step and fallback slot; and for fprop X alone), the layer with the highest ratio, and the final
    loss with its gap to the baseline."""
    losses = summarize(final_losses(runs), baseline)
    settings = {}
    for r in runs:
        cfg = r.config
        settings[r.method] = _method_settings(cfg) if cfg["method"].get("recipe") == "int8_fallback" else \
            {"rule": "none" if cfg["method"].get("recipe") == "int8_block" else "–", "knob": "", "knob_value": None}
    rows = []
    for _, lr in losses.iterrows():
        t = tel[(tel["model"] == lr["model"]) & (tel["method"] == lr["method"])]
        row = {"model": lr["model"], "method": lr["method"], **settings[lr["method"]]}
        if len(t):
            fx = t[(t["gemm"] == "fprop") & (t["operand"] == "x")]
            per_layer = fx.groupby("layer")[["n_fallback", "n_blocks"]].sum()
            per_layer = per_layer["n_fallback"] / per_layer["n_blocks"]
            row.update({"fallback_ratio": _ratio(t),
                        "fprop_x_ratio": fx["n_fallback"].sum() / fx["n_blocks"].sum() if len(fx) else math.nan,
                        "max_layer_ratio": per_layer.max() if len(per_layer) else math.nan,
                        "max_layer": per_layer.idxmax() if len(per_layer) and per_layer.max() > 0 else "",
                        "telemetry_steps": int(t["step"].nunique())})
        elif row["rule"] == "none":
            row.update({"fallback_ratio": 0.0, "fprop_x_ratio": 0.0})
        row.update({"n": lr["n"], "val_loss_mean": lr["val_loss_mean"],
                    "gap_vs_" + baseline: lr.get("delta_vs_baseline", math.nan)})
        rows.append(row)
    cols = ["model", "method", "rule", "knob", "knob_value", "fallback_ratio", "fprop_x_ratio",
            "max_layer_ratio", "max_layer", "telemetry_steps", "n", "val_loss_mean", "gap_vs_" + baseline]
    return pd.DataFrame(rows).reindex(columns=cols)


def _layer_order(layers) -> list[str]:
    return sorted(set(layers), key=lambda n: (linear_role(n)[0], ROLE_ORDER.index(linear_role(n)[1]), n))


def _short(name: str) -> str:
    return re.sub(r"^(model\.layers|transformer\.h)\.", "", name).replace("self_attn.", "attn.")


def plot_heatmap(tel: pd.DataFrame, method: str, outputs: list[str]) -> None:
    """Fallback ratio of fprop X per layer (rows, one label each) over training steps (columns), one
    panel per model side by side, one colour scale."""
    plt = pyplot()
    t = tel[(tel["method"] == method) & (tel["gemm"] == "fprop") & (tel["operand"] == "x")]
    models = list(dict.fromkeys(t["model"]))
    grids = {}
    for model in models:
        g = t[t["model"] == model].groupby(["layer", "step"])["fallback_ratio"].mean().unstack("step")
        grids[model] = g.reindex(_layer_order(g.index))
    rows = max([len(g) for g in grids.values()] + [1])
    # a row per label at 1.6 x the smallest font: labels never overlap
    height = min(MAX_HEIGHT, 1.3 + rows * 1.6 * MIN_FONT / 72)
    fig, axes = plt.subplots(1, max(len(models), 1), figsize=(WIDTH, height), squeeze=False)
    if not models:
        axes[0][0].text(0.5, 0.5, f"no fallback telemetry for method {method!r}", ha="center", va="center")
        axes[0][0].set_axis_off()
    # at least 1% full scale: a run without fallback shows as uniformly dark, not as noise
    vmax = max(float(t["fallback_ratio"].max()), 0.01) if len(t) else 1.0
    im = None
    for ax, model in zip(axes[0], models):
        grid = grids[model]
        im = ax.imshow(100 * grid.to_numpy(float), aspect="auto", cmap="viridis", vmin=0, vmax=100 * vmax,
                       interpolation="nearest")
        ax.set_yticks(range(len(grid.index)), [_short(n) for n in grid.index])
        ax.tick_params(axis="y", length=0)
        ax.grid(False)
        steps = list(grid.columns)
        ticks = np.linspace(0, len(steps) - 1, min(len(steps), 5)).round().astype(int)
        ax.set_xticks(ticks, [str(steps[i]) for i in ticks])
        ax.set_xlabel("training step")
        ax.set_title(f"{model}: {method}, forward X")
    if im is not None:
        fig.colorbar(im, ax=list(axes[0]), label="blocks falling back (%)", fraction=0.04, pad=0.02)
    save_figure(fig, outputs)


def plot_sweep(summary: pd.DataFrame, baseline: str, outputs: list[str]) -> None:
    """Loss gap to the baseline against the fallback ratio, one point per fallback arm (labelled with
    its setting); the no-fallback block INT8 arm as a dashed line; one colour per model."""
    plt = pyplot()
    gap = "gap_vs_" + baseline
    fig, ax = plt.subplots(figsize=(5.0, 3.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (model, g) in enumerate(summary.groupby("model", sort=False)):
        c = colors[i % len(colors)]
        fb = g[g["fallback_ratio"].notna() & (g["rule"] != "none")]
        ax.scatter(100 * fb["fallback_ratio"], fb[gap], color=c, label=f"{model}: fallback arms", zorder=3)
        for _, r in fb.iterrows():
            ax.annotate(_setting(r), (100 * r["fallback_ratio"], r[gap]), fontsize=7, xytext=(4, 3),
                        textcoords="offset points", color=c)
        for _, r in g[g["rule"] == "none"].iterrows():
            ax.axhline(r[gap], color=c, ls="--", lw=1, label=f"{model}: {r['method']} (no fallback)")
    ax.axhline(0, color="black", lw=0.8)
    ax.margins(x=0.15, y=0.12)  # room for the points' labels
    ax.set_xlabel("fallback ratio (% of blocks, over training)")
    ax.set_ylabel(f"final val loss − {baseline}")
    ax.set_title("Fallback ratio against loss gap")
    legend_below(ax, ncol=2)
    save_figure(fig, outputs)


def _setting(row) -> str:
    """A fallback arm's rule and its knob, e.g. ``absmax τ=8`` or ``topk ρ=0.02``."""
    symbol = {"tau": "τ", "rho": "ρ", "error_threshold": "ε"}.get(row["knob"], row["knob"])
    value = row["knob_value"]
    return f"{row['rule']} {symbol}={value:g}" if isinstance(value, (int, float)) and not pd.isna(value) else row["rule"]


# --------------------------------------------------------------------------- loss gaps

def gap_table(runs, baseline: str) -> pd.DataFrame:
    """Method x model final-loss gap to the baseline, and the GLU models' mean gap minus GPT2's:
    positive where a method hurts the GLU model more."""
    losses = summarize(final_losses(runs), baseline)
    family = {r.model: r.config["model"]["family"] for r in runs}
    models = list(dict.fromkeys(losses["model"]))
    rows = []
    for method, g in losses.groupby("method", sort=False):
        row = {"method": method}
        for m in models:
            sel = g[g["model"] == m]
            row[f"val_loss_{m}"] = sel["val_loss_mean"].iloc[0] if len(sel) else math.nan
            row[f"gap_{m}"] = sel["delta_vs_baseline"].iloc[0] if len(sel) else math.nan
        by_class = {c: [row[f"gap_{m}"] for m in models if FAMILY_CLASS.get(family[m]) == c] for c in ("glu", "gpt2")}
        row["glu_minus_gpt2"] = (np.nanmean(by_class["glu"]) - np.nanmean(by_class["gpt2"])
                                 if by_class["glu"] and by_class["gpt2"] else math.nan)
        row["n"] = int(g["n"].min())
        rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- fine-tuning

def finetune_table(runs, baseline: str) -> pd.DataFrame:
    """Final fine-tuning losses per arm, the gap to the baseline arm's fine-tune and, for the
    fallback arms, the fallback ratio over the fine-tuning's telemetry (0 means the arm fine-tuned
    as block INT8: the rule never fired)."""
    table = summarize(final_losses(runs), baseline)
    tel = fallback_telemetry(runs)
    ratios = {key: _ratio(t) for key, t in tel.groupby(["model", "method"])}
    table["fallback_ratio"] = [ratios.get((m, a), math.nan) for m, a in zip(table["model"], table["method"])]
    return table


def finetune_markdown(table: pd.DataFrame, baseline: str) -> str:
    ratios = [f"{r['model']}/{r['method']} {r['fallback_ratio']:.4g}" for _, r in table.iterrows()
              if not pd.isna(r["fallback_ratio"])]
    tail = f"\nFallback ratio over the fine-tuning steps: {', '.join(ratios)}.\n" if ratios else ""
    return to_markdown(table, baseline) + tail


# --------------------------------------------------------------------------- CLI

def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["outliers-run", "outliers", "fallback", "gaps", "finetune", "throughput"])
    ap.add_argument("--runs", nargs="*", default=[])
    ap.add_argument("--evals", nargs="*", default=[], help="outliers: the runs' outliers.csv files")
    ap.add_argument("--ccdfs", nargs="*", default=[], help="outliers: the runs' outlier_ccdf.csv files")
    ap.add_argument("--ccdf", default=None, help="outliers-run: where the run's CCDF table goes")
    ap.add_argument("--baseline", default="bf16")
    ap.add_argument("--batches", type=int, default=None, help="outliers: validation batches (default: the run's)")
    ap.add_argument("--heatmap-method", default="int8_fallback")
    ap.add_argument("--gemm", default=None, help="throughput: the committed benchmark CSV")
    for opt in ("csv", "md", "png", "pdf", "contrast-csv", "contrast-md", "summary-csv", "summary-md",
                "sweep-png", "sweep-pdf"):
        ap.add_argument(f"--{opt}", default=None)
    args = ap.parse_args(argv)

    def out(df, csv, md=None, digits=4):
        write_text(csv, df.to_csv(index=False, float_format="%.6g"))
        if md:
            write_text(md, markdown_table(df, digits))

    figs = [p for p in (args.png, args.pdf) if p]
    if args.what == "outliers-run":
        if len(args.runs) != 1:
            ap.error("outliers-run takes one run folder (--runs DIR)")
        table, ccdf = outliers_run(args.runs[0], args.batches)
        out(_front(table), args.csv)
        out(_front(ccdf), args.ccdf)
    elif args.what == "outliers":
        from ..methods.int8_fallback import DEFAULTS

        table = pd.concat([pd.read_csv(f) for f in args.evals], ignore_index=True)
        out(table, args.csv)
        write_text(args.md, markdown_table(table.drop(columns=["linears"])))  # names are in the CSV; the role says it
        out(outlier_contrast(table), args.contrast_csv, args.contrast_md)
        plot_outliers(pd.concat([pd.read_csv(f) for f in args.ccdfs], ignore_index=True), DEFAULTS["tau"], figs)
    elif args.what == "fallback":
        runs = load_runs(args.runs)
        tel = fallback_telemetry(runs)
        out(tel, args.csv)
        summary = fallback_summary(runs, tel, args.baseline)
        out(summary, args.summary_csv, args.summary_md)
        plot_heatmap(tel, args.heatmap_method, figs)
        plot_sweep(summary, args.baseline, [p for p in (args.sweep_png, args.sweep_pdf) if p])
    elif args.what == "gaps":
        out(gap_table(load_runs(args.runs), args.baseline), args.csv, args.md)
    elif args.what == "finetune":
        from .curves import experiment_panels, plot

        runs = load_runs(args.runs)
        table = finetune_table(runs, args.baseline)
        write_text(args.csv, table.to_csv(index=False, float_format="%.6g"))
        write_text(args.md, finetune_markdown(table, args.baseline))
        plot(runs, "Fine-tuning the BF16-pretrained model on held-out text", figs, args.baseline,
             experiment_panels(runs[0].paper)[1] if runs else None)
    else:
        from . import int8_throughput as tp

        path = Path(args.gemm)
        df = tp.read_gemm(path)
        table = tp.throughput_table(df) if df is not None else pd.DataFrame(columns=["series", "M", "tflops"])
        device = tp.device_of(path)
        source = f"results/{path.parent.name}/{path.name}"
        out(table, args.csv)
        write_text(args.md, tp.throughput_markdown(table, device, source))
        tp.plot_throughput(table, device, source, figs)


if __name__ == "__main__":
    main()
