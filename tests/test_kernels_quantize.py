"""Triton quantize kernels vs the torch reference in lowprec.numerics, bit for bit.

Runs on CUDA when a device is present, else under the Triton interpreter on CPU (about 10 s).
Triton picks interpreted vs compiled when a function is decorated with @triton.jit (reading
TRITON_INTERPRET at that moment), so the variable only has to be set before
lowprec.kernels.quantize (and lowprec.kernels._common, whose jit helpers it calls) is first imported;
if some other module imported them earlier without the variable, they are reloaded below. Whether
triton itself was imported earlier does not matter here: the kernels avoid triton.language's own
@jit helpers (tl.max, tl.cdiv, ...), which are fixed when triton is imported.
"""

import importlib
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

from conftest import INTERPRETER_WARNINGS, assert_equal_or_both_nan, kernel_devices, kernel_modules  # noqa: E402

[kq] = kernel_modules("lowprec.kernels.quantize")

from lowprec.numerics import (  # noqa: E402
    QuantSpec,
    compute_scale,
    quantize,
    sqnr_db,
    to_native,
    to_torch_dtype,
)

DEVICES = kernel_devices(kq)

# The interpreter evaluates kernels with numpy, which warns about IEEE events the kernels rely on
# (fmax / tiny amax overflowing before the clamp, signalling-NaN inputs).
pytestmark = INTERPRETER_WARNINGS

FORMATS = ("e4m3", "e5m2", "int8")
DTYPES = (torch.float32, torch.bfloat16)
# (scaling, block) cases; "delayed" gets a scale from an amax that is not x's own.
CASES = [
    ("tensor", None),
    ("delayed", None),
    ("channel", None),
    ("block", (1, 32)),
    ("block", (4, 32)),
    ("block", (32, 32)),
    ("block", (3, 7)),
]
SHAPES = [(8, 64), (5, 40)]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def _fp8_casts(device):
    # On CUDA both the hardware cast and the written-out rounding must match the reference.
    if device == "cuda" and torch.cuda.get_device_capability() >= (8, 9):
        return ["native", "emulated"]
    return ["auto"]


def _special(shape, dtype, device, seed=0):
    """Random values spread over many binades, plus a zero row, a zero (4, 32) block region,
    NaN, +-Inf, an fp32 subnormal and -0.0."""
    g = torch.Generator().manual_seed(seed)
    m, n = shape
    x = torch.randn(m, n, generator=g) * torch.exp2(torch.randint(-6, 7, (m, n), generator=g).float())
    x[1] = 0.0
    x[4:8, 32:64] = 0.0
    x[2, 3] = float("nan")
    x[3, 5] = float("inf")
    x[0, 0] = -float("inf")
    x[m - 1, n - 1] = 1e-42
    x[0, 1] = -0.0
    return x.to(dtype).to(device)


def _spec(fmt, scaling, block, **kw):
    return QuantSpec(fmt, scaling, block=block, **kw)


def _ref_native(codes_fp32, fmt):
    # Reference codes are fp32 values on the grid and in range, so this conversion is exact.
    return codes_fp32.to(torch.float32).to(to_torch_dtype(fmt))


