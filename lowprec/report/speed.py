"""The report's training-speed section: the committed end-to-end GPU benchmark
(``results/bench/e2e_h200.csv``, written by ``python -m lowprec.bench.e2e_step``), one row per arm
and one column per model shape, each cell the arm's tokens/s over compiled BF16's in the same run.

The committed file is merged from several GPU jobs, so each cell names the commit it was measured
at: a cell older than a later change to its arm's path is stale, and the reader has to see that.
Reads the CSV with the standard library only (the report builder stays light)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ..io import provenance_path
from .markdown import markdown_lines
from .readme import measured_on

SPEED_CSV = "bench/e2e_h200.csv"  # under the results folder
COLUMNS = ("shape", "arm", "path", "ratio_vs_bf16_compiled", "commit")
# how an arm ran, where it is not the compiled fast path every ratio means by default (other paths,
# 'eager' and 'compiled emulation', are named as the benchmark writes them)
_PATHS = {"compiled": "", "cudagraphs": "CUDA graphs"}


# a cell of a run that timed the steps between two syncs by the wall clock (before the benchmark
# recorded its timer): each repeat paid for a first step that waits for every launch
_SYNC_TIMED = "†"


def _cell(row: dict, sync_timed: bool) -> str:
    how = _PATHS.get(row["path"], row["path"])
    if row["arm"] == "bf16_eager":
        how = ""  # the arm is the eager path
    mark = _SYNC_TIMED if sync_timed else ""
    return f"{row['ratio_vs_bf16_compiled']}x{mark}{f', {how}' if how else ''} `{row['commit'][:7]}`"


def _sync_timed_runs(path: Path) -> set:
    """Commits of the runs in the benchmark's provenance that name no timer (they timed between two
    syncs); a run it does not list is not marked."""
    prov = provenance_path(path)
    runs = json.loads(prov.read_text()).get("runs", []) if prov.is_file() else []
    return {r["commit"] for r in runs if not r.get("timer")}


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
    sync_timed = _sync_timed_runs(path)
    cells = {(r["arm"], r["shape"]): _cell(r, r["commit"] in sync_timed) for r in rows}
    table = [[f"`{arm}`", *(cells.get((arm, s), "–") for s in shapes)] for arm in arms]
    lines = ["## Training speed on the GPU", "",
             f"One training step's tokens/s over compiled BF16's in the same run ({measured_on(results, SPEED_CSV)}, "
             f"`python -m lowprec.bench.e2e_step`; [{SPEED_CSV}]({link(path)}) with its provenance). The file merges "
             "several GPU jobs: each cell names the commit it was measured at, and a cell older than a later "
             "change to its arm is stale. Unmarked cells ran compiled, on the arm's fast path where it has one.", "",
             *markdown_lines(["arm", *(f"`{s}`" for s in shapes)], table), ""]
    if any(r["commit"] in sync_timed for r in rows):
        lines += [f"{_SYNC_TIMED} Timed by the wall clock between two syncs, before the benchmark timed the steady "
                  "state of training: each repeat paid for a first step that waits for every launch, which "
                  "lowered the arms that launch more before their first block (GaussWS at 1 B: 0.95x then, "
                  "0.99x in the steady state).", ""]
    return lines
