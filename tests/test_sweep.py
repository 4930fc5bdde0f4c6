"""The size sweep (lowprec.sweep): runs planned from a sweep file, and its table from run folders
written here by hand (no training), checked against numbers worked out in the comments."""

import json
import math

import pandas as pd
import pytest
import yaml

from lowprec import config as lpc
from lowprec.io import write_yaml
from lowprec.sweep import (SweepError, chosen, load_sweep, plan_lines, point_shape, run, sweep_runs, tokens_per_step,
                           write_table)
from lowprec.telemetry import write_telemetry

LAYER = "model.layers.0.mlp.down_proj"


def _sweep(tmp_path, **change):
    sweep = {"scale": "smoke", "runs": str(tmp_path / "sw"), "table": str(tmp_path / "bench" / "sweep.csv"),
             "seeds": [0, 1], "budgets": [2, 4],
             "points": [{"name": "A", "layers": 1, "d_model": 32, "heads": 2},
                        {"name": "B", "layers": 2, "d_model": 64, "heads": 4}],
             "arms": {"fallback": {"paper": "int8_fallback", "model": "llama2", "method": "int8_fallback"},
                      "mor": {"paper": "mor", "model": "nemotron", "method": "mor_tensor"},
                      "gaussws": {"paper": "gaussws", "model": "gpt2", "method": "gaussws_b6", "baseline": "bf16"}}}
    sweep.update(change)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def _write_run(cfg, val: dict, telemetry: list[dict] | None = None, tok_s=1000.0):
    out = lpc.Path(cfg["output_dir"])
    out.mkdir(parents=True)
    write_yaml(out / "config.yaml", cfg)
    pd.DataFrame([{"step": s, "train_loss": v + 0.1, "val_loss": v} for s, v in val.items()]).to_csv(
        out / "metrics.csv", index=False)
    (out / "provenance.json").write_text(json.dumps({"status": "completed", "mean_tokens_per_s": tok_s,
                                                     "final_val_loss": val[max(val)], "git_commit": "abc",
                                                     "device": {"gpu": "GPU-" + cfg["method"]["name"][:3]}}))
    if telemetry:
        write_telemetry(out, pd.DataFrame(telemetry))


def _fallback_rows(fallbacks, amax=None):  # step -> blocks falling back, of 100 (and the tensor amax)
    return [{"step": s, "layer": LAYER, "gemm": "fprop", "operand": "x", "format": "int8", "rule": "absmax",
             "n_blocks": 100, "n_fallback": n, "fallback_ratio": n / 100, "fallback_threshold": 8.0,
             "amax": (amax or {}).get(s, 1.0)} for s, n in fallbacks.items()]


def _mor_rows(formats):  # step -> format of the one logged operand
    return [{"step": s, "layer": LAYER, "gemm": "fprop", "operand": "x", "format": f} for s, f in formats.items()]


def test_plan_shapes_and_steps(tmp_path):
    sweep = load_sweep(_sweep(tmp_path))
    runs = sweep_runs(sweep)
    assert len(runs) == 2 * (1 + 1 + 2) * 2  # points x (fallback, mor, gaussws + baseline) x seeds
    cfg = runs["B/int8_fallback/llama2/int8_fallback/s1"]
    # smoke llama2: d_model 32, ffn 96 (3x); at width 64: 192, rounded up to a multiple of 128
    assert {k: cfg["model"][k] for k in ("layers", "d_model", "heads", "kv_heads", "ffn")} == \
        {"layers": 2, "d_model": 64, "heads": 4, "kv_heads": 4, "ffn": 256}
    assert cfg["train"]["max_steps"] == 4 and cfg["train"]["val_every"] == 2 and cfg["seed"] == 1
    assert cfg["output_dir"] == f"{tmp_path}/sw/B/int8_fallback/llama2/int8_fallback/s1"
    assert cfg["data"]["dir"].startswith("results/data/")  # the scale's prepared data
    assert point_shape({"layers": 12, "d_model": 768, "heads": 12}, "llama2", "medium")["ffn"] == 2048
    per_step = tokens_per_step(cfg)
    assert per_step == cfg["train"]["batch_size"] * cfg["train"]["grad_accum"] * cfg["train"]["seq_len"]
    lines = plan_lines(sweep, runs)
    assert lines[0].startswith(f"16 runs of 4 steps x {per_step} tokens") and len(lines) == 17


