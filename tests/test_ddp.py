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
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from conftest import smoke_run_config
from lowprec import train
from lowprec.io import write_yaml
from lowprec.telemetry import read_telemetry

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
    t1, t2 = read_telemetry(one), read_telemetry(two)
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


# --------------------------------------------------------------------------- numerics across ranks

_RANK_WORKER = textwrap.dedent("""
    import sys

    import torch
    import torch.distributed as dist
    from torch import nn

    from lowprec import RECIPES, convert
    from lowprec.methods.int8_fallback import int8_fallback_recipe
    from lowprec.numerics import ranks, rounding_stream
    from lowprec.recipes import slot_key


    def input_grad(recipe):
        # stochastic rounding of dY: the same input, weights and seed on every rank
        torch.manual_seed(0)
        layer = nn.Sequential(nn.Linear(64, 32))
        convert(layer, recipe, seed=7)
        x = torch.randn(64, 64, generator=torch.Generator().manual_seed(5), requires_grad=True)
        layer(x).backward(torch.randn(64, 32, generator=torch.Generator().manual_seed(6)))
        key = rounding_stream.call_key(layer[0].seed_key, torch.tensor(0), ranks.rank())  # the first call's
        return x.grad, int(slot_key(key, "dgrad", "dy"))


    def delayed(rank, fast_path):
        # delayed scaling: the same weights, each rank its own (differently sized) data
        import lowprec.linear as lin

        before, lin.FAST_PATH = lin.FAST_PATH, fast_path
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 32))
        convert(net, RECIPES["fp8_delayed"])
        g = torch.Generator().manual_seed(100 + rank)
        xs = [torch.randn(16, 64, generator=g) * (1 + 3 * rank) * (step + 1) for step in range(3)]
        for x in xs:
            net(x.clone().requires_grad_()).square().mean().backward()
        lin.FAST_PATH = before
        return {f"{i}:{gm}.{op}": s.history.clone() for i in (0, 2) for (gm, op), s in net[i].scalers.items()}, xs


    def run(rank, world):
        hist, xs = delayed(rank, "off")
        sr = {name: [input_grad(r) for _ in range(2)]
              for name, r in (("int8_block", RECIPES["int8_block"]), ("int8_fallback", int8_fallback_recipe({})))}
        return {"hist": hist, "hist_fast": delayed(rank, "all")[0], "xs": xs, "sr": sr}


    if __name__ == "__main__":
        rank, world, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
        torch.save(run(rank, world), out)
        dist.destroy_process_group()
""")


def _rank_results(tmp_path):
    """(rank 0's, rank 1's) results of two gloo processes and the same code's in this process."""
    import torch

    script = tmp_path / "rank_worker.py"
    script.write_text(_RANK_WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    outs = [tmp_path / f"rank{r}.pt" for r in range(2)]
    procs = [subprocess.Popen([sys.executable, str(script), str(r), "2", (tmp_path / "init").as_uri(), str(outs[r])],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    namespace = {"__name__": "rank_worker"}
    exec(compile(_RANK_WORKER, str(script), "exec"), namespace)
    alone = namespace["run"](0, 1)  # no process group: a single process
    for p in procs:
        log, _ = p.communicate(timeout=300)
        assert p.returncode == 0, log[-3000:]
    return [torch.load(o, weights_only=False) for o in outs], alone


def test_ranks_agree_on_amax_histories_and_differ_in_rounding_noise(tmp_path):
    """Two gloo processes. Delayed scaling: ranks fed different data end with the same amax
    histories, each step's entry the max over the ranks (here rank 1's, whose data is larger), not
    what either rank saw alone, on the emulation and on the fast path alike. Stochastic rounding: on
    the same input each rank draws its own noise (different input gradients), reproducibly, and rank
    0 draws what a single process does."""
    import torch

    two, one = _rank_results(tmp_path)
    h0, h1 = two[0]["hist"], two[1]["hist"]
    assert set(h0) == set(h1) and len(h0) == 12  # 2 layers x 6 operand slots
    for k in h0:
        assert h0[k].numel() == 3 and torch.equal(h0[k], h1[k]), k
        # the fast path: the ranks agree too; where the tensor is the same on both paths (the first
        # layer's input, the weights) it records the emulation's amaxes (other tensors come out of
        # the previous GEMM, whose rounding differs between the paths)
        assert torch.equal(two[0]["hist_fast"][k], two[1]["hist_fast"][k]), k
        if k in ("0:fprop.x", "0:wgrad.x") or k.endswith(".w"):
            assert torch.equal(two[0]["hist_fast"][k], h0[k]), k
    want = torch.stack([torch.maximum(a.abs().max(), b.abs().max()) for a, b in zip(two[0]["xs"], two[1]["xs"])])
    assert torch.equal(h0["0:fprop.x"], want) and torch.equal(want, torch.stack([b.abs().max() for b in two[1]["xs"]]))
    # a process on its own records its own amaxes, smaller here
    assert torch.equal(one["hist"]["0:fprop.x"], torch.stack([x.abs().max() for x in one["xs"]]))
    assert (one["hist"]["0:fprop.x"] < h0["0:fprop.x"]).all()
    for name in ("int8_block", "int8_fallback"):
        (g0, s0), (g0_again, _) = two[0]["sr"][name]
        (g1, s1), (g1_again, _) = two[1]["sr"][name]
        assert s0 != s1 and not torch.equal(g0, g1), name            # distinct streams per rank
        assert torch.equal(g0, g0_again) and torch.equal(g1, g1_again), name  # reproducible per rank
        assert torch.equal(g0, one["sr"][name][0][0]), name          # rank 0: the single-process stream
        # the difference is rounding noise, not a wrong gradient
        assert float((g0 - g1).abs().max()) < 0.1 * float(g0.abs().max()), name


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
