"""MoR (lowprec.methods.mor): GAM inside the partitions, the relative-error statistic, the E4M3/BF16
decision, sub-tensor block rules, the recipe through QLinear, and telemetry."""

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from lowprec import convert
from lowprec.methods.mor import (
    ALL_OPERAND_SLOTS,
    E5M2_DYNAMIC_RANGE,
    SUBTENSOR_E4M3_RANGE,
    MoRQuantizer,
    SubTensorMoRQuantizer,
    decide,
    mor_recipe,
    mor_relative_error,
    mor_tensor,
    quantize_e4m3,
    recipe_coverage,
    relative_error_by_partition,
    subtensor_mor,
)
from lowprec.numerics import block_amax, cast, gam_block_scales, gam_block_scales_bitwise, relative_error, sqnr_db
from lowprec.recipes import OperandCall
from lowprec.telemetry import Telemetry


def gen(seed):
    return torch.Generator().manual_seed(seed)


def wide(shape, seed, octaves=24):
    """Gaussian values times a random power of two per element: many binades, so blocks differ."""
    g = gen(seed)
    e = torch.randint(-octaves // 2, octaves // 2, shape, generator=g).float()
    return torch.randn(shape, generator=g) * torch.exp2(e)


def call(gemm="fprop", operand="x", training=True):
    return OperandCall(layer=None, gemm=gemm, operand=operand, seed=0, training=training)


# ----------------------------------------------------------------------------- scales


def test_gam_in_partitions_equals_stepwise_definition():
    """The partition code's GAM scales equal the paper's bit-level rule (and the closed form)."""
    for seed, (shape, block) in enumerate([((256, 384), (128, 128)), ((200, 96), (64, 64)), ((96, 160), (32, 32))]):
        x = wide(shape, seed)
        qt = quantize_e4m3(x, "block", block, "gam")
        amaxes = block_amax(x, block)
        assert torch.equal(qt.scale, gam_block_scales_bitwise(amaxes, amaxes.max(), 448.0))
        assert torch.equal(qt.scale, gam_block_scales(amaxes, amaxes.max(), 448.0))
        rows = block_amax(x, (1, shape[1]))
        ch = quantize_e4m3(x, "channel", scale="gam")
        assert ch.scale.shape == (shape[0], 1)
        assert torch.equal(ch.scale, gam_block_scales_bitwise(rows, rows.max(), 448.0))
        m, _ = torch.frexp(qt.scale / qt.scale.max())
        assert (m == 0.5).all()  # blocks differ by powers of two only


def test_gam_with_one_block_is_current_scaling():
    x = wide((100, 120), 5)
    cur = quantize_e4m3(x, "tensor")
    for block in [(100, 120), (128, 128)]:
        one = quantize_e4m3(x, "block", block, "gam")
        assert torch.equal(one.scale, cur.scale) and torch.equal(one.codes, cur.codes)
        assert one.scale.item() == torch.div(torch.tensor(448.0), x.abs().max()).item()
    r1, r2 = mor_tensor(x, "block", (128, 128)), mor_tensor(x, "tensor")
    assert r1.rel_error == r2.rel_error and torch.equal(r1.values, r2.values)


@pytest.mark.parametrize("partition,scale", [("tensor", "gam"), ("tensor", "e8"), ("block", "gam"), ("block", "e8"),
                                             ("block", "fp32"), ("channel", "gam"), ("channel", "e8"),
                                             ("channel", "fp32")])
def test_no_scale_maps_a_block_amax_above_448(partition, scale):
    x = wide((256, 192), 7, octaves=40)
    x[:64, :64] = 0.0  # an all-zero block gets a finite scale, too
    qt = quantize_e4m3(x, partition, (64, 64), scale)
    s = qt.expanded_scale()
    assert torch.isfinite(s).all() and (s > 0).all()
    prod = x.double().abs() * s.double()
    assert (prod <= 448.0 * (1 + 2.0**-23)).all()
    # the product as the quantizer forms it never needs the saturating clamp
    assert (cast(x.abs() * s, "e4m3", saturate=False) <= 448.0).all()


# ----------------------------------------------------------------------------- metric


def test_relative_error_matches_float64():
    x = wide((96, 128), 11, octaves=30)
    x[0, :10] = 0.0
    for partition in ("tensor", "block", "channel"):
        q = quantize_e4m3(x, partition, (32, 32)).dequantize()
        got = mor_relative_error(x, q)
        xd, qd = x.double().numpy(), q.double().numpy()
        nz = xd != 0
        want = float(np.mean(np.abs(qd[nz] - xd[nz]) / np.abs(xd[nz])))
        assert got == pytest.approx(want, rel=1e-6)
        assert got == pytest.approx(relative_error(x, q), rel=1e-6)


def test_relative_error_zeros_excluded_underflow_counts_one():
    x = torch.tensor([[448.0, 0.0, 0.0, 2.0**-12, 1.0]])  # scale 1: 2^-12 flushes to 0
    q = quantize_e4m3(x, "tensor").dequantize()
    assert q[0, 3] == 0.0
    assert mor_relative_error(x, q) == pytest.approx(1.0 / 3.0, rel=1e-15)
    assert mor_relative_error(torch.zeros(4, 4), torch.zeros(4, 4)) == 0.0
    bad = x.clone()
    bad[0, 2] = float("nan")
    assert math.isnan(mor_relative_error(bad, bad)) and decide(float("nan")) == "bf16"


def _counted(n_exact, n_flushed, n_zero=7):
    """448 and other E4M3 grid values (error 0) plus values that flush (error 1) under scale 1:
    the tensor's relative error is exactly n_flushed / (n_exact + n_flushed)."""
    vals = [448.0] + [float(v) for v in (torch.arange(1, n_exact) % 16 + 1)]
    vals += [2.0**-12] * n_flushed + [0.0] * n_zero
    return torch.tensor(vals).reshape(1, -1)


def test_decision_flips_exactly_at_threshold():
    q = MoRQuantizer("tensor", threshold=0.045)
    below, at, above = _counted(192, 9), _counted(191, 9), _counted(190, 9)  # 9/201, 9/200, 9/199
    for x, err, fmt in ((below, 9 / 201, "e4m3"), (at, 0.045, "e4m3"), (above, 9 / 199, "bf16")):
        values, stats = q(x, call())
        assert stats["mor_rel_error"] == err and stats["format"] == fmt
        assert stats["e4m3_share"] == (1.0 if fmt == "e4m3" else 0.0)
        want = quantize_e4m3(x, "tensor").dequantize() if fmt == "e4m3" else x.to(torch.bfloat16).float()
        assert torch.equal(values, want)
    # on a random tensor: threshold == its error keeps E4M3, the next float below falls back
    x = wide((64, 64), 13, octaves=16)
    err = mor_tensor(x, "block", (32, 32)).rel_error
    assert mor_tensor(x, "block", (32, 32), threshold=err).format == "e4m3"
    assert mor_tensor(x, "block", (32, 32), threshold=math.nextafter(err, 0)).format == "bf16"
    assert decide(0.045) == "e4m3" and decide(math.nextafter(0.045, 1)) == "bf16"
    # the authors' fake quantization rounds the E4M3 values to BF16 for their BF16 GEMMs
    r = mor_tensor(x, "block", (32, 32), dequant="bf16")
    assert torch.equal(r.values, mor_tensor(x, "block", (32, 32)).values.to(torch.bfloat16).float())


def test_outlier_partitions_and_error_by_partition():
    """One huge outlier in a well-ranged matrix (the authors' channel-scaling test case): per
    tensor and per 128x128 block it flushes its neighbours (BF16), per row only its own row."""
    x = (1 + torch.rand(256, 256, generator=gen(17))).to(torch.bfloat16).float()
    assert mor_tensor(x, "block").format == "e4m3"
    x[100, 37] = 1.46e11
    errs = relative_error_by_partition(x)
    assert set(errs) == {"tensor", "block", "channel"}
    assert errs["tensor"] > 0.99 and 0.2 < errs["block"] < 0.3 and errs["channel"] < 0.03
    fmts = {p: mor_tensor(x, p).format for p in ("tensor", "block", "channel")}
    assert fmts == {"tensor": "bf16", "block": "bf16", "channel": "e4m3"}


# ----------------------------------------------------------------------------- sub-tensor


def _subtensor_case():
    """Four 128x128 blocks with known dynamic ranges."""
    g = gen(19)
    u = lambda n: 1 + torch.rand(n, generator=g)  # magnitudes in [1, 2)
    blocks = [u(128 * 128)]                                                 # DR < 2
    b = u(128 * 128)
    b[::2] *= 1e-5                                                          # DR ~ 2e5, half tiny
    blocks.append(b)
    b = u(128 * 128)
    b[::2] *= 1e-10                                                         # DR ~ 1e10 > E5M2's
    blocks.append(b)
    b = u(128 * 128)
    b[5] = 1e-6                                                             # DR ~ 2e6, one tiny
    blocks.append(b)
    x = torch.cat([blk.reshape(128, 128) for blk in blocks], dim=1)
    return torch.where(torch.rand(x.shape, generator=g) < 0.5, -x, x)


def test_subtensor_rules_on_constructed_blocks():
    x = _subtensor_case()
    three, two = subtensor_mor(x, mode="three_way"), subtensor_mor(x, mode="two_way")
    dr = three.dynamic_range[0]
    assert dr[0] < 2 and SUBTENSOR_E4M3_RANGE < dr[1] < E5M2_DYNAMIC_RANGE
    assert dr[2] > E5M2_DYNAMIC_RANGE and SUBTENSOR_E4M3_RANGE < dr[3] < E5M2_DYNAMIC_RANGE
    e4, e5 = three.e4m3_error[0], three.e5m2_error[0]
    assert e4[1] > e5[1] and e4[3] <= e5[3]  # the rule's comparison goes both ways here
    assert three.choice.tolist() == [[0, 1, 2, 0]]  # E4M3, E5M2, BF16, E4M3
    assert two.choice.tolist() == [[0, 2, 2, 0]]
    assert three.gemm_format == two.gemm_format == "bf16"
    assert three.shares() == {"e4m3_share": 0.5, "e5m2_share": 0.25, "bf16_share": 0.25}
    # values: each block its own representation
    blk = lambda t, j: t[:, 128 * j:128 * (j + 1)]
    for j in (0, 3):
        assert torch.equal(blk(three.values, j), quantize_e4m3(blk(x, j), "tensor", scale="fp32").dequantize())
    s5 = torch.div(torch.tensor(57344.0), blk(x, 1).abs().max())
    assert torch.equal(blk(three.values, 1), cast(blk(x, 1) * s5, "e5m2") / s5)
    assert torch.equal(blk(two.values, 1), blk(x, 1).to(torch.bfloat16).float())
    assert torch.equal(blk(three.values, 2), blk(x, 2).to(torch.bfloat16).float())
    # a tensor of well-ranged blocks runs its GEMM in E4M3
    ok = subtensor_mor(torch.cat([blk(x, 0), blk(x, 0)], dim=0), mode="three_way")
    assert ok.gemm_format == "e4m3" and ok.shares()["e4m3_share"] == 1.0


def test_subtensor_quantizer_stats():
    x = _subtensor_case()
    q = SubTensorMoRQuantizer(mode="three_way")
    values, stats = q(x, call("dgrad", "dy"))
    assert stats["format"] == "bf16" and stats["partition"] == "subtensor"
    assert (stats["e4m3_share"], stats["e5m2_share"], stats["bf16_share"]) == (0.5, 0.25, 0.25)
    assert stats["mor_rel_error"] == mor_relative_error(x, values)
    assert stats["max_block_dynamic_range"] > E5M2_DYNAMIC_RANGE
    assert q.coverage() == [{"layer": "", "gemm": "dgrad", "operand": "dy", "calls": 1, "e4m3": 0, "blocks": 4,
                             "e4m3_blocks": 2, "e5m2_blocks": 1, "bf16_blocks": 1}]


@pytest.mark.parametrize("mode", ["three_way", "two_way"])
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_subtensor_block_holding_nan_or_inf_goes_to_bf16(mode, bad):
    """A block that holds NaN/Inf is BF16 (its dynamic range is Inf), so the value stays as it
    is; E4M3 would saturate an Inf to 448 / scale. The other blocks decide as without it."""
    x = _subtensor_case()
    for j in range(4):  # one bad element in every block, even the well-ranged E4M3 ones
        y = x.clone()
        y[5, 128 * j + 9] = bad
        r = subtensor_mor(y, mode=mode)
        want = subtensor_mor(x, mode=mode).choice.clone()
        want[0, j] = 2
        assert r.choice.tolist() == want.tolist(), j
        assert r.dynamic_range[0, j] == math.inf
        v = r.values[5, 128 * j + 9]
        assert (math.isnan(bad) and math.isnan(v)) or v == bad
        blk = slice(128 * j, 128 * (j + 1))
        assert torch.equal(r.values[:, blk].nan_to_num(), y[:, blk].to(torch.bfloat16).float().nan_to_num())
    # through the quantizer: the GEMM runs in BF16, the Inf reaches it, and telemetry stays finite
    y = x.clone()
    y[0, 0] = math.inf
    values, stats = SubTensorMoRQuantizer(mode=mode)(y, call("fprop", "x"))
    assert values[0, 0] == math.inf and stats["format"] == "bf16"
    assert stats["max_block_dynamic_range"] > E5M2_DYNAMIC_RANGE


def test_tensor_level_mor_with_inf_is_bf16_too():
    x = torch.randn(64, 256, generator=gen(12))
    x[1, 2] = math.inf
    r = mor_tensor(x)
    assert r.format == "bf16" and r.values[1, 2] == math.inf


@pytest.mark.parametrize("threshold", [math.nan, math.inf, -0.01, "0.045", True])
def test_threshold_must_be_a_finite_number(threshold):
    x = torch.randn(16, 16)
    msg = rf"^threshold: must be a finite number >= 0, got {threshold!r}"
    for fn in (lambda: decide(0.01, threshold), lambda: mor_tensor(x, threshold=threshold),
               lambda: MoRQuantizer(threshold=threshold)):
        with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            fn()
    with pytest.raises(ValueError, match=r"^method \(mor\)|^threshold:"):
        mor_recipe({"threshold": threshold})


def test_empty_tensor_and_bad_block_are_clear_errors():
    empty = torch.zeros(0, 128)
    for fn in (lambda: mor_tensor(empty), lambda: subtensor_mor(empty), lambda: quantize_e4m3(empty),
               lambda: relative_error_by_partition(empty), lambda: MoRQuantizer()(empty, call("fprop", "x")),
               lambda: SubTensorMoRQuantizer()(empty, call("fprop", "x"))):
        with pytest.raises(ValueError, match=r"^x: empty tensor of shape \(0, 128\)"):
            fn()
    for bad in ((0, 128), (128, -1), (64.0, 64)):
        with pytest.raises(ValueError, match=r"^block: must be two positive ints"):
            subtensor_mor(torch.ones(4, 4), block=bad)
        with pytest.raises(ValueError, match=r"^block: must be two positive ints"):
            mor_tensor(torch.ones(4, 4), "block", block=bad)


# ----------------------------------------------------------------------------- recipe, QLinear, telemetry


def test_mor_recipe_config():
    r = mor_recipe({})
    assert r.name == "mor_block" and r.high_precision == "bf16"
    quants = [s for g in ("fprop", "dgrad", "wgrad") for s in r.gemm(g)]
    assert all(isinstance(s, MoRQuantizer) for s in quants) and len({id(s) for s in quants}) == 1
    q = quants[0]
    assert (q.partition, q.block, q.scale, q.threshold) == ("block", (128, 128), "gam", 0.045)
    json.dumps(r.to_dict())
    r = mor_recipe({"recipe": "mor", "partition": "channel", "operands": ["fprop.x", "fprop.w"], "include": ["*"]})
    assert r.fprop.a is not None and r.fprop.b is not None
    assert r.dgrad == (None, None) and r.wgrad == (None, None)
    r = mor_recipe({"operands": ["dy"]})
    assert r.fprop == (None, None) and r.dgrad.b is None and r.dgrad.a is not None and r.wgrad.a is not None
    r = mor_recipe({"partition": "subtensor", "block": [64, 64]})
    sq = r.fprop.a
    assert isinstance(sq, SubTensorMoRQuantizer) and (sq.block, sq.mode, sq.scale) == ((64, 64), "two_way", "fp32")
    assert len(ALL_OPERAND_SLOTS) == 6
    for bad, msg in [({"partiton": "block"}, "unknown key"), ({"partition": "row"}, "partition"),
                     ({"partition": "tensor", "block": [64, 64]}, "not used"),
                     ({"partition": "subtensor", "threshold": 0.05}, "not used"),
                     ({"operands": ["fprop.dy"]}, "unknown slot"), ({"scale": "e5"}, "scale"),
                     ({"threshold": -1}, "threshold"), ({"block": [128]}, "block")]:
        with pytest.raises(ValueError, match=msg):
            mor_recipe(bad)


def _manual(t, partition, block):
    return mor_tensor(t, partition, block).values


def test_mor_through_qlinear_equals_manual_computation():
    torch.manual_seed(0)
    lin = nn.Linear(64, 48, bias=False)
    w = lin.weight.detach().clone()
    x = torch.randn(2, 16, 64)
    x[0, 3, 5] = 3e4  # an outlier that sends x (as an E4M3 tensor of 32x32 blocks) to BF16
    dy = torch.randn(2, 16, 48)
    tel = Telemetry(every=1)
    model = nn.Sequential(lin)
    convert(model, mor_recipe({"partition": "block", "block": [32, 32]}), telemetry=tel)
    xr = x.clone().requires_grad_(True)
    y = model(xr)
    y.backward(dy)

    x2d, dy2d = x.reshape(-1, 64), dy.reshape(-1, 48)
    P, B = "block", (32, 32)
    assert mor_tensor(x2d, P, B).format == "bf16" and mor_tensor(w, P, B).format == "e4m3"
    want_y = _manual(x2d, P, B) @ _manual(w, P, B).t()
    want_dx = _manual(dy2d, P, B) @ _manual(w.t().contiguous(), P, B).t()
    want_dw = _manual(dy2d.t().contiguous(), P, B) @ _manual(x2d.t().contiguous(), P, B).t()
    torch.testing.assert_close(y.reshape(-1, 48), want_y, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(xr.grad.reshape(-1, 64), want_dx, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(lin.weight.grad, want_dw, rtol=1e-6, atol=1e-6)

    df = tel.frame()
    assert len(df) == 6
    fmt = {(r.gemm, r.operand): r.format for r in df.itertuples()}
    assert fmt[("fprop", "x")] == "bf16" and fmt[("fprop", "w")] == "e4m3"
    assert set(fmt.values()) <= {"e4m3", "bf16"}
    assert {"mor_rel_error", "e4m3_share", "partition"} <= set(df.columns)
    assert (df["partition"] == "block").all()
    assert set(df["e4m3_share"]) <= {0.0, 1.0}
    row = df[(df.gemm == "fprop") & (df.operand == "x")].iloc[0]
    assert row["mor_rel_error"] == mor_tensor(x2d, P, B).rel_error > 0.045
    cov = {(c["gemm"], c["operand"]): c for c in recipe_coverage(model[0].recipe)}
    assert len(cov) == 6 and cov[("fprop", "x")]["e4m3"] == 0 and cov[("fprop", "w")]["e4m3"] == 1


def test_restricted_operands_keep_other_slots_bf16_in_telemetry():
    torch.manual_seed(1)
    tel = Telemetry(every=1)
    model = nn.Sequential(nn.Linear(32, 32, bias=False))
    w = model[0].weight.detach().clone()
    convert(model, mor_recipe({"partition": "channel", "operands": ["fprop.x", "fprop.w"]}), telemetry=tel)
    x = torch.randn(8, 32)
    y = model(x)
    y.sum().backward()
    torch.testing.assert_close(y, _manual(x, "channel", None) @ _manual(w, "channel", None).t(), rtol=1e-6, atol=1e-6)
    # dgrad with BF16 operands only
    want_dw = torch.ones(8, 32).t() @ x.to(torch.bfloat16).float()
    torch.testing.assert_close(model[0].weight.grad, want_dw, rtol=1e-6, atol=1e-6)
    df = tel.frame()
    fmt = {(r.gemm, r.operand): r.format for r in df.itertuples()}
    assert fmt[("fprop", "x")] == fmt[("fprop", "w")] == "e4m3"
    assert {fmt[k] for k in fmt if k[0] != "fprop"} == {"hp"}


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [{"partition": "block", "block": [64, 64]},
                                 {"partition": "subtensor", "subtensor_mode": "three_way"}],
                         ids=["block64", "subtensor"])
def test_emulated_mor_compiles_whole_and_counts_inside_the_graph(cfg):
    """MoR off the fast path (64x64 blocks, sub-tensor MoR) compiles into one graph too: its decision
    counts are a layer buffer that the graph updates (a Python-side count broke the graph in every
    layer and recompiled per shape until Dynamo's limit), so the compiled step trains like the eager
    one and counts the same calls and blocks."""
    import copy

    from conftest import autocast_loss, compiled_as_one_graph

    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 256))
    eager, comp = copy.deepcopy(base), copy.deepcopy(base)
    recipe_e, recipe_c = mor_recipe(cfg), mor_recipe(cfg)
    convert(eager, recipe_e)
    convert(comp, recipe_c)
    loss = autocast_loss(torch.randn(2, 128, 256), torch.randn(2, 128, 256))
    assert recipe_c.gemm("fprop")[0].coverage() == []
    compiled_as_one_graph(loss)(comp).backward()
    loss(eager).backward()
    for a, b in zip(comp.parameters(), eager.parameters()):
        assert sqnr_db(b.grad, a.grad) > 25
    columns = ("layer", "gemm", "operand", "calls", "blocks")
    cov_c, cov_e = ([tuple(r.get(c) for c in columns) for r in recipe_coverage(r_)] for r_ in (recipe_c, recipe_e))
    # two layers of three GEMMs of two operands, less the first layer's dgrad (its input needs no gradient)
    assert cov_c == cov_e and len(cov_c) == 10 and all(r[3] == 1 for r in cov_c)
