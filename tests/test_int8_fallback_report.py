"""INT8-fallback report (lowprec.report.int8_fallback): outlier statistics of captured layer
inputs against direct computation, telemetry -> fallback ratios, loss-gap contrast, fine-tuning
table, GEMM throughput table (lowprec.report.int8_throughput), and the paper's claims on
constructed files."""

import json
import math

import pandas as pd
import pytest
import torch
import yaml
from torch import nn

from lowprec.methods.int8_fallback import block_absmax_stats
from lowprec.report import claims as cl
from lowprec.report import int8_fallback as rep
from lowprec.report import int8_throughput as tput
from lowprec.report.runs import load_runs
from lowprec.telemetry import write_telemetry


# --------------------------------------------------------------------------- outliers

def test_linear_role_of_module_names():
    assert rep.linear_role("model.layers.3.mlp.down_proj") == (3, "ffn_down")
    assert rep.linear_role("model.layers.0.self_attn.k_proj") == (0, "attn_in")
    assert rep.linear_role("transformer.h.11.mlp.c_proj") == (11, "ffn_down")
    assert rep.linear_role("transformer.h.2.attn.c_proj") == (2, "attn_out")
    assert rep.linear_role("transformer.h.2.mlp.c_fc") == (2, "ffn_in")
    assert rep.linear_role("proj") == (-1, "other")


class _Toy(nn.Module):
    """Llama-named MLP block whose input is the float tensor passed as input_ids."""

    def __init__(self):
        super().__init__()
        mlp = nn.Module()
        mlp.gate_proj, mlp.up_proj, mlp.down_proj = nn.Linear(64, 96), nn.Linear(64, 96), nn.Linear(96, 64)
        layer = nn.Module()
        layer.mlp = mlp
        self.model = nn.Module()
        self.model.layers = nn.ModuleList([layer])
        self.seen = []

    def forward(self, input_ids):
        mlp = self.model.layers[0].mlp
        h = mlp.gate_proj(input_ids) * mlp.up_proj(input_ids)
        self.seen.append(h.detach().clone())
        return mlp.down_proj(h)


def test_captured_stats_equal_direct_computation_per_batch():
    g = torch.Generator().manual_seed(0)
    batches = []
    for i in range(2):
        x = torch.randn(2, 48, 64, generator=g)
        x[0, 5, 7] = 300.0 * (i + 1)  # an outlier in one block
        batches.append((x, None))
    model = _Toy()
    rows, ratios = rep.capture_outlier_stats(model, batches)
    assert len(rows) == 4  # (ffn_in, ffn_down) x 2 batches: gate/up share their input, counted once
    ffn_in = [r for r in rows if r["role"] == "ffn_in"]
    assert ffn_in[0]["linears"] == "model.layers.0.mlp.gate_proj,model.layers.0.mlp.up_proj"
    for b, (x, _) in enumerate(batches):
        for role, inp in (("ffn_in", x), ("ffn_down", model.seen[b])):
            row = next(r for r in rows if r["role"] == role and r["batch"] == b)
            want = block_absmax_stats(inp.reshape(-1, inp.shape[-1]))
            for k, v in want.items():
                if k != "ratios":
                    assert row[k] == pytest.approx(v, nan_ok=True), (role, b, k)
    assert ratios[(0, "ffn_in")].numel() == 2 * 3 * 2  # 96 tokens x 64 channels: 3 x 2 blocks per batch
    table = rep.aggregate_outliers(rows)
    r = table[table["role"] == "ffn_in"].iloc[0]
    per = [x for x in rows if x["role"] == "ffn_in"]
    assert r["max_over_median"] == max(x["max_over_median"] for x in per)
    assert r["kurtosis"] == pytest.approx(sum(x["kurtosis"] for x in per) / 2)
    assert r["batches"] == 2 and r["blocks_per_call"] == 6