@pytest.mark.parametrize("change, match", [
    ({"budgets": [4, 2]}, r"budgets must increase, got \[4, 2\]"),
    ({"points": [{"name": "A", "layers": 1, "d_model": 30, "heads": 4}]}, "d_model 30 is not a multiple of heads 4"),
    ({"points": [{"name": "A", "layers": 1, "d_model": 32, "heads": 2}] * 2}, "point names repeat"),
    ({"seedz": [0]}, "seedz"),
])
def test_bad_sweep_file_is_named(tmp_path, change, match):
    with pytest.raises((SweepError, lpc.ConfigError), match=match):
        load_sweep(_sweep(tmp_path, **change))


def test_table_from_run_folders(tmp_path):
    path = _sweep(tmp_path)
    sweep = load_sweep(path)
    runs = sweep_runs(sweep)
    for seed in (0, 1):
        # A: blocks falling back 0, 1, 3 of 100 at steps 0, 2, 4 (both seeds)
        # the threshold 8 is tau (8) x the median block amax (1): the largest block is amax x the median
        _write_run(runs[f"A/int8_fallback/llama2/int8_fallback/s{seed}"], {2: 5.0, 4: 4.0},
                   _fallback_rows({0: 0, 2: 1, 4: 3}, amax={0: 3.0, 2: 5.0 + seed, 4: 7.0}))
        # A: MoR keeps E4M3 at steps 0 and 2, BF16 at step 4 in seed 0 only
        _write_run(runs[f"A/mor/nemotron/mor_tensor/s{seed}"], {2: 5.0, 4: 4.0},
                   _mor_rows({0: "e4m3", 2: "e4m3", 4: "bf16" if seed == 0 else "e4m3"}), tok_s=500.0 + seed * 100)
        # A: BF16 5.0 / 5.2 at step 2 (sd 0.1414), 4.0 / 4.02 at step 4 (sd 0.01414); GaussWS 0.1 above
        _write_run(runs[f"A/gaussws/gpt2/bf16/s{seed}"], {2: 5.0 + 0.2 * seed, 4: 4.0 + 0.02 * seed})
        _write_run(runs[f"A/gaussws/gpt2/gaussws_b6/s{seed}"], {2: 5.1 + 0.2 * seed, 4: 4.1 + 0.02 * seed})
    # B: only the fallback arm ran, seed 0 without any block falling back, seed 1 with two at step 4
    _write_run(runs["B/int8_fallback/llama2/int8_fallback/s0"], {2: 5.0, 4: 4.0}, _fallback_rows({0: 0, 2: 0, 4: 0}))
    _write_run(runs["B/int8_fallback/llama2/int8_fallback/s1"], {2: 5.0, 4: 4.0}, _fallback_rows({0: 0, 2: 0, 4: 2}))

    df, out = write_table(sweep, path, runs)
    assert out == tmp_path / "bench" / "sweep.csv"
    assert pd.read_csv(out)["point"].tolist() == ["A", "A", "B", "B"]
    a2, a4, b2, b4 = (df.iloc[i] for i in range(4))
    # budget 2: telemetry of steps 0 and 2: (0 + 1) x 2 seeds of 400 blocks; early = step 0, late = step 2
    assert a2["fallback_ratio"] == pytest.approx(2 / 400) and a2["fallback_early"] == 0
    assert a2["fallback_late"] == pytest.approx(2 / 200) and a2["a_fallback_rising"] == True  # noqa: E712
    assert a2["a_seeds"] == "2/2"   # each seed alone too
    # the down-projection's hottest block over the median: steps 0 | 2 at budget 2, 0, 2 | 4 at 4
    assert a2["hot_block_early"] == 3.0 and a2["hot_block_late"] == 5.5
    assert a4["hot_block_early"] == pytest.approx((3 + 5.5) / 2) and a4["hot_block_late"] == 7.0
    # budget 4: (0 + 1 + 3) x 2 of 600; early = steps 0, 2: 2 / 400; late = step 4: 6 / 200
    assert a4["fallback_ratio"] == pytest.approx(8 / 600) and a4["fallback_late"] == pytest.approx(0.03)
    assert a2["e4m3_pct"] == 100 and a2["b_mor_bf16"] == False  # noqa: E712
    assert a4["e4m3_pct"] == pytest.approx(100 * 5 / 6) and a4["b_mor_bf16"] == True  # noqa: E712
    assert a2["loss_gap"] == pytest.approx(0.1) and a2["seed_sd"] == pytest.approx(0.2 / math.sqrt(2))
    assert a2["c_curves_separate"] == False and a4["c_curves_separate"] == True  # noqa: E712
    assert a2["all_three"] == False and a4["all_three"] == True  # noqa: E712
    assert a4["tokens_m"] == pytest.approx(4 * 4 * 32 / 1e6)  # smoke: 4 sequences of 32 tokens a step
    assert a4["tok_s_mor"] == 550 and a4["runs_missing"] == 0
    assert a4["gpus"] == "GPU-bf1; GPU-gau; GPU-int; GPU-mor"   # the cards that the point's speeds are of
    assert b2["fallback_ratio"] == 0 and b2["a_fallback_rising"] == False and b2["a_seeds"] == "0/2"  # noqa: E712
    # B at 4 steps: pooled, (a) holds, carried by seed 1 alone
    assert b4["a_fallback_rising"] == True and b4["a_seeds"] == "1/2"  # noqa: E712
    assert pd.isna(b2["e4m3_pct"]) and pd.isna(b2["b_mor_bf16"]) and pd.isna(b2["all_three"])
    assert b4["runs_missing"] == 6  # of point B's 8 runs
    assert chosen(df) == "chosen: A at 4 steps (0.0M tokens): all three hold"
    prov = json.loads((tmp_path / "bench" / "sweep.provenance.json").read_text())
    assert prov["answer"] == chosen(df) and len(prov["runs"]) == 10 and len(prov["runs_missing"]) == 6
    assert prov["runs"]["A/mor/nemotron/mor_tensor/s1"]["mean_tokens_per_s"] == 600.0


