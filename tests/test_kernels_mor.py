"""MoR Triton kernel (lowprec.kernels.mor_quant) vs the torch reference in lowprec.methods.mor: codes and
scales bit for bit, relative error up to fp32 summation order (rel 1e-5).

CUDA when present, else the Triton interpreter on CPU (tiny shapes: it runs each program in numpy).
TRITON_INTERPRET must be set before the kernel module (and lowprec.kernels._common, whose jit helpers
it calls) is first imported; if another test imported them without, they are reloaded (same pattern
as test_kernels_quantize.py).
"""

import math

import pytest
import torch

from conftest import INTERPRETER_WARNINGS, compiled_probe, kernel_devices, kernel_modules  # noqa: E402

[km] = kernel_modules("lowprec.kernels.mor_quant")

from lowprec.methods import mor  # noqa: E402

DEVICE = kernel_devices(km)[0]

pytestmark = INTERPRETER_WARNINGS

ERR_RTOL = 1e-5


def _data(shape, dtype, seed=0, special=False):
    """Gaussian values over ~16 binades (subnormal codes, flushes, ties after bf16 rounding),
    optionally with a zero row, -0.0, an fp32 subnormal, NaN and +-Inf."""
    g = torch.Generator().manual_seed(seed)
    m, n = shape
    x = torch.randn(m, n, generator=g) * torch.exp2(torch.randint(-8, 8, (m, n), generator=g).float())
    if special:
        x[1] = 0.0
        x[0, 1] = -0.0
        x[m - 1, n - 1] = 1e-42
        x[2, 3] = float("nan")
        x[3, 5] = float("inf")
        x[0, 0] = -float("inf")
    return x.to(dtype).to(DEVICE)


def _check(x, partition, block, scale, fp8_cast="auto"):
    codes, scales, err = km.mor_quantize_e4m3(x, partition, block, scale, fp8_cast=fp8_cast)
    ref = mor.quantize_e4m3(x.cpu(), partition, block, scale)
    want = ref.codes.to(torch.float8_e4m3fn)
    got = codes.cpu()
    assert got.dtype == torch.float8_e4m3fn and got.shape == x.shape
    gn, wn = got.float().isnan(), want.float().isnan()
    assert torch.equal(gn, wn), "NaN positions differ"
    bad = (got.view(torch.uint8)[~gn] != want.view(torch.uint8)[~wn]).sum()
    assert bad == 0, f"{int(bad)} codes differ"
    assert scales.dtype == torch.float32 and torch.equal(scales.cpu(), ref.scale)
    ref_err = mor.mor_relative_error(x.cpu().float(), ref.dequantize())
    assert err.dtype == torch.float32 and err.dim() == 0
    if ref_err != ref_err:
        assert torch.isnan(err)
    else:
        assert float(err) == pytest.approx(ref_err, rel=ERR_RTOL, abs=0.0)
    return float(err)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("partition,block,scale", [
    ("block", (32, 32), "gam"),
    ("block", (32, 32), "e8"),
    ("tensor", None, "gam"),
    ("channel", None, "gam"),
], ids=lambda c: str(c).replace(" ", ""))
def test_kernel_equals_reference(dtype, partition, block, scale):
    _check(_data((64, 64), dtype, seed=1), partition, block or (128, 128), scale)


@pytest.mark.skipif(DEVICE != "cuda" or torch.cuda.get_device_capability() < (8, 9),
                    reason="the hardware FP8 cast needs CUDA capability >= 8.9")
# Failed in every case while the codes' values were decoded from the cast's bits in registers (8662aec;
# H200 at 1ebcc97, H100 at 14b5a5f: the Triton 3.6 bug of tests/test_gpu.py::
# test_triton_hardware_fp8_cast_reproducer); with the values from fp32 adds every case holds (H100 at
# afb7ce6, where the reproducer's register-decode cases failed in the same run).
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("partition,block", [("block", (128, 128)), ("tensor", None), ("channel", None)],
                         ids=lambda c: str(c).replace(" ", ""))
def test_kernel_with_the_hardware_fp8_cast_equals_reference(dtype, partition, block):
    """The quantizer with ``fp8_cast="native"`` (Triton's RNE cast for the codes) against the
    reference, special values in blocks included: the cast's one use is its store, the error's
    values come from fp32 adds (``_common._fp8_value``)."""
    _check(_data((256, 384), dtype, seed=3), partition, block or (128, 128), "gam", fp8_cast="native")
    if partition == "block":  # NaN and Inf confined to their blocks (a tensor scale would be NaN)
        _check(_data((256, 256), dtype, seed=4, special=True), partition, block, "gam", fp8_cast="native")


