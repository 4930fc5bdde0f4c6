import json

import pandas as pd
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from lowprec import train
from lowprec.telemetry import read_telemetry
from conftest import smoke_run_config


class Crash(RuntimeError):
    pass


class CrashAt(Callback):
    """Simulates a killed job: raises once training has completed ``step`` optimizer steps."""

    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step >= self.step:
            raise Crash(f"killed at step {trainer.global_step}")


class PoisonAt(Callback):
    """Writes a NaN into a weight: the next loss is not finite."""

    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, *args):
        if trainer.global_step == self.step:
            with torch.no_grad():
                next(pl_module.model.parameters()).fill_(float("nan"))


def _losses(out_dir):
    m = pd.read_csv(out_dir / "metrics.csv")
    return m.dropna(subset=["train_loss"]).set_index("step")["train_loss"]


def test_run_writes_outputs_and_loss_falls(prepared_data, tmp_path):
    cfg = smoke_run_config("gaussws", "gpt2", "bf16", prepared_data, tmp_path, max_steps=30, log_every=2,
                           val_every=10, lr=1e-2)
    rec = train.run(cfg)
    out = tmp_path / "runs/smoke/gaussws/gpt2/bf16/s0"
    assert {p.name for p in out.iterdir()} >= {"metrics.csv", "config.yaml", "provenance.json"}
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["status"] == "completed" and prov["steps"] == 30
    assert prov["tokens_seen"] == 30 * cfg["train"]["batch_size"] * cfg["train"]["seq_len"]
    for key in ("git_commit", "git_dirty", "versions", "device", "started", "finished", "precision"):
        assert key in prov
    assert prov["versions"]["torch"] and prov["versions"]["lightning"] and prov["versions"]["transformers"]
    assert prov["precision"] == "32-true" and prov["method"]["numerics"] == "bf16: bf16 GEMM operands"
    from lowprec.report.runs import EMULATED, load_run
    assert load_run(out).numerics == f"bf16: bf16 GEMM operands {EMULATED}"  # a CPU run: the emulation
    assert len(prov["method"]["layers"]) == 4  # c_attn, attn.c_proj, c_fc, mlp.c_proj; not lm_head
    m = pd.read_csv(out / "metrics.csv")
    assert {"step", "train_loss", "val_loss", "lr", "tokens", "tokens_per_s", "peak_mem_mb"} <= set(m.columns)
    val = m.dropna(subset=["val_loss"])
    assert list(val["step"]) == [10, 20, 30]
    assert val["val_loss"].iloc[-1] < val["val_loss"].iloc[0]
    assert rec["final_val_loss"] == pytest.approx(val["val_loss"].iloc[-1])


def test_fused_adamw_clips_gradients_as_the_foreach_form(prepared_data, tmp_path, monkeypatch):
    """GPU training steps the fused AdamW (``fused_adamw_applies``), which Lightning's mixed-precision
    plugin refuses to clip gradients for, scaler or not: every GPU run with ``grad_clip`` stopped at
    its first step (H100, 90d080f). The fused path, forced here on the CPU under bf16-mixed, completes,
    says it was fused, and clips: its curve is the foreach form's, not the unclipped one's."""
    import numpy as np

    curves = {}
    for name, fused, clip in (("foreach", False, 1.0), ("fused", True, 1.0), ("unclipped", True, None)):
        monkeypatch.setattr(train, "fused_adamw_applies", lambda *a, fused=fused: fused)
        cfg = smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path / name, max_steps=8,
                               log_every=1, val_every=8, lr=1e-2, precision="bf16-mixed", grad_clip=clip)
        rec = train.run(cfg)
        assert rec["status"] == "completed" and rec["fused_optimizer"] is fused
        curves[name] = _losses(tmp_path / name / "runs/smoke/baselines/gpt2/bf16/s0").to_numpy()
    assert len(curves["fused"]) == 8
    assert np.allclose(curves["fused"], curves["foreach"], rtol=1e-4, atol=0)
    assert np.abs(curves["unclipped"] - curves["fused"]).max() > 1e-3  # the clip acted on these steps