def test_aggregate_weights_layout_by_hot_blocks_and_contrast_ratio():
    base = {"block": 0, "role": "ffn_down", "linears": "d", "n_blocks": 100, "median_block_amax": 1.0,
            "max_over_median": 10.0, "p99_over_median": 2.0, "kurtosis": 3.0, "share_above_4": 0.0,
            "share_above_16": 0.0, "colwise_8": 0.0}
    rows = [{**base, "batch": 0, "share_above_8": 0.01, "rowwise_8": 1.0, "isolated_8": 0.0},
            {**base, "batch": 1, "share_above_8": 0.03, "rowwise_8": 0.0, "isolated_8": 1.0}]
    t = rep.aggregate_outliers(rows)
    assert t["share_above_8"].iloc[0] == pytest.approx(0.02)
    assert t["rowwise_8"].iloc[0] == pytest.approx(0.25) and t["isolated_8"].iloc[0] == pytest.approx(0.75)
    glu = t.assign(model="llama2", **{"class": "glu"})
    gpt = t.assign(model="gpt2", **{"class": "gpt2"}, max_over_median=4.0)
    c = rep.outlier_contrast(pd.concat([glu, gpt]))
    row = c[(c["role"] == "ffn_down") & (c["stat"] == "max_over_median")].iloc[0]
    assert (row["glu"], row["gpt2"], row["glu_over_gpt2"]) == (10.0, 4.0, 2.5)


def test_ccdf_grid_and_block_weighted_pooling(tmp_path):
    ratios = {(0, "ffn_down"): torch.tensor([0.5, 1.0, 1.0, 3.0]), (1, "ffn_down"): torch.tensor([1.0, 20.0])}
    c = rep.ccdf_table(ratios)
    assert len(c) == 2 * len(rep.CCDF_GRID)
    at = lambda df, blk, r: float(df[(df["block"] == blk) & (df["r"] == r)]["share_above"].iloc[0])  # noqa: E731
    assert at(c, 0, 1.0) == 0.25 and at(c, 0, 0.25) == 1.0 and at(c, 0, 4.0) == 0.0
    assert at(c, 1, 16.0) == 0.5 and at(c, 1, 1024.0) == 0.0
    pooled = rep.pooled_ccdf(c.assign(model="llama2", **{"class": "glu"}))
    share = pooled.set_index("r")["share_above"]
    assert share[1.0] == pytest.approx((1 + 1) / 6) and share[16.0] == pytest.approx(1 / 6)
    rep.plot_outliers(c.assign(model="llama2", **{"class": "glu"}), 8.0, [str(tmp_path / "o.png")])
    assert (tmp_path / "o.png").stat().st_size > 0


# --------------------------------------------------------------------------- run folders

def _run(root, model, family, method, loss, recipe=None, extra=None, telemetry=None, seed=0):
    d = root / model / method / f"s{seed}"
    d.mkdir(parents=True)
    cfg = {"paper": "int8_fallback", "scale": "smoke", "seed": seed,
           "model": {"name": model, "family": family},
           "method": {"name": method, "recipe": recipe or method, **(extra or {})}}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "provenance.json").write_text(json.dumps({"status": "completed", "final_val_loss": loss, "tokens_seen": 100,
                                                   "mean_tokens_per_s": 10.0, "method": {"numerics": recipe}}))
    pd.DataFrame({"step": [1], "tokens": [100], "val_loss": [loss], "train_loss": [loss]}).to_csv(d / "metrics.csv", index=False)
    if telemetry is not None:
        write_telemetry(d, telemetry)
    return str(d)


def _tel(rows):
    cols = ["step", "layer", "gemm", "operand", "rule", "n_blocks", "n_fallback", "fallback_ratio", "fallback_threshold"]
    df = pd.DataFrame(rows, columns=cols)
    return df.assign(sqnr_db=30.0, format="int8")


