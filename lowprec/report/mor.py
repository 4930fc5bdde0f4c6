"""MoR (arXiv 2512.22804): figures and tables beyond the loss curves and the final-loss table.

    python -m lowprec.report.mor telemetry --runs RUN... --heatmap-method M --format-methods M... \\
        --error-png --error-pdf --error-csv --format-png --format-pdf --summary-csv --summary-md
    python -m lowprec.report.mor share  --runs RUN... --csv --md --png --pdf
    python -m lowprec.report.mor tables --runs RUN... --main-csv --main-md --ablations-csv \\
        --ablations-md --lr-csv --lr-md

Everything is read from run folders: ``config.yaml`` says what an arm is (its MoR settings come from
the recipe the method config builds, so defaults live in ``lowprec.methods.mor`` only), ``metrics.csv`` and
``provenance.json`` give the losses, and ``telemetry.csv.gz`` (MoR arms) holds one row per layer, GEMM
operand and logged step: the format chosen (``format``, e4m3 | bf16), the relative E4M3 error under
the arm's partition (``mor_rel_error``) and under every partition (``rel_error_<partition>``), and
for sub-tensor MoR the share of blocks per format.

Arms are grouped by what they are, not by their names: the learning-rate regime is the run's
(lr, min_lr_ratio), numbered by peak LR as the paper's configurations are (config 1: 3e-4, config 2:
1.2e-3); an ablation is a per-block MoR arm that differs from the defaults in one setting.
"""

from __future__ import annotations

import argparse
import math
import re

import numpy as np
import pandas as pd

from ..io import write_text
from ..layer_names import matches
from ..telemetry import TELEMETRY_FILE, read_telemetry
from .figures import MAX_HEIGHT, MIN_FONT, WIDTH, figure_size, pyplot, save_figure, suptitle
from .runs import TRAIN_WINDOW, load_runs, train_loss
from .markdown import markdown_table

# GEMM operand slot -> the tensor it is (brief 2.9: X, W and dY, each used by two GEMMs)
ROLES = {"fprop.x": "X", "wgrad.x": "X", "fprop.w": "W", "dgrad.w": "W", "dgrad.dy": "dY", "wgrad.dy": "dY"}
ROLE_ORDER = ("X", "W", "dY")
SLOT_ORDER = ("fprop.x", "fprop.w", "dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x")
# the paper's four quantized layer types, by module-name pattern (Nemotron/Llama, GPT2, Megatron)
LAYER_TYPES = {
    "QKV": ("*.q_proj", "*.k_proj", "*.v_proj", "*.qkv_proj", "*.attn.c_attn", "*.query_key_value"),
    "attention out": ("*.o_proj", "*.attn.c_proj", "*.self_attention.dense", "*.out_proj"),
    "FC1": ("*.up_proj", "*.gate_proj", "*.mlp.c_fc", "*.fc1", "*.dense_h_to_4h"),
    "FC2": ("*.down_proj", "*.mlp.c_proj", "*.fc2", "*.dense_4h_to_h"),
}
TYPE_ORDER = (*LAYER_TYPES, "other")
# Relative-error bins of the paper's heat maps (0.5 % wide up to 6 %, the authors' log tooling),
# plus one open bin for everything above.
ERROR_EDGES = np.round(np.arange(0.0, 0.0601, 0.005), 4)
ERROR_LABELS = [f"{100 * a:.1f}-{100 * b:.1f}%" for a, b in zip(ERROR_EDGES[:-1], ERROR_EDGES[1:])] + [
    f">={100 * ERROR_EDGES[-1]:.0f}%"]
LOW_ERROR = 0.025  # "most tensors' relative error lies well below 2.5 %" (brief 4.3)
FORMATS = ("e4m3", "bf16")  # the tensor-level choice; other telemetry rows are not MoR operands


# --------------------------------------------------------------------------- what a run is

