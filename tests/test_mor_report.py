"""MoR replication outputs: the telemetry MoR adds (error under every partition), the report's
tables and figures from constructed run folders with known answers, the relative loss margin of
the claims, and the experiment grid feeding every table."""

import json
import math

import ml_dtypes
import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from torch import nn

from lowprec import config as lpc
from lowprec import convert
from lowprec.methods.mor import ALL_OPERAND_SLOTS, _ratio_terms, mor_recipe, mor_relative_error, mor_tensor
from lowprec.report import claims as cl
from lowprec.report import mor as rep
from lowprec.telemetry import Telemetry, write_telemetry


def _wide(shape, seed, octaves=20):
    g = torch.Generator().manual_seed(seed)
    e = torch.randint(-octaves // 2, octaves // 2, shape, generator=g).float()
    return torch.randn(shape, generator=g) * torch.exp2(e)


# ----------------------------------------------------------------------------- numerics and telemetry


def test_ratio_terms_equal_the_plain_formula_bit_for_bit():
    x = _wide((64, 96), 1, octaves=40)
    x[0, :5] = 0.0
    x[1, 0] = -0.0
    x[2, 0], x[2, 1], x[2, 2] = float("nan"), float("inf"), -float("inf")
    q = mor_tensor(x, "block", (32, 32)).qtensor.dequantize()
    got, nz = _ratio_terms(x, q)
    want = torch.where(x != 0, (q - x).abs() / x.abs(), torch.zeros_like(x))
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(nz, x != 0)


def _f64_tensor_error(t: torch.Tensor) -> float:
    """Per-tensor E4M3 relative error in float64 with ml_dtypes' cast (independent of lowprec)."""
    x = t.detach().numpy().astype(np.float32)
    s = np.float32(448.0) / np.float32(np.abs(x).max())
    q = (x * s).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) / np.float64(s)
    nz = x != 0
    return float(np.mean(np.abs(q[nz] - x[nz]) / np.abs(x[nz].astype(np.float64))))


@pytest.mark.parametrize("cfg", [{"partition": "channel"}, {"partition": "subtensor", "block": [16, 16]}])
def test_telemetry_records_the_error_under_every_partition(cfg):
    torch.manual_seed(0)
    lin = nn.Linear(48, 40, bias=False)
    tel = Telemetry(every=1)
    model = nn.Sequential(lin)
    convert(model, mor_recipe({**cfg, "operands": ["x", "w"]}), telemetry=tel)
    x = torch.randn(24, 48) * torch.linspace(1e-3, 30, 24)[:, None]  # tokens of very different size
    model(x.requires_grad_(True)).square().sum().backward()
    df = tel.frame()
    mor_rows = df[df["format"].isin(["e4m3", "bf16"])]
    assert set(mor_rows["gemm"] + "." + mor_rows["operand"]) == {"fprop.x", "fprop.w", "wgrad.x", "dgrad.w"}
    for col in ("rel_error_tensor", "rel_error_block", "rel_error_channel"):
        assert mor_rows[col].notna().all()
        assert df.loc[df["format"] == "hp", col].isna().all()  # dY slots stay BF16 and unmeasured
    row = mor_rows[(mor_rows.gemm == "fprop") & (mor_rows.operand == "x")].iloc[0]
    assert row["rel_error_tensor"] == pytest.approx(_f64_tensor_error(x.detach()), rel=1e-6)
    if cfg["partition"] == "channel":  # the arm's own partition: the number that decided
        assert (mor_rows["rel_error_channel"] == mor_rows["mor_rel_error"]).all()
        assert row["rel_error_channel"] < row["rel_error_tensor"]  # per-token scales follow the rows' sizes
    else:
        blocks = mor_tensor(x.detach(), "block", (16, 16), scale="fp32").rel_error
        assert row["rel_error_block"] == blocks


# ----------------------------------------------------------------------------- constructed runs

LAYERS = ["model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj", "model.layers.0.mlp.up_proj",
          "model.layers.0.mlp.down_proj"]


