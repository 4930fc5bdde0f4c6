"""Metrics against plain float64 numpy formulas and on inputs built to have known answers."""

import math

import numpy as np
import pytest
import torch

from lowprec.numerics import (
    QuantSpec,
    amax,
    fake_quantize,
    flush_fraction,
    quantize,
    relative_error,
    saturation_fraction,
    sqnr_db,
    tensor_stats,
)


def sample(seed=0, n=50_000):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-20, 20, (n,), generator=g).float())
    x[::7] = 0.0
    return x, fake_quantize(x, QuantSpec(scaling="block", block=(1, 128)))


def test_sqnr_matches_numpy():
    x, q = sample()
    xd, qd = x.double().numpy(), q.double().numpy()
    want = 10 * np.log10(np.sum(xd**2) / np.sum((xd - qd) ** 2))
    assert sqnr_db(x, q) == pytest.approx(want, rel=1e-12)
    assert sqnr_db(x.to(torch.bfloat16), q.to(torch.bfloat16)) == pytest.approx(
        10 * np.log10(np.sum(x.bfloat16().double().numpy() ** 2)
                      / np.sum((x.bfloat16().double().numpy() - q.bfloat16().double().numpy()) ** 2)), rel=1e-12)


def test_sqnr_edge_cases():
    x = torch.tensor([1.0, -2.0, 3.0])
    assert sqnr_db(x, x) == math.inf
    assert sqnr_db(torch.zeros(4), torch.zeros(4)) == math.inf
    assert sqnr_db(torch.zeros(4), torch.ones(4)) == -math.inf
    assert sqnr_db(x, torch.zeros(3)) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="size"):
        sqnr_db(x, torch.zeros(4))


def test_relative_error_matches_numpy():
    x, q = sample(1)
    xd, qd = x.double().numpy(), q.double().numpy()
    nz = xd != 0
    want = np.mean(np.abs(qd[nz] - xd[nz]) / np.abs(xd[nz]))
    assert relative_error(x, q) == pytest.approx(want, rel=1e-12)


def test_relative_error_edge_cases():
    x = torch.tensor([0.0, 1.0, 4.0, 0.0])
    q = torch.tensor([5.0, 0.0, 5.0, 0.0])  # an underflow counts 1.0; zeros of x are skipped
    assert relative_error(x, q) == pytest.approx((1.0 + 0.25) / 2)
    assert relative_error(torch.zeros(5), torch.ones(5)) == 0.0


def test_flush_fraction():
    x = torch.tensor([0.0, 1e-6, -1e-6, 2.0, 3.0, 0.0])
    q = torch.tensor([0.0, 0.0, -0.0, 2.0, 3.0, 1.0])
    assert flush_fraction(x, q) == 0.5
    assert flush_fraction(torch.zeros(3), torch.zeros(3)) == 0.0
    # with e4m3 and one per-tensor scale, values far below the amax really are flushed
    x = torch.tensor([1000.0] + [1e-3] * 9)
    assert flush_fraction(x, fake_quantize(x, QuantSpec(scaling="tensor"))) == 0.9


def test_saturation_fraction():
    x = torch.tensor([1.0, 2.0, 3.0, -4.0, 0.0])
    assert saturation_fraction(x, 150.0, "e4m3") == 0.2  # 600 is clipped; 450 still rounds to 448
    # E4M3's top binade is spaced by 32: (448, 464] rounds to 448, beyond that a value is clipped
    assert saturation_fraction(torch.tensor([448.0, 448.5, 464.0, 464.5]), 1.0, "e4m3") == 0.25
    assert saturation_fraction(torch.tensor([127.0, 127.5, 127.6]), 1.0, "int8") == pytest.approx(1 / 3)
    assert saturation_fraction(x, torch.tensor([1.0, 1.0, 1.0, 200.0, 1.0]), "int8") == 0.2
    q = quantize(torch.randn(8, 256), QuantSpec(scaling="block"))
    assert saturation_fraction(q.codes, 1.0, "e4m3") == 0.0


