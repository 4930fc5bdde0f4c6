"""Recipe-aware linear layers against independent references: float64 GEMMs, torchao's emulated
Float8Linear, and SQNR floors with upper bounds that prove quantization happened."""

import copy

import pytest

from conftest import linear_reference64
import torch
from torch import nn

from lowprec import RECIPES, convert, recipe_from_config
from lowprec.linear import QLinear
from lowprec.numerics import QuantSpec, fake_quantize, sqnr_db
from lowprec.telemetry import Telemetry

# (floor, ceiling) in dB for output, dX and dW against the float64 reference. Floors start from
# torchao's 18-20 dB for FP8; ceilings sit well below the bf16/fp32 noise floor, so an
# unquantized path cannot pass.
BANDS = {
    "bf16": (40, 60),
    "fp8_tensorwise_current": (20, 32),
    "fp8_delayed": (18, 32),
    "fp8_hybrid": (18, 32),
    "fp8_blockwise": (20, 32),
    "mxfp8": (18, 30),
    "int8_block": (28, 45),
    "int8_rowwise": (28, 48),
}


def _pair(recipe, seed=0, bias=True):
    torch.manual_seed(seed)
    ref = nn.Linear(256, 128, bias=bias)
    q = copy.deepcopy(ref)
    q = nn.Sequential(q)
    convert(q, RECIPES[recipe] if isinstance(recipe, str) else recipe)
    return ref, q


def _run(layer, x, g):
    x = x.clone().requires_grad_()
    y = layer(x)
    y.backward(g)
    w = layer.weight if hasattr(layer, "weight") else layer[0].weight
    return y.detach(), x.grad, w.grad


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_recipe_sqnr_within_band(recipe):
    ref, q = _pair(recipe)
    torch.manual_seed(1)
    x, g = torch.randn(192, 256), torch.randn(192, 128)
    y, dx, dw = _run(q, x, g)
    y64, dx64, dw64 = linear_reference64(ref, x, g)
    lo, hi = BANDS[recipe]
    for what, a, b in (("out", y, y64), ("dx", dx, dx64), ("dw", dw, dw64)):
        if recipe == "int8_rowwise" and what == "dw":
            lo_w, hi_w = 40, 60  # SwitchBack keeps the weight gradient in 16 bits
            assert lo_w < sqnr_db(b.float(), a) < hi_w, (what, sqnr_db(b.float(), a))
            continue
        s = sqnr_db(b.float(), a)
        assert lo < s < hi, (recipe, what, s)


def test_gemm_operands_are_the_documented_quantizations():
    """fp8_blockwise: each operand is quantized with 1x128 groups along its GEMM's reduction
    dimension (K for fprop, N for dgrad, M for wgrad) and 128x128 tiles for W; the emulated GEMM
    equals float64 products of exactly those operands."""
    ref, q = _pair("fp8_blockwise")
    torch.manual_seed(2)
    x, g = torch.randn(256, 256), torch.randn(256, 128)
    y, dx, dw = _run(q, x, g)
    w = ref.weight.detach()
    g1, t128 = QuantSpec("e4m3", "block", block=(1, 128)), QuantSpec("e4m3", "block", block=(128, 128))
    fq = lambda t, s: fake_quantize(t.contiguous(), s).double()  # noqa: E731
    y_ref = fq(x, g1) @ fq(w, t128).t() + ref.bias.detach().double()
    dx_ref = fq(g, g1) @ fq(w.t(), t128).t()
    dw_ref = fq(g.t(), g1) @ fq(x.t(), g1).t()
    for a, b in ((y, y_ref), (dx, dx_ref), (dw, dw_ref)):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)  # fp32 accumulation, K <= 256
    # and the wrong orientation would be far outside that tolerance
    wrong = fq(g.t(), QuantSpec("e4m3", "block", block=(128, 1))) @ fq(x.t(), g1).t()
    assert not torch.allclose(dw.double(), wrong, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ours, cast_grad", [("fp8_tensorwise_current", torch.float8_e4m3fn),
                                             ("fp8_hybrid", torch.float8_e5m2)])
