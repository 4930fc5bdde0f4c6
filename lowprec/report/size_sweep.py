"""The report's size-sweep section: the committed table of each size sweep of the scale
(``configs/sweeps/*.yaml`` whose ``scale`` is the report's; written by ``python -m lowprec.sweep
table``), with its answer and the GPUs its runs trained on, so that ``regenerate`` shows how far
the sweep has come from whatever is committed. Reads the CSV and its provenance with the standard
library only (the report builder stays light)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .. import config as lpc
from ..io import provenance_path
from ..sweep import scale_sweeps
from .markdown import fmt_cell, markdown_lines

# (column of the table, header, decimals or "sig"): the measures, whether each holds, and what is
# missing; the fallback ratio in two significant figures: at the smallest point it is ~1e-7, which
# decimals would print as a zero the rule (a) does not see
COLUMNS = (("point", "point", None), ("budget_steps", "steps", None), ("tokens_m", "tokens (M)", 1),
           ("fallback_ratio", "fallback ratio", "sig"), ("hot_block_early", "hottest/median 1st half", 1),
           ("hot_block_late", "2nd half", 1), ("e4m3_pct", "E4M3 %", 2), ("loss_gap", "loss gap", 4),
           ("seed_sd", "seed sd", 4), ("a_fallback_rising", "(a)", None), ("a_seeds", "(a) seeds", None),
           ("b_mor_bf16", "(b)", None),
           ("c_curves_separate", "(c)", None), ("runs_missing", "runs missing", None))


def _table_path(sweep: dict, results: Path) -> Path:
    """The sweep's table under ``results`` (its file names it under the default results folder)."""
    table = Path(sweep["table"])
    return results.joinpath(*table.parts[1:]) if table.parts and table.parts[0] == "results" else table


def sweep_tables(results: Path, scale: str) -> list[tuple[Path, Path]]:
    """(sweep file, its committed table) for each sweep of ``scale`` whose table exists."""
    tables = ((path, _table_path(sweep, results)) for path, sweep in scale_sweeps(scale))
    return [(path, table) for path, table in tables if table.is_file()]


def _cell(value: str, digits) -> str:
    if value == "":
        return "–"
    if digits is None:
        return {"True": "yes", "False": "no"}.get(value, value.removesuffix(".0"))
    if digits == "sig":
        v = float(value)
        return fmt_cell(v) if v != v else "0" if v == 0 else f"{v:.2g}"
    return fmt_cell(float(value), digits)


def sweep_lines(results: Path, scale: str, link=str) -> list[str]:
    """The section's markdown lines (none without a committed sweep table of the scale); ``link``
    turns a file's path into the link the report can follow."""
    lines = []
    for sweep_path, table in sweep_tables(results, scale):
        with table.open(newline="") as f:
            rows = list(csv.DictReader(f))
        prov_path = provenance_path(table)
        prov = json.loads(prov_path.read_text()) if prov_path.is_file() else {}
        gpus = sorted({r["gpus"] for r in rows if r.get("gpus")})
        rel = sweep_path.relative_to(lpc.CONFIG_DIR.parent)
        lines += [f"## Size sweep (`{rel}`)", "",
                  f"{prov.get('answer', 'no provenance beside the table')}. Per point and token budget: (a) the "
                  "fallback ratio of the GLU model's INT8 fallback runs and whether it rises in the second half "
                  "(pooled over the seeds; \"(a) seeds\": in how many it holds alone), with its precursor, the "
                  "down-projection input's hottest block over the median one (the default rule falls back above 8), "
                  "(b) the E4M3 share of per-tensor MoR, (c) GaussWS's validation loss minus BF16's against the "
                  "BF16 seeds' spread ([the table](" + link(table) + ") holds parameters and tokens/s too; "
                  f"its provenance names each run's commit and device; trained on {', '.join(gpus) or 'no GPU yet'}).",
                  "", *markdown_lines([h for _, h, _ in COLUMNS],
                                      [[_cell(r.get(c, ""), d) for c, _, d in COLUMNS] for r in rows]), ""]
    return lines
