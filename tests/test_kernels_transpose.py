"""The byte transpose kernel (lowprec.kernels.transpose) against torch's ``x.t().contiguous()``, bit
for bit: FP8 codes with NaN, Inf, zeros of both signs and subnormals, INT8, ragged and whole tiles,
transposed views as input. CUDA when present, else the Triton interpreter on CPU (small shapes).
"""

import pytest
import torch

from conftest import INTERPRETER_WARNINGS, kernel_devices, kernel_modules  # noqa: E402

[kt] = kernel_modules("lowprec.kernels.transpose")

DEVICE = kernel_devices(kt)[0]

pytestmark = INTERPRETER_WARNINGS


def _every_byte(rows, cols, dtype, seed=0):
    """A (rows, cols) tensor whose bytes take every value 0..255 (every FP8 code, NaN and Inf among
    them) in a shuffled order."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.arange(rows * cols, dtype=torch.int64) % 256
    bits = bits[torch.randperm(rows * cols, generator=g)].to(torch.uint8).reshape(rows, cols)
    return bits.view(dtype).to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.int8])
@pytest.mark.parametrize("shape", [(128, 64), (70, 135), (1, 200), (65, 1)], ids=str)
def test_transpose_is_torchs_bit_for_bit(shape, dtype):
    x = _every_byte(*shape, dtype)
    for view in (x, x.t()):  # row-major, and a transposed view read through its strides
        got = kt.transpose_bytes(view)
        want = view.t().contiguous()
        assert got.is_contiguous() and got.shape == want.shape and got.dtype == dtype
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_transpose_argument_errors():
    with pytest.raises(ValueError, match="must be 2-D"):
        kt.transpose_bytes(torch.zeros(2, 3, 4, dtype=torch.uint8, device=DEVICE))
    with pytest.raises(ValueError, match="one-byte elements"):
        kt.transpose_bytes(torch.zeros(2, 3, dtype=torch.bfloat16, device=DEVICE))
    assert kt.transpose_bytes(torch.zeros(0, 3, dtype=torch.uint8, device=DEVICE)).shape == (3, 0)