def test_peer_check_against_torchao_float8linear(ours, cast_grad):
    torchao_float8 = pytest.importorskip("torchao.float8")
    from torchao.float8.config import CastConfig

    torch.manual_seed(3)
    base = nn.Sequential(nn.Linear(128, 64, bias=False))
    peer, mine = copy.deepcopy(base), copy.deepcopy(base)
    cfg = torchao_float8.Float8LinearConfig(emulate=True, cast_config_grad_output=CastConfig(target_dtype=cast_grad))
    torchao_float8.convert_to_float8_training(peer, config=cfg)
    convert(mine, RECIPES[ours])
    x, g = torch.randn(64, 128), torch.randn(64, 64)
    yp, dxp, dwp = _run(peer, x, g)
    ym, dxm, dwm = _run(mine, x, g)
    # same codes and scales; only the accumulation order and output rounding may differ
    for a, b in ((ym, yp), (dxm, dxp), (dwm, dwp)):
        assert sqnr_db(b.float(), a.float()) > 60
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-3)


def test_gpt2_conv1d_is_swapped_with_its_transposed_weight():
    from transformers.pytorch_utils import Conv1D

    torch.manual_seed(4)
    conv = Conv1D(64, 32)  # nx=32 inputs, nf=64 outputs, weight (32, 64)
    lin = nn.Linear(32, 64)
    with torch.no_grad():
        lin.weight.copy_(conv.weight.t())
        lin.bias.copy_(conv.bias)
    a, b = nn.Sequential(conv), nn.Sequential(lin)
    keys = list(a.state_dict())
    convert(a, RECIPES["fp8_hybrid"])
    convert(b, RECIPES["fp8_hybrid"])
    assert isinstance(a[0], QLinear) and a[0].transposed and list(a.state_dict()) == keys + ["0.calls", "0._extra_state"]
    x, g = torch.randn(16, 32), torch.randn(16, 64)
    ya, dxa, dwa = _run(a, x, g)
    yb, dxb, dwb = _run(b, x, g)
    assert torch.equal(ya, yb) and torch.equal(dxa, dxb) and torch.equal(dwa.t(), dwb)


def test_convert_include_exclude_and_lm_head_default():
    from lowprec.config import model_config
    from lowprec.models import build_model

    model = build_model(model_config("llama2", "smoke"), vocab_size=64)
    swapped = convert(model, RECIPES["int8_block"])
    assert "lm_head" not in swapped and len(swapped) == 7  # q k v o gate up down
    model = build_model(model_config("llama2", "smoke"), vocab_size=64)
    assert convert(model, RECIPES["int8_block"], include=["*.mlp.*"]) == [
        "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"]
    with pytest.raises(ValueError, match="no linear layer matched"):
        convert(nn.Sequential(nn.Linear(4, 4)), RECIPES["bf16"], include=["nothing*"])


def test_stochastic_rounding_reproducible_from_seed_and_resumable():
    def grads(seed, calls=0):
        torch.manual_seed(0)
        layer = nn.Sequential(nn.Linear(64, 64))
        convert(layer, RECIPES["int8_block"], seed=seed)
        layer[0].calls.fill_(calls)
        x, g = torch.randn(32, 64), torch.randn(32, 64)
        return _run(layer, x, g)[2]
    assert torch.equal(grads(0), grads(0))
    assert not torch.equal(grads(0), grads(1))
    assert not torch.equal(grads(0, calls=0), grads(0, calls=5))  # fresh bits every step...
    assert torch.equal(grads(0, calls=5), grads(0, calls=5))      # ...that a resumed run redraws


def test_delayed_scaling_uses_history_and_checkpoints_it():
    _, q = _pair("fp8_delayed")
    x = torch.randn(64, 256)
    q(x)                   # history: amax(x)
    y_big = q(10 * x)      # scaled with the history's max amax(x): 10x saturates
    state = q.state_dict()
    assert sqnr_db(q[0].weight.detach() @ (10 * x).t(), y_big.t().detach()) < 15
    _, q2 = _pair("fp8_delayed")
    q2.load_state_dict(state)
    hist = q2[0].scalers[("fprop", "x")].history
    assert torch.equal(hist, q[0].scalers[("fprop", "x")].history) and hist.numel() == 2