def _telemetry(bf16_slots=(), steps=(0, 20), err=0.02, partition="block", sub=False):
    """Every layer x slot x step; (layer, slot) pairs in bf16_slots chose BF16."""
    rows = []
    for step in steps:
        for layer in LAYERS:
            for slot in ALL_OPERAND_SLOTS:
                gemm, op = slot.split(".")
                fmt = "bf16" if (layer, slot) in bf16_slots else "e4m3"
                row = {"step": step, "layer": layer, "gemm": gemm, "operand": op, "format": fmt,
                       "mor_rel_error": err, "partition": partition,
                       "rel_error_tensor": 2 * err, "rel_error_block": err, "rel_error_channel": err / 2}
                if sub:
                    row.update({"partition": "subtensor", "e4m3_share": 0.75 if fmt == "bf16" else 1.0,
                                "e5m2_share": 0.25 if fmt == "bf16" else 0.0, "bf16_share": 0.0})
                rows.append(row)
    # a non-MoR slot (format "hp") must be ignored
    rows.append({"step": 0, "layer": "lm_head", "gemm": "fprop", "operand": "x", "format": "hp"})
    return pd.DataFrame(rows)


def _run(root, method, cfg, val, train=None, lr=3e-4, ratio=0.1, seed=0, telemetry=None, status="completed"):
    d = root / method / f"s{seed}"
    d.mkdir(parents=True)
    conf = {"paper": "mor", "scale": "tiny", "seed": seed, "model": {"name": "nemotron"},
            "method": {"name": method, **cfg}, "train": {"lr": lr, "min_lr_ratio": ratio}}
    (d / "config.yaml").write_text(yaml.safe_dump(conf))
    (d / "provenance.json").write_text(json.dumps({"status": status, "final_val_loss": val}))
    steps = np.arange(2, 61, 2)
    # train loss: 9.0 before step 48, then `train` (the last 20 % of 60 steps are 49..60)
    tl = np.where(steps > 48, train if train is not None else val, 9.0)
    pd.DataFrame({"step": steps, "train_loss": tl, "val_loss": np.nan}).to_csv(d / "metrics.csv", index=False)
    if telemetry is not None:
        write_telemetry(d, telemetry)
    return str(d)


@pytest.fixture()
def runs(tmp_path):
    mor = {"recipe": "mor", "telemetry_every": 20}
    q = ("model.layers.0.self_attn.q_proj", "dgrad.dy")
    dn = ("model.layers.0.mlp.down_proj", "fprop.x")
    return [
        _run(tmp_path, "bf16", {"recipe": "bf16"}, 2.0, train=2.2),
        _run(tmp_path, "fp8_hybrid", {"recipe": "fp8_hybrid"}, 2.04, train=2.2),
        _run(tmp_path, "mor_tensor", {**mor, "partition": "tensor"}, 2.01, train=2.211, telemetry=_telemetry({q})),
        _run(tmp_path, "mor_block", {**mor, "partition": "block"}, 2.002, train=2.2, telemetry=_telemetry({q, dn})),
        _run(tmp_path, "mor_block_th050", {**mor, "partition": "block", "threshold": 0.05}, 2.003,
             telemetry=_telemetry({q})),
        _run(tmp_path, "mor_block_b64", {**mor, "partition": "block", "block": [64, 64]}, 2.001,
             telemetry=_telemetry()),
        _run(tmp_path, "mor_block_fp32", {**mor, "partition": "block", "scale": "fp32"}, 2.006,
             telemetry=_telemetry({q})),
        _run(tmp_path, "mor_sub_three_way", {**mor, "partition": "subtensor", "subtensor_mode": "three_way"}, 1.99,
             train=2.178, telemetry=_telemetry({q}, sub=True)),
        _run(tmp_path, "bf16_cfg2", {"recipe": "bf16"}, 1.8, lr=1.2e-3, ratio=0.0025),
        _run(tmp_path, "mor_block_cfg2", {**mor, "partition": "block"}, 1.809, lr=1.2e-3, ratio=0.0025,
             telemetry=_telemetry({q, dn})),
    ]