def arm_settings(method_cfg: dict) -> dict:
    """partition (None for a non-MoR recipe), block, scale, threshold, subtensor_mode and the recipe
    name, read from the quantizer that the method config builds."""
    from ..methods.mor import MoRQuantizer, SubTensorMoRQuantizer
    from ..recipes import GEMMS, recipe_from_config

    recipe = recipe_from_config(method_cfg)
    quants = [q for g in GEMMS for q in recipe.gemm(g) if isinstance(q, (MoRQuantizer, SubTensorMoRQuantizer))]
    out = {"recipe": method_cfg.get("recipe", "bf16"), "partition": None, "block": None, "scale": None,
           "threshold": None, "subtensor_mode": None}
    if quants:
        d = quants[0].to_dict()
        out.update({k: d.get(k) for k in ("partition", "scale", "threshold", "subtensor_mode")})
        out["block"] = "x".join(map(str, d["block"])) if d.get("block") else None
    return out


def _defaults() -> dict:
    from ..methods.mor import DEFAULT_BLOCK, DEFAULT_THRESHOLD

    return {"block": "x".join(map(str, DEFAULT_BLOCK)), "scale": "gam", "threshold": DEFAULT_THRESHOLD}


def setting_label(s: dict) -> str:
    """A short name of what an arm is: the recipe, or MoR's partition and its non-default settings."""
    if s["partition"] is None:
        return s["recipe"]
    if s["partition"] == "subtensor":
        return f"MoR sub-tensor {s['subtensor_mode'].replace('_', '-')}"
    d, extra = _defaults(), []
    if s["partition"] == "block" and s["block"] != d["block"]:
        extra.append(f"{s['block']} blocks")
    if s["scale"] != d["scale"]:
        extra.append(f"{s['scale']} scales")
    if s["threshold"] != d["threshold"]:
        extra.append(f"threshold {100 * s['threshold']:g}%")
    return f"MoR {s['partition']}" + (f" ({', '.join(extra)})" if extra else "")


def run_table(runs, window: float = TRAIN_WINDOW) -> pd.DataFrame:
    """One row per run: model, method, seed, status, losses, LR regime and the arm's settings."""
    rows = []
    for r in runs:
        cfg = r.config
        t = cfg["train"]
        settings = arm_settings(cfg["method"])
        rows.append({"model": r.model, "method": r.method, "seed": r.seed, "status": r.status,
                     "val_loss": r.final_val_loss if r.status == "completed" else math.nan,
                     "train_loss": train_loss(r.metrics, window) if r.status == "completed" else math.nan,
                     "lr": float(t["lr"]), "min_lr_ratio": float(t.get("min_lr_ratio", 0.1)),
                     **settings, "setting": setting_label(settings)})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    peaks = sorted(set(zip(df["lr"], df["min_lr_ratio"])))
    df["regime"] = [f"config {1 + peaks.index(k)}" for k in zip(df["lr"], df["min_lr_ratio"])]
    df["lr_schedule"] = [f"{lr:g} -> {lr * ratio:g}" for lr, ratio in zip(df["lr"], df["min_lr_ratio"])]
    return df


# --------------------------------------------------------------------------- telemetry

def layer_type(name: str) -> str:
    for kind, patterns in LAYER_TYPES.items():
        if matches(name, patterns):
            return kind
    return "other"


def _layer_index(name: str) -> int:
    m = re.search(r"\.(\d+)\.", f".{name}.")
    return int(m.group(1)) if m else -1


def decisions(run) -> pd.DataFrame | None:
    """The run's MoR telemetry rows (one per layer, GEMM operand and logged step) with the tensor's
    label, layer type and role, or None if the run recorded none."""
    path = run.dir / TELEMETRY_FILE
    df = read_telemetry(run.dir)
    if df is None:
        return None
    if "format" not in df:
        raise ValueError(f"{path}: no 'format' column; not a telemetry file")
    df = df[df["format"].isin(FORMATS)].copy()
    if df.empty:
        return None
    df["slot"] = df["gemm"] + "." + df["operand"]
    unknown = sorted(set(df["slot"]) - set(ROLES))
    if unknown:
        raise ValueError(f"{path}: unknown GEMM operand(s) {unknown}; known: {list(ROLES)}")
    df["role"] = df["slot"].map(ROLES)
    df["layer_type"] = df["layer"].map(layer_type)
    df["layer_index"] = df["layer"].map(_layer_index)
    df["tensor"] = [f"L{i} {name.rsplit('.', 1)[-1]} {slot}" if i >= 0 else f"{name} {slot}"
                    for i, name, slot in zip(df["layer_index"], df["layer"], df["slot"])]
    df["e4m3"] = (df["format"] == "e4m3").astype(float)
    df["model"], df["method"], df["seed"] = run.model, run.method, run.seed
    return df


