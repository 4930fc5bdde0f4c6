"""Casts are checked bit for bit against ml_dtypes (an independent C++ implementation) and against
torch's own float8 casts; stochastic rounding is checked statistically."""

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from lowprec.numerics import FORMATS, FloatFormat, IntFormat, cast, get_format, to_native, to_torch_dtype

REF_DTYPES = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e3m2": ml_dtypes.float6_e3m2fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e2m1": ml_dtypes.float4_e2m1fn,
    "bf16": ml_dtypes.bfloat16,
    "fp16": np.float16,
}
FLOATS = list(REF_DTYPES)

KNOWN = {  # name: (max_normal, min_normal, min_subnormal)
    "e2m1": (6.0, 1.0, 0.5),
    "e3m2": (28.0, 0.25, 0.0625),
    "e2m3": (7.5, 1.0, 0.125),
    "e4m3": (448.0, 2.0**-6, 2.0**-9),
    "e5m2": (57344.0, 2.0**-14, 2.0**-16),
    "fp16": (65504.0, 2.0**-14, 2.0**-24),
    "bf16": ((2 - 2.0**-7) * 2.0**127, 2.0**-126, 2.0**-133),
}


# ----------------------------------------------------------------------------- helpers

def ours(x_np, name, saturate):
    return cast(torch.from_numpy(np.ascontiguousarray(x_np, dtype=np.float32)), name, saturate=saturate).numpy()


def reference(x_np, name, saturate):
    """ml_dtypes round trip; with saturate, clip first and keep NaN as NaN (our documented rule)."""
    x = np.asarray(x_np, dtype=np.float32)
    with np.errstate(all="ignore"):
        if saturate:
            m = np.float32(FORMATS[name].max_normal)
            return np.where(np.isnan(x), np.float32("nan"), np.clip(x, -m, m).astype(REF_DTYPES[name]).astype(np.float32))
        return x.astype(REF_DTYPES[name]).astype(np.float32)


def assert_bits_equal(got, want, x):
    """Bit patterns equal, any NaN equal to any NaN (payloads and NaN signs are not portable)."""
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    if not same.all():
        i = np.flatnonzero(~same)[:8]
        raise AssertionError(f"{(~same).sum()} mismatches; x={x[i]}, got={got[i]}, want={want[i]}")


def all_bf16_patterns():
    return (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)


def random_fp32(n=100_000, seed=0):
    rng = np.random.default_rng(seed)
    mag = np.exp2(rng.uniform(-150, 128, n))  # every magnitude fp32 has, subnormals included
    with np.errstate(over="ignore"):
        x = (rng.choice([-1.0, 1.0], n) * mag).astype(np.float32)
    return x[np.isfinite(x)]


# ----------------------------------------------------------------------------- format descriptions

@pytest.mark.parametrize("name", FLOATS)
def test_derived_constants(name):
    f = FORMATS[name]
    assert (f.max_normal, f.min_normal, f.min_subnormal) == KNOWN[name]
    fi = ml_dtypes.finfo(REF_DTYPES[name]) if name != "fp16" else np.finfo(np.float16)
    assert f.max_normal == float(fi.max)
    assert f.min_subnormal == float(fi.smallest_subnormal)
    assert f.fmax == f.max_normal


def test_int8_format():
    f = FORMATS["int8"]
    assert (f.qmin, f.qmax, f.fmax, f.emax) == (-127, 127, 127.0, 6)
    assert IntFormat("int8", 8, symmetric=False).qmin == -128


def test_get_format_errors_name_the_format():
    assert get_format("e4m3") is FORMATS["e4m3"]
    assert get_format(FORMATS["e5m2"]) is FORMATS["e5m2"]
    with pytest.raises(ValueError, match="e9m9.*e4m3"):
        get_format("e9m9")


def test_invalid_format_description():
    with pytest.raises(ValueError, match="Inf"):
        FloatFormat("bad", 4, 3, 7, inf=True, nan=False)
    with pytest.raises(ValueError, match="fp32"):
        FloatFormat("wide", 11, 52, 1023, inf=True, nan=True)


# ----------------------------------------------------------------------------- RNE casts vs ml_dtypes

