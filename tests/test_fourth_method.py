"""A fourth method through the method contract alone (docs/adding-a-method.md): tests/fourth_method/
holds its module (fp8_sr.py: FP8 with stochastically rounded gradients), its experiment config and
its claims file, and installing it is one entry point of the group ``lowprec.methods``. Nothing of
lowprec/, configs/ or pipelines/ changes: the configs are a copy with the two files added
(LOWPREC_CONFIGS), the module is found on the path, and the workflow trains it at the smoke scale
beside BF16 and gives its loss table and claim verdicts."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from conftest import REPO

HERE = REPO / "tests" / "fourth_method"


def _install(site: Path) -> None:
    """What ``pip install`` of a package holding fp8_sr.py and declaring
    ``[project.entry-points."lowprec.methods"] fp8_sr = "fp8_sr"`` puts on the path."""
    shutil.copy(HERE / "fp8_sr.py", site)
    dist = site / "fp8_sr-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fp8-sr\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[lowprec.methods]\nfp8_sr = fp8_sr\n")


def _env(tmp_path: Path) -> dict:
    configs = tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs)
    for sub in ("experiments", "claims"):
        shutil.copy(HERE / "configs" / sub / "fp8_sr.yaml", configs / sub / "fp8_sr.yaml")
    site = tmp_path / "site"
    site.mkdir()
    _install(site)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "LOWPREC_CONFIGS": str(configs), "PYTHONPATH": path}


def _run(args, cwd, env):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def test_the_core_finds_the_method_and_checks_its_keys(tmp_path):
    code = """
import json
from lowprec.recipes import recipe_from_config, registry
reg = registry()
r = recipe_from_config({"name": "fp8_sr", "recipe": "fp8_sr", "include": ["*.mlp.*"]})
errors = []
for bad in ({"recipe": "fp8_sr", "grad_fmt": "e5m2"}, {"recipe": "fp8_sr", "grad_format": "e3m2"}):
    try:
        recipe_from_config(bad)
    except ValueError as e:
        errors.append(str(e))
print(json.dumps({"module": reg.module_of["fp8_sr"], "spec": r.to_dict(), "errors": errors}))
"""
    env = _env(tmp_path)
    out = json.loads(_run([sys.executable, "-c", code], tmp_path, env).strip().splitlines()[-1])
    assert out["module"] == "fp8_sr"
    spec = out["spec"]
    assert spec["name"] == "fp8_sr" and spec["fprop"]["a"]["fmt"] == "e4m3" and spec["fprop"]["a"]["rounding"] == "nearest"
    for gemm in ("dgrad", "wgrad"):
        assert spec[gemm]["a"]["fmt"] == "e5m2" and spec[gemm]["a"]["rounding"] == "stochastic"
    assert out["errors"][0].startswith("method (fp8_sr): unknown key(s) ['grad_fmt']; its keys: ['grad_format']")
    assert out["errors"][1] == "method (fp8_sr): grad_format must be one of ('e5m2', 'e4m3'), got 'e3m2'"
    listing = _run([sys.executable, "-m", "lowprec", "recipes"], tmp_path, env)
    row = next(line for line in listing.splitlines() if line.startswith("fp8_sr "))
    assert "paper (fp8_sr)" in row and "E5M2 gradients stochastically rounded" in row


@pytest.mark.slow
def test_the_workflow_trains_it_and_gives_its_loss_table_and_verdicts(tmp_path):
    env = _env(tmp_path)
    _run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "2", "fp8_sr",
          "--config", "scale=smoke", "papers=[fp8_sr]"], tmp_path, env)
    runs = tmp_path / "results" / "runs" / "smoke" / "fp8_sr" / "gpt2"
    final = {}
    for method in ("bf16", "fp8_sr"):
        for seed in (0, 1):
            prov = json.loads((runs / method / f"s{seed}" / "provenance.json").read_text())
            assert prov["status"] == "completed" and prov["method"]["recipe"] == method
            final[method, seed] = prov["final_val_loss"]
    assert prov["method"]["recipe_spec"]["dgrad"]["a"]["rounding"] == "stochastic"

    tables = tmp_path / "results" / "fp8_sr" / "smoke" / "tables"
    loss = pd.read_csv(tables / "final_loss.csv").set_index("method")
    assert list(loss.index) == ["bf16", "fp8_sr"] and (loss["n"] == 2).all()
    for method in ("bf16", "fp8_sr"):
        assert loss.loc[method, "val_loss_mean"] == pytest.approx((final[method, 0] + final[method, 1]) / 2, abs=1e-5)
    assert "E5M2 gradients stochastically rounded" in loss.loc["fp8_sr", "numerics"]

    # the claim's verdict against an independent paired t-test of the per-seed gaps (margin 5 % of BF16's mean)
    d = [final["fp8_sr", s] - final["bf16", s] for s in (0, 1)]
    margin = 0.05 * (final["bf16", 0] + final["bf16", 1]) / 2
    se = stats.tstd(d) / 2 ** 0.5
    p_ok, p_bad = stats.t.cdf((sum(d) / 2 - margin) / se, 1), stats.t.sf((sum(d) / 2 - margin) / se, 1)
    expected = "reproduced" if p_ok < 0.05 else "not reproduced" if p_bad < 0.05 else "inconclusive"
    claim = pd.read_csv(tables / "claims.csv").set_index("claim").loc["loss_vs_bf16"]
    assert f"paired p={p_ok:.3g} over 2 seeds" in claim["detail"]
    if expected == "inconclusive":
        assert claim["verdict"] == "inconclusive"
    else:  # smoke numbers decide nothing: the registry says where the claim is meaningful
        assert claim["verdict"] == "inconclusive" and f"{expected} at smoke, meaningful at small" in claim["detail"]
    assert (tmp_path / "results" / "fp8_sr" / "smoke" / "figures" / "loss_curves.png").stat().st_size > 0
