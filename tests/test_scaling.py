"""Scale rules, block layout, delayed scaling and QuantSpec validation."""

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from lowprec.numerics import (
    FORMATS,
    SCALINGS,
    DelayedScaler,
    QuantSpec,
    block_amax,
    cast,
    compute_scale,
    fake_quantize,
    gam_block_scales,
    gam_block_scales_bitwise,
    quantize,
    scale_from_amax,
    sqnr_db,
)

ALL_SPECS = [
    QuantSpec(scaling="none"),
    QuantSpec(scaling="tensor"),
    QuantSpec(scaling="delayed"),
    QuantSpec(scaling="block", block=(1, 128)),
    QuantSpec(scaling="block", block=(128, 128)),
    QuantSpec(scaling="block", block=(32, 32), pow2=True),
    QuantSpec(scaling="channel", axis=-1),
    QuantSpec(scaling="channel", axis=0),
    QuantSpec(scaling="mx"),
    QuantSpec(scaling="gam"),
    QuantSpec(scaling="gam", block=(1, 32)),
]
SPEC_IDS = [f"{s.scaling}-{s.block}-{s.axis}-{s.pow2}" for s in ALL_SPECS]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def octave_spread(shape, block, seed=0, octaves=40):
    """randn whose blocks are multiplied by random powers of two, so block amaxes span many octaves."""
    g = gen(seed)
    x = torch.randn(shape, generator=g)
    nr, nc = -(-shape[0] // block[0]), -(-shape[1] // block[1])
    k = torch.randint(-octaves, octaves, (nr, nc), generator=g).float()
    factor = torch.exp2(k).repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)
    return x * factor[: shape[0], : shape[1]]


# ----------------------------------------------------------------------------- degenerate inputs

@pytest.mark.parametrize("spec", ALL_SPECS, ids=SPEC_IDS)
@pytest.mark.parametrize("kind", ["zero", "equal", "tiny", "huge"])
def test_degenerate_blocks_give_finite_scales(spec, kind):
    value = {"zero": 0.0, "equal": -3.0, "tiny": 1e-45, "huge": 3e38}[kind]
    x = torch.full((130, 200), value)
    s = compute_scale(x, spec)
    assert torch.isfinite(s).all() and (s > 0).all()
    y = fake_quantize(x, spec)
    assert torch.isfinite(y).all()
    if kind == "zero":
        assert (s == 1).all() and (y == 0).all()
    if kind == "equal":  # -3 itself is on the e4m3 grid once scaled by any of our rules
        assert torch.allclose(y, x, rtol=1e-6)


def test_amax_maps_to_fmax_exactly():
    amaxes = torch.exp2(torch.rand(2000, generator=gen(1)) * 120 - 60)
    for name in ["e4m3", "e5m2", "e2m1", "e3m2", "int8"]:
        fmax = FORMATS[name].fmax
        s = scale_from_amax(amaxes, fmax)
        for saturate in (True, False):
            assert torch.equal(cast(amaxes * s, name, saturate=saturate), torch.full_like(amaxes, fmax))
        # correctly rounded fp32 quotient: within one ulp of fmax before the cast
        assert ((amaxes.double() * s.double() / fmax - 1).abs() <= 2.0**-23).all()
    x = torch.randn(64, 64, generator=gen(2))
    q = quantize(x, QuantSpec(scaling="tensor"))
    assert q.codes.abs().max().item() == 448.0
    assert q.scale.shape == (1, 1)


def test_margin_and_pow2():
    a = torch.tensor([3.0, 0.1, 1000.0])
    assert torch.equal(scale_from_amax(a, 448.0, margin=2), scale_from_amax(a, 448.0) / 4)
    p = scale_from_amax(a, 448.0, pow2=True)
    m, _ = torch.frexp(p)
    assert (m == 0.5).all()  # powers of two
    assert (p <= scale_from_amax(a, 448.0)).all() and (p * 2 > scale_from_amax(a, 448.0)).all()


# ----------------------------------------------------------------------------- layout

