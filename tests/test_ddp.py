"""Multi-process training: 2 CPU processes (gloo, Lightning DDP) against 1 process with the same
global batch.

Tolerance: per-step train and validation losses agree to 2e-4 absolute (losses are about 6). The
two runs see the same token windows and the same initial weights; the only difference is that
the gradient is the average of two half-batch gradients (all-reduce) instead of one full-batch
mean, so fp32 sums are taken in a different order (about 1e-7 relative). Adam carries that into
the weights over the few steps, and for a quantized recipe an operand that lies on a rounding
boundary may flip by one INT8 level. Measured here: 1e-6 (bf16), 2.4e-5 (int8_rowwise, whose
per-row activation and gradient scales and per-tensor weight scale are the same however the batch
is split). A wrong split (both ranks on the same half batch) moved the loss by 1e-2 to 5e-2.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import smoke_run_config
from lowprec import train
from lowprec.io import write_yaml

REPO = Path(__file__).resolve().parents[1]
TOL = 2e-4
STEPS = dict(max_steps=6, log_every=1, val_every=3, ckpt_every=3, threads=1)


def _two_process_run(cfg, tmp_path):
    path = tmp_path / "ddp.yaml"
    write_yaml(path, cfg)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("MASTER_PORT", None)  # Lightning picks a free port
    proc = subprocess.run([sys.executable, "-m", "lowprec.train", "--config", str(path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _pair(paper, model, method, data, tmp_path, **method_opts):
    """(1-process run folder, 2-process run folder) of the same run config."""
    one = smoke_run_config(paper, model, method, data, tmp_path / "one", accelerator="cpu", devices=1, **STEPS)
    two = smoke_run_config(paper, model, method, data, tmp_path / "two", accelerator="cpu", devices=2,
                           strategy="ddp", **STEPS)
    for cfg in (one, two):
        cfg["method"].update(method_opts)
    train.run(one)
    _two_process_run(two, tmp_path)
    return [tmp_path / r / f"runs/smoke/{paper}/{model}/{method}/s0" for r in ("one", "two")]


def _assert_same_losses(a, b):
    ma, mb = pd.read_csv(a / "metrics.csv"), pd.read_csv(b / "metrics.csv")
    for col in ("train_loss", "val_loss"):
        la = ma.dropna(subset=[col]).set_index("step")[col]
        lb = mb.dropna(subset=[col]).set_index("step")[col]
        assert list(la.index) == list(lb.index) and len(la) >= 2, col
        assert (la - lb).abs().max() < TOL, f"{col}: 1 process {la.tolist()} vs 2 processes {lb.tolist()}"
    assert list(ma["tokens"].dropna()) == list(mb["tokens"].dropna())  # the global batch, not per rank


def test_ddp_two_processes_match_one(prepared_data, tmp_path):
    one, two = _pair("baselines", "gpt2", "bf16", prepared_data, tmp_path)
    _assert_same_losses(one, two)
    # rank zero alone writes: one metrics.csv, and no rank-suffixed copies
    assert sorted(p.relative_to(two).as_posix() for p in two.rglob("*.csv")) == ["metrics.csv"]
    p1, p2 = (json.loads((d / "provenance.json").read_text()) for d in (one, two))
    assert (p2["world_size"], p2["strategy"], p2["status"]) == (2, "ddp", "completed")
    assert p2["tokens_seen"] == p1["tokens_seen"] and p2["parameters"] == p1["parameters"]
    # the final checkpoint of the DDP run loads into one process and gives the logged loss
    from lowprec.evaluate import load_trained, validation_loss

    module, cfg, data = load_trained(two)
    assert validation_loss(module, cfg, data) == pytest.approx(p2["final_val_loss"], abs=1e-5)


def test_ddp_quantized_recipe_with_telemetry(prepared_data, tmp_path):
    one, two = _pair("baselines", "gpt2", "int8_rowwise", prepared_data, tmp_path, telemetry_every=2)
    _assert_same_losses(one, two)
    t1, t2 = pd.read_csv(one / "telemetry.csv"), pd.read_csv(two / "telemetry.csv")
    key = ["step", "layer", "gemm", "operand"]
    assert len(t2) and not t2.duplicated(key).any()  # rank zero's rows only, once each
    assert t2[key].values.tolist() == t1[key].values.tolist()
    # the weight is the same tensor on every rank: its statistics equal the 1-process run's
    w1, w2 = t1[t1["operand"] == "w"], t2[t2["operand"] == "w"]
    assert len(w1) and (w1["amax"].values - w2["amax"].values).__abs__().max() < 1e-4


def test_global_batch_must_divide_over_ranks(prepared_data, tmp_path):
    from lowprec.config import ConfigError

    cfg = smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path, accelerator="cpu", devices=3,
                           strategy="ddp", batch_size=4)
    with pytest.raises(ConfigError, match=r"train.batch_size=4 is the global batch .* = 3"):
        train.run(cfg)


# --------------------------------------------------------------------------- cluster and GPU profiles

def _plan(profile, tmp_path, *config):
    """`snakemake -n -p --profile configs/profiles/<profile>`: the planned train jobs' resources and commands."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-n", "-p",
           "--profile", str(REPO / "configs" / "profiles" / profile)]
    if config:
        cmd += ["--config", *config]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    blocks = [b for b in out.split("\nrule ")[1:] if b.startswith("train:")]
    assert blocks, out[-2000:]
    return blocks


def _field(block, name):
    return next(line.split(":", 1)[1].strip() for line in block.splitlines() if line.strip().startswith(name))


@pytest.mark.skipif(importlib.util.find_spec("snakemake_executor_plugin_slurm") is None,
                    reason="snakemake-executor-plugin-slurm is not installed (pip install -e '.[slurm]')")
def test_slurm_profile_plans_paper_scale(tmp_path):
    from lowprec.config import scale_config

    t = scale_config("paper")["train"]
    blocks = _plan("slurm", tmp_path, "scale=paper")
    for block in blocks[:3]:
        resources = _field(block, "resources")
        # one task per GPU on each node, GPUs per node through gres, srun starting the tasks
        for item in (f"nodes={t['num_nodes']}", f"tasks_per_node={t['devices']}", f"gres=gpu:{t['devices']}",
                     "mpi=srun", "gpu=0"):
            assert item in resources.split(", "), resources
        assert _field(block, "Shell command").startswith("srun python -m lowprec.train --config ")


def test_gpu_profile_plans_small_scale(tmp_path):
    block = _plan("gpu", tmp_path)[0]
    assert "gpu=1" in _field(block, "resources").split(", ")
    assert _field(block, "Shell command").startswith("python -m lowprec.train")  # one process: no launcher
    assert "/small/" in _field(block, "output")