@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("name", FLOATS)
def test_all_bf16_bit_patterns(name, saturate):
    x = all_bf16_patterns()
    got, want = ours(x, name, saturate), reference(x, name, saturate)
    nan_in = np.isnan(x)
    assert_bits_equal(got[~nan_in], want[~nan_in], x[~nan_in])
    # NaN stays NaN everywhere; ml_dtypes instead maps it to a zero for formats without NaN.
    assert np.isnan(got[nan_in]).all()


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("name", FLOATS)
def test_random_fp32(name, saturate):
    x = random_fp32()
    assert_bits_equal(ours(x, name, saturate), reference(x, name, saturate), x)


def edge_inputs(f: FloatFormat):
    sub = f.min_subnormal
    top_ulp = 2.0 ** (f.emax - f.man_bits)
    tie_over_max = f.max_normal + top_ulp / 2
    vals = [
        0.0, 2.0**-149, sub / 2, sub * 0.75, sub, 1.5 * sub, 2.5 * sub, 3.5 * sub,  # subnormal ties
        f.min_normal - sub / 2, f.min_normal, f.min_normal * (1 + 2.0**-f.man_bits / 2),
        1.0, f.max_normal - top_ulp / 2, f.max_normal, tie_over_max,
        float(np.nextafter(np.float32(tie_over_max), np.float32(np.inf))),
        float(np.nextafter(np.float32(tie_over_max), np.float32(0))),
        2 * f.max_normal, 3.0e38, math.inf,
    ]
    with np.errstate(over="ignore"):  # bf16's 2 * max is Inf in fp32, on purpose
        x = np.array(vals, dtype=np.float32)
    return np.concatenate([x, -x])


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("name", FLOATS)
def test_edge_inputs(name, saturate):
    x = edge_inputs(FORMATS[name])
    got = ours(x, name, saturate)
    assert_bits_equal(got, reference(x, name, saturate), x)
    assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()  # signed zero kept
    assert np.isnan(ours(np.array([np.nan], np.float32), name, saturate)).all()


def test_documented_overflow_rules():
    x = torch.tensor([464.0, 465.0, 1e4, math.inf, -math.inf])
    nan = math.nan
    torch.testing.assert_close(cast(x, "e4m3", saturate=False), torch.tensor([448.0, nan, nan, nan, nan]), equal_nan=True)
    assert cast(x, "e4m3").tolist() == [448.0, 448.0, 448.0, 448.0, -448.0]
    y = torch.tensor([61439.0, 61440.0, -1e6, -math.inf])
    assert cast(y, "e5m2", saturate=False).tolist() == [57344.0, math.inf, -math.inf, -math.inf]
    assert cast(y, "e5m2").tolist() == [57344.0, 57344.0, -57344.0, -57344.0]
    # no Inf/NaN encoding: overflow saturates even with saturate=False (as ml_dtypes does)
    assert cast(torch.tensor([7.0, 1e9, -math.inf]), "e2m1", saturate=False).tolist() == [6.0, 6.0, -6.0]


@pytest.mark.parametrize("name,dtype", [("e4m3", "float8_e4m3fn"), ("e5m2", "float8_e5m2")])
def test_matches_torch_float8_after_clamp(name, dtype):
    x = torch.from_numpy(np.concatenate([random_fp32(20_000, seed=1), all_bf16_patterns()]))
    x = x[~torch.isnan(x)]
    m = FORMATS[name].max_normal
    want = x.clamp(-m, m).to(getattr(torch, dtype)).float()
    got = cast(x, name)
    assert_bits_equal(got.numpy(), want.numpy(), x.numpy())
    assert torch.equal(to_native(x, name).float(), want)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["e4m3", "e5m2", "e2m1"])
def test_low_precision_inputs(name, dtype):
    x = (torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 30).to(dtype)
    got = cast(x, name)
    assert got.dtype == dtype
    assert torch.equal(got.float(), cast(x.float(), name))


def test_rejects_other_dtypes_and_roundings():
    with pytest.raises(TypeError, match="int64"):
        cast(torch.arange(3), "e4m3")
    with pytest.raises(ValueError, match="rounding"):
        cast(torch.zeros(3), "e4m3", rounding="up")
    with pytest.raises(ValueError, match="noise shape"):
        cast(torch.zeros(3), "e4m3", rounding="stochastic", noise=torch.zeros(4))
    with pytest.raises(ValueError, match="not both"):
        cast(torch.zeros(3), "e4m3", rounding="stochastic", noise=torch.zeros(3), generator=torch.Generator())


