"""The fast path of QLinear (lowprec.gemm.FastPlan) on the CPU, where torch._scaled_mm takes
tensor-wise and row-wise FP8: its quantization against the emulation's (itself checked against
ml_dtypes and torch's casts), its GEMMs against the emulation's, and the compiled model."""

import copy

import pytest
import torch
from torch import nn

import lowprec.linear as lin
from conftest import autocast_loss
from lowprec import RECIPES, convert
from lowprec.gemm import TRANSPOSED_FROM, FastPlan, quantize_fp8
from lowprec.numerics import QuantSpec, quantize, sqnr_db
from lowprec.recipes import Gemm, Recipe, recipe_from_config

SPECS = [QuantSpec("e4m3", "tensor"), QuantSpec("e5m2", "tensor"), QuantSpec("e4m3", "channel", axis=-1),
         QuantSpec("e5m2", "channel", axis=-1), QuantSpec("e4m3", "block", block=(1, 128)),
         QuantSpec("e4m3", "block", block=(128, 128)), QuantSpec("e4m3", "tensor", margin=1),
         QuantSpec("e4m3", "block", block=(1, 128), pow2=True)]


@pytest.mark.parametrize("spec", [QuantSpec("e4m3", "delayed"), QuantSpec("e5m2", "delayed", margin=1),
                                  QuantSpec("e4m3", "delayed", pow2=True)], ids=lambda s: f"{s.fmt}-m{s.margin}-p{int(s.pow2)}")
def test_quantize_fp8_with_a_delayed_amax_equals_emulation(spec):
    """Delayed scaling quantizes with the amax its history gives, which may lie below the tensor's
    own (values beyond it saturate) or above it."""
    torch.manual_seed(0)
    x = torch.randn(64, 96) * 3
    x[1, 2], x[3, 4] = float("nan"), float("inf")
    for amax in (torch.tensor(0.5), torch.tensor(40.0), torch.tensor(0.0)):
        codes, scale = quantize_fp8(x, spec, amax)
        ref = quantize(x, spec, amax=amax)
        assert torch.equal(scale, ref.scale)
        assert torch.equal(codes.float().nan_to_num(1234.0), ref.codes.nan_to_num(1234.0))
    assert codes.float().abs().nan_to_num(0).max() > 0
    with pytest.raises(ValueError, match="delayed scaling needs"):
        quantize_fp8(x, spec)
    with pytest.raises(ValueError, match="amax= is for delayed scaling"):
        quantize_fp8(x, QuantSpec("e4m3", "tensor"), torch.tensor(1.0))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.fmt}-{s.scaling}-{s.block}-m{s.margin}-p{int(s.pow2)}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantize_fp8_codes_and_scales_equal_emulation(spec, dtype):
    torch.manual_seed(0)
    x = (torch.randn(200, 300) * torch.logspace(-8, 6, 300)).to(dtype)  # 300: partial 128-blocks
    x[3, 5], x[7, 9], x[11, 13], x[17] = float("nan"), float("inf"), -float("inf"), 0.0
    codes, scale = quantize_fp8(x, spec)
    ref = quantize(x, spec)
    assert codes.dtype == (torch.float8_e4m3fn if spec.fmt == "e4m3" else torch.float8_e5m2)
    assert torch.equal(scale, ref.scale)
    assert torch.equal(codes.float().nan_to_num(1234.0), ref.codes.nan_to_num(1234.0))
    assert torch.isnan(codes.float()[3, 5]) and codes.float()[7, 9] == spec.format.fmax  # NaN kept, Inf saturates