def test_kernel_ragged_blocks_several_tiles_per_block(monkeypatch):
    """Blocks that overhang the tensor, and a tile smaller than a block (partial amaxes and error
    sums reduced across tiles)."""
    x = _data((48, 80), torch.float32, seed=2)
    # tile 256: (32, 32) blocks in 4 tiles, (24, 40) in 6; tile 64: each 80-wide row in 2
    for tile, partition, block, scale in ((256, "block", (32, 32), "fp32"), (256, "block", (24, 40), "gam"),
                                          (64, "channel", None, "gam")):
        monkeypatch.setattr(km, "_TILE", tile)
        _check(x, partition, block or (128, 128), scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("partition,block", [("block", (32, 32)), ("tensor", None), ("channel", None)])
def test_kernel_reads_transposed_views(dtype, partition, block, monkeypatch):
    """A transposed view (W^T in dgrad, dY^T and X^T in wgrad) is read through its strides, in
    tiles down its contiguous columns (channel scaling copies it): codes in the view's row-major
    layout, equal to the reference of the copied tensor."""
    monkeypatch.setattr(km, "_TILE", 512)  # several tiles per block, as at full size
    x = _data((72, 40), dtype, seed=6).t()
    assert not x.is_contiguous()
    _check(x, partition, block or (128, 128), "gam")


def test_kernel_special_values():
    x = _data((40, 48), torch.float32, seed=3, special=True)
    assert math.isnan(_check(x, "block", (32, 32), "gam"))  # a NaN/Inf tensor never picks E4M3
    y = _data((40, 48), torch.float32, seed=3)
    y[1] = 0.0
    y[0, 1] = -0.0
    y[39, 47] = 1e-42
    _check(y, "block", (32, 32), "gam")
    z = torch.zeros(8, 16, device=DEVICE)
    codes, scales, err = km.mor_quantize_e4m3(z, "block", (4, 8))
    assert float(err) == 0.0 and torch.equal(scales.cpu(), torch.ones(2, 2))


def test_kernel_decision_matches_tensor_level_mor():
    x = _data((64, 64), torch.bfloat16, seed=4)
    for partition in ("block", "channel"):
        _, _, err, fmt = km.mor_decide(x, 0.045, partition, (32, 32))
        r = mor.mor_tensor(x.cpu(), partition, (32, 32))
        assert fmt == r.format and float(err) == pytest.approx(r.rel_error, rel=ERR_RTOL)
        # the threshold decides on the kernel's own error
        assert km.mor_decide(x, float(err), partition, (32, 32))[3] == "e4m3"


def test_kernel_argument_errors():
    x = torch.zeros(4, 4, device=DEVICE)
    with pytest.raises(ValueError, match="partition"):
        km.mor_quantize_e4m3(x, "rows")
    with pytest.raises(ValueError, match="scale"):
        km.mor_quantize_e4m3(x, "block", (2, 2), "e5")
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        km.mor_quantize_e4m3(x.half())
    with pytest.raises(ValueError, match="block"):
        km.mor_quantize_e4m3(x, "block", (0, 2))


def test_kernel_empty_tensor_and_bad_threshold_are_named():
    for shape in ((0, 16), (4, 0)):
        with pytest.raises(ValueError, match=rf"^x: empty tensor of shape \({shape[0]}, {shape[1]}\)"):
            km.mor_quantize_e4m3(torch.zeros(shape, device=DEVICE))
    x = torch.ones(4, 4, device=DEVICE)
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match=rf"^threshold: must be a finite number >= 0, got {bad}"):
            km.mor_decide(x, bad)


# --- the fast path's pass: scales given, codes (either layout) and the error's partial sums ---