def test_layer_types_and_error_bins():
    names = {"model.layers.3.self_attn.k_proj": "QKV", "transformer.h.0.attn.c_attn": "QKV",
             "model.layers.0.self_attn.o_proj": "attention out", "transformer.h.1.attn.c_proj": "attention out",
             "model.layers.0.mlp.gate_proj": "FC1", "transformer.h.0.mlp.c_fc": "FC1",
             "model.layers.0.mlp.down_proj": "FC2", "transformer.h.0.mlp.c_proj": "FC2", "lm_head": "other"}
    assert {n: rep.layer_type(n) for n in names} == names
    errs = [0.0, 0.0049, 0.005, 0.02249, 0.045, 0.0449999, 0.0599, 0.06, 0.5, float("nan")]
    got = rep.error_bin(errs)
    np.testing.assert_array_equal(got[:-1], [0, 0, 1, 4, 9, 8, 11, 12, 12])
    assert np.isnan(got[-1]) and len(rep.ERROR_LABELS) == 13 and rep.ERROR_LABELS[9] == "4.5-5.0%"


def test_train_loss_window():
    m = pd.DataFrame({"step": [10, 20, 30, 40, 50], "train_loss": [5.0, 4.0, 3.0, 2.0, 1.0]})
    assert rep.train_loss(m, 0.2) == 1.0          # steps > 40
    assert rep.train_loss(m, 0.5) == 2.0          # steps > 25: 3, 2, 1
    with pytest.raises(ValueError, match="window"):
        rep.train_loss(m, 0.0)


def test_share_table_counts_decisions_per_layer_type_and_operand(runs):
    table = rep.share_table(rep.load_runs(runs))
    blk = table[table["method"] == "mor_block"].set_index("group")
    # 4 layers x 6 slots x 2 steps = 48 decisions, 2 slots x 2 steps in BF16
    assert blk.loc["all", "decisions"] == 48 and blk.loc["all", "e4m3_pct"] == pytest.approx(100 * 44 / 48)
    assert blk.loc["QKV", "e4m3_pct"] == pytest.approx(100 * 10 / 12)
    assert blk.loc["FC2", "e4m3_pct"] == pytest.approx(100 * 10 / 12)
    assert blk.loc["FC1", "e4m3_pct"] == 100.0 and blk.loc["attention out", "e4m3_pct"] == 100.0
    assert blk.loc["dY", "e4m3_pct"] == pytest.approx(100 * 14 / 16) and blk.loc["W", "e4m3_pct"] == 100.0
    assert blk.loc["X", "e4m3_pct"] == pytest.approx(100 * 14 / 16) and blk.loc["X", "decisions"] == 16
    assert blk["block_e4m3_pct"].isna().all() and (blk["regime"] == "config 1").all()
    sub = table[table["method"] == "mor_sub_three_way"].set_index("group")
    assert sub.loc["all", "block_e4m3_pct"] == pytest.approx(100 * (46 * 1.0 + 2 * 0.75) / 48)
    assert sub.loc["all", "block_e5m2_pct"] == pytest.approx(100 * 2 * 0.25 / 48)
    assert table[table["method"] == "mor_block_cfg2"]["regime"].iloc[0] == "config 2"
    assert set(table["method"]) == {"mor_tensor", "mor_block", "mor_block_th050", "mor_block_b64",
                                    "mor_block_fp32", "mor_sub_three_way", "mor_block_cfg2"}


