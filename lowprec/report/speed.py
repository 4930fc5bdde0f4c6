"""The report's training-speed section: the committed end-to-end GPU benchmark
(``results/bench/e2e_h200.csv``, written by ``python -m lowprec.bench.e2e_step``), one row per arm
and one column per model shape, each cell the arm's tokens/s over compiled BF16's in the same run.

The committed file is merged from several GPU jobs, so each cell names the commit it was measured
at: a cell older than a later change to its arm's path is stale, and the reader has to see that.
Reads the CSV with the standard library only (the report builder stays light)."""

from __future__ import annotations

import csv
from pathlib import Path

from .markdown import markdown_lines
from .readme import measured_on

SPEED_CSV = "bench/e2e_h200.csv"  # under the results folder
COLUMNS = ("shape", "arm", "path", "ratio_vs_bf16_compiled", "commit")
# how an arm ran, where it is not the compiled fast path every ratio means by default (other paths,
# 'eager' and 'compiled emulation', are named as the benchmark writes them)
_PATHS = {"compiled": "", "cudagraphs": "CUDA graphs"}


def _cell(row: dict) -> str:
    how = _PATHS.get(row["path"], row["path"])
    if row["arm"] == "bf16_eager":
        how = ""  # the arm is the eager path
    return f"{row['ratio_vs_bf16_compiled']}x{f', {how}' if how else ''} `{row['commit'][:7]}`"


def speed_lines(results: Path, link=str) -> list[str]:
    """The section's markdown lines, or none when no benchmark is committed under ``results``;
    ``link`` turns the CSV's path into the link the report can follow (relative to the report)."""
    path = results / SPEED_CSV
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    missing = [c for c in COLUMNS if rows and c not in rows[0]]
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)} (a CSV of lowprec.bench.e2e_step has them)")
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    arms = list(dict.fromkeys(r["arm"] for r in rows))  # the benchmark's order: peers, then methods
    cells = {(r["arm"], r["shape"]): _cell(r) for r in rows}
    table = [[f"`{arm}`", *(cells.get((arm, s), "–") for s in shapes)] for arm in arms]
    return ["## Training speed on the GPU", "",
            f"One training step's tokens/s over compiled BF16's in the same run ({measured_on(results, SPEED_CSV)}, "
            f"`python -m lowprec.bench.e2e_step`; [{SPEED_CSV}]({link(path)}) with its provenance). The file merges "
            "several GPU jobs: each cell names the commit it was measured at, and a cell older than a later "
            "change to its arm is stale. Unmarked cells ran compiled, on the arm's fast path where it has one.", "",
            *markdown_lines(["arm", *(f"`{s}`" for s in shapes)], table), ""]
