"""The Snakemake DAG end to end at the smoke scale, in a temporary directory."""

import json
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
    report = (res / "REPORT_smoke.md").read_text()  # REPORT.md is the default scale's
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
    for section in report.split("\n## ")[1:]:   # a figure and its table share one section per paper
        headings = [line for line in section.splitlines() if line.startswith("### ")]
        assert len(headings) == len(set(headings)), headings
    export = pd.read_csv(gw / "tables" / "export.csv")
    assert set(export["export"]) == {"none", "mxfp8", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"}
    i8 = res / "int8_fallback" / "smoke"
    for f in ("figures/outliers.png", "tables/outliers.csv", "tables/outlier_contrast.csv",
              "figures/fallback_heatmap.png", "figures/fallback_sweep.png", "tables/fallback_ratio.csv",
              "tables/fallback_summary.csv", "tables/gap_vs_bf16.csv", "figures/finetune_curves.png",
              "tables/finetune.csv", "figures/throughput.png", "tables/throughput.csv"):
        assert (i8 / f).stat().st_size > 0, f
    summary = pd.read_csv(i8 / "tables" / "fallback_summary.csv")
    fb = summary[summary["method"].str.startswith("int8_fallback")]
    assert set(fb["rule"]) == {"absmax", "topk", "error", "dynamic"}  # smoke exercises every rule
    assert fb["fallback_ratio"].between(0, 1).all() and (fb["telemetry_steps"] >= 1).all()
    ratio = pd.read_csv(i8 / "tables" / "fallback_ratio.csv")
    assert set(ratio["gemm"]) == {"fprop", "wgrad"} and set(ratio["operand"]) == {"x"}
    assert set(pd.read_csv(i8 / "tables" / "outliers.csv")["model"]) == {"llama2", "gpt2"}
    ft = pd.read_csv(i8 / "tables" / "finetune.csv")
    assert set(ft["method"]) == {"bf16", "int8_block", "int8_rowwise", "int8_fallback"}
    assert ft["val_loss_mean"].notna().all()
    ft_prov = json.loads((res / "runs/smoke/int8_fallback_finetune/llama2/int8_fallback/s0/provenance.json").read_text())
    assert ft_prov["init_from"]["path"].endswith("int8_fallback/llama2/bf16/s0/checkpoints/last.ckpt")
    for f in ("outliers.csv", "outlier_ccdf.csv"):  # per-run evaluation, kept for regenerating without checkpoints
        assert (res / "runs/smoke/int8_fallback/llama2/bf16/s0" / f).stat().st_size > 0, f
    i8_claims = pd.read_csv(i8 / "tables" / "claims.csv")
    assert len(i8_claims) == 9 and "end_to_end_speedup" in set(i8_claims["claim"])
    assert "### Fallback heatmap" in report and "### Outlier contrast" in report
    mr = res / "mor" / "smoke"
    for f in ("figures/rel_error_heatmap.png", "figures/format_heatmap.png", "figures/e4m3_share.png",
              "tables/rel_error.csv", "tables/rel_error_summary.csv", "tables/e4m3_share.csv",
              "tables/loss_by_partition.csv", "tables/ablations.csv", "tables/lr_regimes.csv"):
        assert (mr / f).stat().st_size > 0, f
    share = pd.read_csv(mr / "tables" / "e4m3_share.csv")
    overall = share[share["group"] == "all"]
    assert set(overall["method"]) == {"mor_block", "mor_sub_three_way", "mor_block_th050", "mor_channel_cfg2"}
    assert overall["e4m3_pct"].between(0, 100).all()
    assert {"QKV", "attention out", "FC1", "FC2", "X", "W", "dY"} <= set(share["group"])
    assert set(pd.read_csv(mr / "tables" / "rel_error.csv")["partition"]) == {"tensor", "block", "channel"}
    assert set(pd.read_csv(mr / "tables" / "ablations.csv")["ablation"]) == {"threshold", "sub-tensor"}
    assert set(pd.read_csv(mr / "tables" / "lr_regimes.csv")["regime"]) == {"config 1", "config 2"}
    mor_claims = pd.read_csv(mr / "tables" / "claims.csv").set_index("claim")
    assert mor_claims.loc["e4m3_share_config2", "verdict"] != "not run at this scale"
    assert mor_claims.loc["linear_speedup", "ours"].endswith("x")  # the committed H200 benchmark
    assert "### Rel error heatmap" in report and "### Loss by partition" in report
    models = {p.parent.parent.name for p in (res / "runs" / "smoke").glob("*/*/*/s0")}
    assert models == {"gpt2", "llama2", "nemotron"}
    # nothing left to do: outputs are complete and consistent
    dry = _snakemake(["--cores", "1", "--config", "scale=smoke", "-n"], tmp_path)
    assert "Nothing to be done" in dry.stdout + dry.stderr
    _snakemake(["--config", "scale=smoke", "--report", "report.html"], tmp_path)
    html = (tmp_path / "report.html").read_text(errors="replace")
    assert "loss_curves.png" in html


def test_data_target_plans_every_dataset_and_nothing_else(tmp_path):
    """`snakemake data`: every prepared dataset of the grid, the one encoded with another's tokenizer
    after it, and no training (the data step alone, for a training machine without network)."""
    out = _snakemake(["data", "-n", "--config", "scale=medium"], tmp_path).stdout
    table = out[out.index("Job stats"):].split("total")[0]
    jobs = dict(line.split() for line in table.splitlines()[3:] if line.strip())
    assert jobs == {"prepare_data": "2", "data": "1"}, table


def test_paper_scale_plans_without_error(tmp_path):
    out = _snakemake(["-n", "--cores", "1", "--config", "scale=paper"], tmp_path)
    text = out.stdout + out.stderr
    assert "llama2_1b" in text and "train" in text


def test_bad_config_key_is_named(tmp_path):
    out = _snakemake(["-n", "--cores", "1", "--config", "scale=smoke", "stepz=3"], tmp_path, check=False)
    assert out.returncode != 0 and "stepz" in out.stdout + out.stderr


@pytest.mark.parametrize("file, old, new, config, message", [
    ("experiments/mor.yaml", "mor_block: {recipe: mor, partition: block,", "mor_block: {recipe: mor, partition: block, thresold: 0.05,",
     [], "run config mor nemotron/mor_block/s0: experiment mor, methods.mor_block: method (mor): unknown key(s) ['thresold']"),
    ("scales/smoke.yaml", "seq_len: 32", "seq_len: 96", [],
     "train.seq_len=96 is longer than model.max_seq_len=64 of model"),
    ("scales/smoke.yaml", "batch_size: 4", "batch_size: 1048576", ["gpu_memory_gib=80"],
     "train.batch_size=1048576 x train.seq_len=32 needs at least"),
])
def test_bad_run_config_stops_the_dry_run(file, old, new, config, message, tmp_path):
    """The start-up check: `snakemake -n` on a temporary config fails with one line naming the key."""
    import os
    import shutil

    shutil.copytree(REPO / "configs", tmp_path / "configs")
    path = tmp_path / "configs" / file
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    proc = subprocess.run(SNAKEMAKE + ["-n", "--cores", "1", "--config", "scale=smoke", *config], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "LOWPREC_CONFIGS": str(tmp_path / "configs")})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "rule train" not in out, out[-3000:]
    line = next((ln for ln in out.splitlines() if message in ln), None)
    assert line is not None and line.startswith("run config "), out[-3000:]