def test_fast_plan_covers_exactly_the_recipes_it_can_run():
    planned = {name for name, r in RECIPES.items() if FastPlan.for_recipe(r) is not None}
    assert planned == {"bf16", "fp8_tensorwise_current", "fp8_hybrid", "fp8_delayed", "fp8_blockwise", "int8_block"}
    delayed = FastPlan.for_recipe(RECIPES["fp8_delayed"])
    # its transposed slots reuse their source's codes and record their own histories
    assert len(delayed.delayed) == 6 and delayed.reused == delayed.delayed_reused == {
        ("dgrad", "w"), ("wgrad", "dy"), ("wgrad", "x")}
    for partition in ("tensor", "channel", "block"):
        assert FastPlan.for_recipe(recipe_from_config({"recipe": "mor", "partition": partition})).has_mor
    for rule in ("absmax", "topk", "error", "dynamic", "none"):
        assert FastPlan.for_recipe(recipe_from_config({"recipe": "int8_fallback", "rule": rule})).int8
    i8_margin = {"fmt": "int8", "scaling": "block", "block": [32, 32], "margin": 1}
    assert {kind for kind, _, _ in FastPlan.for_recipe(recipe_from_config({"recipe": "mor", "partition": "subtensor"}))
            .gemms.values()} == {"mor_sub"}
    for cfg in ({"recipe": "mor", "partition": "subtensor", "dequant": "bf16"},
                {"recipe": "fp8_tensorwise_current", "fprop": {"b": None}},  # FP8 x BF16: no hardware GEMM
                {"recipe": "int8_block", "fprop": {"a": i8_margin}},  # not as the INT8 fast path quantizes
                {"recipe": "int8_block", "wgrad": {"b": {"fmt": "int8", "scaling": "block", "block": [32, 64]}}},
                {"recipe": "int8_block", "fprop": {"a": {"fmt": "e4m3", "scaling": "tensor"},
                                                   "b": {"fmt": "e4m3", "scaling": "tensor"}}}):  # INT8 and FP8
        assert FastPlan.for_recipe(recipe_from_config(cfg)) is None, cfg
    gauss = FastPlan.for_recipe(recipe_from_config({"recipe": "gaussws", "b": 6}))
    assert gauss is not None and gauss.all_hp
    stochastic = QuantSpec("e4m3", "tensor", rounding="stochastic")
    assert FastPlan.for_recipe(Recipe("sr", Gemm(stochastic, stochastic), Gemm(None, None), Gemm(None, None))) is None


def _train_once(layer, x, g):
    x = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    y.float().backward(g)
    return y.detach().float(), x.grad.float(), layer[0].weight.grad.float(), layer[0].bias.grad.float()


@pytest.mark.parametrize("name", ["bf16", "fp8_tensorwise_current", "fp8_hybrid", "fp8_delayed", "fp8_blockwise"])
def test_fast_layer_trains_like_the_emulation(name, monkeypatch, scaled_mm_calls):
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(256, 384))
    fast, emu = copy.deepcopy(base), copy.deepcopy(base)
    convert(fast, RECIPES[name])
    convert(emu, RECIPES[name])
    x, g = torch.randn(4, 64, 256), torch.randn(4, 64, 384)
    calls = scaled_mm_calls
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    got = _train_once(fast, x, g)
    # tensor-wise FP8 runs all three GEMMs on _scaled_mm; blockwise scales are CUDA-only (fp32 fallback)
    tensorwise = {"fp8_tensorwise_current": 3, "fp8_hybrid": 3, "fp8_delayed": 3}
    assert calls["n"] == tensorwise.get(name, 0)
    monkeypatch.setattr(lin, "FAST_PATH", "off")
    want = _train_once(emu, x, g)
    assert calls["n"] == tensorwise.get(name, 0)  # emulation: none
    # the output is bf16 on both paths; gradients differ by the bf16 rounding of the fast GEMMs' outputs
    for a, b in zip(got, want):
        assert sqnr_db(b, a) > 35
    assert int(fast[0].calls) == 0 and int(emu[0].calls) == 1  # no random draws on the fast path


def test_fast_path_is_off_on_the_cpu_by_default_and_on_telemetry_steps(monkeypatch):
    from lowprec.telemetry import Telemetry

    tel = Telemetry(every=2)
    model = nn.Sequential(nn.Linear(64, 32))
    convert(model, RECIPES["fp8_tensorwise_current"], telemetry=tel)
    x = torch.randn(8, 64)
    assert lin.FAST_PATH == "cuda" and not model[0].fast(x)
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    tel.step = 0
    assert not model[0].fast(x)  # a recording step needs the emulation's values
    tel.step = 1
    assert model[0].fast(x)
    monkeypatch.setattr(lin, "FAST_PATH", "gpu")
    with pytest.raises(ValueError, match="LOWPREC_FAST_PATH"):
        model[0].fast(x)