def assert_codes_equal(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == torch.int8:
        assert torch.equal(got, want)
        return
    # Bits, so -0.0 vs +0.0 counts; NaN by position only (the NaN's sign bit is platform-defined).
    gn, wn = got.float().isnan(), want.float().isnan()
    assert torch.equal(gn, wn), "NaN positions differ"
    gb, wb = got.view(torch.uint8)[~gn], want.view(torch.uint8)[~wn]
    bad = (gb != wb).nonzero()
    assert bad.numel() == 0, f"{bad.numel()} codes differ, e.g. got {gb[bad[:5, 0]]} want {wb[bad[:5, 0]]}"


def run_both(x, spec, noise=None, amax=None, fp8_cast="auto"):
    scale = None
    if spec.scaling == "delayed":
        scale = compute_scale(x, spec, amax=amax)
    got_codes, got_scale = kq.quantize_spec(x, spec, scale=scale, noise=noise, fp8_cast=fp8_cast)
    ref = quantize(x, spec, noise=noise, amax=amax)
    return got_codes, got_scale, _ref_native(ref.codes, spec.fmt), ref.scale


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("scaling,block", CASES, ids=lambda c: str(c).replace(" ", ""))
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_reference(device, dtype, fmt, scaling, block, shape):
    x = _special(shape, dtype, device)
    spec = _spec(fmt, scaling, block)
    amax = torch.tensor(3.7, device=device) if scaling == "delayed" else None
    for cast in _fp8_casts(device) if fmt != "int8" else ["auto"]:
        codes, scale, ref_codes, ref_scale = run_both(x, spec, amax=amax, fp8_cast=cast)
        assert_codes_equal(codes, ref_codes)
        assert scale.dtype == torch.float32
        assert_equal_or_both_nan(scale, ref_scale)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_bf16_value(device, fmt):
    """All 65536 bf16 bit patterns (subnormals, ties, NaN, Inf) through the encoder, with a plain
    scale and one that is not a power of two."""
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    x = x.reshape(256, 256).to(device)
    if fmt == "int8":
        # NaN and +-Inf would make the one INT8 block's scale NaN and every code 0 (tested in
        # test_nan_inf_rules): the encoder is checked on the finite patterns
        x = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
    for s in (1.0, 1.37 * 2.0**-3):
        scale = torch.tensor([s], device=device)
        for cast in _fp8_casts(device) if fmt != "int8" else ["auto"]:
            codes, got_scale = kq.quantize_spec(x, QuantSpec(fmt, "delayed"), scale=scale, fp8_cast=cast)
            assert torch.equal(got_scale, scale.reshape(1, 1))
            # What the reference quantize does with a given scale: cast(x * scale).
            assert_codes_equal(codes, to_native(x.float() * scale, fmt))


@pytest.mark.parametrize("fmt,fmax", [("e4m3", 448.0), ("e5m2", 57344.0), ("int8", 127.0)])
def test_overflow_saturates_not_nan(device, fmt, fmax):
    """A scale that pushes values past fmax must give +-fmax codes (the interpreter's and some
    torch versions' fp8 casts give NaN or garbage there)."""
    big = 1e30 if fmt == "int8" else float("inf")  # an INT8 block holding Inf has a NaN scale
    x = torch.tensor([[460.0, 500.0, 1e4, big, -1e4, -big, 1.0, 2.0]], device=device)
    scale = torch.tensor(300.0, device=device)
    for cast in _fp8_casts(device) if fmt != "int8" else ["auto"]:
        codes, _ = kq.quantize_spec(x, QuantSpec(fmt, "delayed"), scale=scale, fp8_cast=cast)
        vals = codes.float().cpu()
        assert not vals.isnan().any()
        assert vals[0, :4].eq(fmax).all() and vals[0, 4:6].eq(-fmax).all()
        assert_codes_equal(codes, to_native(x * scale, fmt))


def test_nan_inf_rules(device):
    x = torch.tensor([[1.0, float("nan"), float("inf"), -2.0]], device=device)
    # Inf and NaN are left out of the amax: the scale is fmax / 2.
    codes, scale = kq.quantize_fp8(x, "e4m3", "channel")
    assert scale.item() == 224.0
    vals = codes.float().cpu()[0]
    assert vals[0] == 224.0 and vals[1].isnan() and vals[2] == 448.0 and vals[3] == -448.0
    # INT8: a block holding NaN or Inf gets a NaN scale and codes 0 (an int8 code cannot hold
    # them); the other blocks are untouched
    y = torch.tensor([[1.0, float("nan"), 3.0, -2.0, float("-inf"), 5.0]], device=device)
    codes, scale = kq.quantize_int8(y, "block", block=(1, 2))
    assert codes.cpu().tolist() == [[0, 0, 127, -85, 0, 0]]
    s = scale.cpu()[0]
    assert s[0].isnan() and s[1].item() == torch.tensor(127.0 / 3.0).item() and s[2].isnan()
    for scaling, kw in (("channel", {}), ("tensor", {}), ("delayed", {"scale": torch.tensor(2.0, device=device)})):
        codes, scale = kq.quantize_int8(y, scaling, **kw)
        assert scale.isnan().all() and not codes.any(), scaling
    codes, scale = kq.quantize_int8(torch.tensor([[4.0, -8.0]], device=device), "delayed",
                                    scale=torch.tensor(2.0, device=device))
    assert scale.item() == 2.0 and codes.cpu().tolist() == [[8, -16]]  # finite: the given scale


def test_scale_edge_cases(device):
    """Zero rows -> 1; a subnormal amax whose fmax/amax overflows -> 2^127; margin and pow2."""
    x = torch.zeros(4, 16, device=device)
    x[1, 3] = 1e-44
    x[2] = torch.linspace(-3, 3, 16)
    x[3, 0] = 1e30
    for margin, pow2 in ((0, False), (2, False), (0, True), (1, True)):
        for scaling, block in (("channel", None), ("block", (2, 8)), ("tensor", None)):
            spec = QuantSpec("e4m3", scaling, block=block, margin=margin, pow2=pow2)
            codes, scale, ref_codes, ref_scale = run_both(x, spec)
            assert_equal_or_both_nan(scale, ref_scale)
            assert_codes_equal(codes, ref_codes)
    _, scale = kq.quantize_fp8(x, "e4m3", "channel")
    assert scale[0].item() == 1.0 and scale[1].item() == 2.0**127


@pytest.mark.parametrize("scaling,block", [("tensor", None), ("channel", None), ("block", (1, 32)), ("block", (3, 7))])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_int8_stochastic_rounding_matches_reference(device, dtype, scaling, block):
    x = _special((5, 40), dtype, device, seed=1)
    g = torch.Generator().manual_seed(2)
    noise = torch.rand(5, 40, generator=g).to(device)
    noise[0, 2] = 0.99999994  # largest fp32 below 1: exercises the 128 -> 127 clamp
    spec = QuantSpec("int8", scaling, block=block, rounding="stochastic")
    codes, scale, ref_codes, ref_scale = run_both(x, spec, noise=noise)
    assert_equal_or_both_nan(scale, ref_scale)
    assert_codes_equal(codes, ref_codes)
    # It really rounded stochastically: some codes differ from round-to-nearest (checked on the
    # finite values: with tensor scaling the NaN makes every code 0)
    xf = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
    sr, _ = kq.quantize_int8(xf, scaling, block=block, noise=noise)
    rne, _ = kq.quantize_int8(xf, scaling, block=block)
    assert (rne != sr).any()


def test_stochastic_clamp_at_127(device):
    x = torch.tensor([[126.99999, -126.99999, 127.0]], device=device)
    noise = torch.full_like(x, 0.99999994)
    codes, _ = kq.quantize_int8(x, "delayed", scale=torch.tensor(1.0, device=device), noise=noise)
    ref = quantize(x, QuantSpec("int8", "delayed", rounding="stochastic"), noise=noise, amax=torch.tensor(127.0))
    assert codes.cpu().tolist() == [[127, -127, 127]]
    assert_codes_equal(codes, _ref_native(ref.codes, "int8"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantization_happened(device, fmt):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 64, generator=g).to(device)
    codes, scale = kq.quantize_spec(x, QuantSpec(fmt, "block", block=(1, 32)))
    expanded = scale.repeat_interleave(32, dim=1)
    assert not torch.equal(codes.float(), x * expanded), "codes equal the unrounded scaled input"
    db = sqnr_db(x.cpu(), (codes.float() / expanded).cpu())
    assert math.isfinite(db) and 10.0 < db < 60.0, db


def test_tensor_scaling_without_scale_is_current_scaling(device):
    x = _special((5, 40), torch.bfloat16, device, seed=4)
    for fmt in FORMATS:
        codes, scale, ref_codes, ref_scale = run_both(x, QuantSpec(fmt, "tensor"))
        assert scale.shape == (1, 1)
        assert_equal_or_both_nan(scale, ref_scale)
        assert_codes_equal(codes, ref_codes)


def test_float16_and_nd_input(device):
    x = _special((6, 40), torch.float32, device, seed=5).reshape(2, 3, 40).to(torch.float16)
    for scaling, block in (("channel", None), ("block", (4, 32))):
        codes, scale, ref_codes, ref_scale = run_both(x, QuantSpec("e4m3", scaling, block=block))
        assert codes.shape == x.shape
        assert_equal_or_both_nan(scale, ref_scale)
        assert_codes_equal(codes, ref_codes)


@pytest.mark.parametrize("shape", [(0, 16), (3, 0), (0,)], ids=str)
def test_empty_is_an_error(device, shape):
    """Kernels and reference refuse an empty tensor alike, naming it (an empty operand has no
    amax, no scale and no block grid)."""
    x = torch.zeros(shape, device=device)
    msg = rf"x: empty tensor of shape \({shape[0]},"
    for scaling, block in (("tensor", None), ("channel", None), ("block", (1, 8))):
        with pytest.raises(ValueError, match=msg):
            kq.quantize_fp8(x, "e4m3", scaling, block=block)
        with pytest.raises(ValueError, match=msg):
            kq.quantize_int8(x, scaling, block=block)
        with pytest.raises(ValueError, match=msg):
            quantize(x, QuantSpec("int8", scaling, block=block))
        with pytest.raises(ValueError, match=msg):
            compute_scale(x, QuantSpec("e4m3", scaling, block=block))


def test_invalid_block_is_named(device):
    x = torch.ones(4, 8, device=device)
    for bad in ((0, 8), (1, -2), (1.5, 2), 8):
        with pytest.raises(ValueError, match=r"block: must be two positive ints"):
            kq.quantize_int8(x, "block", block=bad)


def test_large_blocks_are_chunked(device):
    """Blocks larger than one program's tile take the two-sweep path (amax, then quantize)."""
    big = 16 if device == "cpu" else 8192
    x = _special((5, 2 * big + 5), torch.float32, device, seed=6)
    tile = kq._TILE
    try:
        if device == "cpu":
            kq._TILE = 16  # force chunking on an interpreter-sized tensor
        for scaling, block in (("channel", None), ("block", (3, 20)), ("block", (2, 2 * big))):
            codes, scale, ref_codes, ref_scale = run_both(x, QuantSpec("e5m2", scaling, block=block))
            assert_equal_or_both_nan(scale, ref_scale)
            assert_codes_equal(codes, ref_codes)
    finally:
        kq._TILE = tile


@pytest.mark.parametrize("spec", [QuantSpec("e4m3", "block", block=(1, 128)),
                                  QuantSpec("e4m3", "block", block=(128, 128)),
                                  QuantSpec("e4m3", "block", block=(3, 20)),
                                  QuantSpec("e4m3", "block", block=(8, 24)),
                                  QuantSpec("e5m2", "channel")],
                         ids=lambda s: f"{s.scaling}{s.block or ''}".replace(" ", ""))
def test_block_scaling_reads_a_transposed_view(device, spec):
    """Block (and channel) scaling reads a transposed view through its strides, with no copy first:
    the codes and scales of the reference on the same view, bit for bit, chunked blocks too. The
    shape keeps every block ragged somewhere; (8, 24) gives several blocks larger than a 16-element
    tile (the interpreter's size: each chunk is a Python-level step there). The 128x128 block, one
    block holding the whole view, takes the 16-element tile's two sweeps as (8, 24) does, at ten
    times its interpreted steps: it runs at the default tile only."""
    base = _special((70, 40), torch.bfloat16, device, seed=7)
    x = base.t()  # (40, 70), column-major
    assert not x.is_contiguous()
    tile = kq._TILE
    small_tile = device == "cpu" and spec.block != (128, 128)
    try:
        for t in ((tile, 16) if small_tile else (tile,)):
            kq._TILE = t  # 16: blocks bigger than a tile take the two sweeps
            codes, scale, ref_codes, ref_scale = run_both(x, spec)
            assert_equal_or_both_nan(scale, ref_scale)
            assert_codes_equal(codes, ref_codes)
    finally:
        kq._TILE = tile


@pytest.mark.parametrize("fmt,dtype,kw", [("e4m3", torch.bfloat16, {}), ("e5m2", torch.float32, {"margin": 1}),
                                           ("e4m3", torch.float32, {"pow2": True})],
                         ids=["e4m3-bf16", "e5m2-fp32-margin", "e4m3-fp32-pow2"])
def test_with_transpose_matches_two_references(device, fmt, dtype, kw, monkeypatch):
    """One read gives the (1, B) blocks of x and of x.t(): the reference's codes and scales of both,
    bit for bit, with ragged tiles in both directions or none, NaN/Inf, zero blocks, and a transposed
    view as input (read through its strides). B is 16 under the interpreter (each element a Python step), the
    training's 128 on CUDA."""
    block = 128 if device == "cuda" else 16
    m, n = (3 * block + 5, 2 * block + 3)
    base = _special((m, n), dtype, device, seed=3)
    spec = QuantSpec(fmt, "block", block=(1, block), **kw)
    cases = [(base, None), (base.t(), block // 4), (base[: 3 * block, : 2 * block], None),  # whole tiles: no masks
             (base[: 2 * block, : 2 * block], block // 2)]
    for x, strip in cases:
        monkeypatch.setattr(kq, "_ROWS_COLS_STRIP", strip)  # the tile at once, or in column strips
        codes, scale, codes_t, scale_t = kq.quantize_fp8_with_transpose(x, fmt, block, **kw)
        assert codes.is_contiguous() and codes_t.is_contiguous() and codes_t.shape == x.t().shape
        for got_codes, got_scale, view in ((codes, scale, x), (codes_t, scale_t, x.t())):
            ref = quantize(view, spec)
            assert_codes_equal(got_codes, _ref_native(ref.codes, fmt))
            assert_equal_or_both_nan(got_scale, ref.scale)
        assert (scale != 1).any() and (scale_t != scale_t[0, 0]).any()  # scales were computed per block


def test_with_transpose_argument_errors(device, monkeypatch):
    x = torch.randn(4, 8, device=device)
    with pytest.raises(ValueError, match="must be 2-D"):
        kq.quantize_fp8_with_transpose(x.reshape(2, 2, 8))
    with pytest.raises(ValueError, match="block must be 16, 32, 64 or 128"):
        kq.quantize_fp8_with_transpose(x, "e4m3", 100)
    with pytest.raises(ValueError, match="fmt must be one of"):
        kq.quantize_fp8_with_transpose(x, "int8")
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        kq.quantize_fp8_with_transpose(x.double())
    monkeypatch.setattr(kq, "_ROWS_COLS_STRIP", 48)
    with pytest.raises(ValueError, match="_ROWS_COLS_STRIP must be a power of two"):
        kq.quantize_fp8_with_transpose(x, "e4m3", 128)


def test_argument_errors(device):
    x = torch.randn(4, 8, device=device)
    with pytest.raises(ValueError):
        kq.quantize_fp8(x, "e2m1")
    with pytest.raises(ValueError):
        kq.quantize_fp8(x, "e4m3", "mx")
    with pytest.raises(ValueError):
        kq.quantize_fp8(x, "e4m3", "channel", block=(1, 8))
    with pytest.raises(ValueError):
        kq.quantize_fp8(x, "e4m3", "delayed")
    with pytest.raises(ValueError):
        kq.quantize_int8(x, "channel", scale=torch.ones(1, device=device))
    with pytest.raises(ValueError):
        kq.quantize_int8(x, "tensor", noise=torch.rand(3, 8, device=device))
    with pytest.raises(ValueError, match="stochastic rounding in the kernel is int8 only"):
        kq._quantize(x, "e4m3", "tensor", None, None, torch.rand_like(x), 0, False, "auto")
    with pytest.raises(ValueError):
        kq.quantize_spec(x, QuantSpec("e4m3", saturate=False))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("fmt", FORMATS)
def test_cuda_many_random_scales(fmt):
    """Thousands of distinct amaxes: an approximate fp32 division (Triton's plain '/') would show
    up here as scales one ulp off."""
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(4096, 256, generator=g) * torch.exp2(torch.randint(-20, 20, (4096, 1), generator=g).float()))
    x = x.cuda().to(torch.bfloat16)
    for spec in (QuantSpec(fmt, "channel"), QuantSpec(fmt, "block", block=(1, 128)), QuantSpec(fmt, "block", block=(128, 128))):
        for cast in _fp8_casts("cuda") if fmt != "int8" else ["auto"]:
            codes, scale, ref_codes, ref_scale = run_both(x, spec, fp8_cast=cast)
            assert_equal_or_both_nan(scale, ref_scale)
            assert_codes_equal(codes, ref_codes)


def test_import_without_triton(monkeypatch):
    """The module imports without Triton; the kernels then raise a clear RuntimeError."""
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    path = Path(kq.__file__)
    spec = importlib.util.spec_from_file_location("_quantize_without_triton", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert not mod.triton_available()
    assert not mod.interpreter_active()
    with pytest.raises(RuntimeError, match="Triton"):
        mod.quantize_fp8(torch.ones(2, 2))
