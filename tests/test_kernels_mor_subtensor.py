"""Sub-tensor MoR's quantization kernels (lowprec.kernels.mor_subtensor_quant) against the emulation's
torch rule (lowprec.methods.mor.subtensor_parts, itself checked against independent references):
block statistics, codes, values, scales and choices bit for bit, error sums up to fp64 summation
order. CUDA when present, else the Triton interpreter on CPU (tiny shapes, 32x32 blocks)."""

import pytest
import torch

from conftest import INTERPRETER_WARNINGS, compiled_and_eager_mor_models, kernel_devices, kernel_modules  # noqa: E402

[kq, _] = kernel_modules("lowprec.kernels.mor_subtensor_quant", "lowprec.kernels.block_fp8_gemm")

from lowprec.methods import mor  # noqa: E402
from lowprec.methods.mor_subtensor_fast import subtensor_operand  # noqa: E402

DEVICE = kernel_devices(kq)[0]
BLOCK = (32, 32)

pytestmark = INTERPRETER_WARNINGS


def _data(rows=96, cols=160, dtype=torch.float32, seed=0, special=True):
    """Blocks of every kind: plain Gaussian ones over a few binades, one whose dynamic range no FP8
    format holds (BF16), one E5M2 holds better than E4M3, an all-zero one, and NaN, +-Inf, -0.0 and an
    fp32 subnormal in blocks of their own; ragged at the right edge (160 = 5 blocks, 96 = 3)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.exp2(torch.randint(-4, 4, (rows, cols), generator=g).float())
    x[:32, :32] *= torch.logspace(-12, 0, 32)
    mags = torch.logspace(-6, 0, 32 * 32)[torch.randperm(32 * 32, generator=g)].reshape(32, 32)
    x[32:64, 32:64] = mags * (torch.randint(0, 2, (32, 32), generator=g) * 2 - 1)
    x[64:96, 64:96] = 0.0
    if special:
        x[5, 70] = float("nan")
        x[40, 100] = float("inf")
        x[70, 130] = -float("inf")
        x[80, 10] = -0.0
        x[81, 11] = 1e-42
    return x.to(dtype).to(DEVICE)


def _equal_nan(a, b):
    return torch.equal(a.float().nan_to_num(7.0, 8.0, -8.0), b.float().nan_to_num(7.0, 8.0, -8.0))


# every mode with every scale, and each of them in both input dtypes (pairwise: the dtype only
# changes the load, and each case costs seconds under the interpreter)
RULE_CASES = [(mode, scale, (torch.float32, torch.bfloat16)[i % 2])
              for i, (mode, scale) in enumerate((m, s) for m in ("two_way", "three_way")
                                                for s in ("fp32", "gam", "e8"))]


@pytest.mark.parametrize("mode,scale,dtype", RULE_CASES, ids=lambda v: str(v))
def test_kernels_are_the_emulations_rule(mode, scale, dtype):
    x = _data(dtype=dtype)
    ref = mor.subtensor_parts(x.cpu().float(), BLOCK, mode, scale)
    amax, amin, bad = kq.block_stats(x, BLOCK)
    want_amax, want_amin, want_dr = mor.block_dynamic_range(x.cpu().float(), BLOCK)
    assert torch.equal(amax.cpu(), want_amax) and torch.equal(amin.cpu(), want_amin)
    assert torch.equal(mor.dynamic_range(amax, amin, bad).cpu(), want_dr)
    assert bool(bad[0, 2]) and bool(bad[1, 3]) and bool(bad[2, 4]) and int(bad.sum()) == 3

    op = subtensor_operand(mor.SubTensorMoRQuantizer(BLOCK, mode, scale, quantize="kernel"), x)
    assert op.e4m3 is not None, "the kernels did not run"
    assert torch.equal(op.choice.cpu(), ref.choice)
    formats = {int(c) for c in ref.choice.unique()}
    assert {mor.E4M3, mor.BF16} <= formats and (mode == "two_way" or mor.E5M2 in formats)
    per_elem = mor.expand_blocks(ref.choice, tuple(x.shape), BLOCK)
    want = torch.where(per_elem == mor.E4M3, ref.codes["e4m3"],
                       torch.where(per_elem == mor.E5M2, ref.codes["e5m2"], x.cpu().float())).bfloat16()
    assert op.values.dtype == torch.bfloat16 and _equal_nan(op.values.cpu(), want)
    # the E4M3 codes of the E4M3 blocks, zero in the others (a GEMM of them sums the E4M3 blocks alone)
    want_codes = torch.where(per_elem == mor.E4M3, ref.codes["e4m3"], 0.0).to(torch.float8_e4m3fn)
    assert torch.equal(op.e4m3.cpu().view(torch.uint8), want_codes.view(torch.uint8))
    one = torch.ones_like(ref.scales["e4m3"])
    assert torch.equal(op.scale.cpu(), torch.where(ref.choice == mor.E4M3, ref.scales["e4m3"],
                                                   torch.where(ref.choice == mor.E5M2, ref.scales["e5m2"], one)))
    # the E4M3 blocks really were quantized: their values differ from x's BF16 rounding somewhere
    e4 = per_elem == mor.E4M3
    assert bool((op.dequantized().cpu()[e4] != x.cpu().float().bfloat16().float()[e4]).any())


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan_inf"])
def test_error_sums_equal_the_emulations_up_to_summation_order(special):
    """Both formats' error sums per block against the emulation's; NaN and +-Inf make their block's
    sums NaN in both (the pass forms its terms in magnitudes, the emulation signed)."""
    x = _data(special=special)
    ref = mor.subtensor_parts(x.cpu(), BLOCK, "three_way", "gam")
    err = kq.block_errors(x, BLOCK, ref.scales["e4m3"].to(DEVICE), ref.scales["e5m2"].to(DEVICE))
    assert err.dtype == torch.float64 and err.shape == (2, 3, 5)
    for got, want in zip(err.cpu(), (ref.errors["e4m3"], ref.errors["e5m2"])):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=0.0, equal_nan=True)
        assert int(want.isnan().sum()) == (3 if special else 0)  # the three blocks holding NaN or Inf
    assert bool((err[0] > 0).any()) and float(err[:, 2, 2].abs().sum()) == 0.0  # the zero block


def test_error_pass_reads_only_the_blocks_whose_choice_reads_it():
    """With ``need`` (``mor.subtensor_error_blocks``), the blocks whose dynamic range alone decides
    keep zero sums and the rest the full pass's; the choice is the full pass's."""
    x = _data(special=False)
    amax, amin, bad = kq.block_stats(x, BLOCK)
    s = mor.subtensor_scales(amax, "gam")
    dr = mor.dynamic_range(amax, amin, bad)
    need = mor.subtensor_error_blocks(dr)
    assert bool(need.any()) and not bool(need.all())
    full = kq.block_errors(x, BLOCK, s["e4m3"], s["e5m2"])
    got = kq.block_errors(x, BLOCK, s["e4m3"], s["e5m2"], need=need)
    assert torch.equal(got[:, need], full[:, need]) and float(got[:, ~need].abs().sum()) == 0.0
    assert bool((full[:, ~need] > 0).any())  # the skipped blocks did have sums to skip
    for mode in mor.SUBTENSOR_MODES:
        assert torch.equal(mor.subtensor_choice(dr, got[0], got[1], mode), mor.subtensor_choice(dr, full[0], full[1], mode))
    with pytest.raises(ValueError, match="need"):
        kq.block_errors(x, BLOCK, s["e4m3"], s["e5m2"], need=need[:2])


def test_transposed_view_is_read_through_its_strides():
    x = _data().t()
    assert not x.is_contiguous()
    q = mor.SubTensorMoRQuantizer(BLOCK, quantize="kernel")
    got, want = subtensor_operand(q, x), subtensor_operand(q, x.contiguous())
    assert got.e4m3 is not None
    assert torch.equal(got.choice, want.choice) and _equal_nan(got.values, want.values)
    assert got.values.is_contiguous()


def test_transposes_are_written_for_the_backward():
    """The kernels write each operand's transpose too (row-major): ``t()`` hands those over,
    K-contiguous, instead of views; equal to the transposed values and codes bit for bit."""
    x = _data()
    op = subtensor_operand(mor.SubTensorMoRQuantizer(BLOCK, quantize="kernel"), x)
    t = op.t()
    assert t.values.is_contiguous() and t.e4m3.is_contiguous() and t.values.shape == (160, 96)
    assert _equal_nan(t.values, op.values.t()) and torch.equal(t.e4m3.view(torch.uint8), op.e4m3.view(torch.uint8).t())
    assert torch.equal(t.scale, op.scale.t()) and t.block == BLOCK[::-1]
    assert t.t().values is op.values and t.t().e4m3_t is op.e4m3_t


def test_kept_operand_carries_the_transposes_into_the_backward():
    """The layer keeps an operand for the backward as four tensors (``lowprec.linear._tensors``):
    for the kernels' operand those are the transposed copies, so the backward's GEMM reads them as
    written (the same storage, K-contiguous), with no copy of a view and no cast of values to FP8
    codes; the torch path's operand keeps its values as before."""
    from lowprec import linear as lin
    x = _data()
    op = subtensor_operand(mor.SubTensorMoRQuantizer(BLOCK, quantize="kernel"), x)
    kept = lin._unpack(lin._tensors(op), lin._meta(op))
    t = kept.t()
    assert t.values.data_ptr() == op.values_t.data_ptr() and t.e4m3.data_ptr() == op.e4m3_t.data_ptr()
    assert t.values.is_contiguous() and t.e4m3.is_contiguous()
    assert torch.equal(t.scale, op.t().scale) and torch.equal(t.choice, op.t().choice) and t.block == op.t().block
    assert _equal_nan(kept.values, op.values) and torch.equal(kept.e4m3.view(torch.uint8), op.e4m3.view(torch.uint8))
    by_torch = subtensor_operand(mor.SubTensorMoRQuantizer(BLOCK, quantize="torch"), x)
    kept = lin._unpack(lin._tensors(by_torch), lin._meta(by_torch))
    assert kept.values is by_torch.values and kept.values_t is None and kept.e4m3 is None


