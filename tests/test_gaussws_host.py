"""The host-time benchmark of GaussWS's transforms (lowprec.bench.gaussws_host): the weights it
draws are the model's, and a run writes both paths' rows with provenance (no timing is asserted)."""

import csv
import json
import os
import subprocess
import sys

import torch

from lowprec.bench import gaussws_host as gh
from lowprec.bench.e2e_step import SHAPES
from lowprec.models import build_model


def test_weight_shapes_are_the_models_linear_weights():
    with torch.device("meta"):
        model = build_model({**SHAPES["llama_100m"]["model"], "layers": 2}, 512)
    blocks = [tuple(m.weight.shape) for name, m in model.named_modules()
              if isinstance(m, torch.nn.Linear) and ".layers." in f".{name}"]
    assert sorted(gh.linear_weight_shapes({**SHAPES["llama_100m"]["model"], "layers": 2})) == sorted(blocks)


def test_run_writes_both_paths_with_provenance(tmp_path):
    out = tmp_path / "host.csv"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    subprocess.run([sys.executable, "-m", "lowprec.bench.gaussws_host", "--steps", "2", "--warmup", "1",
                    "--out", str(out)], check=True, env=env, capture_output=True, text=True)
    rows = list(csv.DictReader(out.open()))
    assert [r["path"] for r in rows] == list(gh.PATHS)
    assert all(r["weights"] == "84" and float(r["host_ms"]) > 0 and len(r["host_ms_reps"].split(";")) == 2
               for r in rows)
    prov = json.loads((tmp_path / "host.provenance.json").read_text())
    assert "stubbed" in prov["note"] and prov["device"] == "cpu"