# (grid of a (M, N) operand, scale block): per tensor, per row, per column (the transposed view of a
# per-row grid), in blocks 128 columns wide (whole tiles: 128 on CUDA, 32 in the interpreter)
_GRIDS = {"tensor": lambda m, n: ((1, 1), (m, n)), "rows": lambda m, n: ((m, 1), (1, n)),
          "cols": lambda m, n: ((1, n), (m, 1)), "blocks": lambda m, n: ((-(-m // 24), -(-n // 128)), (24, 128))}


def _scales(m, n, grid, seed=0):
    shape, block = _GRIDS[grid](m, n)
    g = torch.Generator().manual_seed(seed)
    scale = torch.exp2(torch.randint(-4, 6, shape, generator=g).float()) * (1 + torch.rand(shape, generator=g))
    return scale, block


def _cast_error_reference(x, scale, block):
    """The fast path's torch form (lowprec.methods.mor_fast): codes of the clamped product, the
    terms |code - y| / |y| over non-zero x (1 where y underflows), their row sums and counts."""
    from lowprec.numerics.scaling import expand_blocks
    x = x.float()
    y = x * expand_blocks(scale, tuple(x.shape), block)
    codes = y.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    nz = x != 0
    terms = torch.where(nz, torch.where(y == 0, 1.0, (codes.float() - y).abs() / y.abs()), 0.0)
    return codes, terms.double().sum(dim=1), nz.sum(dim=1)


def _same_codes(got, want):
    gn, wn = got.float().isnan(), want.float().isnan()
    assert torch.equal(gn, wn), "NaN positions differ"
    bad = int((got.view(torch.uint8)[~gn] != want.view(torch.uint8)[~wn]).sum())
    assert bad == 0, f"{bad} codes differ"


# "auto" is the written-out encoder, the one "emulated" names (kernels.mor_quant._use_native), so it
# stands for both; "native" where the hardware cast exists
CAST_FP8 = ["auto"] + (["native"] if DEVICE == "cuda" and torch.cuda.get_device_capability() >= (8, 9) else [])


@pytest.mark.parametrize("fp8_cast", CAST_FP8)
@pytest.mark.parametrize("layouts", ["rows", "transposed", "both"])
@pytest.mark.parametrize("grid", list(_GRIDS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cast_error_pass_equals_the_fast_paths_torch_form(dtype, grid, layouts, fp8_cast):
    """Codes bit for bit (in the operand's layout, its transpose's, or both), the non-zero counts
    exactly, the per-row error sums within fp32 summation order; ragged tiles at both edges."""
    x = _data((40, 300), dtype, seed=5)
    x[3, :7] = 0.0
    x[4, 9] = 1e-30  # flushes to zero once scaled: counts 1
    scale, block = _scales(40, 300, grid)
    codes, codes_t, err, nz, err_t = km.mor_cast_error(x, scale.to(DEVICE), block, layouts=layouts, fp8_cast=fp8_cast)
    assert err_t.numel() == 0  # no grid of the transpose's own
    want, want_err, want_nz = _cast_error_reference(x.cpu(), scale, block)
    for got, shape, asked in ((codes, (40, 300), layouts != "transposed"), (codes_t, (300, 40), layouts != "rows")):
        assert got.dtype == torch.float8_e4m3fn and got.shape == (shape if asked else (0,))
        if asked:
            _same_codes(got.cpu() if shape == (40, 300) else got.cpu().t(), want)
    tile = km.CAST_TILE[1] if DEVICE == "cuda" else 32
    assert err.shape == nz.shape == (40, -(-300 // tile))
    assert torch.equal(nz.cpu().sum(dim=1), want_nz.int())
    got_err = err.cpu().double().sum(dim=1)
    assert got_err.min() > 0 and torch.allclose(got_err, want_err, rtol=ERR_RTOL, atol=0)


@pytest.mark.parametrize("layouts", ["transposed", "both"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cast_error_pass_scales_the_transpose_by_a_grid_of_its_own(dtype, layouts):
    """Per channel, x's rows scale x and its columns scale x.T: with ``scale_t`` the transposed
    codes and their error sums (``err_t``) come from that grid, bit for bit and within fp32
    summation order of the torch form, from the same read (ragged tiles at both edges)."""
    x = _data((40, 300), dtype, seed=11)
    x[3, :7] = 0.0
    scale, block = _scales(40, 300, "rows", seed=1)
    scale_t, block_t = _scales(40, 300, "cols", seed=2)
    codes, codes_t, err, nz, err_t = km.mor_cast_error(x, scale.to(DEVICE), block, layouts=layouts,
                                                       scale_t=scale_t.to(DEVICE), block_t=block_t)
    want, want_err, want_nz = _cast_error_reference(x.cpu(), scale, block)
    want_t, want_err_t, _ = _cast_error_reference(x.cpu(), scale_t, block_t)
    assert not torch.equal(want.view(torch.uint8), want_t.view(torch.uint8))  # two grids, two codes
    if layouts == "both":
        _same_codes(codes.cpu(), want)
    _same_codes(codes_t.cpu().t(), want_t)
    assert err_t.shape == err.shape and torch.equal(nz.cpu().sum(dim=1), want_nz.int())
    for got, ref in ((err, want_err), (err_t, want_err_t)):
        got = got.cpu().double().sum(dim=1)
        assert got.min() > 0 and torch.allclose(got, ref, rtol=ERR_RTOL, atol=0)
    with pytest.raises(ValueError, match="scale_t scales x.T's codes"):
        km.mor_cast_error(x, scale.to(DEVICE), block, layouts="rows", scale_t=scale_t.to(DEVICE), block_t=block_t)
    with pytest.raises(ValueError, match="scale_t needs its blocks"):
        km.mor_cast_error(x, scale.to(DEVICE), block, layouts="both", scale_t=scale_t.to(DEVICE))
    with pytest.raises(ValueError, match="scale_t must be a float32 grid"):
        km.mor_cast_error(x, scale.to(DEVICE), block, layouts="both", scale_t=scale.to(DEVICE), block_t=block_t)


def test_cast_error_pass_auto_is_the_written_out_encoder():
    """``fp8_cast="auto"`` (the parametrized tests' stand-in) and ``"emulated"`` run the same encoder."""
    x = _data((16, 64), torch.bfloat16, seed=6)
    scale, block = _scales(16, 64, "rows")
    auto, emulated = (km.mor_cast_error(x, scale.to(DEVICE), block, fp8_cast=c) for c in ("auto", "emulated"))
    for a, b in zip(auto, emulated):
        assert torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                           b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)
    assert not km._use_native(x.to(DEVICE), "auto") and not km._use_native(x.to(DEVICE), "emulated")


# The cast-and-error pass compiled for sm_90 (no GPU needed) in a process without the interpreter:
# instructions per element of each layout, with the hardware cast (the fast path's on the H200)
_CAST_SASS_PROBE = """
import sys
from lowprec.bench import kernel_sass as ks
if ks.nvidia_tool("cuobjdump") is None:
    print("SKIP"); sys.exit()
for layouts, own_t in (("rows", False), ("both", False), ("both", True)):
    row = ks.mor_cast_row(layouts, native=True, approx_div=True, own_t=own_t)
    print(layouts + ("_own_t" if own_t else ""), row.get("per_element"), row.get("error", ""))
"""


def test_cast_error_pass_encodes_once_when_writing_both_layouts():
    """Writing the transposed codes beside the row-major ones costs the pass a transposition of
    bytes, not a second encoder: Triton's layout pass, given the codes to store transposed, computed
    the cast again in the transposed store's layout from a converted x (sm_90: 58 instructions an
    element against the row-major layout's 32 with Triton 3.6, 44 against 34 with 3.9); read back
    from the program's own row-major codes, the transpose adds about 5 (static counts of
    ``lowprec.bench.kernel_sass``)."""
    out = compiled_probe(_CAST_SASS_PROBE, "this Triton ships no cuobjdump")
    per = {line.split()[0]: float(line.split()[1]) for line in out.splitlines()}
    assert per["both"] - per["rows"] < 7.5, out
    # per channel's transposed codes take a grid of their own: a second encoder in the load's layout,
    # only its bytes converted for the transposed store (Triton 3.9: 47 instructions an element
    # against the rows' 24 since the terms are formed in magnitudes; 67 against 34 before, 81 while
    # its flags spilled to registers), no third
    assert per["both_own_t"] < 2.2 * per["rows"], out


def test_cast_error_pass_reads_through_strides_and_keeps_nan():
    """A transposed view is read in place (the backward's X^T, dY^T); NaN and Inf make their row's
    sum NaN and keep NaN / saturate in the codes."""
    base = _data((48, 40), torch.bfloat16, seed=6, special=True)
    x = base.t()
    scale, block = _scales(40, 48, "blocks")
    codes, _, err, nz, _ = km.mor_cast_error(x, scale.to(DEVICE), block)
    want, want_err, want_nz = _cast_error_reference(x.cpu(), scale, block)
    _same_codes(codes.cpu(), want)
    got = err.cpu().double().sum(dim=1)
    assert torch.equal(got.isnan(), want_err.isnan()) and got.isnan().any()
    ok = ~want_err.isnan()
    assert torch.allclose(got[ok], want_err[ok], rtol=ERR_RTOL, atol=0)
    assert torch.equal(nz.cpu().sum(dim=1), want_nz.int())


def test_cast_error_pass_refuses_what_it_cannot_take():
    x = torch.ones(32, 64, device=DEVICE)
    good = torch.ones(2, 1, device=DEVICE)
    with pytest.raises(ValueError, match=r"scale must be a float32 grid of shape \(2, 1\)"):
        km.mor_cast_error(x, torch.ones(2, 2, device=DEVICE), (16, 64))
    with pytest.raises(ValueError, match="scale must be a float32"):
        km.mor_cast_error(x, good.double(), (16, 64))
    with pytest.raises(ValueError, match="cut the"):
        km.mor_cast_error(x, torch.ones(4, 4, device=DEVICE), (8, 16))
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        km.mor_cast_error(x.half(), good, (16, 64))
    with pytest.raises(ValueError, match="2-D"):
        km.mor_cast_error(x[0], good, (16, 64))
    with pytest.raises(ValueError, match="empty"):
        km.mor_cast_error(x[:0], good, (16, 64))
    with pytest.raises(ValueError, match="layouts"):
        km.mor_cast_error(x, good, (16, 64), layouts="cols")


def test_fp8_value_is_the_value_of_torchs_e4m3_cast():
    """``_common._fp8_value``, which gives the cast pass its codes' values in fp32 adds (not the
    hardware cast's value widened in registers), equals torch's E4M3 cast of the clamped value
    widened to fp32, bit for bit: every finite E4M3 value (subnormals and 448), the midpoints
    between neighbours (ties to even, the carry into the next binade), fp32 subnormals, values
    far under E4M3's smallest subnormal and random values over 20 binades of either sign; NaN stays
    NaN. Checked that it rounds: most random values are not on the grid."""
    import triton
    import triton.language as tl

    @triton.jit
    def value(y_ptr, q_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        y = tl.load(y_ptr + offs, mask=ok, other=0.0)
        y = tl.where(y > 448.0, 448.0, y)
        y = tl.where(y < -448.0, -448.0, y)
        tl.store(q_ptr + offs, km._fp8_value(y, 3, -6), mask=ok)

    grid = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    grid = grid[grid.isfinite()].unique()
    pos = grid[grid > 0]
    mids = (pos[1:] + pos[:-1]) / 2
    g = torch.Generator().manual_seed(3)
    rand = torch.randn(4096, generator=g) * torch.exp2(torch.randint(-14, 7, (4096,), generator=g).float())
    tiny = torch.tensor([1e-42, 2.0 ** -126, 2.0 ** -11, 2.0 ** -10, 3 * 2.0 ** -11, 500.0, 1e30, float("inf")])
    y = torch.cat([grid, mids, -mids, rand, tiny, -tiny, torch.tensor([float("nan")])])
    q = torch.empty_like(y, device=DEVICE)
    value[(triton.cdiv(y.numel(), 1024),)](y.to(DEVICE), q, y.numel(), BLOCK=1024)
    want = y.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float()
    got = q.cpu()
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().sum() == 1
    ok = ~want.isnan()
    assert torch.equal(got[ok], want[ok]), f"{int((got[ok] != want[ok]).sum())} values differ"
    assert (want[ok] != y[ok]).float().mean() > 0.5


# The approximate division on a row-major whole-tile operand failed on the GPU (error sums 10^4-10^5
# times the reference's, codes right: H200 at 1ebcc97 and 32c1b28, H100 at 14b5a5f) while the codes'
# values came from the hardware cast widened in registers; since they come from fp32 adds
# (_common._fp8_value) every case holds (H100 at 0997a7a).
@pytest.mark.parametrize("view,approx_div", [
    (False, False), (False, True), (True, False), (True, True),
], ids=["rows-rn", "rows-approx", "transposed_view-rn", "transposed_view-approx"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_cast_error_pass_on_whole_tiles_takes_the_unmasked_path(view, dtype, approx_div):
    """A shape of whole tiles (no masks: the vectorized loads and stores) gives the same codes and
    sums, read in place from a row-major tensor or a transposed view, for bf16 and fp32 operands and
    either division (the fast path's fp32 operands stay off the pass until an fp32 layer has run
    through it on the GPU: ``lowprec.methods.mor_fast._cast_on_kernel``)."""
    base = _data((256, 128) if view else (128, 256), dtype, seed=9)
    x = base.t() if view else base
    scale, block = _scales(128, 256, "blocks")
    codes, codes_t, err, nz, _ = km.mor_cast_error(x, scale.to(DEVICE), block, layouts="both", approx_div=approx_div)
    want, want_err, want_nz = _cast_error_reference(x.cpu(), scale, block)
    _same_codes(codes.cpu(), want)
    _same_codes(codes_t.cpu().t(), want)
    assert torch.equal(nz.cpu().sum(dim=1), want_nz.int())
    assert torch.allclose(err.cpu().double().sum(dim=1), want_err, rtol=ERR_RTOL, atol=0)


def test_cast_error_pass_takes_its_launch_and_division_options():
    """Another tile, more warps and the approximate division leave the codes and counts as they are
    and the error within fp32 rounding (the interpreter divides exactly either way); a tile that is
    not two powers of two is refused."""
    x = _data((40, 300), torch.bfloat16, seed=8)
    scale, block = _scales(40, 300, "blocks")
    want, want_err, want_nz = _cast_error_reference(x.cpu(), scale, block)
    codes, _, err, nz, _ = km.mor_cast_error(x, scale.to(DEVICE), block, tile=(8, 64), num_warps=2, approx_div=True)
    _same_codes(codes.cpu(), want)
    assert err.shape == (40, 5) and torch.equal(nz.cpu().sum(dim=1), want_nz.int())
    assert torch.allclose(err.cpu().double().sum(dim=1), want_err, rtol=1e-5, atol=0)
    with pytest.raises(ValueError, match="two powers of two"):
        km.mor_cast_error(x, scale.to(DEVICE), block, tile=(24, 64))


def test_cast_kernel_bench_measures_a_tiny_operand(capsys):
    """The bench's measurement of one operand dtype, shape and partition runs end to end (here on
    the Triton interpreter, its times meaningless): the default path, the scales, the pass at a
    launch, codes equal to the default path's and the error at the torch form's. The operands cover
    both views, both dtypes and both ways of writing the transpose's codes (per block with x's
    scales; per channel with their own, the columns', as the fast path does, in either view)."""
    from lowprec.bench.mor_cast_kernel import measure
    for view, partition, dtype in ((True, "block", "bf16"), (False, "channel", "fp32"), (True, "channel", "bf16")):
        # 32 rows: still two 128-column scale blocks and 2x8 tiles (the interpreter's reductions
        # run per element: 64 rows took twice as long)
        rows = measure(32, 256, view, partition, [(16, 32, 4)], ["rn", "approx"], lambda fn: (fn(), 1.0)[1], DEVICE,
                       dtype)
        assert {r["dtype"] for r in rows} == {dtype}
        arms = [r["arm"] for r in rows]
        assert arms[0] == "inductor" and "scales" in arms and arms.count("kernel") == 2
        for r in rows:
            if r["arm"] == "kernel":
                assert r["codes_equal"] is True and float(r["error_rel_diff"]) < 1e-5
        assert rows[0]["layouts"] == ("both (own scales)" if partition == "channel" else "both")


def test_approximate_division_takes_every_zero_code_as_one_exactly():
    """The fast division the pass divides with on CUDA is within 2 ulp only over |y| in [2^-126,
    2^126]: every |y| <= 2^-10 (E4M3 code 0) is taken as the term 1 before the division, exactly
    what the correctly rounded division gives (the interpreter divides with '/' under that rule).
    Just above 2^-10 the code is 2^-9 and the term is divided; Inf makes the row's sum NaN."""
    x = torch.zeros(16, 32)
    x[0, :6] = torch.tensor([2.0 ** -10, -(2.0 ** -10), 2.0 ** -12, 1e-40, 2.0 ** -133, 0.0])
    above = 2.0 ** -10 * 1.0078125  # the next bf16 up
    x[1] = above
    x[2:] = torch.randn(14, 32, generator=torch.Generator().manual_seed(3)) * 50
    x[3, 7] = float("inf")
    x = x.to(torch.bfloat16).to(DEVICE)
    scale = torch.ones(1, 1, device=DEVICE)
    sums = {}
    for approx in (True, False):
        codes, _, err, nz, _ = km.mor_cast_error(x, scale, (16, 32), layouts="rows", approx_div=approx)
        sums[approx] = err.double().sum(dim=1).cpu()
        assert nz.sum(dim=1)[0].item() == 5 and (codes.view(torch.uint8)[0].cpu() & 0x7F).eq(0).all()  # +-0
    for s in sums.values():
        assert s[0].item() == 5.0  # five non-zero x whose code is 0: five terms of exactly 1
        assert s[1].item() == pytest.approx(32 * (2 - 1.0078125) / 1.0078125, rel=1e-6)
        assert math.isnan(s[3].item())
    finite = torch.arange(16) != 3
    torch.testing.assert_close(sums[True][finite], sums[False][finite], rtol=1e-6, atol=0)