def test_quantize_option_picks_the_path():
    """``quantize: kernel`` (a method key of sub-tensor MoR) runs the kernels, ``torch`` the torch
    ops, the default ``auto`` the kernels on CUDA only; all give the same operand, and the key means
    nothing to the other partitions."""
    from lowprec.methods.mor import mor_recipe
    x = _data(special=False)
    by_kernel = subtensor_operand(mor.SubTensorMoRQuantizer(BLOCK, quantize="kernel"), x)
    by_torch = subtensor_operand(mor.SubTensorMoRQuantizer(BLOCK, quantize="torch"), x)
    by_default = subtensor_operand(mor.SubTensorMoRQuantizer(BLOCK), x)
    assert by_kernel.e4m3 is not None and by_torch.e4m3 is None
    assert (by_default.e4m3 is not None) == x.is_cuda
    assert torch.equal(by_default.choice, by_torch.choice) and torch.equal(by_default.values, by_torch.values)
    assert torch.equal(by_kernel.choice, by_torch.choice) and torch.equal(by_kernel.values, by_torch.values)
    assert torch.equal(by_kernel.scale, by_torch.scale)
    q = mor_recipe({"partition": "subtensor", "quantize": "kernel"}).gemm("fprop")[0]
    assert q.quantize == "kernel" and q.to_dict()["quantize"] == "kernel"
    assert mor_recipe({"partition": "subtensor"}).gemm("fprop")[0].quantize == "auto"
    with pytest.raises(ValueError, match="quantize"):
        mor_recipe({"partition": "subtensor", "quantize": "cuda"})
    with pytest.raises(ValueError, match=r"\['quantize'\] not used with partition 'block'"):
        mor_recipe({"partition": "block", "quantize": "kernel"})