def test_fallback_ratio_is_block_weighted_over_active_slots(tmp_path):
    tel = _tel([
        (0, "model.layers.0.mlp.down_proj", "fprop", "x", "absmax", 100, 10, 0.1, 5.0),
        (0, "model.layers.0.mlp.down_proj", "wgrad", "x", "absmax", 100, 10, 0.1, 5.0),
        (0, "model.layers.0.mlp.down_proj", "fprop", "w", "none", 50, 0, 0.0, math.nan),   # not a fallback slot
        (0, "model.layers.0.self_attn.q_proj", "fprop", "x", "absmax", 300, 0, 0.0, 5.0),
        (10, "model.layers.0.mlp.down_proj", "fprop", "x", "absmax", 100, 30, 0.3, 5.0),
        (10, "model.layers.0.self_attn.q_proj", "fprop", "x", "absmax", 300, 3, 0.01, 5.0),
    ])
    dirs = [_run(tmp_path, "llama2", "llama", "bf16", 3.0),
            _run(tmp_path, "llama2", "llama", "int8_block", 3.5),
            _run(tmp_path, "llama2", "llama", "int8_fallback", 3.1, recipe="int8_fallback", telemetry=tel)]
    runs = load_runs(dirs)
    long = rep.fallback_telemetry(runs)
    assert len(long) == 5 and set(long["rule"]) == {"absmax"}
    s = rep.fallback_summary(runs, long, "bf16").set_index("method")
    fb = s.loc["int8_fallback"]
    assert fb["fallback_ratio"] == pytest.approx((10 + 10 + 0 + 30 + 3) / (100 + 100 + 300 + 100 + 300))
    assert fb["fprop_x_ratio"] == pytest.approx((10 + 30 + 3) / 800)
    assert fb["max_layer"] == "model.layers.0.mlp.down_proj" and fb["max_layer_ratio"] == pytest.approx(0.2)
    assert (fb["rule"], fb["knob"], fb["knob_value"]) == ("absmax", "tau", 8.0)
    assert fb["gap_vs_bf16"] == pytest.approx(0.1) and fb["telemetry_steps"] == 2
    assert s.loc["int8_block", "fallback_ratio"] == 0.0 and s.loc["int8_block", "rule"] == "none"
    assert math.isnan(s.loc["bf16", "fallback_ratio"])
    out = [str(tmp_path / "h.png"), str(tmp_path / "s.png")]
    rep.plot_heatmap(long, "int8_fallback", out[:1])
    rep.plot_sweep(rep.fallback_summary(runs, long, "bf16"), "bf16", out[1:])
    assert all((tmp_path / f).stat().st_size > 0 for f in ("h.png", "s.png"))
    # a fallback arm without telemetry is a configuration error, named
    bad = _run(tmp_path / "b", "gpt2", "gpt2", "int8_fallback_tau4", 3.0, recipe="int8_fallback")
    with pytest.raises(FileNotFoundError, match="telemetry_every"):
        rep.fallback_telemetry(load_runs([bad]))


def test_finetune_table_says_whether_the_rule_fired(tmp_path):
    fired = _tel([(0, "model.layers.0.mlp.down_proj", "fprop", "x", "absmax", 100, 4, 0.04, 5.0),
                  (5, "model.layers.0.mlp.down_proj", "fprop", "x", "absmax", 300, 0, 0.0, 5.0)])
    dirs = [_run(tmp_path, "llama2", "llama", "bf16", 3.0),
            _run(tmp_path, "llama2", "llama", "int8_block", 3.1),
            _run(tmp_path, "llama2", "llama", "int8_fallback", 3.05, recipe="int8_fallback", telemetry=fired)]
    t = rep.finetune_table(load_runs(dirs), "bf16").set_index("method")
    assert t.loc["int8_fallback", "fallback_ratio"] == pytest.approx(4 / 400)
    assert math.isnan(t.loc["bf16", "fallback_ratio"]) and math.isnan(t.loc["int8_block", "fallback_ratio"])
    assert t.loc["int8_fallback", "delta_vs_baseline"] == pytest.approx(0.05)
    md = rep.finetune_markdown(t.reset_index(), "bf16")
    assert md.endswith("Fallback ratio over the fine-tuning steps: llama2/int8_fallback 0.01.\n")