@pytest.mark.parametrize("recipe", ["fp8_tensorwise_current", "fp8_blockwise", "mxfp8", "int8_rowwise", "int8_block"])
def test_nan_and_inf_inputs(recipe):
    """NaN and Inf stay visible and local. FP8 codes keep NaN, so a NaN input poisons its own
    output row and no other (amaxes skip NaN/Inf; an Inf saturates). INT8 codes cannot hold NaN
    or Inf, so the block that holds one gets a NaN scale: per-row INT8 poisons that row (Inf as
    well), 32x32 blocks poison the 32 rows of their block-row, and nothing else."""
    _, q = _pair(recipe)
    x = torch.randn(64, 256)
    x[3, 5] = float("nan")
    x[6, 7] = float("inf")
    with torch.no_grad():
        y = q(x)
    bad_rows = {"int8_rowwise": [3, 6], "int8_block": list(range(32))}.get(recipe, [3])
    clean_rows = [i for i in range(64) if i not in bad_rows]
    assert torch.isfinite(y[clean_rows]).all()
    assert torch.isnan(y[bad_rows]).all()


def test_telemetry_records_every_operand_only_when_on():
    tel = Telemetry(every=2)
    layer = nn.Sequential(nn.Linear(64, 32))
    convert(layer, RECIPES["fp8_hybrid"], telemetry=tel)
    for step in range(3):
        tel.step = step
        _run(layer, torch.randn(16, 64), torch.randn(16, 32))
    df = tel.frame()
    assert sorted(df["step"].unique()) == [0, 2]
    assert set(zip(df["gemm"], df["operand"])) == {("fprop", "x"), ("fprop", "w"), ("dgrad", "dy"),
                                                   ("dgrad", "w"), ("wgrad", "dy"), ("wgrad", "x")}
    assert set(df[df["operand"] == "dy"]["format"]) == {"e5m2"}
    assert ((df["sqnr_db"] > 15) & (df["sqnr_db"] < 40)).all()
    assert (df["saturation_fraction"] == 0).all()
    off = Telemetry(every=0)
    assert not off.wants("l", "fprop", "x")


def test_compiled_layer_is_not_recompiled_as_the_step_advances():
    """Between telemetry steps a compiled layer reads whether the step records, never the step: a
    guard on the step's value recompiled every layer at every optimizer step until Dynamo's limit
    sent it back to eager (sub-tensor MoR on the GPU spent its whole job there)."""
    import torch._dynamo as dynamo

    tel = Telemetry(every=4)
    layer = nn.Sequential(nn.Linear(64, 32))
    convert(layer, RECIPES["fp8_hybrid"], telemetry=tel)
    step = torch.compile(lambda x: layer(x).sum())
    dynamo.reset()
    tel.step = 1
    step(torch.randn(16, 64)).backward()
    with dynamo.config.patch(error_on_recompile=True):
        for tel.step in (2, 3, 5, 6):
            step(torch.randn(16, 64)).backward()
    assert tel.rows == []


@pytest.mark.parametrize("recipe, draws", [({"recipe": "mor", "partition": "block", "block": [64, 64]}, False),
                                           ({"recipe": "mor", "partition": "subtensor"}, False),
                                           ({"recipe": "int8_fallback"}, True),
                                           ({"recipe": "fp8_hybrid"}, False),
                                           ({"recipe": "bf16",
                                             "wgrad": {"a": {"fmt": "e5m2", "rounding": "stochastic"}}}, True)],
                         ids=["mor_block64", "mor_subtensor", "int8_fallback", "fp8_hybrid", "stochastic"])
