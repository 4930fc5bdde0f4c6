"""The MoR error kernel (lowprec.kernels.mor_error) against the torch form of the fast path's error
(lowprec.methods.mor_fast.operand_error) and the emulation's statistic: the same non-zero counts per
row, row sums equal up to fp32 summation order, the statistic within ERROR_ATOL of both, NaN and Inf
as NaN, for operands and transposed views of every partition.

CUDA when present, else the Triton interpreter on CPU (tiny shapes), as test_kernels_mor.py.
"""

import math

import pytest
import torch

from conftest import INTERPRETER_WARNINGS, kernel_devices, kernel_modules  # noqa: E402

[ke] = kernel_modules("lowprec.kernels.mor_error")

from lowprec.methods.mor import MoRQuantizer, _relative_error, mean_over_nonzero, quantize_e4m3  # noqa: E402
from lowprec.methods.mor_fast import ERROR_ATOL, error_terms, in_base_layout, mor_operand, operand_error  # noqa: E402

DEVICE = kernel_devices(ke)[0]

pytestmark = INTERPRETER_WARNINGS


def _data(rows, cols, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.logspace(-3, 2, cols)
    x[1, :7] = 0.0          # zeros are left out
    x[2, 3] = 1e-30         # flushes: counts 1
    return x.bfloat16()


def _kernel_error(base, f, transposed):
    codes, scale, block = in_base_layout(f, transposed)
    sums, counts = ke.error_rows(base.to(DEVICE), codes.to(DEVICE), scale.to(DEVICE), block)
    return sums.cpu(), counts.cpu()


def _torch_rows(base, f, transposed):
    """The torch form's per-row sums and counts, from its own terms."""
    _, scale, block = in_base_layout(f, transposed)
    terms, nz = error_terms(base, scale, block, f.spec)
    return terms.double().sum(dim=1), nz.sum(dim=1, dtype=torch.int32)


# each partition once (the interpreter takes seconds a case); the transposed view (read through the
# codes' and grid's strides) where training makes one, per channel
@pytest.mark.parametrize("partition, scale, transposed", [("block", "gam", False), ("tensor", "fp32", False),
                                                          ("channel", "gam", True)])
def test_error_rows_equal_the_torch_form(partition, scale, transposed):
    base = _data(40, 136, seed=1)  # partial 128-blocks at both edges (the interpreter is slow: tiny)
    q = MoRQuantizer(partition=partition, scale=scale)
    f = mor_operand(q, base.t() if transposed else base).fp8
    sums, counts = _kernel_error(base, f, transposed)
    want_sums, want_counts = _torch_rows(base, f, transposed)
    assert torch.equal(counts, want_counts) and int(counts[1]) == 136 - 7
    torch.testing.assert_close(sums.double(), want_sums, rtol=1e-5, atol=0)
    got = float(mean_over_nonzero(sums.sum(dtype=torch.float64), counts.sum()))
    view = base.t() if transposed else base
    ref = float(_relative_error(view.float(), quantize_e4m3(view.float(), partition, scale=scale).dequantize()))
    assert got > 1e-3 and got == pytest.approx(ref, abs=ERROR_ATOL)
    assert got == pytest.approx(float(operand_error(base, f, transposed)), abs=ERROR_ATOL)


def test_nan_and_inf_make_the_row_nan():
    base = _data(32, 128, seed=2)
    base[5, 9], base[7, 1] = float("nan"), float("inf")
    f = mor_operand(MoRQuantizer(partition="block"), base).fp8
    sums, _ = _kernel_error(base, f, False)
    assert math.isnan(sums[5]) and math.isnan(sums[7]) and not sums[:5].isnan().any()


def test_bad_operands_are_named():
    base = _data(64, 256)  # nothing launches
    f = mor_operand(MoRQuantizer(partition="block"), base).fp8
    with pytest.raises(ValueError, match="one shape"):
        ke.error_rows(base.to(DEVICE), f.codes.t().to(DEVICE), f.scale.to(DEVICE), (128, 128))
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        ke.error_rows(base.to(DEVICE), f.codes.float().to(DEVICE), f.scale.to(DEVICE), (128, 128))
    with pytest.raises(ValueError, match="scale grid"):
        ke.error_rows(base.to(DEVICE), f.codes.to(DEVICE), f.scale.to(DEVICE), (32, 128))
