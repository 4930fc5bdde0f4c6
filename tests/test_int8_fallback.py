"""INT8 with block-level fallback (lowprec.methods.int8_fallback): error bounds, the two-part 16-bit
representation, each fallback rule, the exact integer GEMM, and the three GEMMs of a converted
layer against float64 with SQNR floors and ceilings."""

import copy
import math

import pytest

from conftest import linear_reference64
import torch
from torch import nn

from lowprec import RECIPES, convert
from lowprec.methods.int8_fallback import (
    DEFAULTS,
    FallbackInt8Quantizer,
    block_absmax_stats,
    block_int8_error,
    expand_mask,
    fallback_quantize,
    int8_block_gemm_reference,
    int8_fallback_recipe,
    select_blocks,
)
from lowprec.numerics import QuantSpec, block_amax, fake_quantize, quantize, rounding_stream, sqnr_db
from lowprec.numerics.scaling import expand_blocks
from lowprec.recipes import OperandCall
from lowprec.telemetry import Telemetry

BLOCKS = [(32, 32), (1, 128), (128, 128)]


def _grid(shape, block):
    return (-(-shape[0] // block[0]), -(-shape[1] // block[1]))


def _planted(block=(32, 32), seed=0, shape=(128, 256)):
    """Gaussian x with outliers in chosen blocks: a whole block scaled up, and a single spike in an
    otherwise ordinary block. Returns x and the bool grid of the planted blocks."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    grid = torch.zeros(_grid(shape, block), dtype=torch.bool)
    br, bc = block
    picks = [(0, 1), (grid.shape[0] - 1, grid.shape[1] - 2)]
    x[picks[0][0] * br:(picks[0][0] + 1) * br, picks[0][1] * bc:(picks[0][1] + 1) * bc] *= 50.0
    x[picks[1][0] * br + br // 2, picks[1][1] * bc + bc // 3] = 400.0
    for i, j in picks:
        grid[i, j] = True
    return x, grid


def _call(layer="l0", gemm="fprop", operand="x", seed=0, training=True):
    class L:
        name = layer
    return OperandCall(L(), gemm, operand, seed, training)


# ----------------------------------------------------------------------------------------------
# Representation


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
def test_quantize_error_bounds_nearest(block):
    """First part: |x - q1/S1| <= 1/(2 S1) per block. Two parts: |x - deq| <= 1/(2 S2) + a few fp32
    ulps of the block amax, with S2 >= 254 S1 (the residual is at most half a first-part step)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(96, 256, generator=g) * torch.exp2(torch.randint(-8, 9, (96, 1), generator=g).float())
    everything = torch.ones(_grid(x.shape, block), dtype=torch.bool)
    fq = fallback_quantize(x, block, everything)
    assert fq.codes.abs().max() <= 127 and fq.residual.abs().max() <= 127
    assert torch.equal(fq.codes, fq.codes.round()) and torch.equal(fq.residual, fq.residual.round())
    s1 = expand_blocks(fq.scale, x.shape, block)
    s2 = expand_blocks(fq.residual_scale, x.shape, block)
    amax = expand_blocks(block_amax(x, block), x.shape, block)
    assert ((x - fq.first_part()).abs() <= 0.5 / s1 * (1 + 1e-6)).all()
    assert ((x - fq.dequantize()).abs() <= 0.5 / s2 + 4 * amax * 2.0**-24).all()
    assert (fq.residual_scale >= 253.9 * fq.scale).all()


def test_two_part_representation_is_16_bit():
    """s1*q1 + s2*q2 resolves the block to ~2^-16 of its amax; normwise it is at least 4x more
    accurate than rounding to bf16 and within 2x of fp16 (better than fp16 on Gaussian data; a
    128x128 block around an outlier gives its small elements a coarser step than fp16's)."""
    for x in (torch.randn(128, 256, generator=torch.Generator().manual_seed(2)), _planted()[0]):
        for block in BLOCKS:
            fq = fallback_quantize(x, block, torch.ones(_grid(x.shape, block), dtype=torch.bool))
            amax = expand_blocks(block_amax(x, block), x.shape, block)
            assert ((x - fq.dequantize()).abs() <= amax * 2.0**-15).all()
            e2 = float((x - fq.dequantize()).norm() / x.norm())
            e8 = float((x - fq.first_part()).norm() / x.norm())
            e_fp16 = float((x - x.half().float()).norm() / x.norm())
            e_bf16 = float((x - x.bfloat16().float()).norm() / x.norm())
            assert e2 < min(2 * e_fp16, e_bf16 / 4) and e_bf16 < e8, (block, e2, e_fp16, e_bf16, e8)
            assert e2 > 1e-7  # still a quantization, not the input


def test_no_fallback_is_jetfire_bit_for_bit():
    x, _ = _planted()
    spec = QuantSpec(fmt="int8", scaling="block", block=(32, 32))
    fq = fallback_quantize(x, (32, 32), torch.zeros(4, 8, dtype=torch.bool))
    assert torch.equal(fq.dequantize(), fake_quantize(x, spec))
    assert fq.residual.abs().sum() == 0 and (fq.residual_scale == 1).all()


def test_fallback_fixes_planted_outliers_and_absmax_picks_exactly_them():
    for block in [(32, 32), (1, 128)]:
        x, planted = _planted(block)
        mask, thr = select_blocks(x, block, "absmax", tau=DEFAULTS["tau"])
        assert torch.equal(mask, planted), block
        assert float(thr) == pytest.approx(8.0 * float(block_amax(x, block).median()))
        with_fb = fallback_quantize(x, block, mask)
        without = fallback_quantize(x, block, None)
        # error inside the planted blocks: orders of magnitude smaller with fallback
        inside = expand_mask(planted, x.shape, block)
        e_with = (x - with_fb.dequantize())[inside].norm()
        e_without = (x - without.dequantize())[inside].norm()
        assert e_with < e_without / 100
        # and the tensor as a whole (bounded by the blocks that stay INT8): > 15 dB better
        assert sqnr_db(x, with_fb.dequantize()) > sqnr_db(x, without.dequantize()) + 15
        # blocks that did not fall back are untouched by it
        assert torch.equal(with_fb.dequantize()[~inside], without.dequantize()[~inside])


# ----------------------------------------------------------------------------------------------
# Rules


def test_topk_ratio_is_exact_even_with_ties():
    x, _ = _planted()
    n = 4 * 8
    for rho in (0.0, 0.02, 0.1, 0.25, 0.5, 1.0):
        mask, _ = select_blocks(x, (32, 32), "topk", rho=rho)
        assert int(mask.sum()) == math.floor(rho * n + 0.5), rho
    # largest blocks first: the planted ones lead
    mask, _ = select_blocks(x, (32, 32), "topk", rho=2 / n)
    assert torch.equal(mask, _planted()[1])
    # all blocks tied: still exactly k, the first k in row-major order (stable)
    mask, _ = select_blocks(torch.ones(64, 64), (32, 32), "topk", rho=0.5)
    assert mask.tolist() == [[True, True], [False, False]]


def test_error_rule_flags_internal_dynamic_range_not_magnitude():
    """A block scaled up as a whole quantizes as well as any other (absmax flags it, error does
    not); a lone spike crushes its block's other elements (both flag it)."""
    x, planted = _planted()
    err = block_int8_error(x, (32, 32))
    assert float(err[~planted].max()) < 0.012  # Gaussian blocks: ~0.0075
    mask, thr = select_blocks(x, (32, 32), "error", error_threshold=DEFAULTS["error_threshold"])
    assert float(thr) == pytest.approx(DEFAULTS["error_threshold"])
    assert mask.tolist()[3][6] and not mask.tolist()[0][1]  # the spike block yes, the scaled one no
    assert int(mask.sum()) == 1
    assert select_blocks(x, (32, 32), "absmax")[0][0, 1]


def test_absmax_reference_level_ignores_zero_blocks():
    x = torch.zeros(128, 128)
    x[:32, :64] = torch.randn(32, 64)        # 2 of 16 blocks carry data
    x[100, 100] = 50.0                        # and one an outlier
    mask, thr = select_blocks(x, (32, 32), "absmax")
    assert mask.sum() == 1 and mask[3, 3]    # not every non-zero block
    assert select_blocks(torch.zeros(64, 64), (32, 32), "absmax")[0].sum() == 0


def test_dynamic_threshold_follows_an_ema_and_checkpoints():
    q = FallbackInt8Quantizer(rule="dynamic", tau=8.0, ema=0.5, quantile=0.5)
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(64, 128, generator=g) for _ in range(6)]
    level = None
    thresholds = []
    for i, x in enumerate(xs):
        x = x * (1.0 if i < 3 else 10.0)      # the layer's activations grow 10x at step 3
        now = float(block_amax(x, (32, 32)).median())  # the lower median, as the rule takes it
        _, stats = q.quantize_operand(x, _call())
        expected = now if level is None else level
        assert stats["fallback_threshold"] == pytest.approx(8.0 * expected, rel=1e-6)
        thresholds.append(stats["fallback_threshold"])
        level = now if level is None else 0.5 * level + 0.5 * now
        assert float(q.state_dict()["l0:fprop.x"]["level"]) == pytest.approx(level, rel=1e-6)
    # lagging, then adapting: right after the jump every block exceeds the old threshold
    assert thresholds[3] == pytest.approx(thresholds[2], rel=0.3)
    assert thresholds[5] > 4 * thresholds[2]
    _, stats = q.quantize_operand(xs[0] * 10.0, _call())
    # evaluation reads the level but does not move it
    before = q.state_dict()
    q.quantize_operand(xs[0] * 1000.0, _call(training=False))
    assert torch.equal(q.state_dict()["l0:fprop.x"]["level"], before["l0:fprop.x"]["level"])
    # keyed per layer, GEMM and operand; checkpointable whole or per layer
    q.quantize_operand(xs[1], _call(layer="l1", gemm="wgrad"))
    sd = q.state_dict()
    assert set(sd) == {"l0:fprop.x", "l1:wgrad.x"} and sd["l0:fprop.x"]["steps"] == 7
    q2 = FallbackInt8Quantizer(rule="dynamic", tau=8.0, ema=0.5)
    q2.load_state_dict(sd)
    assert q2.state_dict().keys() == sd.keys()
    q3 = FallbackInt8Quantizer(rule="dynamic", tau=8.0, ema=0.5)
    q3.load_state_for_layer("l1", q.state_for_layer("l1"))
    assert set(q3.state_dict()) == {"l1:wgrad.x"}
    x = xs[2] * 10.0
    assert torch.equal(q2.quantize_operand(x, _call())[0].mask, q.quantize_operand(x, _call())[0].mask)


def test_dynamic_rule_falls_back_on_planted_outliers():
    q = FallbackInt8Quantizer(rule="dynamic")
    x, planted = _planted()
    fq, stats = q.quantize_operand(x, _call())
    assert torch.equal(fq.mask, planted) and stats["n_fallback"] == 2 and stats["n_blocks"] == 32


# ----------------------------------------------------------------------------------------------
# Integer GEMM reference


def test_integer_gemm_reference_equals_dequantized_product():
    x, planted = _planted(shape=(96, 160))   # K = 160: a partial 32-wide K-group is not needed
    g = torch.Generator().manual_seed(4)
    w = torch.randn(48, 160, generator=g)
    fx = fallback_quantize(x, (32, 32), select_blocks(x, (32, 32), "absmax")[0])
    fw = fallback_quantize(w, (16, 32), select_blocks(w, (16, 32), "topk", rho=0.2)[0])
    assert fx.mask.any() and fw.mask.any()
    a, b = fx.gemm_operands(), fw.gemm_operands()
    y = int8_block_gemm_reference(a[0], a[1], b[0], b[1], (32, 32), (16, 32), *a[2:], *b[2:])
    y64 = fx.dequantize().double() @ fw.dequantize().double().t()
    assert float((y.double() - y64).abs().max() / y64.abs().max()) < 1e-6
    # without the second parts it is the plain INT8 product
    y1 = int8_block_gemm_reference(a[0], a[1], b[0], b[1], (32, 32), (16, 32))
    y1_64 = fx.first_part().double() @ fw.first_part().double().t()
    assert float((y1.double() - y1_64).abs().max() / y1_64.abs().max()) < 1e-6
    assert not torch.allclose(y, y1)
    with pytest.raises(ValueError, match="K-group"):
        int8_block_gemm_reference(a[0], a[1], b[0], b[1], (32, 32), (32, 16))


# ----------------------------------------------------------------------------------------------
# Through QLinear


def _pair(recipe, seed=0):
    torch.manual_seed(seed)
    ref = nn.Linear(256, 128)
    q = nn.Sequential(copy.deepcopy(ref))
    convert(q, recipe)
    return ref, q


def _run(layer, x, g):
    x = x.clone().requires_grad_()
    y = layer(x)
    y.backward(g)
    return y.detach(), x.grad, layer[0].weight.grad


def test_three_gemms_against_float64_and_better_than_jetfire_on_outliers():
    x, _ = _planted(shape=(192, 256))
    g = torch.randn(192, 128, generator=torch.Generator().manual_seed(5))
    ref, q = _pair(int8_fallback_recipe({}))
    _, jet = _pair(RECIPES["int8_block"])
    got, base = _run(q, x, g), _run(jet, x, g)
    want = linear_reference64(ref, x, g)
    s = {k: sqnr_db(w.float(), a) for k, a, w in zip(("out", "dx", "dw"), got, want)}
    s_jet = {k: sqnr_db(w.float(), a) for k, a, w in zip(("out", "dx", "dw"), base, want)}
    # floors from the INT8 operands that remain (W, dY); ceilings below the bf16 recipe's 53 dB on
    # the same data, so an unquantized path cannot pass
    for k, (lo, hi) in {"out": (42, 51), "dx": (34, 44), "dw": (34, 44)}.items():
        assert lo < s[k] < hi, (k, s[k])
    assert s["out"] > s_jet["out"] + 3 and s["dw"] > s_jet["dw"] + 3, (s, s_jet)
    assert s["dx"] == pytest.approx(s_jet["dx"], abs=0.01)  # dgrad has no X: nothing falls back


def test_rule_none_recipe_equals_int8_block_recipe_bit_for_bit():
    """With nothing falling back, the recipe is Jetfire's, stochastic rounding draws included."""
    x, _ = _planted(shape=(64, 256))
    g = torch.randn(64, 128, generator=torch.Generator().manual_seed(6))
    _, q = _pair(int8_fallback_recipe({"rule": "none"}))
    _, jet = _pair(RECIPES["int8_block"])
    for a, b in zip(_run(q, x, g), _run(jet, x, g)):
        assert torch.equal(a, b)


def test_telemetry_reports_fallback_ratio_per_slot():
    tel = Telemetry(every=1)
    layer = nn.Sequential(nn.Linear(256, 128))
    convert(layer, int8_fallback_recipe({}), telemetry=tel)
    x, _ = _planted(shape=(64, 256))
    _run(layer, x, torch.randn(64, 128))
    df = tel.frame().set_index(["gemm", "operand"])
    assert set(df["format"]) == {"int8"}
    assert df.loc[("fprop", "x"), "fallback_ratio"] == pytest.approx(2 / 16)
    assert df.loc[("wgrad", "x"), "fallback_ratio"] == pytest.approx(2 / 16)  # the same blocks, transposed
    for slot in [("fprop", "w"), ("dgrad", "dy"), ("dgrad", "w"), ("wgrad", "dy")]:
        assert df.loc[slot, "fallback_ratio"] == 0.0 and df.loc[slot, "rule"] == "none"
    assert df.loc[("fprop", "x"), "n_blocks"] == 16 and df.loc[("fprop", "x"), "n_fallback"] == 2
    assert ((df["sqnr_db"] > 25) & (df["sqnr_db"] < 80)).all()


def test_stochastic_rounding_reproducible_from_call_seed():
    q = FallbackInt8Quantizer(fallback_operands=["dy"], fallback_gemms=["dgrad"], rule="topk", rho=0.5)
    dy = torch.randn(64, 64, generator=torch.Generator().manual_seed(7))
    a, _ = q(dy, _call(gemm="dgrad", operand="dy", seed=11))
    b, _ = q(dy, _call(gemm="dgrad", operand="dy", seed=11))
    c, _ = q(dy, _call(gemm="dgrad", operand="dy", seed=12))
    assert torch.equal(a, b) and not torch.equal(a, c)
    # the first part is the int8_block recipe's stochastic rounding with the uniforms of the same key
    fq, _ = q.quantize_operand(dy, _call(gemm="dgrad", operand="dy", seed=11))
    spec = QuantSpec(fmt="int8", scaling="block", block=(32, 32), rounding="stochastic")
    sr = quantize(dy, spec, noise=rounding_stream.uniforms(11, (64, 64)))
    assert torch.equal(fq.codes, sr.codes)
    # the residual of the fallback blocks draws its own uniforms (part 1 of the key)
    r = dy - fq.first_part()
    blk = fq.mask.repeat_interleave(32, 0).repeat_interleave(32, 1)
    s2 = expand_blocks(fq.residual_scale, (64, 64), (32, 32))
    u2 = rounding_stream.uniforms(rounding_stream.part_key(11, 1), (64, 64))
    want = torch.copysign(torch.floor((r * s2).abs().clamp(max=127) + u2), r).clamp(-127, 127)
    assert fq.mask.sum() == 2 and torch.equal(fq.residual[blk], want[blk] + 0.0)
    # unbiased: the mean over draws approaches x much closer than one draw's error
    draws = torch.stack([q(dy, _call(gemm="dgrad", operand="dy", seed=s))[0] for s in range(64)])
    one = (draws[0] - dy).abs().mean()
    assert (draws.mean(0) - dy).abs().mean() < one / 4
    # x and w round to nearest: no seed dependence
    x1, _ = q(dy, _call(seed=1))
    x2, _ = q(dy, _call(seed=2))
    assert torch.equal(x1, x2)


def test_nan_and_inf_stay_in_their_block_rows():
    """A NaN or Inf is not lost in INT8: its 32x32 block gets a NaN scale, so the 32 output rows of
    its block-row are NaN, and no other row."""
    _, q = _pair(int8_fallback_recipe({}))
    x, _ = _planted(shape=(96, 256))
    x[3, 5] = float("nan")
    x[70, 7] = float("inf")
    with torch.no_grad():
        y = q(x)
    bad = list(range(32)) + list(range(64, 96))
    assert torch.isnan(y[bad]).all()
    assert torch.isfinite(y[32:64]).all()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("flagged", [True, False], ids=["fallback-block", "int8-block"])
def test_nonfinite_block_has_nan_scale_in_both_parts(bad, flagged):
    """A NaN/Inf is propagated, not routed: its block's first-part scale is NaN (codes 0, residual
    0, residual scale 1) whether or not the block falls back; it dequantizes to NaN, and the exact
    integer GEMM gives NaN in the rows it enters and the other rows exactly as without it."""
    x, _ = _planted(shape=(64, 96))
    x[40, 50] = bad  # block (1, 1)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    mask[1, 1] = flagged
    mask[0, 1] = True  # a finite fallback block beside it keeps its two parts
    fq = fallback_quantize(x, (32, 32), mask)
    nan_grid = torch.zeros(2, 3, dtype=torch.bool)
    nan_grid[1, 1] = True
    assert torch.equal(fq.scale.isnan(), nan_grid)
    assert torch.isfinite(fq.residual_scale).all() and fq.residual_scale[1, 1] == 1.0
    assert (fq.codes[32:, 32:64] == 0).all() and (fq.residual[32:, 32:64] == 0).all()
    assert fq.residual[:32, 32:64].abs().max() > 0  # the finite fallback block is unaffected
    deq = fq.dequantize()
    assert torch.equal(deq.isnan(), expand_blocks(nan_grid, x.shape, (32, 32)))
    w = torch.randn(16, 96, generator=torch.Generator().manual_seed(3))
    fw = fallback_quantize(w, (32, 32))
    y = int8_block_gemm_reference(*fq.gemm_operands()[:2], *fw.gemm_operands()[:2], (32, 32), (32, 32),
                                  *fq.gemm_operands()[2:])
    assert torch.isnan(y[32:]).all() and torch.isfinite(y[:32]).all()
    clean = x.clone()
    clean[32:, 32:64] = 0.0
    fc = fallback_quantize(clean, (32, 32), mask)
    yc = int8_block_gemm_reference(*fc.gemm_operands()[:2], *fw.gemm_operands()[:2], (32, 32), (32, 32),
                                   *fc.gemm_operands()[2:])
    assert torch.equal(y[:32], yc[:32])


def test_nan_in_activation_and_gradient_reach_every_gemm_output():
    """Through a converted layer: NaN in X gives NaN outputs and a NaN weight gradient; NaN in dY
    (stochastically rounded INT8) gives a NaN input gradient and weight gradient. Before, INT8
    turned them into zeros and all three came back finite."""
    torch.manual_seed(0)
    for where in ("x", "dy"):
        q = nn.Sequential(nn.Linear(64, 32))
        convert(q, int8_fallback_recipe({}))
        x = torch.randn(48, 64, requires_grad=True)
        g = torch.randn(48, 32)
        with torch.no_grad():
            (x if where == "x" else g)[5, 7] = math.nan
        y = q(x)
        y.backward(g)
        if where == "x":
            assert torch.isnan(y[:32]).all() and torch.isfinite(y[32:]).all()
        else:
            assert torch.isfinite(y).all() and torch.isnan(x.grad[:32]).all() and torch.isfinite(x.grad[32:]).all()
        assert torch.isnan(q[0].weight.grad).any()


@pytest.mark.parametrize("kwargs,message", [
    (dict(tau=-1), r"^tau: must be a finite number > 0, got -1"),
    (dict(tau=0), r"^tau: must be a finite number > 0, got 0"),
    (dict(tau=math.nan), r"^tau: must be a finite number > 0, got nan"),
    (dict(tau=math.inf), r"^tau: must be a finite number > 0, got inf"),
    (dict(tau="8"), r"^tau: must be a finite number > 0, got '8'"),
    (dict(rho=1.5), r"^rho: must be a finite number >= 0 and <= 1, got 1.5"),
    (dict(rho=math.nan), r"^rho: .* got nan"),
    (dict(error_threshold=-0.1), r"^error_threshold: must be a finite number >= 0, got -0.1"),
    (dict(error_threshold=math.nan), r"^error_threshold: .* got nan"),
    (dict(rule="median"), r"^rule: must be one of"),
])
def test_invalid_rule_parameters_are_named(kwargs, message):
    """Function level (select_blocks), quantizer and recipe alike."""
    x = torch.randn(64, 64)
    args = {"rule": "absmax", **kwargs}
    with pytest.raises(ValueError, match=message):
        select_blocks(x, (32, 32), args.pop("rule"), **args)
    with pytest.raises(ValueError, match=message):
        FallbackInt8Quantizer(**kwargs)
    with pytest.raises(ValueError, match=r"^method \(int8_fallback\): " + message[1:]):
        int8_fallback_recipe(kwargs)


@pytest.mark.parametrize("key,value,message", [
    ("gemm", "cublas", r"gemm: must be 'emulated' or 'kernel', got 'cublas'"),
    ("second_parts", "fused", r"second_parts: must be one of \('tail', 'sparse'\), got 'fused'"),
])
def test_invalid_gemm_options_are_named(key, value, message):
    with pytest.raises(ValueError, match=r"^method \(int8_fallback\): " + message):
        int8_fallback_recipe({key: value})
    assert int8_fallback_recipe({"second_parts": "sparse"}).gemm("fprop")[0].second_parts == "sparse"


@pytest.mark.parametrize("kwargs,message", [
    (dict(ema=1.0), r"^ema: must be a finite number >= 0 and < 1, got 1.0"),
    (dict(ema=-0.5), r"^ema: .* got -0.5"),
    (dict(quantile=math.nan), r"^quantile: .* got nan"),
    (dict(block=(0, 32)), r"^block: must be two positive ints"),
    (dict(block=(32, -1)), r"^block: must be two positive ints"),
])
def test_invalid_quantizer_parameters_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FallbackInt8Quantizer(**kwargs)


def test_empty_and_bad_shapes_are_clear_errors():
    empty = torch.zeros(0, 64)
    for fn in (lambda: fallback_quantize(empty), lambda: select_blocks(empty, (32, 32), "absmax"),
               lambda: block_int8_error(empty, (32, 32)), lambda: block_absmax_stats(empty),
               lambda: FallbackInt8Quantizer()(empty, _call())):
        with pytest.raises(ValueError, match=r"^x: empty tensor of shape \(0, 64\)"):
            fn()
    q = torch.zeros(4, 32)
    d = torch.ones(1, 1)
    with pytest.raises(ValueError, match=r"^qb: empty tensor of shape \(0, 32\)"):
        int8_block_gemm_reference(q, d, torch.zeros(0, 32), d, (32, 32), (32, 32))
    with pytest.raises(ValueError, match=r"^block_b: must be two positive ints"):
        int8_block_gemm_reference(q, d, q, d, (32, 32), (0, 32))
    with pytest.raises(ValueError, match=r"^taus: must be a finite number > 0, got 0"):
        block_absmax_stats(torch.randn(32, 32), taus=(4.0, 0))


# ----------------------------------------------------------------------------------------------
# Recipe config


def test_recipe_config_keys_and_defaults():
    r = int8_fallback_recipe({})
    quant = r.fprop.a
    assert all(getattr(r, gm).a is quant and getattr(r, gm).b is quant for gm in ("fprop", "dgrad", "wgrad"))
    assert quant.block == (32, 32) and quant.rule == "absmax" and quant.tau == 8.0
    assert quant.fallback_gemms == ("fprop", "wgrad") and quant.fallback_operands == ("x",)
    slots = [("fprop", "x"), ("wgrad", "x"), ("fprop", "w"), ("dgrad", "dy"), ("wgrad", "dy")]
    assert [quant.falls_back(gm, o) for gm, o in slots] == [True, True, False, False, False]
    assert quant.rounding("dy") == "stochastic" and quant.rounding("x") == "nearest"
    d = r.to_dict()
    assert d["fprop"]["a"]["quantizer"] == "int8_fallback" and d["fprop"]["a"]["block"] == [32, 32]
    assert "_state" not in d["fprop"]["a"]
    r = int8_fallback_recipe({"block": [1, 128], "rule": "topk", "rho": 0.05, "fallback_operands": ["x", "dy"],
                              "fallback_gemms": ["fprop", "dgrad", "wgrad"], "stochastic_gradients": False})
    quant = r.fprop.a
    assert quant.block == (1, 128) and quant.falls_back("dgrad", "dy") and quant.rounding("dy") == "nearest"
    assert "top 0.05" in r.description
    for bad in ({"rule": "median"}, {"tau": -1}, {"block": [32]}, {"fallback_operands": "x"},
                {"fallback_gemms": ["bprop"]}, {"ema": 1.0}, {"rohh": 0.1}):
        with pytest.raises(ValueError):
            int8_fallback_recipe(bad)


def test_recipe_from_method_config():
    from lowprec import recipes

    r = recipes.recipe_from_config({"recipe": "int8_fallback", "name": "fb", "rule": "error"})
    assert r.name == "int8_fallback" and r.fprop.a.rule == "error"


# ----------------------------------------------------------------------------------------------
# Outlier analysis


def test_block_absmax_stats_patterns():
    g = torch.Generator().manual_seed(8)
    x = torch.randn(256, 256, generator=g)
    st = block_absmax_stats(x)
    assert st["n_blocks"] == 64 and 2.5 < st["kurtosis"] < 3.5 and st["max_over_median"] < 2
    assert st["share_above_8"] == 0 and len(st["ratios"]) == 64
    x[32:64, :] *= 20        # a hot token block-row (token-wise)
    x[:, 224:256] *= 20      # a hot channel block-column (channel-wise)
    x[200, 40] = 1000.0      # and an isolated spike
    st = block_absmax_stats(x)
    n_hot = 8 + 8 - 1 + 1
    assert st["share_above_8"] == pytest.approx(n_hot / 64)
    assert st["rowwise_8"] == pytest.approx(8 / n_hot)
    assert st["colwise_8"] == pytest.approx(7 / n_hot)
    assert st["isolated_8"] == pytest.approx(1 / n_hot)
    assert st["kurtosis"] > 10