@pytest.mark.slow
def test_compiled_gaussws_model_has_one_graph_and_trains_like_eager(monkeypatch):
    """GaussWS's weight transform keeps host state (noise counter, cache): ``compiled`` runs it
    eagerly and hands the compiled graph the noised weights, whose gradients reach the master
    weights. One graph, no recompilation as the noise changes, and eager's losses."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from lowprec.linear import compiled
    from lowprec.models import build_model, causal_lm_loss

    monkeypatch.setattr(lin, "FAST_PATH", "all")
    torch._dynamo.reset()
    counters.clear()
    losses = []
    for use_compile in (False, True):
        torch.manual_seed(0)
        model = build_model({"family": "llama", "layers": 1, "d_model": 64, "heads": 2, "ffn": 128,
                             "max_seq_len": 32}, 128)
        convert(model, recipe_from_config({"recipe": "gaussws", "b": 6}))
        fn = compiled(model) if use_compile else model
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        run = []
        for _ in range(3):
            x = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))  # one batch: loss must fall
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = causal_lm_loss(fn, x, torch.roll(x, -1, 1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            run.append(loss.item())
        losses.append(run)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    assert losses[1][0] == pytest.approx(losses[0][0], rel=1e-3)
    assert losses[1] == pytest.approx(losses[0], rel=5e-3)  # bf16 kernels of another order
    assert losses[1][2] < losses[1][0]  # the master weights learned through the noised copies


@pytest.mark.parametrize("recipe", ["fp8_tensorwise_current", "fp8_blockwise", "mor_block"])
def test_compiled_layer_quantizes_what_eager_quantizes(recipe, monkeypatch):
    """Compiled with the blocks' Inductor settings (``EAGER_NUMERICS``), a layer rounds an fp32
    activation to bf16 before quantizing it, as the eager layer does: the forward output is bit for
    bit the eager one (the backward's GEMMs may sum in another order and round their bf16 outputs
    differently, so they are held to an SQNR floor)."""
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = {"recipe": "mor", "partition": "block"} if recipe == "mor_block" else {"recipe": recipe}
    eager = nn.Sequential(nn.Linear(256, 256))  # 2x2 blocks of 128; CPU FP8 GEMMs are slow
    convert(eager, recipe_from_config(cfg))
    comp = copy.deepcopy(eager)
    x, g = torch.randn(256, 256), torch.randn(256, 256)  # x fp32, as a residual stream under autocast

    def run(layer, fn):
        xi = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = fn(xi)
        y.float().backward(g)
        return y.detach(), xi.grad, layer[0].weight.grad

    assert eager[0].fast(x.bfloat16())
    ye, dxe, dwe = run(eager, eager)
    yc, dxc, dwc = run(comp, torch.compile(comp, options=lin.EAGER_NUMERICS))
    assert torch.equal(ye, yc)
    assert sqnr_db(dxe.double(), dxc.double()) > 45 and sqnr_db(dwe.double(), dwc.double()) > 45


def test_compile_blocks_settings(monkeypatch):
    from lowprec.linear import compile_blocks
    from lowprec.models import build_model

    seen = []
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: seen.append(kw))
    model = build_model({"family": "llama", "layers": 2, "d_model": 64, "heads": 2, "ffn": 128,
                         "max_seq_len": 32}, 128)
    compile_blocks(model, options={"max_autotune": True})
    assert seen == [{"dynamic": False, "options": {**lin.EAGER_NUMERICS, **lin.GRAPH_PASSES, "max_autotune": True}}] * 2
    with pytest.raises(ValueError, match="options=, not mode="):
        compile_blocks(model, mode="max-autotune")
    seen.clear()
    compiled_model = lin.compiled(model, cudagraphs=True)
    assert seen == [{"dynamic": False, "options": {**lin.EAGER_NUMERICS, **lin.GRAPH_PASSES, "triton.cudagraphs": True}}] * 2
    steps = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: steps.append(1))
    compiled_model(torch.randint(0, 128, (1, 8)))
    assert steps == [1]  # each call begins a new step of the CUDA graphs
    from lowprec.recipes import recipe_from_config
    gauss = copy.deepcopy(model)
    convert(gauss, recipe_from_config({"recipe": "gaussws", "b": 6}))
    # the fast path, as on CUDA: the graph takes GaussWS's bf16 W_c itself (an fp32 copy would be new)
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    graphed = lin.compiled(gauss, cudagraphs=True)  # GaussWS draws into fixed tensors
    layers = lin.transformed_layers(gauss)
    assert layers and not lin.unstable_weight_layers(gauss)
    assert all(m.weight_transform.stable_output for m in layers)
    opt = torch.optim.SGD(gauss.parameters(), lr=1e-3)
    ids = torch.randint(0, 128, (1, 8))
    for _ in range(2):
        out = graphed(ids)
        (out.logits if hasattr(out, "logits") else out).float().square().mean().backward()
        opt.step()
        opt.zero_grad()
    assert steps == [1, 1, 1] and all(m.weight_transform.samples == 2 for m in layers)
    # a transform that still hands a new tensor is caught at the call
    monkeypatch.setattr(lin, "graph_weights", lambda ms: [m.weight.detach().to(torch.bfloat16) for m in ms])
    with pytest.raises(RuntimeError, match="must stay at one address"):
        graphed(ids)
        graphed(ids)
    learn = copy.deepcopy(model)
    convert(learn, recipe_from_config({"recipe": "gaussws", "learnable_b": True}))
    assert lin.unstable_weight_layers(learn)
    with pytest.raises(ValueError, match="learnable b.*not validated under CUDA graphs"):
        lin.compiled(learn, cudagraphs=True)
    ste = copy.deepcopy(model)
    convert(ste, recipe_from_config({"recipe": "ste", "fmt": "mxfp4"}))
    assert lin.unstable_weight_layers(ste)
    with pytest.raises(ValueError, match=r"\(STEWeight: makes a new tensor at every call\)"):
        lin.compiled(ste, cudagraphs=True)


def test_train_compile_setting():
    from lowprec.config import ConfigError
    from lowprec.train import use_compile

    gpu = {"accelerator": "gpu", "strategy": "auto"}
    assert use_compile({}, gpu) and use_compile({"compile": "auto"}, gpu)
    assert not use_compile({}, {"accelerator": "cpu", "strategy": "auto"})
    assert not use_compile({}, {"accelerator": "gpu", "strategy": "fsdp"})
    assert use_compile({"compile": True}, {"accelerator": "cpu", "strategy": "auto"})
    with pytest.raises(ConfigError, match="train.compile"):
        use_compile({"compile": True}, {"accelerator": "gpu", "strategy": "fsdp"})


def test_train_cudagraphs_setting():
    """train.cudagraphs: off by default; auto takes CUDA graphs only where the compiled blocks run on
    one GPU with weights that are graph inputs; true refuses, naming the key and the reason, where
    they cannot run; a result-neutral key (the same kernels), so committed runs stay current."""
    from lowprec.config import RESULT_NEUTRAL_KEYS, ConfigError
    from lowprec.train import use_cudagraphs

    one_gpu = {"accelerator": "gpu", "strategy": "auto", "devices": 1, "num_nodes": 1}
    two_gpus = {**one_gpu, "devices": 2}
    cpu = {"accelerator": "cpu", "strategy": "auto", "devices": 1, "num_nodes": 1}
    from types import SimpleNamespace

    from lowprec.methods.gaussws import GaussWSWeight, STEWeight
    ste = [SimpleNamespace(weight_transform=STEWeight("mxfp4"))]
    learnable = [SimpleNamespace(weight_transform=GaussWSWeight((64, 64), learnable_b=True))]
    assert not use_cudagraphs({}, one_gpu, True, []) and not use_cudagraphs({"cudagraphs": False}, one_gpu, True, [])
    for want in ("auto", True):
        assert use_cudagraphs({"cudagraphs": want}, one_gpu, True, [])
    for place, on, transformed, why in ((cpu, True, [], "not compiled on a GPU"),
                                        (one_gpu, False, [], "not compiled on a GPU"),
                                        (one_gpu, True, ste, r"STEWeight: makes a new tensor at every call"),
                                        (one_gpu, True, learnable, r"GaussWSWeight .*learnable b.*not validated"),
                                        (two_gpus, True, [], "more than one process")):
        assert not use_cudagraphs({"cudagraphs": "auto"}, place, on, transformed)
        with pytest.raises(ConfigError, match=f"train.cudagraphs.*{why}"):
            use_cudagraphs({"cudagraphs": True}, place, on, transformed)
    assert "train.cudagraphs" in RESULT_NEUTRAL_KEYS


def test_compile_numerics_setting_reaches_inductor(monkeypatch):
    """train.compile_numerics: "eager" compiles the blocks with EAGER_NUMERICS, "fast" with each of
    those settings off; anything else is an error naming the key (also in the config schema)."""
    import yaml

    from lowprec.config import CONFIG_DIR
    from lowprec.models import build_model

    assert lin.compile_numerics_options("eager") == {}
    fast = lin.compile_numerics_options("fast")
    assert set(fast) == set(lin.EAGER_NUMERICS) and not any(fast.values())
    with pytest.raises(ValueError, match="train.compile_numerics"):
        lin.compile_numerics_options("exact")
    seen = []
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: seen.append(kw["options"]))
    model = build_model({"family": "llama", "layers": 2, "d_model": 64, "heads": 2, "ffn": 128,
                         "max_seq_len": 32}, 128)
    lin.compiled(model, options=fast)
    lin.compiled(model)
    assert seen == [{**fast, **lin.GRAPH_PASSES}] * 2 + [{**lin.EAGER_NUMERICS, **lin.GRAPH_PASSES}] * 2  # two blocks, each time
    schema = yaml.safe_load((CONFIG_DIR / "schema" / "scale.schema.yaml").read_text())
    assert schema["$defs"]["train"]["properties"]["compile_numerics"]["enum"] == list(lin.COMPILE_NUMERICS)


@pytest.mark.slow
def test_compiled_delayed_scaling_trains_like_eager():
    """Delayed scaling's history is a ring of the layer's buffers that one operator reads and
    records (X's and W's amaxes in the forward, dY's in the backward): step by step a compiled layer
    records the amaxes the eager one records and computes its gradients bit for bit."""
    from lowprec.numerics.scaling import ordered_history

    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(64, 64))
    comp = copy.deepcopy(eager)
    convert(eager, RECIPES["fp8_delayed"])
    convert(comp, RECIPES["fp8_delayed"])
    g = torch.randn(32, 64)

    def loss(model, x):
        return (model(x) * g).sum()

    loss_c = torch.compile(loss, options=lin.EAGER_NUMERICS, fullgraph=True)  # no break: one graph
    for scale in (1.0, 4.0, 2.0):  # a growing, then a shrinking amax: the history sets the scales
        x = scale * torch.randn(32, 64)
        loss(eager, x).backward()
        loss_c(comp, x).backward()
        assert torch.equal(comp[0].weight.grad, eager[0].weight.grad)
    for key in eager[0].scalers:
        assert torch.equal(ordered_history(*comp[0]._history(*key)), ordered_history(*eager[0]._history(*key))), key
    assert ordered_history(*comp[0]._history("fprop", "x")).numel() == 3
    assert comp[0].scalers[("fprop", "x")].history.numel() == 3  # the scaler's own state is the layer's


def _delayed_steps(monkeypatch, paths: list, on_step, setup=None) -> dict:
    """Three training steps of fp8_delayed layers (one per path: "off", "compiled...", or any other
    name for the eager fast path; a name with "recorded" asks before each step whether the histories
    hold an amax, as ``lowprec.linear.compiled`` does), with an amax that grows, then shrinks (the
    history, not the tensor, sets the scale); ``setup(models)`` once converted, ``on_step(models)``
    after each step."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(64, 96))
    models = {p: copy.deepcopy(base) for p in paths}
    for m in models.values():
        convert(m, RECIPES["fp8_delayed"])
    if setup is not None:
        setup(models)
    g = torch.randn(32, 96)
    loss = autocast_loss(None, g)
    loss_c = torch.compile(loss, options=lin.EAGER_NUMERICS, fullgraph=True)
    for scale in (1.0, 8.0, 0.5):
        x = (scale * torch.randn(32, 64)).requires_grad_()  # dgrad's slots too
        for p, m in models.items():
            monkeypatch.setattr(lin, "FAST_PATH", "off" if p == "off" else "all")
            if "recorded" in p:
                m[0].refresh_histories_recorded()
            (loss_c if p.startswith("compiled") else loss)(m, x).backward()
        on_step(models)
    return models


def _histories(model) -> dict:
    from lowprec.numerics.scaling import ordered_history
    return {key: ordered_history(*model[0]._history(*key)) for key in model[0].scalers}


def test_fast_delayed_scaling_records_the_emulations_histories(monkeypatch, scaled_mm_calls):
    """Step by step the fast path records every slot's amax history bit for bit as the emulation
    does, and runs its three GEMMs on _scaled_mm; evaluation reads the histories only."""
    def check(models):
        check.calls, before = scaled_mm_calls["n"], check.calls
        assert check.calls - before == 3
        assert sqnr_db(models["off"][0].weight.grad, models["all"][0].weight.grad) > 35
        want, got = _histories(models["off"]), _histories(models["all"])
        assert want.keys() == got.keys() and len(want) == 6
        for key in want:
            assert torch.equal(got[key], want[key]), key
        # what the fast path's reuse rests on: a slot and the one it reuses record the same amaxes
        for target, source in TRANSPOSED_FROM.items():
            assert torch.equal(want[target], want[source]), target
    check.calls = 0
    fast = _delayed_steps(monkeypatch, ["off", "all"], check)["all"]
    assert _histories(fast)[("wgrad", "x")].numel() == 3
    with torch.no_grad():
        fast.eval()
        fast(torch.randn(8, 64))
    assert _histories(fast)[("fprop", "x")].numel() == 3


def test_fast_delayed_scaling_reuse_is_bit_for_bit(monkeypatch):
    """The transposed slots' reuse of their sources' codes (``FastPlan.reused``) changes nothing:
    step by step, the same gradients bit for bit and the same histories as a plan that quantizes
    every slot's own tensor with its own history."""
    plain = copy.copy(FastPlan.for_recipe(RECIPES["fp8_delayed"]))
    plain.reused = plain.delayed_reused = plain.with_transpose = frozenset()

    def check(models):
        a, b = models["reuse"][0], models["no_reuse"][0]
        assert torch.equal(a.weight.grad, b.weight.grad) and torch.equal(a.bias.grad, b.bias.grad)
        want, got = _histories(models["no_reuse"]), _histories(models["reuse"])
        assert all(torch.equal(got[k], want[k]) for k in want)
    _delayed_steps(monkeypatch, ["reuse", "no_reuse"], check,
                   setup=lambda models: setattr(models["no_reuse"][0], "fast_plan", plain))


def test_fast_delayed_scaling_from_recorded_histories_is_bit_for_bit(monkeypatch):
    """Once every slot's history holds an amax (after the first step), a call that knows it
    (``QLinear.histories_recorded``) quantizes with the histories' amaxes without waiting for its
    own: step by step the same gradients bit for bit and the same histories as the calls that ask
    the history operator."""
    def check(models):
        a, b = models["recorded"][0], models["all"][0]
        check.steps += 1
        assert a.histories_recorded == (check.steps > 1)  # asked before the step: empty before the first
        assert torch.equal(a.weight.grad, b.weight.grad) and torch.equal(a.bias.grad, b.bias.grad)
        want, got = _histories(models["all"]), _histories(models["recorded"])
        assert all(torch.equal(got[k], want[k]) for k in want)
    check.steps = 0
    _delayed_steps(monkeypatch, ["all", "recorded"], check)


def test_histories_recorded_is_asked_a_few_times_and_cleared_by_a_load():
    """The host reads stop once the histories hold an amax, or after HISTORY_READS tries (a slot
    that never records); loading histories asks again."""
    layer = nn.Sequential(nn.Linear(16, 8))
    convert(layer, RECIPES["fp8_delayed"])
    q = layer[0]
    for _ in range(lin.HISTORY_READS + 2):
        assert not q.refresh_histories_recorded()
    assert q._history_reads == lin.HISTORY_READS
    for key in q.scalers:
        q._history(*key)[1].fill_(1)
    assert not q.refresh_histories_recorded()  # no more reads
    q.set_extra_state(q.get_extra_state())
    assert q.refresh_histories_recorded()
    q.set_extra_state({})  # empty histories
    assert not q.histories_recorded and not q.refresh_histories_recorded()


@pytest.mark.slow
def test_compiled_fast_delayed_scaling_equals_eager(monkeypatch):
    """The compiled fast path (one graph: the history operators in its forward and backward) steps
    as the eager fast path does, bit for bit: gradients and histories; also once it quantizes with
    the recorded histories' amaxes (a graph of its own, the histories read before they record)."""
    def check(models):
        for p in ("compiled", "compiled_recorded"):
            assert torch.equal(models[p][0].weight.grad, models["all"][0].weight.grad), p
            want, got = _histories(models["all"]), _histories(models[p])
            assert all(torch.equal(got[k], want[k]) for k in want), p
    models = _delayed_steps(monkeypatch, ["all", "compiled", "compiled_recorded"], check)
    assert models["compiled_recorded"][0].histories_recorded  # its last steps took the recorded path


def test_delayed_recorded_switch_keeps_the_waiting_form(monkeypatch):
    """LOWPREC_DELAYED_RECORDED=0 (``lin.DELAYED_RECORDED``): a layer whose histories hold an amax
    still answers that they do not, so every call keeps the form that waits for its own amax (the
    GPU A/B of the two forms); on, the same layer answers that they do."""
    seen = {}

    def ask(models):
        for switch in (False, True):
            monkeypatch.setattr(lin, "DELAYED_RECORDED", switch)
            layer = models["all"][0]
            layer.histories_recorded, layer._history_reads = False, 0
            seen[switch] = layer.refresh_histories_recorded()
    _delayed_steps(monkeypatch, ["all"], ask)
    assert seen == {False: False, True: True}


@pytest.mark.parametrize("spec", [QuantSpec("e4m3", "tensor"), QuantSpec("e5m2", "tensor", margin=1),
                                  QuantSpec("e4m3", "block", block=(128, 128))], ids=lambda s: f"{s.fmt}-{s.block}")
def test_transposed_operand_equals_quantizing_the_transpose(spec):
    from lowprec.gemm import FP8Operand
    torch.manual_seed(0)
    x = (torch.randn(200, 300) * torch.logspace(-4, 4, 300)).bfloat16()  # partial 128-blocks both ways
    x[3, 5] = float("nan")
    got, want = FP8Operand.of(x, spec).t(), FP8Operand.of(x.t(), spec)
    assert got.codes.is_contiguous() and got.codes.shape == (300, 200)
    assert torch.equal(got.scale, want.scale)
    assert torch.equal(got.codes.float().nan_to_num(7.0), want.codes.float().nan_to_num(7.0))
    with pytest.raises(ValueError, match="kind 'row'"):
        FP8Operand.of(x, QuantSpec("e4m3", "channel", axis=-1)).t()


def test_each_tensor_is_quantized_once_per_scale_layout(monkeypatch):
    import lowprec.gemm as gemm_mod
    assert FastPlan.for_recipe(RECIPES["fp8_tensorwise_current"]).reused == {
        ("dgrad", "w"), ("wgrad", "dy"), ("wgrad", "x")}
    assert FastPlan.for_recipe(RECIPES["fp8_hybrid"]).reused == {("dgrad", "w"), ("wgrad", "dy"), ("wgrad", "x")}
    # blockwise: 128x128 weight blocks transpose; 1x128 activation and gradient blocks are quantized
    # with their transposes in one pass, which the weight gradient takes
    blockwise = FastPlan.for_recipe(RECIPES["fp8_blockwise"])
    assert blockwise.reused == {("dgrad", "w"), ("wgrad", "dy"), ("wgrad", "x")}
    assert blockwise.with_transpose == {("fprop", "x"), ("dgrad", "dy")}
    assert FastPlan.for_recipe(RECIPES["fp8_tensorwise_current"]).with_transpose == frozenset()
    seen, paired = [], []
    real, real_pair = gemm_mod.quantize_fp8, gemm_mod.quantize_fp8_with_transpose
    monkeypatch.setattr(gemm_mod, "quantize_fp8", lambda t, spec, amax=None: seen.append(tuple(t.shape)) or real(t, spec, amax))
    monkeypatch.setattr(gemm_mod, "quantize_fp8_with_transpose",
                        lambda t, spec: paired.append(tuple(t.shape)) or real_pair(t, spec))
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    # delayed scaling: each tensor once too (the transposed slots record their amaxes all the same);
    # blockwise: the weight once, x and dy each with its transpose (two quantizations off CUDA)
    for name, n, pairs in (("fp8_tensorwise_current", 3, []), ("fp8_blockwise", 5, [(128, 256), (128, 384)]),
                           ("fp8_delayed", 3, [])):
        seen.clear(), paired.clear()
        layer = nn.Sequential(nn.Linear(256, 384))
        convert(layer, RECIPES[name])
        _train_once(layer, torch.randn(2, 64, 256), torch.randn(2, 64, 384))
        assert len(seen) == n and paired == pairs, (name, seen, paired)


def test_blockwise_forward_keeps_the_transposed_codes_not_the_activation(monkeypatch):
    """The weight gradient of blockwise FP8 takes the activation's 1x128 codes along tokens, made with
    the forward's: the forward keeps those FP8 codes (x.T's layout) and their scales, not the BF16
    activation nor its own codes, and they are bit for bit the quantization of x.T."""
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    layer = nn.Sequential(nn.Linear(256, 384))
    convert(layer, RECIPES["fp8_blockwise"])
    x = torch.randn(2, 64, 256)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x.requires_grad_())
    saved = [t for t in y.grad_fn.saved_tensors if t is not None]
    spec = RECIPES["fp8_blockwise"].gemm("wgrad")[1]
    codes_t, scale_t = quantize_fp8(x.reshape(-1, 256).bfloat16().t(), spec)
    assert not any(t.dtype == torch.bfloat16 and t.shape == (128, 256) for t in saved)  # no BF16 activation
    kept = [t for t in saved if t.dtype == torch.float8_e4m3fn and t.shape == (256, 128)]
    assert len(kept) == 1 and torch.equal(kept[0].view(torch.uint8), codes_t.view(torch.uint8))
    assert any(t.shape == scale_t.shape and torch.equal(t, scale_t) for t in saved)
    assert not any(t.dtype == torch.float8_e4m3fn and t.shape == (128, 256) for t in saved)  # nor x's own codes