def test_run_needs_a_matching_pattern(tmp_path):
    runs = sweep_runs(load_sweep(_sweep(tmp_path)))
    with pytest.raises(SweepError, match=r"--only \['C/\*'\]: no run of the sweep matches"):
        run(runs, ["C/*"])


def test_the_medium_sweep_file_is_valid():
    sweep = load_sweep(lpc.CONFIG_DIR / "sweeps" / "medium.yaml")
    assert sweep["scale"] == "medium" and sweep["table"].startswith("results/bench/")


@pytest.mark.slow
def test_run_trains_what_is_not_current_once(tmp_path, prepared_data):
    sweep = load_sweep(_sweep(tmp_path, budgets=[2], seeds=[0], points=[{"name": "A", "layers": 1, "d_model": 32, "heads": 2}]))
    runs = sweep_runs(sweep)
    for cfg in runs.values():
        cfg["data"] = {**cfg["data"], "dir": str(prepared_data), "vocab_size": 320}
    name = "A/gaussws/gpt2/bf16/s0"
    assert run(runs, ["A/gaussws/gpt2/bf16/*"], tmp_path / "configs") == [name]
    assert (tmp_path / "configs" / f"{name}.yaml").is_file()
    assert lpc.run_status(runs[name])[0] == "current"
    assert json.loads((lpc.Path(runs[name]["output_dir"]) / "provenance.json").read_text())["status"] == "completed"
    assert run(runs, ["A/gaussws/gpt2/bf16/*"], tmp_path / "configs") == []  # complete: not trained again