def test_nan_elements_are_ignored():
    x = torch.tensor([1.0, math.nan, 2.0, 0.0, 4.0])
    q = torch.tensor([1.0, 1.0, math.nan, 0.0, 3.0])
    assert sqnr_db(x, q) == pytest.approx(10 * math.log10(17.0 / 1.0))
    assert relative_error(x, q) == pytest.approx((0 + 0.25) / 2)
    assert amax(torch.tensor([math.nan, -3.0, 2.0])) == 3.0
    assert amax(torch.tensor([math.nan])) == 0.0
    assert amax(torch.tensor([1.0, -math.inf])) == math.inf  # overflow must stay visible
    assert saturation_fraction(torch.tensor([math.nan, 500.0, 1.0]), 1.0, "e4m3") == 0.5


def test_tensor_stats():
    x, q = sample(2)
    stats = tensor_stats(x, q)
    assert set(stats) == {"sqnr_db", "relative_error", "amax", "flush_fraction", "saturation_fraction"}
    assert all(isinstance(v, float) for v in stats.values())
    assert math.isnan(stats["saturation_fraction"])
    assert stats["amax"] == x.abs().max().item()
    assert tensor_stats(x, q, scale=1e6, fmt="e4m3")["saturation_fraction"] > 0.0


def test_one_pass_sums_equal_the_eager_ones(monkeypatch):
    """The compiled one-pass sums (CUDA's by default; forced here on the CPU) give the eager form's
    numbers: counts and amax exactly, the float64 sums to their summation order, NaN pairs left
    out and infinities kept, with a tensor scale, a per-row scale broadcast to x, or none."""
    import lowprec.numerics.metrics as M

    g = torch.Generator().manual_seed(5)
    x = torch.randn(256, 96, generator=g) * torch.exp2(torch.randint(-10, 10, (256, 1), generator=g).float())
    x[3, 5], x[4, 0] = math.nan, 0.0
    q = fake_quantize(x.nan_to_num(0.0), QuantSpec(scaling="tensor"))
    q[9, 9] = math.nan
    inf = x.clone()
    inf[6, 1] = -math.inf     # kept: its noise is infinite, its relative error NaN, amax inf
    row_scale = (448.0 / x.nan_to_num(0.0).abs().amax(1, keepdim=True).clamp_min(1e-30)).expand_as(x)
    cases = [(x, q, None, None), (inf, q, None, None), (x.bfloat16(), q, torch.tensor(3.0), "e5m2"),
             (x, q, row_scale * 4, "e4m3")]
    assert M._sums_one_pass(x, q, None, None)["flushed"] > 0   # really quantized: some values flushed
    for xi, qi, scale, fmt in cases:
        monkeypatch.setattr(M, "FUSED_METRICS", "never")
        want = M.tensor_sums(xi, qi, scale, fmt)
        monkeypatch.setattr(M, "FUSED_METRICS", "always")
        got = M.tensor_sums(xi, qi, scale, fmt)
        assert set(got) == set(want), fmt
        for k in want:
            assert got[k].dtype == want[k].dtype, k
            w, v = want[k].item(), got[k].item()
            if k in ("signal", "noise", "relative_error_sum") and not math.isnan(w):
                assert v == pytest.approx(w, rel=1e-12), (fmt, k)
            else:
                assert v == w or (math.isnan(v) and math.isnan(w)), (fmt, k)
    assert want["clipped"] > 0   # the last case's scale saturates some values
    assert M.FUSED_METRICS == "always"   # compiled, never fallen back to the eager form
    assert math.isinf(M.tensor_sums(inf, q)["amax"].item()) and math.isinf(M.tensor_sums(inf, q)["noise"].item())


def test_one_pass_sums_stay_compiled_over_the_operands_of_a_telemetry_step(monkeypatch):
    """A telemetry step sums operands of several dtypes, formats and scale layouts: each format's
    clip threshold is no new variant, and the others stay within the compiled function's own limit,
    so the sums never fall back to the eager form (Dynamo's default limit of 8 variants did, after
    which a medium run's telemetry ran in float64 copies and failed for memory)."""
    import warnings

    import lowprec.numerics.metrics as M

    monkeypatch.setattr(M, "FUSED_METRICS", "always")
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(6)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="tensor_sums: the compiled one-pass sums failed")
        for xd in (torch.bfloat16, torch.float32):
            for qd in (torch.float32, torch.bfloat16):
                for fmt in (None, "e4m3", "e5m2", "int8"):
                    for scale_shape in ((), (1,), (32, 1)):
                        x = torch.randn(32, 16, generator=g).to(xd)
                        q = (x.float() * 1.01).to(qd)
                        scale = torch.full(scale_shape, 2.0) if fmt else None
                        got = M.tensor_sums(x, q, scale, fmt)
                        assert got["noise"].item() > 0
    assert M.FUSED_METRICS == "always"


