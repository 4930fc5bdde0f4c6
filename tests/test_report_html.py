"""`snakemake --report report.html` on the committed results of a scale, as on a fresh clone (no
.snakemake metadata, no reuse_runs given): every table and figure of the scale is in the report with
a caption, a table's caption holds the table, and the log says once, not per file, that the files
carry no Snakemake metadata."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

RESULTS = REPO / "results"


def _copy_committed(dest, scale):
    """The committed run folders and outputs of ``scale`` (what a clone holds), with fresh file times."""
    src = RESULTS
    shutil.copytree(src / "runs" / scale, dest / "results" / "runs" / scale,
                    ignore=shutil.ignore_patterns("checkpoints", "logs", "wandb"))
    for out in src.glob(f"*/{scale}"):
        if out.parent.name != "runs":
            shutil.copytree(out, dest / "results" / out.parent.name / scale)
    for report in src.glob("REPORT*.md"):
        shutil.copy(report, dest / "results" / report.name)


def _report_results(html: str) -> dict:
    """The report's results (path -> name, caption, ...), as the HTML embeds them."""
    m = re.search(r'\bvar results = (\{"results/.*?\});?\n', html)
    assert m, "no results in the report"
    return json.loads(m.group(1))


@pytest.mark.parametrize("scale", ["tiny", "small"])
def test_report_holds_every_table_and_figure_of_the_scale(scale, tmp_path):
    _copy_committed(tmp_path, scale)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--report", "report.html",
           "--config", f"scale={scale}"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert log.count("metadata") <= 1, log[-3000:]   # one line, not one per file
    results = _report_results((tmp_path / "report.html").read_text())
    tables = sorted(RESULTS.glob(f"*/{scale}/tables/*"))
    figures = sorted(RESULTS.glob(f"*/{scale}/figures/*.png"))
    assert tables and figures
    for path in tables:  # a .md table is the text form of its .csv: the report holds the CSV
        key = path.relative_to(REPO).with_suffix(".csv").as_posix()
        assert key in results, f"table {path.relative_to(REPO)} is not in the report"
    for path in figures:
        assert path.relative_to(REPO).as_posix() in results, f"figure {path.relative_to(REPO)} is not in the report"
    for key, entry in results.items():
        caption = entry.get("caption") or ""
        assert caption.strip() and "system-message" not in caption, f"{key}: caption {caption[:300]!r}"
    # the caption of a table holds it: the final-loss table of each paper, row by row
    for path in RESULTS.glob(f"*/{scale}/tables/final_loss.md"):
        caption = results[path.with_suffix(".csv").relative_to(REPO).as_posix()]["caption"]
        first_row = path.read_text().splitlines()[2]
        assert first_row.replace("&", "&amp;") in caption.replace("&gt;", ">").replace("&lt;", "<"), first_row


def test_report_names_the_outputs_it_lacks(tmp_path):
    _copy_committed(tmp_path, "tiny")
    (tmp_path / "results" / "mor" / "tiny" / "tables" / "ablations.csv").unlink()
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--report", "report.html"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "results/mor/tiny/tables/ablations.csv" in log, log[-3000:]
    assert "snakemake regenerate --forceall --cores all --config scale=tiny reuse_runs=true" in log
    assert not (tmp_path / "report.html").exists()
