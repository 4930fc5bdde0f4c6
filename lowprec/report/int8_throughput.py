"""The INT8 fallback paper's throughput figure and table from the committed GPU GEMM benchmark
(``lowprec.bench.int8_gemm``): block INT8 against the group size K, the fallback GEMM against the
fallback ratio, with the BF16 and ``torch._int_mm`` baselines of the same run. Drawn by
``python -m lowprec.report.int8_fallback throughput``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ..io import provenance_path
from .figures import WIDTH, pyplot, save_figure, suptitle
from .markdown import markdown_table

GEMM_COLUMNS = ("sweep", "kind", "M", "N", "K", "group", "pattern", "fallback_ratio", "tflops",
                "speedup_vs_bf16")
# dense peak INT8 TOPS : BF16 TFLOPS with fp32 accumulation (brief section 3.3g)
PEAK_RATIO = {"H200": 2.0, "RTX 4090": 4.0}
# the fallback GEMM's rows, by the benchmark's kind: the second parts as training adds them
# (``second_parts: tail``, after the main loop) where a run measured them, else the kernel API's
# default (the sparse passes), which runs before the tail had
FALLBACK_KINDS = {"int8_fallback_tail": "second parts after the main loop",
                  "int8_fallback": "second parts in passes of their own"}


def read_gemm(path: str | Path) -> pd.DataFrame | None:
    """The committed GEMM benchmark, or None where it has not been measured; a file with other
    columns is an error (the figure would silently be wrong)."""
    path = Path(path)
    if not path.is_file():
        return None
    df = pd.read_csv(path)
    missing = [c for c in GEMM_COLUMNS if c not in df]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing} (written by lowprec.bench.int8_gemm)")
    return df


def throughput_table(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of the figure: BF16 / cuBLAS INT8 baselines, block INT8 per group size K (with its
    throughput relative to the smallest K), and the fallback GEMM per fallback ratio."""
    base = df[df["sweep"] == "baseline"].assign(series=lambda t: t["kind"])
    grp = df[(df["sweep"] == "group") & (df["kind"] == "int8_block")].copy()
    grp["series"] = "int8_block"
    smallest = grp.loc[grp.groupby("M")["group"].idxmin()].set_index("M")["tflops"]
    grp["rel_to_smallest_group"] = grp["tflops"] / grp["M"].map(smallest)
    ratio = df[df["sweep"] == "ratio"]
    kind = fallback_kind(ratio)
    ratio = ratio[ratio["kind"] == kind].assign(series="int8_fallback", implementation=FALLBACK_KINDS[kind])
    cols = ["series", "implementation", "M", "N", "K", "group", "pattern", "fallback_ratio", "tflops",
            "speedup_vs_bf16", "rel_to_smallest_group"]
    out = pd.concat([base, grp, ratio], ignore_index=True)
    return out.reindex(columns=cols).sort_values(["M", "series", "group", "pattern", "fallback_ratio"],
                                                 kind="stable", na_position="first").reset_index(drop=True)


def fallback_kind(ratio_rows: pd.DataFrame) -> str:
    """The benchmark kind whose rows are the figure's fallback GEMM (``FALLBACK_KINDS``, first measured)."""
    return next((k for k in FALLBACK_KINDS if (ratio_rows["kind"] == k).any()), "int8_fallback")


def throughput_markdown(table: pd.DataFrame, device: str, source: str) -> str:
    if table.empty:
        return f"No committed GEMM measurement ({source}).\n"
    lines = [f"GEMM throughput on {device} (TFLOP/s of useful work, M = N = K; {source}). "
             f"Dense INT8:BF16 peak is {PEAK_RATIO.get(device, math.nan):g}:1 here "
             f"(RTX 4090, the paper's GPU: {PEAK_RATIO['RTX 4090']:g}:1), so the ceiling of any INT8 speedup differs.", ""]
    grp = table[table["series"] == "int8_block"].pivot_table(index="M", columns="group", values="tflops")
    base = table[table["series"].isin(["bf16_matmul", "int_mm"])].pivot_table(index="M", columns="series", values="tflops")
    wide = pd.concat([base, grp.rename(columns=lambda k: f"block K={int(k)}")], axis=1).reset_index()
    wide["M"] = wide["M"].astype(int).astype(str)  # a label, not a number to format
    lines += ["Block INT8 against the group size K:", "", markdown_table(wide, 1).rstrip(), ""]
    fb = table[(table["series"] == "int8_fallback") & (table["pattern"] == "random")]
    if len(fb):
        fb = fb.assign(target=fb["fallback_ratio"].round(2))
        piv = fb.pivot_table(index=["M", "group"], columns="target", values="speedup_vs_bf16")
        piv.columns = [f"ρ={c:g}" for c in piv.columns]
        piv = piv.reset_index().astype({"M": int, "group": int}).astype({"M": str, "group": str})
        lines += [f"Fallback GEMM ({fb['implementation'].iloc[0]}), speedup against BF16 by fallback ratio ρ "
                  "(random blocks):", "", markdown_table(piv, 2).rstrip(), ""]
    return "\n".join(lines) + "\n"