def tensor_order(df: pd.DataFrame) -> list[str]:
    """Tensors top to bottom: by block, layer type (QKV, attention out, FC1, FC2), layer, GEMM slot."""
    keys = df.drop_duplicates("tensor")[["tensor", "layer_index", "layer_type", "layer", "slot"]]
    keys = keys.assign(t=keys["layer_type"].map(TYPE_ORDER.index), s=keys["slot"].map(SLOT_ORDER.index))
    return keys.sort_values(["layer_index", "t", "layer", "s"])["tensor"].tolist()


def error_bin(err) -> np.ndarray:
    """Index of the paper's 0.5 % bin that each relative error falls in (the last bin is open);
    NaN (a non-finite tensor) stays NaN."""
    e = np.asarray(err, dtype=float)
    idx = np.searchsorted(ERROR_EDGES, e, side="right") - 1.0
    return np.where(np.isnan(e), np.nan, np.clip(idx, 0, len(ERROR_LABELS) - 1))


def partitions_in(df: pd.DataFrame) -> list[str]:
    from ..methods.mor import PARTITIONS

    return [p for p in PARTITIONS if f"rel_error_{p}" in df]


def rel_error_long(dec: pd.DataFrame) -> pd.DataFrame:
    """(tensor, step, partition) -> relative error and its bin, from one run's decisions."""
    parts = partitions_in(dec)
    if not parts:
        raise ValueError(f"run {dec['method'].iloc[0]}: telemetry has no rel_error_<partition> columns "
                         "(recorded before MoR telemetry measured every partition)")
    long = dec.melt(id_vars=["model", "method", "seed", "tensor", "layer_type", "role", "step"],
                    value_vars=[f"rel_error_{p}" for p in parts], var_name="partition", value_name="rel_error")
    long["partition"] = long["partition"].str.removeprefix("rel_error_")
    long["bin"] = error_bin(long["rel_error"])
    long["bin_label"] = [ERROR_LABELS[int(b)] if not np.isnan(b) else "nan" for b in long["bin"]]
    return long


def rel_error_summary(decs: list[pd.DataFrame]) -> pd.DataFrame:
    """Per run (arm and seed) and partition: share of (tensor, step) cells below 2.5 % relative error,
    median, 95th percentile and maximum (in percent)."""
    rows = []
    for dec in sorted(decs, key=lambda d: (str(d["method"].iloc[0]), int(d["seed"].iloc[0]))):
        for part in partitions_in(dec):
            e = dec[f"rel_error_{part}"].astype(float)
            finite = e[np.isfinite(e)]
            rows.append({"model": dec["model"].iloc[0], "method": dec["method"].iloc[0],
                         "seed": int(dec["seed"].iloc[0]), "partition": part, "cells": int(len(e)),
                         "below_2p5_pct": 100 * float((finite < LOW_ERROR).sum()) / max(len(e), 1),
                         "median_pct": 100 * float(finite.median()) if len(finite) else math.nan,
                         "p95_pct": 100 * float(finite.quantile(0.95)) if len(finite) else math.nan,
                         "max_pct": 100 * float(finite.max()) if len(finite) else math.nan})
    return pd.DataFrame(rows, columns=["model", "method", "seed", "partition", "cells", "below_2p5_pct",
                                       "median_pct", "p95_pct", "max_pct"])


def _grid(dec: pd.DataFrame, column: str, order: list[str]) -> tuple[np.ndarray, list]:
    wide = dec.pivot_table(index="tensor", columns="step", values=column, aggfunc="mean", dropna=False)
    wide = wide.reindex(index=order)
    return wide.to_numpy(dtype=float), list(wide.columns)