def test_same_seed_same_losses(prepared_data, tmp_path):
    a = smoke_run_config("mor", "nemotron", "bf16", prepared_data, tmp_path / "a")
    b = smoke_run_config("mor", "nemotron", "bf16", prepared_data, tmp_path / "b")
    train.run(a)
    train.run(b)
    la, lb = _losses(tmp_path / "a/runs/smoke/mor/nemotron/bf16/s0"), _losses(tmp_path / "b/runs/smoke/mor/nemotron/bf16/s0")
    assert len(la) >= 5
    pd.testing.assert_series_equal(la, lb)


def test_resume_after_kill_matches_uninterrupted(prepared_data, tmp_path):
    kw = dict(max_steps=12, ckpt_every=4, log_every=1, val_every=6)
    ref = smoke_run_config("int8_fallback", "llama2", "bf16", prepared_data, tmp_path / "ref", **kw)
    train.run(ref)
    killed = smoke_run_config("int8_fallback", "llama2", "bf16", prepared_data, tmp_path / "k", **kw)
    with pytest.raises(Crash):
        train.run(killed, callbacks=[CrashAt(6)])  # killed after step 6; last checkpoint at step 4
    out = tmp_path / "k/runs/smoke/int8_fallback/llama2/bf16/s0"
    assert not (out / "provenance.json").exists()
    # every row logged before the kill is on disk, the ones after the checkpoint (steps 5, 6) too
    assert list(_losses(out).index) == [1, 2, 3, 4, 5, 6]
    rec = train.run(killed)
    assert rec["resumed_from"].endswith("last.ckpt") and rec["steps"] == 12
    lr, lk = _losses(tmp_path / "ref/runs/smoke/int8_fallback/llama2/bf16/s0"), _losses(out)
    pd.testing.assert_series_equal(lr, lk, rtol=1e-6, atol=0)  # every step, before and after the kill
    assert list(lk.index) == list(range(1, 13))


class SigtermAt(Callback):
    """What Lightning's SIGTERM handler does when a job's time limit stops the run: it marks the
    trainer, which ends the step it is in and raises SIGTERMException."""

    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step:
            trainer._signal_connector.received_sigterm = True