def test_one_pass_sums_compile_inside_a_telemetry_steps_eager_stance(monkeypatch):
    """A telemetry step runs the compiled blocks under the force_eager stance; the sums inside it are
    still compiled (a graph is made), not run in their eager float64 form."""
    from torch._dynamo.utils import counters

    import lowprec.numerics.metrics as M

    monkeypatch.setattr(M, "FUSED_METRICS", "always")
    x, q = sample(4, 512)
    torch._dynamo.reset()
    counters.clear()
    with torch.compiler.set_stance("force_eager"):
        got = M.tensor_sums(x, q)
    assert counters["stats"]["unique_graphs"] >= 1
    monkeypatch.setattr(M, "FUSED_METRICS", "never")
    want = M.tensor_sums(x, q)
    assert got["nonzero"].item() == want["nonzero"].item()
    assert got["noise"].item() == pytest.approx(want["noise"].item(), rel=1e-12)


def test_one_pass_sums_that_fail_to_compile_fall_back_to_eager(monkeypatch):
    import lowprec.numerics.metrics as M

    def broken():
        def fn(*a):
            raise torch._dynamo.exc.TorchDynamoException("no compiler")
        return fn

    x, q = sample(4, 512)
    monkeypatch.setattr(M, "FUSED_METRICS", "never")
    want = M.tensor_sums(x, q)
    monkeypatch.setattr(M, "FUSED_METRICS", "always")
    monkeypatch.setattr(M, "_one_pass_sums", broken)
    with pytest.warns(UserWarning, match="compiled one-pass sums failed .*no compiler.*eager from now on"):
        got = M.tensor_sums(x, q)
    assert {k: v.item() for k, v in got.items()} == {k: v.item() for k, v in want.items()}
    assert M.FUSED_METRICS == "never"


def test_telemetry_rows_hold_device_values_until_the_frame_reads_them_at_once(monkeypatch):
    """Telemetry.record keeps the metrics' sums and tensor values unread; frame() reads them in one
    conversion per dtype (not one per number, each a wait for a GPU) and gives what the immediate
    metrics give, each value as Tensor.item gives it, a Choice as the name its flag picks, and a
    value of the quantizer's own in place of a metric of the same name."""
    from lowprec.recipes import Choice, LazyStats
    from lowprec.telemetry import Telemetry

    x, q = sample(4, 4096)
    tel = Telemetry(every=1)
    tel.step = 1
    counts = torch.tensor([7, 3])
    stats = LazyStats(format=Choice(torch.tensor(True), "e4m3", "bf16"), n_fallback=lambda: counts[1],
                      ratio=torch.tensor(0.25, dtype=torch.float32), rule="absmax")
    tel.record("l0", "fprop", "x", x, q, torch.tensor(2.0), "e4m3", **stats.pending())
    counts[1] = 99   # a buffer that the next GEMMs update: the row keeps the count at its call
    tel.record("l0", "fprop", "w", x, q, None, None, amax=5.0, format=Choice(torch.tensor(False), "e4m3", "bf16"))
    stack = torch.stack
    calls = []
    monkeypatch.setattr(torch, "stack", lambda ts, *a, **k: calls.append(len(ts)) or stack(ts, *a, **k))
    f = tel.frame()
    assert len(calls) == 4   # one per dtype: float64 sums, float32 amax and ratio, int64 counts, bool flags
    a, b = tel.rows   # as the frame's rows hold them (the frame makes a column with a gap float)
    assert {k: a[k] for k in tensor_stats(x, q, 2.0, "e4m3")} == tensor_stats(x, q, 2.0, "e4m3")
    assert (a["format"], a["n_fallback"], a["ratio"], a["rule"]) == ("e4m3", 3, 0.25, "absmax")
    assert type(a["n_fallback"]) is int and b["format"] == "bf16" and b["amax"] == 5.0
    assert b["sqnr_db"] == tensor_stats(x, q)["sqnr_db"] and math.isnan(b["saturation_fraction"])
    assert list(f.columns[:10]) == ["step", "layer", "gemm", "operand", "format", "sqnr_db", "relative_error",
                                    "amax", "flush_fraction", "saturation_fraction"]
    assert tel.frame().equals(f)   # read once