def _row_groups(order: list[str], key) -> list[tuple[str, int, int]]:
    """Runs of consecutive tensors with the same ``key(tensor)``: (key, first row, last row + 1)."""
    out = []
    for i, t in enumerate(order):
        k = key(t)
        if out and out[-1][0] == k:
            out[-1] = (k, out[-1][1], i + 1)
        else:
            out.append((k, i, i + 1))
    return out


def _layer_key(tensor: str) -> str:
    """``L3 q_proj`` of the tensor label ``L3 q_proj fprop.x``."""
    return tensor.rsplit(" ", 1)[0]


def _block_key(tensor: str) -> str:
    """``L3`` of ``L3 q_proj fprop.x``; a layer outside the transformer blocks is its own group."""
    return tensor.split(" ", 1)[0] if re.match(r"L\d+ ", tensor) else _layer_key(tensor)


def _tensor_ticks(ax, order: list[str], height_in: float) -> None:
    """Label the tensor rows by linear layer (``L3 q_proj``: its GEMM operands' rows), or by
    transformer block where the axis is too short for one label per layer; lines between them."""
    layers, blocks = _row_groups(order, _layer_key), _row_groups(order, _block_key)
    per_label = height_in / max(len(layers), 1)  # inches per layer label
    groups = layers if per_label >= 1.6 * MIN_FONT / 72 else blocks
    ax.set_yticks([(a + b - 1) / 2 for _, a, b in groups], [k for k, _, _ in groups])
    ax.tick_params(axis="y", length=0)


def _separators(ax, order: list[str]) -> None:
    """Lines between the rows of two linear layers, thicker between transformer blocks."""
    for _, a, _ in _row_groups(order, _layer_key)[1:]:
        ax.axhline(a - 0.5, color="white", lw=0.3)
    for _, a, _ in _row_groups(order, _block_key)[1:]:
        ax.axhline(a - 0.5, color="white", lw=1.2)


def _step_ticks(ax, steps: list, max_labels: int = 12) -> None:
    every = max(1, math.ceil(len(steps) / max_labels))
    ax.set_xticks(range(0, len(steps), every), [str(int(s)) for s in steps[::every]])


def _tensor_heatmaps(plt, panels, order, imshow_kw, max_columns: int):
    """Tensor x step heat maps, one per panel ((title, values, steps)), at most ``max_columns`` side
    by side, sharing the tensor axis (labelled on the first column)."""

    ncols = min(len(panels), max_columns)
    nrows = math.ceil(len(panels) / ncols)
    # rows of the heat map: about 0.04 in per tensor, the page height at most
    panel_h = min(max(2.2, 0.04 * len(order) + 0.6), (MAX_HEIGHT - 1.3) / nrows)
    fig, axes = plt.subplots(nrows, ncols, figsize=(WIDTH, nrows * panel_h + 1.3), squeeze=False,
                             sharey=True)
    im = None
    for k, ax in enumerate(axes.ravel()):
        if k >= len(panels):
            ax.set_visible(False)
            continue
        title, values, steps = panels[k]
        im = ax.imshow(values, aspect="auto", interpolation="nearest", **imshow_kw)
        ax.set_title(title)
        ax.grid(False)
        ax.set_xlabel("training step")
        _step_ticks(ax, steps, max_labels=max(2, int((WIDTH - 1.8) / ncols / 0.4)))  # ~0.4 in per label
        _separators(ax, order)
        if k % ncols == 0:
            _tensor_ticks(ax, order, panel_h - 0.6)
    return fig, [ax for ax in axes.ravel()[:len(panels)]], im