def test_loss_tables(runs):
    arms = rep.arm_table(rep.load_runs(runs))
    main = rep.main_table(arms).set_index("method")
    assert list(main.index) == ["bf16", "fp8_hybrid", "mor_tensor", "mor_block"]
    assert main.loc["mor_tensor", "val_gap_pct"] == pytest.approx(0.5)
    assert main.loc["mor_tensor", "train_gap_pct"] == pytest.approx(0.5)   # 2.211 vs 2.2 in the window
    assert main.loc["mor_block", "val_gap_pct"] == pytest.approx(0.1)
    assert main.loc["mor_block", "e4m3_pct"] == pytest.approx(100 * 44 / 48) and math.isnan(main.loc["bf16", "e4m3_pct"])

    abl = rep.ablation_table(arms)
    assert set(abl["ablation"]) == {"threshold", "block size", "scale", "sub-tensor"}
    th = abl[abl["ablation"] == "threshold"].set_index("value")
    assert list(th.index) == ["4.5%", "5%"]
    assert th.loc["5%", "e4m3_vs_ref_pts"] == pytest.approx(100 * 46 / 48 - 100 * 44 / 48)
    assert th.loc["5%", "val_vs_ref_pct"] == pytest.approx(100 * (2.003 - 2.002) / 2.002)
    assert set(abl[abl["ablation"] == "block size"]["value"]) == {"128x128", "64x64"}
    assert set(abl[abl["ablation"] == "scale"]["value"]) == {"gam", "fp32"}
    sub = abl[abl["ablation"] == "sub-tensor"].set_index("value")
    assert sub.loc["three_way", "train_gap_pct"] == pytest.approx(-1.0)
    assert sub.loc["three_way", "val_vs_ref_pct"] == pytest.approx(-0.5)
    assert "mor_block_cfg2" not in set(abl["method"])

    lr = rep.lr_table(arms)
    assert set(lr["setting"]) == {"bf16", "MoR block"}
    row = lr[lr["method"] == "mor_block_cfg2"].iloc[0]
    assert row["regime"] == "config 2" and row["lr_schedule"] == "0.0012 -> 3e-06"
    assert row["val_gap_pct"] == pytest.approx(0.5)   # against bf16_cfg2, not bf16


def test_error_summary_and_figures(runs, tmp_path):
    out = tmp_path / "out"
    rep.main(["telemetry", "--runs", *runs, "--heatmap-method", "mor_block", "--format-methods", "mor_block",
              "mor_sub_three_way", "--error-png", str(out / "e.png"), "--error-csv", str(out / "e.csv"),
              "--format-png", str(out / "f.png"), "--summary-csv", str(out / "s.csv"), "--summary-md", str(out / "s.md")])
    assert (out / "e.png").stat().st_size > 0 and (out / "f.png").stat().st_size > 0
    long = pd.read_csv(out / "e.csv")
    assert set(long["method"]) == {"mor_block"} and len(long) == 48 * 3
    assert set(long.loc[long["partition"] == "tensor", "bin"]) == {8}   # 4 % -> 4.0-4.5 %
    summary = pd.read_csv(out / "s.csv")
    assert not summary.duplicated(["method", "seed", "partition"]).any()   # one row per run and partition
    summary = summary.set_index(["method", "partition"])
    assert summary.loc[("mor_block", "block"), "below_2p5_pct"] == 100.0
    assert summary.loc[("mor_block", "tensor"), "below_2p5_pct"] == 0.0
    assert summary.loc[("mor_block", "channel"), "median_pct"] == pytest.approx(1.0)


def test_bad_telemetry_is_named(tmp_path):
    bad = _telemetry().drop(columns=["format"])
    d = _run(tmp_path, "mor_x", {"recipe": "mor"}, 2.0, telemetry=bad)
    with pytest.raises(ValueError, match="telemetry.csv.gz: no 'format' column"):
        rep.decisions(rep.load_runs([d])[0])
    t = _telemetry()
    t.loc[0, "operand"] = "dx"
    d = _run(tmp_path / "b", "mor_y", {"recipe": "mor"}, 2.0, telemetry=t)
    with pytest.raises(ValueError, match="unknown GEMM operand"):
        rep.decisions(rep.load_runs([d])[0])


# ----------------------------------------------------------------------------- claims


