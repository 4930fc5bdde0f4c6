"""Keep README.md's results block equal to the committed result tables.

``python -m lowprec.report.readme`` rewrites the block between the markers; a test checks that the
README on disk equals what this would write, so the README never disagrees with ``results/``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .. import config as cfglib
from ..config import FINETUNE, PRETRAIN
from ..io import provenance_path, write_text
from .markdown import markdown_lines

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


SCALES = ("tiny", "small", "medium")  # the default (CPU) scale, the GPU reference, the papers' phenomena
# the scale the table gives a column of its own while its grid is trained in parts (issue: a `medium`
# scale): its verdict beside the row's, "–" for a claim that has no run there yet
COLUMN_SCALE = "medium"
# a decided verdict outranks an undecided one at any scale; between undecided ones the larger scale tells
# more (a phenomenon absent at `tiny` may be present, if too weak to decide, at `small`)
_RANK = {"reproduced": 2, "not reproduced": 2, "not exercised": 1, "inconclusive": 1, "not run at this scale": 0}
# Tables of a scale that carry a committed GPU measurement, not numbers of the scale's runs (the
# workflow reads them in pipelines/gaussws.smk, GW_GPU, and pipelines/int8_fallback.smk, I8_GEMM):
# a claim that reads such a table reports that measurement.
MEASUREMENT_TABLES = {("gaussws", "tables/memory.csv"): "gaussws/overhead_h200.csv",
                      ("int8_fallback", "tables/throughput.csv"): "int8_fallback/gemm_h200.csv"}


def _claims(results: Path, paper: str, scale: str):
    import pandas as pd

    path = results / paper / scale / "tables" / "claims.csv"
    return pd.read_csv(path, keep_default_na=False).set_index("claim") if path.is_file() else None


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ") if text != "" else "–"


def _gpu(record) -> str | None:
    """The first ``gpu`` named anywhere in a provenance record, as its model ('H100' for 'NVIDIA
    H100 80GB HBM3': the memory and its kind are in the provenance, the table has no room)."""
    if isinstance(record, dict):
        if isinstance(record.get("gpu"), str) and record["gpu"].strip():
            return record["gpu"].removeprefix("NVIDIA ").split()[0]
        record = list(record.values())
    if isinstance(record, list):
        for item in record:
            found = _gpu(item)
            if found:
                return found
    return None


def measured_on(results: Path, measurement: str) -> str:
    """'H200 benchmark' for a committed measurement (``results/<measurement>``, its device from the
    provenance beside it)."""
    prov = provenance_path(results / measurement)
    gpu = _gpu(json.loads(prov.read_text())) if prov.is_file() else None
    return f"{gpu or 'GPU'} benchmark"


def runs_of_scale(results: Path, scale: str, paper: str | None = None, arms: set | None = None) -> str:
    """'`small` (H200, 3 seeds)': the scale, where its committed runs (``paper``'s pre-training runs,
    or every experiment's) trained, and how many seeds an arm has committed (a range while a grid is
    committed in parts, e.g. '3-5 seeds'). A paper's count leaves out the one-seed cross-recipe
    matrix, which no claim reads. ``arms``: a claim's (PRETRAIN or FINETUNE, method) pairs
    (``claims.claim_arms``): only their runs count, fine-tuning runs included."""
    from ..cli import complete_runs

    def kind(d: Path):
        return next((k for k in (PRETRAIN, FINETUNE) if d.parents[2].name == cfglib.run_group(paper, k)), None)

    runs = [d for d in complete_runs(results, scale)
            if paper is None or ((kind(d), d.parent.name) in arms if arms else kind(d) == PRETRAIN)]
    devices = sorted({_gpu(json.loads((d / "provenance.json").read_text())) or "CPU" for d in runs})
    per_arm: dict[Path, int] = {}
    for d in runs:
        per_arm[d.parent] = per_arm.get(d.parent, 0) + 1
    if not runs:
        return f"`{scale}` (no committed run)"
    low, high = min(per_arm.values()), max(per_arm.values())
    seeds = f"{low}" if low == high else f"{low}-{high}"
    return f"`{scale}` ({', '.join(devices)}, {seeds} seed{'s' * (high != 1)})"


def number_source(results: Path, paper: str, claim: dict, scale: str) -> str:
    """Where a claim's number at ``scale`` comes from: a committed GPU measurement that the metric
    reads (directly, ``file: /...``, or through a table that carries it), or the scale's runs of
    the claim's arms."""
    from .claims import claim_arms

    metric = claim.get("metric", {})
    file = str(metric.get("file", ""))
    measurement = file.lstrip("/") if file.startswith("/") else MEASUREMENT_TABLES.get((paper, file))
    if measurement:
        return f"{measured_on(results, measurement)} ([{Path(measurement).name}](results/{measurement}))"
    return runs_of_scale(results, scale, paper, claim_arms(claim) if metric else None)


def verdict_rows(results: Path, papers: list[str]) -> list[dict]:
    """One row per claim at its most telling scale (a decided verdict over an undecided one, the
    larger scale on a tie): paper, claim, the paper's number, ours, where ours comes from, the
    verdict, why (the hand-written reason in a few words, its claims table's) and that scale."""
    rows = []
    for paper in papers:
        tables = {sc: _claims(results, paper, sc) for sc in SCALES}
        present = [t for t in tables.values() if t is not None]
        if not present:
            continue
        registry_path = cfglib.CONFIG_DIR / "claims" / f"{paper}.yaml"
        registry = {c["id"]: c for c in cfglib.load_yaml(registry_path).get("claims", [])} \
            if registry_path.is_file() else {}
        for claim in present[0].index:
            best, best_scale = None, None
            for sc in SCALES:
                t = tables[sc]
                if t is not None and claim in t.index:
                    v = t.loc[claim, "verdict"]
                    if best is None or _RANK.get(v, 0) >= _RANK.get(best, 0):
                        best, best_scale = v, sc
            row = tables[best_scale].loc[claim]
            ran = _RANK.get(best, 1) > 0
            source = number_source(results, paper, registry.get(claim, {}), best_scale) \
                if ran else "–"
            column = tables.get(COLUMN_SCALE)
            at_column = column.loc[claim, "verdict"] if column is not None and claim in column.index else ""
            rows.append({"paper": paper, "claim": claim, "paper_value": _cell(row["paper_value"]),
                         "ours": _cell(row["ours"] if ran else ""), "source": source, "verdict": best,
                         "scale": best_scale, "why": _cell(row.get("why", "")),
                         COLUMN_SCALE: _cell("" if _RANK.get(at_column, 0) == 0 else at_column)})
    return rows


def verdict_table(results: Path, papers: list[str], rows: list[dict] | None = None) -> list[str]:
    """The rows of ``verdict_rows`` (given, or read) as a markdown table."""
    return markdown_lines(["paper", "claim", "paper's number", "ours", "from", "verdict", f"`{COLUMN_SCALE}`", "why"],
                          ([r["paper"], r["claim"], r["paper_value"], r["ours"], r["source"], r["verdict"],
                            r[COLUMN_SCALE], r["why"]]
                           for r in (verdict_rows(results, papers) if rows is None else rows)))


def results_block(results: Path, scale: str = "tiny") -> str:
    papers = [p.stem for p in sorted((cfglib.CONFIG_DIR / "experiments").glob("*.yaml"))]
    rows = verdict_rows(results, papers)
    table = verdict_table(results, papers, rows)
    verdicts = [r["verdict"] for r in rows]
    counts = sorted(((verdicts.count(v), v) for v in set(verdicts)), key=lambda nv: (-nv[0], nv[1]))
    reports = ", ".join(f"[results/{Path(cfglib.report_path('results', sc)).name}]"
                        f"({cfglib.report_path('results', sc)}) (`{sc}`)" for sc in SCALES)
    parts = [BEGIN, "",
             f"**{len(verdicts)} claims: " + ", ".join(f"{n} {v}" for n, v in counts) + ".** "
             "One row per claim, at the scale that decides it (a decided verdict first, else the larger "
             f"scale); *from* says where our number comes from, *`{COLUMN_SCALE}`* its verdict at that scale, "
             "*why* the reason for a verdict (in full in the reports). Every "
             f"table and figure is in the reports: {reports}, or "
             "`snakemake --report report.html` (add `--config scale=small`).", "",
             *table, "", END]
    return "\n".join(parts)


def render(readme_text: str, results: Path, scale: str = "tiny") -> str:
    head, sep, rest = readme_text.partition(BEGIN)
    if not sep or END not in rest:
        raise ValueError(f"README.md has no {BEGIN} ... {END} block")
    return head + results_block(results, scale) + rest.split(END, 1)[1]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readme", default=str(cfglib.REPO_ROOT / "README.md"))
    ap.add_argument("--results", default=str(cfglib.REPO_ROOT / "results"))
    ap.add_argument("--scale", default="tiny")
    args = ap.parse_args(argv)
    path = Path(args.readme)
    write_text(path, render(path.read_text(), Path(args.results), args.scale))


if __name__ == "__main__":
    main()