def plot_error_heatmap(dec: pd.DataFrame, outputs: list[str]) -> None:
    """Tensor x step, the relative E4M3 error binned as in the paper, one panel per partition."""
    from matplotlib.colors import BoundaryNorm, ListedColormap

    plt = pyplot()
    parts, order = partitions_in(dec), tensor_order(dec)
    n = len(ERROR_LABELS)
    cmap = ListedColormap(plt.get_cmap("viridis")(np.linspace(0, 1, n)))
    norm = BoundaryNorm(np.arange(-0.5, n), n)
    panels = []
    for part in parts:
        values, steps = _grid(dec, f"rel_error_{part}", order)
        panels.append((f"{part} partition", error_bin(values), steps))
    fig, axes, im = _tensor_heatmaps(plt, panels, order, dict(cmap=cmap, norm=norm), max_columns=3)
    cbar = fig.colorbar(im, ax=axes, ticks=range(n), fraction=0.04, pad=0.02)
    cbar.ax.set_yticklabels(ERROR_LABELS)
    cbar.set_label("relative error of E4M3 (0.5 % bins)")
    suptitle(fig, f"Relative E4M3 error per tensor and step: {dec['model'].iloc[0]} / {dec['method'].iloc[0]} "
             f"(seed {dec['seed'].iloc[0]})\nat the 4.5 % threshold, the bins from 4.5-5.0 % up fall back to "
             "BF16; rows: each linear layer's six GEMM operands")
    save_figure(fig, outputs)


def plot_format_heatmap(decs: list[pd.DataFrame], outputs: list[str]) -> None:
    """Tensor x step, the share of the tensor kept in E4M3 (1 or 0 at tensor level, the block share
    for sub-tensor MoR), one panel per arm."""
    plt = pyplot()
    order = tensor_order(pd.concat(decs, ignore_index=True))
    panels = []
    for dec in decs:
        sub = "e4m3_share" in dec and (dec.get("partition") == "subtensor").any()
        values, steps = _grid(dec, "e4m3_share" if sub else "e4m3", order)
        share = 100 * dec["e4m3"].mean()
        panels.append((f"{dec['method'].iloc[0]}\n{share:.1f}% E4M3", values, steps))
    # orange BF16 to purple E4M3: apart for every colour vision
    fig, axes, im = _tensor_heatmaps(plt, panels, order, dict(cmap="PuOr", vmin=0, vmax=1), max_columns=4)
    cbar = fig.colorbar(im, ax=axes, fraction=0.04, pad=0.02, ticks=[0, 0.5, 1])
    cbar.ax.set_yticklabels(["BF16", "0.5", "E4M3"])
    cbar.set_label("share of the tensor in E4M3 (sub-tensor MoR: of its blocks)")
    suptitle(fig, "Representation chosen per tensor and step (rows: each linear layer's six GEMM operands)")
    save_figure(fig, outputs)


# --------------------------------------------------------------------------- E4M3 share