@pytest.mark.parametrize("kind,k", [("1x128", 200), ("128x128", 200), ("1x128", 650)])
def test_padding_k_for_cublas_adds_zeros_in_unit_blocks(kind, k):
    """A block-scaled operand padded along K to whole blocks of 128 (cuBLAS's block-scaled GEMMs;
    lowprec.gemm.hardware_route's "scaled_mm_padded" on CUDA) dequantizes to itself, then zeros:
    every product the padding adds is 0, and the last block keeps its scale."""
    from lowprec.gemm import FP8Operand, _pad_k, dequantized, padded_k

    spec = QuantSpec("e4m3", "block", block=tuple(map(int, kind.split("x"))))
    op = FP8Operand.of(torch.randn(256, k), spec)
    kp = padded_k(k)
    assert kp % 128 == 0 and kp - k < 128
    codes, scale = _pad_k(op, kp)
    assert codes.dtype == op.codes.dtype and codes.shape == (256, kp) and scale.shape[1] == kp // 128
    block = spec.block
    got, want = dequantized(codes, scale, block), dequantized(op.codes, op.scale, block)
    assert torch.equal(got[:, :k], want) and not got[:, k:].any()
    assert torch.equal(scale, op.scale) and want.abs().sum() > 0  # the partial block's own scale