def _per_run(gap_pct, base=2.0, seeds=3, noise=0.002):
    rows = []
    for s in range(seeds):
        j = noise * (s - 1)
        rows.append({"model": "nemotron", "method": "bf16", "seed": s, "status": "completed", "final_val_loss": base + j})
        rows.append({"model": "nemotron", "method": "m", "seed": s, "status": "completed",
                     "final_val_loss": base * (1 + gap_pct / 100) - j})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("gap_pct, margin_pct, verdict", [
    (0.1, 0.5, cl.REPRODUCED), (1.5, 0.5, cl.NOT_REPRODUCED),
    (-0.5, 0.0, cl.REPRODUCED), (0.5, 0.0, cl.NOT_REPRODUCED), (0.0, 0.0, cl.INCONCLUSIVE)])
def test_relative_margin(gap_pct, margin_pct, verdict):
    claim = {"id": "c", "metric": {"kind": "loss_gap", "method": "m", "baseline": "bf16"},
             "test": {"kind": "noninferiority", "margin_pct": margin_pct, "seeds": 3, "alpha": 0.05}}
    out = cl._loss_gap(claim, _per_run(gap_pct), "small")
    assert out["verdict"] == verdict
    assert f"({gap_pct:+.2f}%)" in out["ours"]
    # the same test with the margin in nats is the same verdict
    absolute = {**claim, "test": {**claim["test"], "margin": margin_pct / 100 * 2.0}}
    del absolute["test"]["margin_pct"]
    assert cl._loss_gap(absolute, _per_run(gap_pct), "small")["verdict"] == verdict


def test_claim_without_margin_is_an_error():
    claim = {"id": "c", "metric": {"kind": "loss_gap", "method": "m", "baseline": "bf16"},
             "test": {"kind": "noninferiority", "seeds": 3}}
    with pytest.raises(ValueError, match="claim c: .*margin"):
        cl._loss_gap(claim, _per_run(0.1), "small")


# ----------------------------------------------------------------------------- the experiment grid


def _grid_arms(scale):
    exp = lpc.experiment_config("mor")
    grid = lpc.experiment_grid("mor", scale)
    rows = []
    for m in grid["methods"]:
        method = dict(exp["methods"][m])
        lr = method.pop("train", {}).get("lr", exp["train"]["lr"])  # how resolve_run layers them
        rows.append({"method": m, "lr": lr, **rep.arm_settings(method), "telemetry": bool(method.get("telemetry_every"))})
    return exp, pd.DataFrame(rows)


@pytest.mark.parametrize("scale", ["tiny", "paper"])  # small: a GPU-budget subset (its YAML says which)
def test_grid_feeds_every_table(scale):
    exp, arms = _grid_arms(scale)
    assert {"bf16", "fp8_tensorwise_current", "fp8_delayed", "fp8_hybrid"} <= set(arms["method"])
    mor = arms[arms["partition"].notna()]
    assert mor["telemetry"].all()
    cfg1 = mor[mor["lr"] == exp["train"]["lr"]]
    assert {"tensor", "block", "channel", "subtensor"} <= set(cfg1["partition"])
    assert set(cfg1.loc[cfg1["partition"] == "subtensor", "subtensor_mode"]) == {"two_way", "three_way"}
    block = cfg1[cfg1["partition"] == "block"]
    assert set(block["threshold"]) == {0.045, 0.05} and set(block["block"]) == {"128x128", "64x64"}
    assert set(block["scale"]) == {"gam", "e8", "fp32"}
    # both learning-rate regimes, with BF16 and per-channel MoR (the share claims) in each
    assert arms["lr"].nunique() == 2
    for lr in arms["lr"].unique():
        at = arms[arms["lr"] == lr]
        assert "bf16" in set(at["recipe"]) and "channel" in set(at["partition"])
    # every method named by a claim runs at the scales where the claim is meaningful
    for c in cl.load_claims("mor"):
        if scale in c["meaningful_at"] and c["metric"]["kind"] == "loss_gap":
            assert {c["metric"]["method"], c["metric"]["baseline"]} <= set(arms["method"]), c["id"]