def test_layers_make_random_keys_only_for_recipes_that_draw(recipe, draws, monkeypatch):
    """A forward call makes its random key (an operator with a host cost in every compiled call)
    only where an operand draws from it; the call counter advances either way (a resumed run's
    draws depend on it)."""
    import lowprec.linear as linear

    made = []
    real = linear._stream.next_call_key_
    monkeypatch.setattr(linear._stream, "next_call_key_", lambda *a: made.append(1) or real(*a))
    layer = nn.Sequential(nn.Linear(128, 128))
    convert(layer, recipe_from_config(recipe))
    for _ in range(2):
        layer(torch.randn(128, 128)).sum().backward()
    assert len(made) == (2 if draws else 0)
    assert int(layer[0].calls) == 2


def test_recipe_overrides_from_config():
    r = recipe_from_config({"recipe": "fp8_hybrid", "wgrad": {"a": None}})
    assert r.wgrad.a is None and r.wgrad.b == RECIPES["fp8_hybrid"].wgrad.b and r.fprop == RECIPES["fp8_hybrid"].fprop
    r = recipe_from_config({"recipe": "bf16", "fprop": {"a": {"fmt": "e4m3", "scaling": "tensor"}}})
    assert r.quantized and r.fprop.a.fmt == "e4m3"
    with pytest.raises(ValueError, match="unknown recipe 'fp7'"):
        recipe_from_config({"recipe": "fp7"})
    with pytest.raises(ValueError, match=r"method.fprop: fmt"):
        recipe_from_config({"recipe": "bf16", "fprop": {"a": {"fmt": "e9m9"}}})


def test_extension_points_operand_quantizer_and_weight_transform():
    """The two hooks the papers' methods plug into: an operand quantizer (sees the call, returns
    values and telemetry) and a per-layer weight transform whose gradient reaches the master weight."""
    from lowprec.recipes import Gemm, OperandQuantizer, Recipe

    class RoundToHalf(OperandQuantizer):
        name = "round_to_half"

        def __init__(self):
            self.calls = []

        def __call__(self, t, call):
            self.calls.append((call.gemm, call.operand, call.training))
            return torch.round(t * 2) / 2, {"format": "halves", "share_changed": float((t * 2 != torch.round(t * 2)).float().mean())}

    class PlusOne(nn.Module):
        def forward(self, w):
            return w + 1.0

    quant = RoundToHalf()
    recipe = Recipe("custom", Gemm(quant, None), Gemm(None, None), Gemm(None, None), high_precision="fp32",
                    weight_transform=lambda layer: PlusOne())
    tel = Telemetry(every=1)
    layer = nn.Sequential(nn.Linear(8, 4, bias=False))
    w0 = layer[0].weight.detach().clone()
    convert(layer, recipe, telemetry=tel)
    x = torch.randn(5, 8)
    y = layer(x)
    torch.testing.assert_close(y, (torch.round(x * 2) / 2) @ (w0 + 1).t())
    y.sum().backward()
    torch.testing.assert_close(layer[0].weight.grad, torch.ones(5, 4).t() @ x)  # identity through +1
    assert quant.calls == [("fprop", "x", True)]
    row = tel.frame().query("operand == 'x' and gemm == 'fprop'").iloc[0]
    assert row["format"] == "halves" and 0 < row["share_changed"] <= 1


def test_call_count_follows_the_buffer_without_reading_it_each_call():
    layer = nn.Sequential(nn.Linear(16, 16))
    convert(layer, RECIPES["int8_block"])
    q = layer[0]
    x = torch.randn(4, 16)
    for _ in range(3):
        layer(x).sum().backward()
    assert q.call_count() == int(q.calls) == 3
    q.calls.fill_(7)  # changed behind forward's back: read again
    assert q.call_count() == 7
    state = layer.state_dict()
    state["0.calls"] = torch.tensor(11)
    layer.load_state_dict(state)  # a resume
    assert q.call_count() == 11
    layer(x)
    assert q.call_count() == int(q.calls) == 12
    layer.eval()
    layer(x)  # evaluation passes do not count
    assert q.call_count() == 12