def plot_throughput(table: pd.DataFrame, device: str, source: str, outputs: list[str]) -> None:
    """(a) block INT8 against the group size K at 2048/4096/8192, BF16 dashed; (b) the fallback
    GEMM against the fallback ratio (random blocks; K-group 128 solid, 32 dotted). One colour per
    matrix size; the line styles in a legend under the panels."""
    from matplotlib.lines import Line2D

    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.6))
    if table.empty:
        for ax in (a, b):
            ax.text(0.5, 0.5, f"not measured: {source}", ha="center", va="center", fontsize=8)
            ax.set_axis_off()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    sizes = sorted(table["M"].unique()) if len(table) else []
    for i, m in enumerate(sizes):
        c = colors[i % len(colors)]
        t = table[table["M"] == m]
        g = t[t["series"] == "int8_block"].sort_values("group")
        a.plot(g["group"], g["tflops"], marker="o", color=c)
        for ax in (a, b):
            for series, ls in (("bf16_matmul", "--"), ("int_mm", ":")):
                v = t[t["series"] == series]["tflops"]
                if len(v):
                    ax.axhline(float(v.iloc[0]), color=c, ls=ls, lw=1)
        fb = t[(t["series"] == "int8_fallback") & (t["pattern"] == "random")]
        for group, ls in ((128, "-"), (32, "-.")):
            s = fb[fb["group"] == group].sort_values("fallback_ratio")
            if len(s):
                b.plot(100 * s["fallback_ratio"], s["tflops"], marker=".", ls=ls, color=c)
    a.set_xscale("log", base=2)
    a.set_xlabel("group size K")
    a.set_title(f"(a) block INT8 against the group size K ({device})")
    b.set_xlabel("fallback ratio (% of activation blocks)")
    b.set_title("(b) fallback GEMM against the fallback ratio")
    for ax in (a, b):
        ax.set_ylabel("TFLOP/s (useful work)")
    if sizes:
        keys = [Line2D([], [], color=colors[i % len(colors)], lw=2, label=f"M = N = K = {m}") for i, m in enumerate(sizes)]
        keys += [Line2D([], [], color="0.3", marker="o", label="block INT8 (a)"),
                 Line2D([], [], color="0.3", ls="-", label="fallback, K-group 128 (b)"),
                 Line2D([], [], color="0.3", ls="-.", label="fallback, K-group 32 (b)"),
                 Line2D([], [], color="0.3", ls="--", label="BF16 cuBLAS"),
                 Line2D([], [], color="0.3", ls=":", label="INT8 _int_mm (no scales)")]
        fig.legend(handles=keys, loc="outside lower center", ncol=4)
    suptitle(fig, f"GEMM throughput on {device}; INT8:BF16 dense peak {PEAK_RATIO.get(device, math.nan):g}:1 "
                  f"(4:1 on the paper's RTX 4090)")
    save_figure(fig, outputs)


def device_of(gemm_path: Path) -> str:
    """The GPU that ran the benchmark (from its provenance beside the CSV), as PEAK_RATIO names it."""
    prov = provenance_path(gemm_path)
    gpu = json.loads(prov.read_text()).get("gpu", "") if prov.is_file() else ""
    return next((k for k in PEAK_RATIO if k.replace(" ", "").lower() in gpu.replace(" ", "").lower()), gpu or "GPU")