def share_table(runs) -> pd.DataFrame:
    """Per MoR arm: the share of GEMM-operand decisions in E4M3 over all logged steps, overall, per
    layer type and per operand role (the paper's 98.38 % / 95.93 %); sub-tensor arms also give the
    share of blocks per format. Seeds pooled (every seed logs the same decisions)."""
    info = run_table(runs).set_index(["model", "method", "seed"])
    frames = [d for d in (decisions(r) for r in runs) if d is not None]
    cols = ["model", "method", "setting", "regime", "group_kind", "group", "e4m3_pct", "decisions", "runs",
            "block_e4m3_pct", "block_e5m2_pct", "block_bf16_pct"]
    if not frames:
        return pd.DataFrame(columns=cols)
    dec = pd.concat(frames, ignore_index=True)
    rows = []
    for (model, method), g in dec.groupby(["model", "method"], sort=False):
        first = info.loc[(model, method, g["seed"].iloc[0])]
        groupings = [("all", pd.Series("all", index=g.index)), ("layer type", g["layer_type"]), ("operand", g["role"])]
        for kind, key in groupings:
            order = {"all": ["all"], "layer type": list(TYPE_ORDER), "operand": list(ROLE_ORDER)}[kind]
            for name in [o for o in order if (key == o).any()]:
                sel = g[key == name]
                row = {"model": model, "method": method, "setting": first["setting"], "regime": first["regime"],
                       "group_kind": kind, "group": name, "e4m3_pct": 100 * sel["e4m3"].mean(),
                       "decisions": int(len(sel)), "runs": int(sel["seed"].nunique())}
                for fmt in ("e4m3", "e5m2", "bf16"):
                    col = f"{fmt}_share"
                    sub = col in sel and (sel.get("partition") == "subtensor").all()
                    row[f"block_{fmt}_pct"] = 100 * sel[col].mean() if sub else math.nan
                rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def plot_share(table: pd.DataFrame, outputs: list[str]) -> None:
    """Arms (rows) x groups (columns: all operands, each layer type, each operand role), each cell
    the share of GEMM-operand decisions in E4M3, printed in it; the colour spans 0-100 %."""
    plt = pyplot()
    groups = [g for g in ("all", *TYPE_ORDER, *ROLE_ORDER) if g in set(table["group"])]
    arms = list(dict.fromkeys(zip(table["model"], table["method"])))
    grid = np.full((len(arms), len(groups)), np.nan)
    labels = []
    for i, (model, method) in enumerate(arms):
        t = table[(table["model"] == model) & (table["method"] == method)].set_index("group")
        grid[i] = [t["e4m3_pct"].get(g, np.nan) for g in groups]
        first = t.iloc[0]
        name = method if table["model"].nunique() == 1 else f"{model} / {method}"
        labels.append(f"{name}: {first['setting']}, {first['regime']}")
    fig, ax = plt.subplots(figsize=figure_size(7.0, 1.3 + 0.27 * max(len(arms), 1)))
    if not arms:
        ax.text(0.5, 0.5, "no MoR arm logged telemetry", ha="center", va="center")
        ax.set_axis_off()
    else:
        im = ax.imshow(grid, cmap="Purples", vmin=0, vmax=100, aspect="auto")
        for i in range(len(arms)):
            for j in range(len(groups)):
                v = grid[i, j]
                if not np.isnan(v):
                    ax.text(j, i, f"{v:.1f}" if v < 99.95 else "100", ha="center", va="center", fontsize=7,
                            color="white" if v > 60 else "black")
        ax.set_xticks(range(len(groups)), [g.replace("attention out", "attn out") for g in groups])
        ax.xaxis.tick_top()
        ax.set_yticks(range(len(arms)), labels)
        ax.tick_params(length=0)
        ax.grid(False)
        for k in (1, 1 + sum(g in TYPE_ORDER for g in groups)):  # all | layer types | operand roles
            if 0 < k < len(groups):
                ax.axvline(k - 0.5, color="white", lw=3)
        for side in ax.spines.values():
            side.set_visible(False)
        fig.colorbar(im, ax=ax, label="E4M3 (%)", fraction=0.03, pad=0.02)
    ax.set_title("GEMM operands in E4M3 (%): overall, per layer type, per operand\n"
                 "paper: 98.38 % (per-channel MoR, config 1), 95.93 % (config 2)")
    save_figure(fig, outputs)


# --------------------------------------------------------------------------- loss tables

def arm_table(runs, window: float = TRAIN_WINDOW) -> pd.DataFrame:
    """One row per (model, method): losses over seeds and the gaps, in percent, to the BF16 arm
    with the same learning-rate regime; the overall E4M3 share for MoR arms."""
    per_run = run_table(runs, window)
    if per_run.empty:
        return per_run
    keys = ["model", "method"]
    first = per_run.groupby(keys, sort=False).first().reset_index()
    agg = per_run.groupby(keys, sort=False).agg(
        n=("seed", "count"), diverged=("status", lambda s: int((s == "diverged").sum())),
        train_loss=("train_loss", "mean"), val_loss=("val_loss", "mean")).reset_index()
    arms = first[keys + ["regime", "lr_schedule", "setting", "recipe", "partition", "block", "scale",
                         "threshold", "subtensor_mode"]].merge(agg, on=keys)
    base = arms[(arms["recipe"] == "bf16") & arms["partition"].isna()].drop_duplicates(["model", "regime"])
    base = base.set_index(["model", "regime"])
    for col in ("train_loss", "val_loss"):
        ref = [base[col].get((m, r), np.nan) for m, r in zip(arms["model"], arms["regime"])]
        arms[col.replace("_loss", "_gap_pct")] = 100 * (arms[col] - ref) / np.asarray(ref, dtype=float)
    share = share_table(runs)
    overall = share[share["group"] == "all"].set_index(["model", "method"])
    arms["e4m3_pct"] = [overall["e4m3_pct"].get((m, me), np.nan) for m, me in zip(arms["model"], arms["method"])]
    for fmt in ("e4m3", "e5m2", "bf16"):
        col = f"block_{fmt}_pct"
        arms[col] = [overall[col].get((m, me), np.nan) for m, me in zip(arms["model"], arms["method"])]
    return arms