@pytest.mark.parametrize("name, own", [("gaussws", {"b": 6}), ("ste", {"fmt": "e2m1"}), ("int8_fallback", {"tau": 4}),
                                       ("mor", {"partition": "tensor"}), ("int8_block", {})])
def test_one_check_of_method_keys(name, own):
    """Every method, built-in or a paper's, accepts the keys any method may carry (one list:
    GENERIC_METHOD_KEYS) beside its own, and the core names an unknown one the same way."""
    from lowprec.recipes import GENERIC_METHOD_KEYS, registry

    section = {"name": "arm", "recipe": name, "include": ["*.mlp.*"], "exclude": [], "telemetry_every": 5, **own}
    assert set(section) - set(own) == GENERIC_METHOD_KEYS
    assert set(own) <= set(registry().methods[name].keys if name in registry().methods else {})
    recipe_from_config(section)
    with pytest.raises(ValueError, match=rf"method \({name}\): unknown key\(s\) \['telemetry'\]; its keys: "):
        recipe_from_config({**section, "telemetry": 5})


def test_the_registry_of_methods():
    """Each paper module declares its methods (lowprec.recipes.Method) and the registry finds them;
    a method module's recipe names are unique, GaussWS offers the weight exports, and the
    recipe's extra loss term is GaussWS's bit decay where bit_decay is set."""
    from lowprec.methods import gaussws
    from lowprec.recipes import Method, registry

    reg = registry()
    assert set(reg.methods) == {"gaussws", "ste", "int8_fallback", "mor"} and not set(reg.methods) & set(RECIPES)
    assert {reg.module_of[n] for n in reg.methods} == {"lowprec.methods.gaussws", "lowprec.methods.int8_fallback",
                                                         "lowprec.methods.mor"}
    assert all(isinstance(m, Method) and m.recipe == n for n, m in reg.methods.items())
    assert set(reg.exports) == set(gaussws.EXPORT_FORMATS)
    assert recipe_from_config({"recipe": "gaussws", "learnable_b": True}).extra_loss is None
    r = recipe_from_config({"recipe": "gaussws", "learnable_b": True, "bit_decay": 0.01})
    assert isinstance(r.extra_loss, gaussws.BitDecay) and r.extra_loss.lam == 0.01
    assert r.to_dict() == recipe_from_config({"recipe": "gaussws", "learnable_b": True}).to_dict()
    with pytest.raises(ValueError, match=r"method \(mor\): section names recipe 'gaussws'"):
        reg.methods["mor"].recipe_for({"recipe": "gaussws"})


def test_the_registry_names_a_clash_and_a_module_without_methods(monkeypatch):
    """A recipe defined twice (two modules, or a module and the built-in recipes) and a registered
    module that exports no METHODS are errors that name the modules."""
    import sys
    import types

    from lowprec import recipes
    from lowprec.recipes import Gemm, Method, Recipe

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, m)
        return name

    plain = Recipe("x", Gemm(None, None), Gemm(None, None), Gemm(None, None))
    cases = [
        ([("lowprec.methods.mor", False), (module("ext_mor", METHODS=(Method("mor", {}, lambda own: plain),)), True)],
         ValueError, "method module ext_mor: recipe 'mor' is also defined by lowprec.methods.mor"),
        ([(module("ext_bf16", METHODS=(Method("bf16", {}, lambda own: plain),)), True)],
         ValueError, "method module ext_bf16: recipe 'bf16' is also defined by the built-in recipes"),
        ([(module("ext_empty"), True)], TypeError, "method module ext_empty: METHODS must be a sequence"),
        ([(module("ext_helper"), False)], None, None),  # a helper module of lowprec.methods: skipped
    ]
    for modules, error, message in cases:
        monkeypatch.setattr(recipes, "_method_modules", lambda modules=modules: modules)
        recipes.registry.cache_clear()
        try:
            if error is None:
                assert recipes.registry().methods == {}
            else:
                with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
                    recipes.registry()
        finally:
            recipes.registry.cache_clear()
