"""The report's training-speed section: the committed end-to-end GPU benchmarks
(``results/bench/e2e_h200.csv``, the reference, and ``e2e_h100.csv`` beside it where committed; both
written by ``python -m lowprec.bench.e2e_step``), one row per arm and one column per model shape and
card, each cell the arm's tokens/s over compiled BF16's in the same run.

A committed file is merged from several GPU jobs, so each cell names the commit it was measured
at: a cell older than a later change to its arm's path is stale, and the reader has to see that.
Reads the CSVs with the standard library only (the report builder stays light)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ..io import provenance_path
from .markdown import markdown_lines
from .readme import measured_on

SPEED_CSV = "bench/e2e_h200.csv"  # under the results folder: the section exists when this one does
# every benchmark file the section shows, the reference first; a card's file adds its columns
SPEED_CSVS = (SPEED_CSV, "bench/e2e_h100.csv")
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


def speed_inputs(results: Path) -> list[Path]:
    """The committed benchmark files the section reads (none without the reference file)."""
    paths = [results / name for name in SPEED_CSVS]
    return [p for p in paths if p.is_file()] if paths[0].is_file() else []


def _read(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    missing = [c for c in COLUMNS if rows and c not in rows[0]]
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)} (a CSV of lowprec.bench.e2e_step has them)")
    return rows


def speed_lines(results: Path, link=str) -> list[str]:
    """The section's markdown lines, or none when no benchmark is committed under ``results``;
    ``link`` turns a CSV's path into the link the report can follow (relative to the report)."""
    paths = speed_inputs(results)
    if not paths:
        return []
    # each file's card by its model ("H100 80GB HBM3" -> "H100")
    files = [(p, _read(p), measured_on(results, str(p.relative_to(results))).split()[0]) for p in paths]
    columns = [(i, shape) for i, (_, rows, _) in enumerate(files)
               for shape in dict.fromkeys(r["shape"] for r in rows)]
    # the reference file's order (peers, then methods), then arms that only another file holds
    arms = list(dict.fromkeys(r["arm"] for _, rows, _ in files for r in rows))
    cells, sync_marked = {}, False
    for i, (path, rows, _) in enumerate(files):
        sync_timed = _sync_timed_runs(path)
        sync_marked = sync_marked or any(r["commit"] in sync_timed for r in rows)
        cells.update({(r["arm"], i, r["shape"]): _cell(r, r["commit"] in sync_timed) for r in rows})
    table = [[f"`{arm}`", *(cells.get((arm, i, s), "–") for i, s in columns)] for arm in arms]
    several = len(files) > 1
    header = [f"`{s}`{f' ({files[i][2]})' if several else ''}" for i, s in columns]
    sources = "; ".join(f"[{p.relative_to(results)}]({link(p)}){f' ({gpu})' if several else ''}"
                        for p, _, gpu in files)
    lines = ["## Training speed on the GPU", "",
             f"One training step's tokens/s over compiled BF16's in the same run ("
             f"{'' if several else measured_on(results, SPEED_CSV) + ', '}`python -m lowprec.bench.e2e_step`; "
             f"{sources}{', each' if several else ''} with its provenance). A file merges several GPU jobs: each "
             "cell names the commit it was measured at, and a cell older than a later change to its arm is stale. "
             "Unmarked cells ran compiled, on the arm's fast path where it has one.", "",
             *markdown_lines(["arm", *header], table), ""]
    if sync_marked:
        lines += [f"{_SYNC_TIMED} Timed by the wall clock between two syncs, before the benchmark timed the steady "
                  "state of training: each repeat paid for a first step that waits for every launch, which "
                  "lowered the arms that launch more before their first block (GaussWS at 1 B: 0.95x then, "
                  "0.99x in the steady state).", ""]
    return lines