def _first_regime(arms: pd.DataFrame) -> pd.DataFrame:
    return arms[arms["regime"] == "config 1"]


def _default_except(arms: pd.DataFrame, free: str | None) -> pd.Series:
    """Arms whose block, scale and threshold are MoR's defaults, except the ``free`` one."""
    d = _defaults()
    ok = pd.Series(True, index=arms.index)
    for key in ("block", "scale", "threshold"):
        if key != free:
            ok &= arms[key] == d[key]
    return ok


LOSS_COLUMNS = ["n", "diverged", "train_loss", "val_loss", "train_gap_pct", "val_gap_pct", "e4m3_pct"]


def main_table(arms: pd.DataFrame) -> pd.DataFrame:
    """Config 1: BF16, the FP8 baselines and tensor-level MoR under each partition (default
    threshold, block and scale), losses and gaps to BF16 in percent (the paper's Table: within 0.5 %)."""
    a = _first_regime(arms)
    d = _defaults()
    tensor_level = a["partition"].isin(["tensor", "block", "channel"])
    default = (a["scale"] == d["scale"]) & (a["threshold"] == d["threshold"])
    default &= (a["partition"] != "block") | (a["block"] == d["block"])  # a block size only for blocks
    keep = a["partition"].isna() | (tensor_level & default)
    return a[keep][["model", "method", "setting", *LOSS_COLUMNS]].reset_index(drop=True)


ABLATIONS = (("threshold", "threshold"), ("block size", "block"), ("scale", "scale"))


def ablation_table(arms: pd.DataFrame) -> pd.DataFrame:
    """Config 1: per-block MoR varying one setting at a time (threshold, block size, scale rule),
    and sub-tensor MoR two- vs three-way beside BF16; a group appears when it has a varied arm.
    val_vs_ref_pct and e4m3_vs_ref_pts compare each row with its group's reference (the default
    setting, BF16 for the sub-tensor group)."""
    a = _first_regime(arms)
    block, d = a[a["partition"] == "block"], _defaults()
    parts = []
    for name, key in ABLATIONS:
        g = block[_default_except(block, key)]
        if g[key].nunique() > 1:
            fmt = (lambda v: f"{100 * v:g}%") if key == "threshold" else str
            parts.append(g.assign(ablation=name, value=g[key].map(fmt), is_ref=g[key] == d[key]))
    sub = a[a["partition"] == "subtensor"]
    if len(sub):
        bf16 = a[(a["recipe"] == "bf16") & a["partition"].isna()]
        parts.append(pd.concat([bf16.assign(value="BF16", is_ref=True),
                                sub.assign(value=sub["subtensor_mode"], is_ref=False)]).assign(ablation="sub-tensor"))
    cols = ["ablation", "value", "model", "method", *LOSS_COLUMNS, "val_vs_ref_pct", "e4m3_vs_ref_pts",
            "block_e4m3_pct", "block_e5m2_pct", "block_bf16_pct"]
    if not parts:
        return pd.DataFrame(columns=cols)
    t = pd.concat(parts, ignore_index=True)
    # against the group's reference arm (the default setting; BF16 for sub-tensor MoR), same model
    ref = t[t["is_ref"]].drop_duplicates(["ablation", "model"]).set_index(["ablation", "model"])
    key = list(zip(t["ablation"], t["model"]))
    ref_val = np.array([ref["val_loss"].get(k, np.nan) for k in key], dtype=float)
    t["val_vs_ref_pct"] = 100 * (t["val_loss"] - ref_val) / ref_val
    t["e4m3_vs_ref_pts"] = t["e4m3_pct"] - np.array([ref["e4m3_pct"].get(k, np.nan) for k in key], dtype=float)
    return t[cols]


