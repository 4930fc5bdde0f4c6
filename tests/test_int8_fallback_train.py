"""The dynamic fallback rule's per-layer EMA level in checkpoints: QLinear extra state, and a killed
and resumed training run that continues exactly like an uninterrupted one."""

import json

import pandas as pd
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from lowprec import convert, train
from lowprec.methods.int8_fallback import FallbackInt8Quantizer, int8_fallback_recipe
from lowprec.linear import QLinear
from lowprec.telemetry import read_telemetry
from conftest import smoke_run_config
from test_train import Crash, CrashAt, _losses


def _net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32))


def _levels(recipe):
    return {k: float(v["level"]) for k, v in recipe.fprop.a.state_dict().items()}


def test_qlinear_extra_state_carries_the_dynamic_level():
    recipe = int8_fallback_recipe({"rule": "dynamic", "ema": 0.5})
    net = _net()
    convert(net, recipe)
    g = torch.Generator().manual_seed(1)
    for scale in (1.0, 5.0, 20.0):  # a level that has moved: EMA of different medians
        net(torch.randn(64, 64, generator=g) * scale).sum().backward()
    saved = _levels(recipe)
    assert set(saved) == {"0:fprop.x", "0:wgrad.x", "2:fprop.x", "2:wgrad.x"}
    state = net.state_dict()
    assert state["0._extra_state"]["quantizers"][0].keys() == {"fprop.x", "wgrad.x"}

    fresh_recipe = int8_fallback_recipe({"rule": "dynamic", "ema": 0.5})
    fresh = _net(seed=5)
    convert(fresh, fresh_recipe)
    assert _levels(fresh_recipe) == {}
    fresh.load_state_dict(state)
    assert _levels(fresh_recipe) == saved
    assert {k: v["steps"] for k, v in fresh_recipe.fprop.a.state_dict().items()} == \
        {k: v["steps"] for k, v in recipe.fprop.a.state_dict().items()} == {k: 3 for k in saved}
    # the restored level decides the next call's blocks exactly as the original does
    x = torch.randn(64, 64, generator=g) * 50.0
    with torch.no_grad():
        assert torch.equal(net(x), fresh(x))


def test_checkpoint_without_quantizer_state_clears_the_level():
    """A checkpoint from a run without the dynamic rule (or from before its first call) must not
    leave a stale level behind."""
    recipe = int8_fallback_recipe({"rule": "dynamic"})
    net = _net()
    convert(net, recipe)
    net(torch.randn(8, 64)).sum().backward()
    assert _levels(recipe)
    plain = _net()
    convert(plain, int8_fallback_recipe({}))
    net.load_state_dict(plain.state_dict())
    assert _levels(recipe) == {}


def test_dynamic_rule_run_resumes_onto_the_uninterrupted_run(prepared_data, tmp_path):
    kw = dict(max_steps=8, ckpt_every=4, log_every=1, val_every=4)
    runs = {}
    for tag in ("ref", "killed"):
        cfg = smoke_run_config("int8_fallback", "llama2", "int8_fallback_dynamic", prepared_data, tmp_path / tag, **kw)
        cfg["method"]["telemetry_every"] = 1
        runs[tag] = cfg
    train.run(runs["ref"])
    with pytest.raises(Crash):
        train.run(runs["killed"], callbacks=[CrashAt(6)])  # last checkpoint at step 4
    rec = train.run(runs["killed"])
    assert rec["resumed_from"] is not None and rec["steps"] == 8
    sub = "runs/smoke/int8_fallback/llama2/int8_fallback_dynamic/s0"
    pd.testing.assert_series_equal(_losses(tmp_path / "ref" / sub), _losses(tmp_path / "killed" / sub), rtol=1e-6, atol=0)
    ref = read_telemetry(tmp_path / "ref" / sub)
    got = read_telemetry(tmp_path / "killed" / sub)
    key = ["step", "layer", "gemm", "operand"]
    merged = ref.merge(got, on=key, suffixes=("_ref", "_got"))
    assert len(merged) == len(ref) == len(got)
    active = merged[merged["rule_ref"] == "dynamic"]
    assert set(active["step"]) == set(range(8)) and len(active)
    # the threshold after the resume (step 5 on) comes from the restored EMA level: a run that lost
    # its state would restart the level from the first call's median
    after = active[active["step"] >= 5]
    assert torch.allclose(torch.tensor(after["fallback_threshold_got"].to_numpy()),
                          torch.tensor(after["fallback_threshold_ref"].to_numpy()), rtol=1e-6, atol=0)
    assert (merged["fallback_ratio_got"] == merged["fallback_ratio_ref"]).all()


class NaNIntoLayerInput(Callback):
    """From optimizer step ``step`` on, a forward pre-hook puts one NaN into the input of one
    converted MLP layer (an activation in a fallback slot): it reaches the loss only through that
    layer's INT8-fallback GEMM."""

    def __init__(self, step):
        self.step, self.layer, self.handle = step, None, None

    def on_train_batch_start(self, trainer, pl_module, *args):
        if trainer.global_step == self.step and self.handle is None:
            name, layer = next((n, m) for n, m in pl_module.model.named_modules()
                               if isinstance(m, QLinear) and n.endswith("mlp.down_proj"))
            assert isinstance(layer.recipe.fprop.a, FallbackInt8Quantizer) and layer.recipe.fprop.a.falls_back("fprop", "x")
            self.layer = name

            def poison(module, args):
                x = args[0].clone()
                x.view(-1)[7] = float("nan")
                return (x, *args[1:])

            self.handle = layer.register_forward_pre_hook(poison)

    def on_train_end(self, trainer, pl_module):
        if self.handle is not None:
            self.handle.remove()


def test_nan_in_a_fallback_activation_ends_the_run_as_diverged(prepared_data, tmp_path):
    """INT8 used to turn the NaN into a 0 and the run trained on as if nothing happened; now the
    block's NaN scale carries it into the loss, and train.py records the run as diverged."""
    cfg = smoke_run_config("int8_fallback", "llama2", "int8_fallback", prepared_data, tmp_path, max_steps=8,
                           log_every=1, val_every=4)
    hook = NaNIntoLayerInput(3)
    rec = train.run(cfg, callbacks=[hook])
    assert hook.layer is not None
    assert rec["status"] == "diverged" and rec["diverged_at_step"] == 3 and rec["steps"] == 3
    out = tmp_path / "runs/smoke/int8_fallback/llama2/int8_fallback/s0"
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["status"] == "diverged" and prov["diverged_at_step"] == 3
    assert list(_losses(out).index) == [1, 2, 3]  # the finite steps before the NaN, all logged