def test_gap_table_contrasts_glu_with_gpt2(tmp_path):
    dirs = [_run(tmp_path, "llama2", "llama", "bf16", 3.0), _run(tmp_path, "llama2", "llama", "int8_block", 3.3),
            _run(tmp_path, "gpt2", "gpt2", "bf16", 3.2), _run(tmp_path, "gpt2", "gpt2", "int8_block", 3.25)]
    t = rep.gap_table(load_runs(dirs), "bf16").set_index("method")
    assert t.loc["int8_block", "gap_llama2"] == pytest.approx(0.3)
    assert t.loc["int8_block", "gap_gpt2"] == pytest.approx(0.05)
    assert t.loc["int8_block", "glu_minus_gpt2"] == pytest.approx(0.25)
    assert t.loc["bf16", "glu_minus_gpt2"] == 0.0


# --------------------------------------------------------------------------- throughput

def _gemm_csv(path):
    rows = [("baseline", "bf16_matmul", 2048, None, None, None, 600.0, 1.0),
            ("baseline", "int_mm", 2048, None, None, None, 500.0, 0.83),
            ("group", "int8_block", 2048, 32, None, 0, 200.0, 0.33),
            ("group", "int8_block", 2048, 128, None, 0, 300.0, 0.5),
            ("ratio", "int8_fallback", 2048, 128, "random", 0.0, 280.0, 0.47),
            ("ratio", "int8_fallback", 2048, 128, "random", 0.1, 250.0, 0.42)]
    df = pd.DataFrame(rows, columns=["sweep", "kind", "M", "group", "pattern", "fallback_ratio", "tflops",
                                     "speedup_vs_bf16"]).assign(N=2048, K=2048)
    df.to_csv(path, index=False)


def test_throughput_table_and_missing_measurement(tmp_path):
    _gemm_csv(tmp_path / "gemm_h200.csv")
    t = tput.throughput_table(tput.read_gemm(tmp_path / "gemm_h200.csv"))
    blk = t[t["series"] == "int8_block"].set_index("group")
    assert blk.loc[128, "rel_to_smallest_group"] == pytest.approx(1.5) and blk.loc[32, "rel_to_smallest_group"] == 1.0
    assert len(t[t["series"] == "int8_fallback"]) == 2 and set(t["series"]) >= {"bf16_matmul", "int_mm"}
    md = tput.throughput_markdown(t, "H200", "x.csv")
    assert "2:1" in md and "4:1" in md and "block K=128" in md and "ρ=0.1" in md
    out = tmp_path / "o"
    rep.main(["throughput", "--gemm", str(tmp_path / "absent.csv"), "--csv", str(out / "t.csv"),
              "--md", str(out / "t.md"), "--png", str(out / "t.png")])
    assert "No committed GEMM measurement" in (out / "t.md").read_text() and (out / "t.png").stat().st_size > 0
    assert "passes of their own" in md
    # a run that timed the tail too: the figure's fallback GEMM is the one training runs
    df = pd.read_csv(tmp_path / "gemm_h200.csv")
    tail = df[df["kind"] == "int8_fallback"].assign(kind="int8_fallback_tail", tflops=[290.0, 270.0])
    t = tput.throughput_table(pd.concat([df, tail], ignore_index=True))
    assert sorted(t[t["series"] == "int8_fallback"]["tflops"]) == [270.0, 290.0]
    assert "after the main loop" in tput.throughput_markdown(t, "H200", "x.csv")
    pd.read_csv(tmp_path / "gemm_h200.csv").drop(columns=["tflops"]).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match=r"missing column\(s\) \['tflops'\]"):
        tput.read_gemm(tmp_path / "bad.csv")


# --------------------------------------------------------------------------- claims

def _claim(cid):
    return next(c for c in cl.load_claims("int8_fallback") if c["id"] == cid)