def lr_table(arms: pd.DataFrame) -> pd.DataFrame:
    """The arms trained under more than one learning-rate regime, side by side."""
    counts = arms.groupby(["model", "setting"])["regime"].transform("nunique")
    t = arms[counts > 1].sort_values(["model", "setting", "regime"], kind="stable")
    return t[["model", "setting", "regime", "lr_schedule", "method", *LOSS_COLUMNS]].reset_index(drop=True)


# --------------------------------------------------------------------------- CLI

def _write(df: pd.DataFrame, csv: str, md: str | None = None, note: str = "") -> None:
    write_text(csv, df.to_csv(index=False, float_format="%.6g"))
    if md:
        write_text(md, (note + "\n\n" if note else "") + (markdown_table(df) if len(df) else "(no rows at this scale)\n"))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["telemetry", "share", "tables"])
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--heatmap-method", default=None, help="arm whose telemetry the error heat map shows")
    ap.add_argument("--format-methods", nargs="*", default=None, help="arms of the format heat map")
    ap.add_argument("--train-window", type=float, default=TRAIN_WINDOW)
    for name in ("error-png", "error-pdf", "error-csv", "format-png", "format-pdf", "summary-csv", "summary-md",
                 "csv", "md", "png", "pdf", "main-csv", "main-md", "ablations-csv", "ablations-md", "lr-csv", "lr-md"):
        ap.add_argument(f"--{name}", default=None)
    args = ap.parse_args(argv)
    runs = load_runs(args.runs)
    if args.what == "telemetry":
        decs = {(r.method, r.seed): d for r in runs if (d := decisions(r)) is not None}
        if not decs:
            raise SystemExit("lowprec.report.mor telemetry: none of the runs has MoR telemetry "
                             "(method.telemetry_every on a MoR arm)")
        by_method = {}
        for (method, seed), d in sorted(decs.items(), key=lambda kv: kv[0][1]):
            by_method.setdefault(method, d)  # the lowest seed of each arm
        method = args.heatmap_method if args.heatmap_method in by_method else next(iter(by_method))
        heat = by_method[method]
        plot_error_heatmap(heat, [p for p in (args.error_png, args.error_pdf) if p])
        if args.error_csv:
            write_text(args.error_csv, rel_error_long(heat).to_csv(index=False, float_format="%.6g"))
        chosen = [m for m in (args.format_methods or list(by_method)) if m in by_method] or list(by_method)
        plot_format_heatmap([by_method[m] for m in chosen], [p for p in (args.format_png, args.format_pdf) if p])
        _write(rel_error_summary(list(decs.values())), args.summary_csv, args.summary_md,
               "Relative E4M3 error of every logged GEMM operand under each partition (percent of cells "
               "below 2.5 %, median, 95th percentile, maximum).")
    elif args.what == "share":
        table = share_table(runs)
        _write(table, args.csv, args.md, "Share of GEMM-operand decisions in E4M3 over the logged steps "
               "(paper: 98.38 % per-channel in config 1, 95.93 % in config 2).")
        if args.png or args.pdf:
            plot_share(table, [p for p in (args.png, args.pdf) if p])
    else:
        arms = arm_table(runs, args.train_window)
        _write(main_table(arms), args.main_csv, args.main_md,
               "Config 1: final train and validation loss per partition strategy against BF16 "
               "(gap in percent; paper: every MoR partition within 0.5 %).")
        _write(ablation_table(arms), args.ablations_csv, args.ablations_md,
               "Config 1 ablations of per-block MoR (one setting varied), and sub-tensor MoR beside BF16.")
        _write(lr_table(arms), args.lr_csv, args.lr_md,
               "The arms trained under both learning-rate regimes (gaps to BF16 of the same regime).")


if __name__ == "__main__":
    main()