def test_fast_accumulation_setting():
    from lowprec.gemm import fast_accum_gemms
    assert fast_accum_gemms("fprop") == {"fprop"} and fast_accum_gemms("none") == set()
    assert fast_accum_gemms("fprop, dgrad") == {"fprop", "dgrad"}
    with pytest.raises(ValueError, match="LOWPREC_FP8_FAST_ACCUM: unknown GEMM.*'fwd'"):
        fast_accum_gemms("fwd")


@pytest.mark.slow
def test_compiled_blockwise_layer_has_one_graph(monkeypatch):
    """fp8_blockwise's weight-gradient route (the Triton FP8 loop where Triton runs) is decided
    while tracing without a graph break (Dynamo cannot trace the kernel module's availability
    checks: the answer is a constant of the process)."""
    from conftest import assert_one_graph
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    layer = nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 256))
    convert(layer, RECIPES["fp8_blockwise"])
    assert_one_graph(autocast_loss(torch.randn(2, 128, 256), torch.randn(2, 128, 256)), layer)


def test_cpu_row_scales_route_to_the_gemm_of_the_codes_where_torch_refuses_them(monkeypatch):
    """A CPU torch whose ``_scaled_mm`` takes single-number scales only (2.11's oneDNN path asserts
    on row scales) multiplies row-scaled operands as the fp32 GEMM of their codes, the same values
    to fp32 summation order; per-tensor pairs stay on ``_scaled_mm``."""
    import lowprec.gemm as gemm
    from lowprec.gemm import FP8Operand, hardware_route, operand_mm
    from lowprec.numerics import scaled_mm

    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(64, 128, generator=g), torch.randn(32, 128, generator=g)
    row, tensor = QuantSpec("e4m3", "channel", axis=-1), QuantSpec("e4m3", "tensor")
    qa, qb = FP8Operand.of(a, row), FP8Operand.of(b, row)
    ta, tb = FP8Operand.of(a, tensor), FP8Operand.of(b, tensor)
    monkeypatch.setattr(scaled_mm, "CPU_ROW_SCALES", False)
    assert hardware_route(qa, qb) is None and hardware_route(ta, qb) is None
    assert hardware_route(ta, tb) == "scaled_mm"
    got = operand_mm(qa, qb, torch.float32)
    want = gemm.dequantized_mm(qa.codes, qa.scale, (1, a.shape[1]), qb.codes, qb.scale, (1, b.shape[1]))
    assert torch.equal(got, want)
    assert sqnr_db(a.double() @ b.double().t(), got.double()) < 40  # quantized
    monkeypatch.setattr(scaled_mm, "CPU_ROW_SCALES", True)
    assert hardware_route(qa, qb) == "scaled_mm"