def test_end_to_end_claim_reads_the_committed_file_or_says_it_is_absent(tmp_path, monkeypatch):
    monkeypatch.setattr(cl.cfglib, "REPO_ROOT", tmp_path)
    claim = _claim("end_to_end_speedup")
    out = cl._value(claim, tmp_path / "paper", tmp_path)
    assert out["verdict"] == cl.NOT_RUN and "not measured" in out["detail"] and "e2e_h200.csv" in out["detail"]
    f = tmp_path / "results" / "bench" / "e2e_h200.csv"  # lowprec.bench.e2e_step's output
    f.parent.mkdir(parents=True)
    pd.DataFrame({"shape": ["llama_100m", "llama_1b", "llama_1b"], "arm": ["int8_fallback", "int8_fallback", "int8_block"],
                  "path": ["compiled"] * 3, "tokens_per_s": [1.2, 1.3, 1.5],
                  "ratio_vs_bf16_compiled": [1.2, 1.3, 1.5]}).to_csv(f, index=False)
    out = cl._value(claim, tmp_path / "paper", tmp_path)
    assert out["ours"] == "1.3x" and out["verdict"] == cl.NOT_REPRODUCED  # the best fallback row, not int8_block's
    f.write_text("")
    assert cl._value(claim, tmp_path / "paper", tmp_path)["verdict"] == cl.NOT_RUN
    pd.DataFrame({"shape": ["s"], "arm": ["int8_fallback"]}).to_csv(f, index=False)
    out = cl._value(claim, tmp_path / "paper", tmp_path)
    assert out["verdict"] == cl.NOT_RUN and "no column 'ratio_vs_bf16_compiled'" in out["detail"]


def _outlier_contrast(path, glu_hot_share, glu_max=12.0):
    pd.DataFrame({"role": ["ffn_down", "ffn_down"], "stat": ["max_over_median", "share_above_8"],
                  "glu": [glu_max, glu_hot_share], "gpt2": [3.0, 0.0],
                  "glu_over_gpt2": [glu_max / 3.0, math.inf]}).to_csv(path / "outlier_contrast.csv", index=False)


def test_outlier_claims_are_not_exercised_without_hot_blocks(tmp_path):
    """No block above tau x median: the GLU outliers are not there, so "sparse" (0 hot blocks),
    "larger" and "block INT8 degrades GLU" are not exercised, whatever their tests say; with hot
    blocks the same tables give the tests' own verdicts."""
    tables = tmp_path / "int8_fallback" / "small" / "tables"
    tables.mkdir(parents=True)
    pd.DataFrame({"method": ["int8_block"], "glu_minus_gpt2": [0.01], "n": [3]}).to_csv(tables / "gap_vs_bf16.csv", index=False)
    per_run = pd.DataFrame(columns=["model", "method", "seed", "status", "final_val_loss"])

    _outlier_contrast(tables, glu_hot_share=0.0)
    table = cl.evaluate("int8_fallback", "small", per_run, tmp_path).set_index("claim")
    for claim, alone in (("glu_sparse_outliers", cl.REPRODUCED), ("glu_larger_outliers", cl.REPRODUCED),
                         ("block_int8_degrades_glu", cl.NOT_REPRODUCED)):
        row = table.loc[claim]
        assert row["verdict"] == cl.NOT_EXERCISED, claim
        assert "precondition fails: hot blocks" in row["detail"] and "ours 0, needs > 0" in row["detail"]
        assert f"the test alone: {alone}" in row["detail"], row["detail"]
    assert table.loc["glu_sparse_outliers", "ours"] == "0"   # our number is still shown

    _outlier_contrast(tables, glu_hot_share=0.002)
    table = cl.evaluate("int8_fallback", "small", per_run, tmp_path).set_index("claim")
    assert table.loc["glu_sparse_outliers", "verdict"] == cl.REPRODUCED
    assert table.loc["glu_larger_outliers", "verdict"] == cl.REPRODUCED
    assert table.loc["block_int8_degrades_glu", "verdict"] == cl.NOT_REPRODUCED
    assert "precondition" not in table.loc["glu_sparse_outliers", "detail"]