def test_a_run_stopped_by_sigterm_resumes_from_the_step_it_ended(prepared_data, tmp_path):
    """A job's time limit (the packer's --resumable jobs) stops a run between periodic checkpoints:
    the step it ended is saved, its process exits non-zero, and the next start resumes there with
    the whole curve of an uninterrupted run."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from lowprec import checkpoint as ckptlib

    kw = dict(max_steps=12, ckpt_every=4, log_every=1, val_every=6)
    ref = smoke_run_config("int8_fallback", "llama2", "bf16", prepared_data, tmp_path / "ref", **kw)
    train.run(ref)
    cfg = smoke_run_config("int8_fallback", "llama2", "bf16", prepared_data, tmp_path / "k", **kw)
    with pytest.raises(SIGTERMException):
        train.run(cfg, callbacks=[SigtermAt(7)])  # periodic saves at 4 and 8: the stop saves 7
    out = tmp_path / "k/runs/smoke/int8_fallback/llama2/bf16/s0"
    assert not (out / "provenance.json").exists()
    assert ckptlib.load(out / "checkpoints" / ckptlib.LAST)["global_step"] == 7
    rec = train.run(cfg)
    assert rec["resumed_from"].endswith("last.ckpt") and rec["steps"] == 12
    lr, lk = _losses(tmp_path / "ref/runs/smoke/int8_fallback/llama2/bf16/s0"), _losses(out)
    pd.testing.assert_series_equal(lr, lk, rtol=1e-6, atol=0)
    assert list(lk.index) == list(range(1, 13))


def test_a_stopped_training_process_exits_non_zero(monkeypatch, capsys):
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    def stopped(cfg):
        raise SIGTERMException

    monkeypatch.setattr(train, "run", stopped)
    monkeypatch.setattr(train.cfglib, "load_yaml", lambda path: {})
    with pytest.raises(SystemExit) as e:
        train.main(["--config", "run.yaml"])
    assert "stopped (SIGTERM)" in str(e.value.code) and "resumes" in str(e.value.code)


def test_divergence_is_recorded_not_raised(prepared_data, tmp_path):
    cfg = smoke_run_config("gaussws", "llama2", "bf16", prepared_data, tmp_path, max_steps=12, log_every=1)
    rec = train.run(cfg, callbacks=[PoisonAt(3)])
    assert rec["status"] == "diverged" and rec["diverged_at_step"] == 3 and rec["steps"] == 3
    out = tmp_path / "runs/smoke/gaussws/llama2/bf16/s0"
    assert json.loads((out / "provenance.json").read_text())["status"] == "diverged"
    assert (out / "metrics.csv").is_file()


class StandIn(torch.nn.Module):
    """In the place of ``lowprec.linear.compiled(model)``: the model called through another module,
    with the eager model that telemetry steps call."""

    def __init__(self, model):
        super().__init__()
        self.eager, self.cudagraphs = model, False

    def forward(self, *args, **kwargs):
        return self.eager(*args, **kwargs)


class ZeroGradientOf(Callback):
    """A backward that never reaches one weight: its gradient is replaced by zeros, on the steps
    that call `model` ("eager" or "compiled"); `wrap` stands a plain wrapper in for the compiled model."""

    def __init__(self, name, model="eager", wrap=False):
        self.name, self.model, self.wrap = name, model, wrap

    def on_train_start(self, trainer, pl_module):
        if self.wrap:
            pl_module.compiled = StandIn(pl_module.model)
        weight = dict(pl_module.model.named_parameters())[self.name]
        weight.register_hook(lambda g: torch.zeros_like(g) if pl_module.stepped_model == self.model else g)


def test_a_backward_that_misses_a_weight_stops_the_run_at_that_step_with_its_name(prepared_data, tmp_path):
    cfg = smoke_run_config("int8_fallback", "llama2", "int8_block", prepared_data, tmp_path, max_steps=6)
    name = "model.layers.0.mlp.down_proj.weight"
    with pytest.raises(train.GradientsNotReached, match=r"step 0 \(eager model\) gave 1 of \d+ weight matrices.*"
                       + name.replace(".", r"\.")):
        train.run(cfg, callbacks=[ZeroGradientOf(name)])
    out = tmp_path / "runs/smoke/int8_fallback/llama2/int8_block/s0"
    assert not (out / "provenance.json").exists() and not (out / "checkpoints" / "last.ckpt").exists()


def test_the_compiled_models_first_backward_is_checked_after_an_eager_telemetry_step(prepared_data, tmp_path):
    """Telemetry steps call the eager model (step 0 here), the others the compiled one: the first
    backward of each is checked, so a fault of the compiled model alone stops the run at step 1."""
    cfg = smoke_run_config("baselines", "gpt2", "fp8_tensorwise_current", prepared_data, tmp_path, max_steps=6)
    cfg["method"]["telemetry_every"] = 4
    name = "transformer.h.0.mlp.c_fc.weight"
    with pytest.raises(train.GradientsNotReached, match=r"step 1 \(compiled model\)"):
        train.run(cfg, callbacks=[ZeroGradientOf(name, model="compiled", wrap=True)])
    # and a run whose backward reaches every weight trains through both models
    rec = train.run(smoke_run_config("baselines", "gpt2", "fp8_tensorwise_current", prepared_data, tmp_path / "ok",
                                     max_steps=6), callbacks=[ZeroGradientOf(name, model="none", wrap=True)])
    assert rec["status"] == "completed" and rec["steps"] == 6


def test_unreached_weights_are_those_without_a_gradient_or_with_zeros_only():
    from lowprec.gradient_check import unreached_weights

    params = {n: torch.nn.Parameter(torch.ones(2, 2)) for n in ("none", "zero", "nan", "one", "frozen")}
    params["frozen"].requires_grad_(False)
    params["zero"].grad = torch.zeros(2, 2)
    params["nan"].grad = torch.tensor([[0.0, float("nan")], [0.0, 0.0]])
    params["one"].grad = torch.tensor([[0.0, 0.0], [0.0, 1e-30]])
    assert unreached_weights(params.items(), set(params)) == ["none", "zero"]
    assert unreached_weights(params.items(), {"one", "nan"}) == []


def test_a_backward_that_misses_a_weight_exits_non_zero_in_one_line(monkeypatch):
    def missed(cfg):
        raise train.GradientsNotReached("the backward of step 0 (eager model) gave 1 of 9 weight matrices ...")

    monkeypatch.setattr(train, "run", missed)
    monkeypatch.setattr(train.cfglib, "load_yaml", lambda path: {})
    with pytest.raises(SystemExit) as e:
        train.main(["--config", "run.yaml"])
    assert str(e.value.code).startswith("lowprec.train: error: the backward of step 0")


def test_config_change_starts_fresh_instead_of_resuming(prepared_data, tmp_path):
    cfg = smoke_run_config("mor", "nemotron", "bf16", prepared_data, tmp_path, max_steps=8, ckpt_every=4)
    with pytest.raises(Crash):
        train.run(cfg, callbacks=[CrashAt(5)])
    cfg["train"]["lr"] = 1e-3
    rec = train.run(cfg)
    assert rec["resumed_from"] is None and rec["steps"] == 8


@pytest.mark.parametrize("method,fast_path", [("int8_block", "cuda"), ("fp8_delayed", "cuda"), ("fp8_delayed", "all")])
def test_resume_with_stateful_recipe_and_telemetry(prepared_data, tmp_path, method, fast_path, monkeypatch):
    """Stochastic-rounding draws and delayed-scaling histories travel with the checkpoint, so a
    killed quantized run resumes onto the uninterrupted run's losses; telemetry rows are merged.
    With the fast path on (``all``), delayed scaling's steps alternate between it and the emulation
    (telemetry steps), both recording into the same histories."""
    import lowprec.linear as lin

    monkeypatch.setattr(lin, "FAST_PATH", fast_path)
    kw = dict(max_steps=8, ckpt_every=4, log_every=1, val_every=4)
    runs = {}
    for tag in ("ref", "killed"):
        cfg = smoke_run_config("baselines", "gpt2", method, prepared_data, tmp_path / tag, **kw)
        cfg["method"]["telemetry_every"] = 2
        runs[tag] = cfg
    train.run(runs["ref"])
    with pytest.raises(Crash):
        train.run(runs["killed"], callbacks=[CrashAt(6)])
    rec = train.run(runs["killed"])
    assert rec["resumed_from"] is not None
    ref_dir = tmp_path / f"ref/runs/smoke/baselines/gpt2/{method}/s0"
    out = tmp_path / f"killed/runs/smoke/baselines/gpt2/{method}/s0"
    pd.testing.assert_series_equal(_losses(ref_dir), _losses(out), rtol=1e-6, atol=0)
    tel = read_telemetry(out)
    assert sorted(tel["step"].unique()) == [0, 2, 4, 6]
    assert len(tel) == 4 * 4 * 6  # steps x layers x (gemm, operand)
    assert not tel.duplicated(["step", "layer", "gemm", "operand"]).any()
    ref_tel = read_telemetry(ref_dir)
    pd.testing.assert_frame_equal(tel.reset_index(drop=True), ref_tel.reset_index(drop=True), rtol=1e-5)


def test_step_times_are_taken_when_asked():
    """Each step's seconds (the wall clock on the CPU), held until read, once."""
    import time

    from lowprec.steplog import StepTimes

    times, cpu = StepTimes(), torch.device("cpu")
    for pause in (0.02, 0.0, 0.03):
        times.begin(cpu)
        time.sleep(pause)
        times.end(cpu)
    got = times.take()
    assert len(got) == 3 and got[0] >= 0.02 and got[2] >= 0.03 and got[1] < got[0]
    assert times.take() == []


def test_a_gpu_run_records_the_int8_tuning_it_did(monkeypatch, capsys):
    """After training on a GPU, the INT8 GEMM classes the run tuned go to the file
    LOWPREC_INT8_TUNED names (the tuner's record_named); a run that never met the GEMM (its tuning
    module not imported) or trained on the CPU records nothing."""
    import sys
    import types

    calls = []
    fake = types.SimpleNamespace(record_named=lambda device: calls.append(device) or (3, "OUT/tuned.json"))
    monkeypatch.delitem(sys.modules, "lowprec.kernels.int8_fallback_tuning", raising=False)
    train.record_int8_tuning(torch.device("cuda", 0))
    assert calls == []
    monkeypatch.setitem(sys.modules, "lowprec.kernels.int8_fallback_tuning", fake)
    train.record_int8_tuning(torch.device("cpu"))
    assert calls == []
    train.record_int8_tuning(torch.device("cuda", 0))
    assert calls == [torch.device("cuda", 0)]
    assert "recorded 3 tuned INT8 GEMM configuration(s) in OUT/tuned.json" in capsys.readouterr().out