def reference_block_amax(x2d, block):
    br, bc = block
    rows, cols = x2d.shape
    out = torch.zeros(-(-rows // br), -(-cols // bc))
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = x2d[i * br:(i + 1) * br, j * bc:(j + 1) * bc].abs().max()
    return out


@pytest.mark.parametrize("shape,block", [((130, 300), (128, 128)), ((5, 300), (1, 128)),
                                         ((64, 96), (32, 32)), ((33, 65), (32, 32))])
def test_block_amax_and_padded_shapes(shape, block):
    x = torch.randn(shape, generator=gen(3))
    assert torch.equal(block_amax(x, block), reference_block_amax(x, block))
    spec = QuantSpec(scaling="block", block=block)
    q = quantize(x, spec)
    assert q.scale.shape == reference_block_amax(x, block).shape
    torch.testing.assert_close(q.scale, torch.div(torch.full_like(q.scale, 448.0), reference_block_amax(x, block)))
    assert q.codes.shape == x.shape and q.expanded_scale().shape == x.shape
    assert torch.equal(q.codes, cast(q.codes, "e4m3"))  # codes are on the grid


@pytest.mark.parametrize("shape,block", [((300, 130), (128, 128)), ((300, 5), (1, 128)), ((96, 64), (32, 16)),
                                         ((65, 33), (32, 32))])
def test_block_amax_of_a_transposed_view_is_reduced_over_its_source(shape, block, monkeypatch):
    """A transposed view's block maxima (the backward's X^T, dY^T) equal the reference's, with
    NaN and Inf ignored, and are reduced over the contiguous source (its blocks transposed), never
    over the view itself: no blocks view of the strided tensor is built."""
    from lowprec.numerics import scaling

    src = torch.randn(shape, generator=gen(4)) * torch.logspace(-3, 3, shape[1])
    src[3, 2], src[50, 0] = float("nan"), float("-inf")
    view = src.t()
    want = reference_block_amax(torch.where(torch.isfinite(view), view, torch.zeros_like(view)), block)
    seen = []
    real = scaling._blocks_view
    monkeypatch.setattr(scaling, "_blocks_view", lambda x, b: seen.append(x.is_contiguous()) or real(x, b))
    got = block_amax(view, block)
    assert torch.equal(got, want) and got.shape == want.shape
    assert seen and all(seen), "a blocks view of the strided tensor was built"
    assert torch.equal(scaling.nonfinite_blocks(view, block), scaling.nonfinite_blocks(view.contiguous(), block))
    assert bool(scaling.nonfinite_blocks(view, block).any())


def test_nd_tensors_flatten_leading_dims():
    x = torch.randn(2, 3, 70, generator=gen(4))
    spec = QuantSpec(scaling="block", block=(1, 32))
    q = quantize(x, spec)
    assert q.scale.shape == (6, 3)
    assert torch.equal(q.codes, quantize(x.reshape(6, 70), spec).codes.reshape(2, 3, 70))
    assert fake_quantize(x, spec).shape == x.shape
    one_d = torch.randn(100, generator=gen(5))
    assert quantize(one_d, spec).scale.shape == (1, 4)


def test_channel_scales():
    x = torch.randn(3, 17, 40, generator=gen(6))
    rows = compute_scale(x, QuantSpec(scaling="channel", axis=-1))
    cols = compute_scale(x, QuantSpec(scaling="channel", axis=0))
    x2 = x.reshape(-1, 40)
    assert rows.shape == (51, 1) and cols.shape == (1, 40)
    assert torch.equal(rows, scale_from_amax(x2.abs().amax(1, keepdim=True), 448.0))
    assert torch.equal(cols, scale_from_amax(x2.abs().amax(0, keepdim=True), 448.0))


def test_bf16_input_keeps_dtype():
    x = torch.randn(16, 64, generator=gen(7)).to(torch.bfloat16)
    for spec in ALL_SPECS:
        y = fake_quantize(x, spec)
        assert y.dtype == torch.bfloat16 and y.shape == x.shape


# ----------------------------------------------------------------------------- MX

@pytest.mark.parametrize("name", ["e4m3", "e2m1", "e5m2"])
def test_mx_matches_float64_ocp_rule(name):
    x = octave_spread((16, 320), (1, 32), seed=8, octaves=30)
    x[0, :32] = 0.0  # an all-zero block
    got = fake_quantize(x, QuantSpec(fmt=name, scaling="mx")).double().numpy()

    ref_dtype = {"e4m3": ml_dtypes.float8_e4m3fn, "e2m1": ml_dtypes.float4_e2m1fn, "e5m2": ml_dtypes.float8_e5m2}[name]
    fmt = FORMATS[name]
    xb = x.double().numpy().reshape(16, 10, 32)
    amax = np.abs(xb).max(axis=2, keepdims=True)
    shared = np.clip(np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - fmt.emax, -127, 127)
    X = np.where(amax > 0, 2.0**shared, 1.0)
    elems = np.clip(xb / X, -fmt.max_normal, fmt.max_normal).astype(np.float32).astype(ref_dtype)
    want = (elems.astype(np.float64) * X).reshape(16, 320)
    assert np.array_equal(got, want)


def test_mx_scales_are_e8m0():
    x = octave_spread((8, 256), (1, 32), seed=9, octaves=60)
    s = compute_scale(x, QuantSpec(scaling="mx"))
    m, e = torch.frexp(s)
    assert (m == 0.5).all() and ((e - 1) >= -127).all() and ((e - 1) <= 127).all()
    # the shared exponent clamps at E8M0's range: a block far below 2^-127 * 2^8 gets scale 2^127
    tiny = torch.full((1, 32), 2.0**-140)
    assert compute_scale(tiny, QuantSpec(scaling="mx")).item() == 2.0**127


# ----------------------------------------------------------------------------- GAM

def test_gam_closed_form_equals_bitwise_random_tensors():
    for seed, (shape, block) in enumerate([((512, 768), (128, 128)), ((256, 2048), (1, 32)),
                                           ((300, 500), (32, 32))]):
        x = octave_spread(shape, block, seed=seed, octaves=50)
        amaxes = block_amax(x, block)
        closed = gam_block_scales(amaxes, amaxes.max(), 448.0)
        bitwise = gam_block_scales_bitwise(amaxes, amaxes.max(), 448.0)
        assert torch.equal(closed, bitwise)
        assert torch.equal(compute_scale(x, QuantSpec(scaling="gam", block=block)), closed)
    amaxes = torch.exp2(torch.rand(100_000, generator=gen(10)) * 100 - 50) * torch.rand(100_000, generator=gen(11))
    for fmax in (448.0, 57344.0, 6.0, 127.0):
        assert torch.equal(gam_block_scales(amaxes, amaxes.max(), fmax), gam_block_scales_bitwise(amaxes, amaxes.max(), fmax))


def test_gam_power_of_two_boundaries():
    """Where a block amax sits within a few fp32 ulps of tensor_amax / 2^k, the closed form (exact
    on the amaxes) and the bit rule (on rounded scales) may pick neighbouring k. Both still never
    push a block past fmax, and they differ by exactly a factor of two."""
    g = gen(12)
    n = 200_000
    ag = torch.exp2(torch.rand(n, generator=g) * 60 - 30)
    k = torch.randint(0, 20, (n,), generator=g).float()
    wiggle = torch.randint(-3, 4, (n,), generator=g, dtype=torch.int32)
    ab = ((ag * torch.exp2(-k)).view(torch.int32) + wiggle).view(torch.float32)
    closed = gam_block_scales(ab, ag, 448.0)
    bitwise = gam_block_scales_bitwise(ab, ag, 448.0)
    differ = closed != bitwise
    assert torch.equal(bitwise[differ], 2 * closed[differ])
    for s in (closed, bitwise):
        assert ((ab.double() * s.double()) <= 448.0 * (1 + 2.0**-23)).all()
        assert (cast(ab * s, "e4m3", saturate=False) <= 448.0).all()  # no NaN: never saturates


def test_gam_single_block_is_current_scaling():
    x = torch.randn(100, 120, generator=gen(13)) * 7
    for block in [(128, 128), (100, 120)]:
        gam = QuantSpec(scaling="gam", block=block)
        assert torch.equal(compute_scale(x, gam), compute_scale(x, QuantSpec(scaling="tensor")))
        assert torch.equal(fake_quantize(x, gam), fake_quantize(x, QuantSpec(scaling="tensor")))


def test_gam_structure():
    x = octave_spread((512, 512), (128, 128), seed=14, octaves=20)
    x[:128, :128] = 0.0
    amaxes = block_amax(x, (128, 128))
    s = compute_scale(x, QuantSpec(scaling="gam"))
    s_g = scale_from_amax(amaxes.max(), 448.0)
    m, _ = torch.frexp(s / s_g)
    assert (m == 0.5).all()  # blocks differ from s_g only by powers of two
    assert s[0, 0] == s_g  # the zero block
    mapped = amaxes * s
    nz = amaxes > 0
    assert (mapped[nz] <= 448.0).all() and (mapped[nz] > 224.0).all()  # amax lands in (224, 448]


# ----------------------------------------------------------------------------- delayed scaling

def test_delayed_scaler_max_history():
    sc = DelayedScaler(history_len=3, reduction="max")
    seen = []
    for cur in [1.0, 4.0, 2.0, 0.5, 0.25, 0.125]:
        seen.append(sc.amax(cur).item())
        assert sc.scale(cur).item() == pytest.approx(448.0 / seen[-1], rel=1e-7)
        sc.update(cur)
    # first call uses the current amax; later calls only the history before the current step
    assert seen == [1.0, 1.0, 4.0, 4.0, 4.0, 2.0]
    assert sc.history.tolist() == [0.5, 0.25, 0.125]


def test_delayed_scaler_most_recent_and_megatron():
    for sc in (DelayedScaler(history_len=8, reduction="most_recent"),
               DelayedScaler(history_len=1, reduction="most_recent")):
        seen = []
        for cur in [1.0, 4.0, 2.0, 0.5]:
            seen.append(sc.amax(cur).item())
            sc.update(cur)
        assert seen == [1.0, 1.0, 4.0, 2.0]
    with pytest.raises(ValueError, match="first call"):
        DelayedScaler().amax()


@pytest.mark.parametrize("reduction,length", [("max", 3), ("most_recent", 4), ("max", 1)])
def test_delayed_step_from_a_recorded_history_is_the_same_step(reduction, length):
    """``step(..., recorded=True)`` (the caller knows the history holds an amax) returns what
    ``step`` returns and records the same history, across the ring's wrap; the first call of an
    empty history takes the current amax and is not a recorded one."""
    a, b = (DelayedScaler(history_len=length, reduction=reduction) for _ in range(2))
    assert a.step(torch.tensor(3.0)).item() == b.step(torch.tensor(3.0)).item() == 3.0
    for cur in [1.0, 8.0, 0.5, math.inf, 2.0, 0.25, 0.125]:
        want, got = a.step(torch.tensor(cur)), b.step(torch.tensor(cur), recorded=True)
        assert got.item() == want.item() and got.shape == want.shape
        assert torch.equal(b.history, a.history) and int(b.state[1]) == int(a.state[1])


def test_tensor_amax_ignores_nonfinite_values_at_any_rank():
    from lowprec.linear import tensor_amax
    x = torch.randn(6, 5, 3, generator=gen(3))
    x[1, 2, 0], x[0, 0, 1], x[4, 1, 2] = math.nan, math.inf, -math.inf
    for t in (x, x[0], x[0, 0], x[2, 3, 1]):
        want = torch.where(t.isfinite(), t, 0.0).abs().max()
        got = tensor_amax(t)
        assert got.dtype == torch.float32 and got.shape == () and got.item() == want.item()


def test_delayed_scaler_defaults_and_bad_amax():
    sc = DelayedScaler()
    assert (sc.history_len, sc.reduction, sc.fmax) == (1024, "max", 448.0)
    sc.update(torch.tensor(math.inf))
    assert sc.history.tolist() == [0.0] and sc.scale().item() == 1.0
    sc.update(2.0)
    assert sc.scale().item() == 224.0
    spec = QuantSpec(fmt="e5m2", scaling="delayed", history_len=16, reduction="most_recent", margin=1)
    sc = DelayedScaler.from_spec(spec)
    assert (sc.history_len, sc.reduction, sc.fmax, sc.margin) == (16, "most_recent", 57344.0, 1)


def test_quantize_with_delayed_amax():
    spec = QuantSpec(scaling="delayed")
    sc = DelayedScaler.from_spec(spec)
    x0 = torch.randn(64, 64, generator=gen(15))
    x1 = x0 * 4  # the next step grows: its large values saturate against the stale amax
    for x in (x0, x1):
        cur = x.abs().max()
        q = quantize(x, spec, amax=sc.amax(cur))
        sc.update(cur)
    assert q.scale.item() == scale_from_amax(x0.abs().max(), 448.0).item()
    assert (q.codes.abs() == 448.0).float().mean() > 0.3
    assert torch.equal(quantize(x0, spec).codes, quantize(x0, QuantSpec(scaling="tensor")).codes)
    with pytest.raises(ValueError, match="amax="):
        quantize(x0, QuantSpec(scaling="block"), amax=1.0)


# ----------------------------------------------------------------------------- NaN / Inf

def test_nan_and_inf_do_not_leak_into_scales():
    x = torch.randn(4, 256, generator=gen(16))
    clean = x.clone()
    x[1, 5], x[2, 7] = math.nan, math.inf
    clean[1, 5], clean[2, 7] = 0.0, 0.0
    for spec in ALL_SPECS:
        assert torch.equal(compute_scale(x, spec), compute_scale(clean, spec))
        q = quantize(x, spec)
        y = q.dequantize()
        bad = torch.zeros_like(x, dtype=torch.bool)
        bad[1, 5] = True
        assert torch.isnan(y).eq(bad).all()  # NaN only where it was
        s = q.expanded_scale()[2, 7]
        assert q.codes[2, 7] == 448.0 and y[2, 7] == torch.tensor(448.0) / s  # Inf saturates
    y = fake_quantize(x, QuantSpec(scaling="block", saturate=False))
    assert math.isnan(y[2, 7])  # e4m3 overflow without saturation is NaN
    y = fake_quantize(x, QuantSpec(fmt="e5m2", scaling="block", saturate=False))
    assert y[2, 7] == math.inf


INT8_SPECS = [
    QuantSpec(fmt="int8", scaling="none"),
    QuantSpec(fmt="int8", scaling="tensor"),
    QuantSpec(fmt="int8", scaling="delayed"),
    QuantSpec(fmt="int8", scaling="block", block=(32, 32)),
    QuantSpec(fmt="int8", scaling="block", block=(1, 128), rounding="stochastic"),
    QuantSpec(fmt="int8", scaling="channel", axis=-1),
    QuantSpec(fmt="int8", scaling="channel", axis=0),
    QuantSpec(fmt="int8", scaling="mx"),
    QuantSpec(fmt="int8", scaling="gam", block=(32, 32)),
]


@pytest.mark.parametrize("spec", INT8_SPECS, ids=lambda s: f"{s.scaling}{s.block or ''}{s.axis}{s.rounding[0]}")
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_int8_block_holding_nan_or_inf_dequantizes_to_nan(spec, bad):
    """An INT8 code cannot hold NaN/Inf, so the block that holds one gets a NaN scale and codes 0;
    it dequantizes to NaN everywhere and every other block is exactly what it is without it."""
    x = torch.randn(64, 256, generator=gen(30))
    clean = x.clone()
    x[40, 200] = bad
    clean[40, 200] = 0.0
    q = quantize(x, spec, generator=gen(1))
    ref = quantize(clean, spec, generator=gen(1))
    # the blocks the element belongs to, from the spec's own layout
    r, c = {"none": (64, 256), "tensor": (64, 256), "delayed": (64, 256), "mx": (1, 32)}.get(spec.scaling, q.block)
    hit = torch.zeros_like(x, dtype=torch.bool)
    hit[40 // r * r:(40 // r + 1) * r, 200 // c * c:(200 // c + 1) * c] = True
    if spec.scaling == "channel":
        hit = torch.zeros_like(hit)
        if spec.axis == -1:
            hit[40, :] = True
        else:
            hit[:, 200] = True
    scale = q.expanded_scale()
    assert torch.isnan(scale).eq(hit).all()
    assert torch.equal(compute_scale(x, spec).isnan(), q.scale.isnan())
    y = q.dequantize()
    assert torch.isnan(y).eq(hit).all()
    assert (q.codes[hit] == 0).all()
    if spec.scaling != "gam":  # gam's tensor amax sees the block's finite values, the clean copy a 0
        assert torch.equal(q.codes[~hit], ref.codes[~hit]) and torch.equal(y[~hit], ref.dequantize()[~hit])


def test_float_formats_keep_their_nan_rule():
    """The INT8 rule does not touch FP8: scales stay finite and NaN stays in its own element."""
    x = torch.randn(8, 64, generator=gen(31))
    x[2, 3] = math.nan
    q = quantize(x, QuantSpec(scaling="block", block=(8, 64)))
    assert torch.isfinite(q.scale).all() and torch.isnan(q.dequantize()).sum() == 1


@pytest.mark.parametrize("shape", [(0, 16), (4, 0), (0,), (2, 0, 8)], ids=str)
def test_empty_tensor_is_a_clear_error(shape):
    x = torch.zeros(shape)
    for spec in ALL_SPECS[:3] + INT8_SPECS[3:4]:
        with pytest.raises(ValueError, match=r"^x: empty tensor of shape \(" + str(shape[0])):
            quantize(x, spec)
        with pytest.raises(ValueError, match=r"^x: empty tensor"):
            compute_scale(x, spec)
        with pytest.raises(ValueError, match=r"^x: empty tensor"):
            fake_quantize(x, spec)


def test_block_helpers_name_a_bad_block():
    x = torch.randn(4, 8)
    for bad in ((0, 4), (4,), (2, 2.5), "4x4"):
        with pytest.raises(ValueError, match=r"^block: must be two positive ints"):
            block_amax(x, bad)
    with pytest.raises(ValueError, match=r"^margin:"):
        DelayedScaler(margin=-1)


# ----------------------------------------------------------------------------- quantization happens

@pytest.mark.parametrize("spec", ALL_SPECS, ids=SPEC_IDS)
def test_sqnr_band_e4m3(spec):
    # measured 30.6-31.9 dB on this input; e4m3 (4 significant bits) cannot do much better, and an
    # exact copy (infinite SQNR) would mean nothing was quantized.
    x = torch.randn(256, 512, generator=gen(17))
    assert 28.0 < sqnr_db(x, fake_quantize(x, spec)) < 35.0


def test_stochastic_quantize_reproducible():
    x = torch.randn(64, 96, generator=gen(18))
    spec = QuantSpec(scaling="block", block=(32, 32), rounding="stochastic")
    a = quantize(x, spec, generator=gen(5)).codes
    assert torch.equal(a, quantize(x, spec, generator=gen(5)).codes)
    assert not torch.equal(a, quantize(x, spec, generator=gen(6)).codes)
    noise = torch.rand(x.shape, generator=gen(5))
    assert torch.equal(a, quantize(x, spec, noise=noise).codes)
    assert 22.0 < sqnr_db(x, fake_quantize(x, spec, generator=gen(5))) < 32.0
    with pytest.raises(ValueError, match="noise shape"):
        quantize(x, spec, noise=noise.T)


def test_int8_uses_qmax():
    x = torch.randn(64, 256, generator=gen(19))
    q = quantize(x, QuantSpec(fmt="int8", scaling="block", block=(1, 128)))
    assert torch.equal(q.codes, q.codes.round()) and q.codes.abs().max() == 127
    assert (q.codes.abs().reshape(64, 2, 128).amax(-1) == 127).all()
    assert 38.0 < sqnr_db(x, q.dequantize()) < 48.0
    mx = quantize(x, QuantSpec(fmt="int8", scaling="mx"))
    assert mx.codes.abs().max() <= 127 and mx.codes.abs().reshape(64, 8, 32).amax(-1).min() >= 64


# ----------------------------------------------------------------------------- spec

@pytest.mark.parametrize("kwargs,field", [
    (dict(fmt="e9m9"), "fmt"),
    (dict(scaling="row"), "scaling"),
    (dict(scaling="block", block=(0, 128)), "block"),
    (dict(scaling="block", block=(128,)), "block"),
    (dict(scaling="tensor", block=(1, 128)), "block"),
    (dict(scaling="mx", block=(1, 64)), "block"),
    (dict(scaling="channel", axis=2), "axis"),
    (dict(rounding="up"), "rounding"),
    (dict(saturate="yes"), "saturate"),
    (dict(pow2=1), "pow2"),
    (dict(scaling="gam", pow2=True), "pow2"),
    (dict(margin=-1), "margin"),
    (dict(scaling="mx", margin=1), "margin"),
    (dict(history_len=0), "history_len"),
    (dict(reduction="mean"), "reduction"),
])
def test_spec_validation_names_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}:"):
        QuantSpec(**kwargs)


def test_spec_defaults_and_dict_round_trip():
    assert QuantSpec(scaling="block").block == (1, 128)
    assert QuantSpec(scaling="gam").block == (128, 128)
    assert QuantSpec(scaling="mx").block == (1, 32)
    assert QuantSpec(scaling="tensor").block is None
    for spec in ALL_SPECS:
        d = spec.to_dict()
        assert d["block"] is None or isinstance(d["block"], list)
        assert QuantSpec.from_dict(d) == spec
    with pytest.raises(ValueError, match="blok"):
        QuantSpec.from_dict({"blok": [1, 128]})
    assert set(SCALINGS) == {s.scaling for s in ALL_SPECS}