@pytest.mark.slow
@pytest.mark.skipif(not kq.interpreter_active(), reason="the model test runs on the CPU, under the interpreter")
def test_compiled_model_quantizes_by_the_kernels_in_one_graph(monkeypatch):
    """A two-layer model under ``quantize: kernel``, compiled as one graph (the kernels an operator in
    it), trains like the eager one and counts its blocks; the kernels really ran."""
    import lowprec.linear as lin
    from lowprec.numerics import sqnr_db

    calls = []
    values = kq.block_values
    monkeypatch.setattr(kq, "block_values", lambda *a, **k: calls.append(1) or values(*a, **k))
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    method = {"partition": "subtensor", "quantize": "kernel", "block": [32, 32]}
    comp, eager, recipe_c = compiled_and_eager_mor_models(method, width=64)
    assert len(calls) >= 6  # x, w and dy of both layers, compiled and eager
    for a, b in zip(comp.parameters(), eager.parameters()):
        assert sqnr_db(b.grad, a.grad) > 25
    cov = recipe_c.gemm("fprop")[0].coverage()
    assert len(cov) == 10 and all(r["calls"] == 1 and r["blocks"] == 4 for r in cov)


def test_launch_configs_compute_the_same():
    x = _data()
    s = mor.subtensor_scales(kq.block_stats(x, BLOCK)[0], "fp32")
    choice = torch.zeros(3, 5, dtype=torch.int8, device=DEVICE)
    small = kq.PassConfig(step=256, num_warps=2)  # several steps per block row
    for a, b in zip(kq.block_stats(x, BLOCK, config=small), kq.block_stats(x, BLOCK)):
        assert torch.equal(a, b)
    torch.testing.assert_close(kq.block_errors(x, BLOCK, s["e4m3"], s["e5m2"], config=small),
                               kq.block_errors(x, BLOCK, s["e4m3"], s["e5m2"]), rtol=1e-12, atol=0.0, equal_nan=True)
    for a, b in zip(kq.block_values(x, BLOCK, choice, s["e4m3"], s["e5m2"], config=small),
                    kq.block_values(x, BLOCK, choice, s["e4m3"], s["e5m2"])):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    with pytest.raises(ValueError, match="step must be a power of two"):
        kq.block_stats(x, BLOCK, config=kq.PassConfig(step=1000))


def test_bad_input_names_the_problem():
    x = _data()
    with pytest.raises(ValueError, match="2-D"):
        kq.block_stats(x[0], BLOCK)
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        kq.block_stats(x.half(), BLOCK)
    s = torch.ones(3, 5, device=DEVICE)
    with pytest.raises(ValueError, match=r"s5 must be the block grid of shape \(3, 5\)"):
        kq.block_errors(x, BLOCK, s, s[:2])
    with pytest.raises(ValueError, match="choice"):
        kq.block_values(x, BLOCK, torch.zeros(3, 4, dtype=torch.int8, device=DEVICE), s, s)