def test_fallback_claims_need_the_rule_to_have_fired(tmp_path):
    tables = tmp_path / "int8_fallback" / "small" / "tables"
    tables.mkdir(parents=True)
    _outlier_contrast(tables, glu_hot_share=0.002)
    summary = pd.DataFrame({"model": ["llama2", "gpt2"], "method": ["int8_fallback"] * 2,
                            "fallback_ratio": [0.0, 3e-4], "n": [3, 3]})
    summary.to_csv(tables / "fallback_summary.csv", index=False)
    pd.DataFrame({"model": ["llama2"], "method": ["int8_fallback"], "delta_vs_baseline": [0.001],
                  "fallback_ratio": [0.0], "n": [3]}).to_csv(tables / "finetune.csv", index=False)
    per_run = pd.DataFrame(columns=["model", "method", "seed", "status", "final_val_loss"])
    table = cl.evaluate("int8_fallback", "small", per_run, tmp_path).set_index("claim")
    assert table.loc["small_fallback_ratio", "verdict"] == cl.NOT_EXERCISED   # llama2's rule never fired
    assert "fallback rule fired in every model" in table.loc["small_fallback_ratio", "detail"]
    assert table.loc["finetune_robust", "verdict"] == cl.NOT_EXERCISED
    assert "fired during fine-tuning" in table.loc["finetune_robust", "detail"]
    summary.assign(fallback_ratio=[2e-5, 3e-4]).to_csv(tables / "fallback_summary.csv", index=False)
    pd.DataFrame({"model": ["llama2"], "method": ["int8_fallback"], "delta_vs_baseline": [0.001],
                  "fallback_ratio": [1e-4], "n": [3]}).to_csv(tables / "finetune.csv", index=False)
    table = cl.evaluate("int8_fallback", "small", per_run, tmp_path).set_index("claim")
    assert table.loc["small_fallback_ratio", "verdict"] == cl.REPRODUCED
    assert table.loc["finetune_robust", "verdict"] == cl.REPRODUCED
    # a precondition whose table is absent cannot be checked: not run, never reproduced
    (tables / "outlier_contrast.csv").unlink()
    table = cl.evaluate("int8_fallback", "small", per_run, tmp_path).set_index("claim")
    assert table.loc["small_fallback_ratio", "verdict"] == cl.NOT_RUN
    assert "cannot be checked: missing tables/outlier_contrast.csv" in table.loc["small_fallback_ratio", "detail"]


def test_paper_claims_evaluate_on_report_tables(tmp_path):
    paper = tmp_path / "int8_fallback" / "small" / "tables"
    paper.mkdir(parents=True)
    pd.DataFrame({"role": ["ffn_down", "ffn_down"], "stat": ["max_over_median", "share_above_8"],
                  "glu": [12.0, 0.01], "gpt2": [3.0, 0.0], "glu_over_gpt2": [4.0, math.inf]}).to_csv(
        paper / "outlier_contrast.csv", index=False)
    pd.DataFrame({"method": ["int8_block"], "glu_minus_gpt2": [0.01], "n": [3]}).to_csv(paper / "gap_vs_bf16.csv", index=False)
    per_run = pd.DataFrame(columns=["model", "method", "seed", "status", "final_val_loss"])
    table = cl.evaluate("int8_fallback", "small", per_run, tmp_path).set_index("claim")
    assert table.loc["glu_larger_outliers", "verdict"] == cl.REPRODUCED and table.loc["glu_larger_outliers", "ours"] == "4x"
    assert table.loc["glu_sparse_outliers", "verdict"] == cl.REPRODUCED
    assert table.loc["block_int8_degrades_glu", "verdict"] == cl.NOT_REPRODUCED
    assert table.loc["fallback_recovers_bf16", "verdict"] == cl.NOT_RUN
    assert table.loc["finetune_robust", "verdict"] == cl.NOT_RUN