def test_torch_dtypes():
    assert to_torch_dtype("e4m3") == torch.float8_e4m3fn
    assert to_torch_dtype("e5m2") == torch.float8_e5m2
    assert to_torch_dtype("bf16") == torch.bfloat16 and to_torch_dtype("fp16") == torch.float16
    assert to_torch_dtype("int8") == torch.int8
    assert to_torch_dtype("e2m1") is None
    with pytest.raises(ValueError, match="e2m1"):
        to_native(torch.zeros(2), "e2m1")


# ----------------------------------------------------------------------------- INT8

def test_int8_rne_and_clamp():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-200, 200, 10_000), np.arange(-130, 131) + 0.5]).astype(np.float32)
    want = np.clip(np.round(x), -127, 127)  # numpy rounds half to even
    assert np.array_equal(cast(torch.from_numpy(x), "int8").numpy(), want)


def test_int8_specials():
    x = torch.tensor([math.nan, math.inf, -math.inf, -0.3, -0.0, 126.5, -127.5])
    got = cast(x, "int8", saturate=False)  # int8 always saturates; the flag is ignored
    assert got.tolist() == [0.0, 127.0, -127.0, 0.0, 0.0, 126.0, -127.0]
    assert not torch.signbit(got[3:5]).any()  # no negative zero in integer codes
    full = IntFormat("int8", 8, symmetric=False)
    assert cast(torch.tensor([-300.0, -127.6, 300.0]), full).tolist() == [-128.0, -128.0, 127.0]
    assert to_native(torch.tensor([3.4, -200.0]), "int8").tolist() == [3, -127]


# ----------------------------------------------------------------------------- stochastic rounding

N_SR = 1_000_000


def neighbours(x: float, name: str):
    """The two grid points around x (equal when x is on the grid), from RNE casts of nearby
    values rather than from the code under test's own quantum computation."""
    f = get_format(name)
    if isinstance(f, IntFormat):
        return math.floor(x), math.ceil(x)
    grid = np.unique(reference(np.linspace(x - abs(x) * 0.3 - f.min_subnormal,
                                           x + abs(x) * 0.3 + f.min_subnormal, 20_001), name, True))
    lo, hi = grid[grid <= x].max(), grid[grid >= x].min()
    return float(lo), float(hi)


SR_CASES = {
    "e4m3": [0.3, -0.3, 1.7e-3, 0.01, 300.0, 440.0, -447.0],  # subnormals, middle, top binade
    "e5m2": [0.3, 5e-6, -2.0e-5, 40000.0, 57000.0],
    "e2m1": [0.2, 0.8, -2.7, 5.5],
    "int8": [0.3, -0.7, 5.25, 126.9, -126.5],
}


@pytest.mark.parametrize("name,x", [(n, v) for n, vs in SR_CASES.items() for v in vs])
def test_stochastic_rounding_unbiased_and_on_grid(name, x):
    lo, hi = neighbours(x, name)
    xs = torch.full((N_SR,), x, dtype=torch.float32)
    q = cast(xs, name, rounding="stochastic", generator=torch.Generator().manual_seed(1)).double()
    assert bool(((q == lo) | (q == hi)).all()), f"values off the two neighbours {lo}, {hi}"
    x32 = float(np.float32(x))
    p = (x32 - lo) / (hi - lo) if hi > lo else 0.0
    sigma = (hi - lo) * math.sqrt(p * (1 - p) / N_SR)
    assert abs(q.mean().item() - x32) <= 5 * sigma + 1e-12 * abs(x32)
    assert 0 < p < 1, "pick test values strictly between grid points"


def test_stochastic_rounding_seeds_and_noise():
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(0)) * 10
    run = lambda seed: cast(x, "e4m3", rounding="stochastic", generator=torch.Generator().manual_seed(seed))
    assert torch.equal(run(3), run(3))
    assert not torch.equal(run(3), run(4))
    noise = torch.rand(x.shape, generator=torch.Generator().manual_seed(3))
    assert torch.equal(cast(x, "e4m3", rounding="stochastic", noise=noise), run(3))
    # u = 0 truncates the magnitude, u -> 1 rounds it away from zero
    lo = cast(x, "e4m3", rounding="stochastic", noise=torch.zeros_like(x))
    hi = cast(x, "e4m3", rounding="stochastic", noise=torch.full_like(x, 1 - 2**-24))
    assert (lo.abs() <= x.abs()).all() and (hi.abs() >= x.abs()).all()
    assert torch.equal(lo, cast(lo, "e4m3")) and torch.equal(hi, cast(hi, "e4m3"))