@pytest.mark.parametrize("recipe", ["int8_block", "fp8_tensorwise_current"])
def test_compiled_layer_without_bias_keeps_no_copy_of_its_output(recipe, monkeypatch):
    """Compiled, the fast path's autograd Functions return a copy of their output
    (``lowprec.gemm.traced_output``: torch 2.11's Dynamo lost both gradients of an INT8 layer without
    a bias on the GPU), and Inductor's code has no copy of it: the generated forward is the one
    without the copy, and the step's outputs and gradients are the same bit for bit. INT8 through
    its GEMM operator (the torch reference on the CPU), FP8 through the fast path's torch ops."""
    import re

    import lowprec.gemm as gemm_mod
    from lowprec.kernels import int8_fallback_gemm as kf
    from lowprec.methods import int8_ops
    from torch._inductor.utils import run_and_get_code

    monkeypatch.setattr(int8_ops, "KERNEL_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(kf, "triton_available", lambda device=None: False)
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    g = torch.Generator().manual_seed(1)
    x, dy = torch.randn(2, 64, 256, generator=g), torch.randn(2, 64, 256, generator=g) * 1e-2

    def step(model, compiled):
        xx = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = compiled(xx)
        y.float().backward(dy)
        return [y.detach().float(), xx.grad, model[0].weight.grad]

    runs = {}
    for copy_out in (False, True):
        monkeypatch.setattr(gemm_mod, "COPY_TRACED_OUTPUT", copy_out)
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(256, 256, bias=False))
        convert(model, recipe_from_config({"recipe": recipe}))
        got, code = run_and_get_code(step, model, torch.compile(model))
        # the forward's code without its comments and the cache paths of its kernels
        forward = "\n".join(line for line in code[0].splitlines() if not line.lstrip().startswith("#"))
        runs[copy_out] = (got, re.sub(r"/\S+\.(py|so|cpp)\b", "", forward))
    assert recipe != "int8_block" or "int8_block_mm" in runs[True][1]
    assert runs[True][1] == runs[False][1]
    for a, b in zip(runs[True][0], runs[False][0]):
        assert torch.equal(a, b)

