"""The Snakemake DAG end to end at the smoke scale, in a temporary directory."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO

SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]


def _snakemake(args, cwd, check=True):
    proc = subprocess.run(SNAKEMAKE + args, cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.mark.slow
def test_smoke_dag_end_to_end(tmp_path):
    _snakemake(["--cores", "2", "--config", "scale=smoke"], tmp_path)
    res = tmp_path / "results"
    report = (res / "REPORT.md").read_text()
    for paper in ("gaussws", "int8_fallback", "mor"):
        for f in ("figures/loss_curves.png", "figures/loss_curves.pdf", "tables/final_loss.csv", "tables/final_loss.md"):
            assert (res / paper / "smoke" / f).stat().st_size > 0, (paper, f)
        assert f"(`{paper}`" in report
        table = pd.read_csv(res / paper / "smoke" / "tables" / "final_loss.csv")
        assert (table["n"] >= 1).all() and table["val_loss_mean"].notna().all()
    gw = res / "gaussws" / "smoke"
    for f in ("figures/exactness.png", "tables/exactness.csv", "tables/export.csv", "tables/overhead.csv",
              "tables/memory.csv", "tables/claims.csv"):
        assert (gw / f).stat().st_size > 0, f
    claims = pd.read_csv(gw / "tables" / "claims.csv")
    assert set(claims["claim"]) == {"stable_vs_bf16", "fp6_parameters", "nine_bit_limit", "overhead", "memory"}
    assert "## Verdicts" in report
    export = pd.read_csv(gw / "tables" / "export.csv")
    assert set(export["export"]) == {"none", "mxfp8", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"}
    models = {p.parent.parent.name for p in (res / "runs" / "smoke").glob("*/*/*/s0")}
    assert models == {"gpt2", "llama2", "nemotron"}
    # nothing left to do: outputs are complete and consistent
    assert "Nothing to be done" in _snakemake(["--cores", "1", "--config", "scale=smoke", "-n"], tmp_path).stdout + \
        _snakemake(["--cores", "1", "--config", "scale=smoke", "-n"], tmp_path).stderr
    _snakemake(["--config", "scale=smoke", "--report", "report.html"], tmp_path)
    html = (tmp_path / "report.html").read_text(errors="replace")
    assert "loss_curves.png" in html


def test_paper_scale_plans_without_error(tmp_path):
    out = _snakemake(["-n", "--cores", "1", "--config", "scale=paper"], tmp_path)
    text = out.stdout + out.stderr
    assert "llama2_1b" in text and "train" in text


def test_bad_config_key_is_named(tmp_path):
    out = _snakemake(["-n", "--cores", "1", "--config", "scale=smoke", "stepz=3"], tmp_path, check=False)
    assert out.returncode != 0 and "stepz" in out.stdout + out.stderr