def test_stochastic_rounding_saturation_and_specials():
    x = torch.tensor([447.9, 1e5, math.inf, math.nan, -0.0, -1e-30])
    q = cast(x, "e4m3", rounding="stochastic", noise=torch.full_like(x, 0.999))
    assert q[:3].tolist() == [448.0, 448.0, 448.0]
    assert math.isnan(q[3]) and q[4] == 0 and torch.signbit(q[4:]).all()
    # without saturation, rounding up past max follows the format's overflow rule
    q = cast(torch.tensor([447.9, 450.0]), "e4m3", rounding="stochastic", saturate=False,
             noise=torch.tensor([0.5, 0.99]))
    assert q[0] == 448.0 and math.isnan(q[1])


@pytest.mark.parametrize("name", ["e4m3", "e5m2", "bf16", "fp16"])
def test_native_fast_path_equals_the_arithmetic_rounding(name):
    """cast() takes torch's own cast for RNE with saturation; the bit arithmetic (used for
    stochastic rounding and non-saturating casts) must agree with it on every bf16 pattern."""
    from lowprec.numerics.formats import _cast_float, _cast_native

    fmt = FORMATS[name]
    x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    a = _cast_native(x, fmt)
    b = _cast_float(x, fmt, "nearest", True, None, None)
    same = (a.view(torch.int32) == b.view(torch.int32)) | (torch.isnan(a) & torch.isnan(b))
    assert bool(same.all())


def test_bf16_rounding_on_the_bits_equals_ml_dtypes():
    """The compiled path's fp32 -> bf16 rounding (``round_bits_to_bf16``) against ml_dtypes on random
    bit patterns (every exponent, NaNs and subnormals among them), ties and the overflow edge."""
    from lowprec.numerics.formats import round_bits_to_bf16

    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=2_000_000, dtype=np.uint64).astype(np.uint32)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.3895e38, 3.3961e38, -3.4028235e38, 1e-45, -1e-40,
                      1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-9, -(1 + 3 * 2**-9)], dtype=np.float32)
    x = np.concatenate([bits.view(np.float32), edges])
    want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    got = round_bits_to_bf16(torch.from_numpy(x)).numpy()
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert not np.array_equal(got[~nan], x[~nan])  # it rounded


def test_compiled_round_cast_keeps_the_rounding_before_a_reduction():
    """Compiled, the amax and FP8 codes of a rounded fp32 activation are eager's (the scale of an
    unrounded amax differs by up to one bf16 step)."""
    from lowprec.gemm import quantize_fp8
    from lowprec.numerics import QuantSpec
    from lowprec.numerics.formats import round_cast

    torch.manual_seed(0)
    x = torch.randn(64, 256) * torch.logspace(-2, 2, 256)
    spec = QuantSpec("e4m3", "block", block=(1, 128))

    def quantize(t):
        return quantize_fp8(round_cast(t, torch.bfloat16), spec)

    want = quantize(x)
    got = torch.compile(quantize, fullgraph=True)(x)
    assert torch.equal(got[1], want[1]) and torch.equal(got[0].float(), want[0].float())
    assert not torch.equal(want[1], quantize_fp8(x, spec)[1])  # the rounding mattered here


def test_compiled_round_cast_is_the_cast_and_its_gradient():
    """Values (Inf, NaN and overflow included) and the gradient of the compiled rounding are the
    plain cast's: the gradient passes through as the cast's does, never cut by the bit arithmetic."""
    from lowprec.numerics.formats import round_cast

    torch.manual_seed(0)
    x = torch.randn(4096) * 1e3
    x[:4] = torch.tensor([float("inf"), -float("inf"), float("nan"), 3.3961e38])
    g = torch.randn(4096).bfloat16()
    grads = []
    for fn in (round_cast, torch.compile(round_cast, fullgraph=True)):
        xi = x.clone().requires_grad_()
        y = fn(xi, torch.bfloat16)
        y.backward(g)
        grads.append((y, xi.grad))
    (want, want_grad), (got, got_grad) = grads
    assert torch.equal(got.float().nan_to_num(), want.float().nan_to_num()) and bool(got[2].isnan())
    assert torch.equal(got_grad, want_grad) and torch.equal(want_grad, g.float())
