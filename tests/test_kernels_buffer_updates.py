"""The buffer-update kernels (lowprec.kernels.buffer_updates) against the torch operators they replace on
CUDA: a delayed scaler's history step (lowprec.numerics.scaling.delayed_step_) and the rows added to a
counts buffer (lowprec.methods.layer_buffers.add_rows_), the dynamic fallback rule's level
(lowprec.methods.int8_fallback_state.set_level_) and a layer's call counter
(lowprec.numerics.rounding_stream.take_count_), bit for bit, step by step. CUDA when present,
else the Triton interpreter on CPU."""

import pytest
import torch

from conftest import INTERPRETER_WARNINGS, kernel_devices, kernel_modules  # noqa: E402

[kb] = kernel_modules("lowprec.kernels.buffer_updates")

from lowprec.methods.int8_fallback_state import set_level_  # noqa: E402
from lowprec.methods.layer_buffers import add_rows_  # noqa: E402
from lowprec.numerics.rounding_stream import take_count_  # noqa: E402
from lowprec.numerics.scaling import delayed_step_  # noqa: E402

DEVICE = kernel_devices(kb)[0]

pytestmark = INTERPRETER_WARNINGS


@pytest.mark.parametrize("use_max", [True, False], ids=["max", "most_recent"])
@pytest.mark.parametrize("length", [1, 3, 1024, 1500])  # 1500: the max over two loop steps of the ring
@pytest.mark.parametrize("start", ["empty", "wrapped"])
def test_delayed_step_is_the_operators(length, use_max, start):
    """From an empty history (the first call quantizes with its own amax) and from one that has
    wrapped around the ring, with amaxes that rise, fall and are zero: the amax returned and the
    recorded ring and count equal the torch operator's after every call."""
    g = torch.Generator().manual_seed(length)
    ring = torch.zeros(length)
    count = torch.zeros((), dtype=torch.int64)
    if start == "wrapped":
        ring = torch.rand(length, generator=g) * 100
        count.fill_(3 * length + 1)
    want = (ring, count)
    got = tuple(t.clone().to(DEVICE) for t in want)
    for i, a in enumerate([0.5, 1e3, 0.0, 7.0, 1e-3, 2.0]):
        a = torch.tensor(a)
        expect = delayed_step_(*want, a, use_max)
        out = torch.empty(1, device=DEVICE)
        kb.delayed_step(*got, a.reshape(1).to(DEVICE), use_max, out)
        assert torch.equal(out.cpu().reshape(()), expect), i
        assert torch.equal(got[0].cpu(), want[0]) and int(got[1]) == int(want[1]), i
    assert int(got[1]) == int(count) and int(count) == (6 if start == "empty" else 3 * length + 7)


def test_delayed_step_reads_the_whole_history_before_it_writes():
    """The slot written this call (the oldest, when the ring is full) still counts in this call's max."""
    ring = torch.tensor([1.0, 9.0, 2.0, 3.0], device=DEVICE)
    count = torch.tensor(5, dtype=torch.int64, device=DEVICE)  # writes slot 1, which holds the max
    out = torch.empty(1, device=DEVICE)
    kb.delayed_step(ring, count, torch.tensor([0.5], device=DEVICE), True, out)
    assert float(out) == 9.0 and ring.tolist() == [1.0, 0.5, 2.0, 3.0] and int(count) == 6


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32], ids=str)
@pytest.mark.parametrize("shape, row, update_shape", [((12, 3), 4, (1, 3)), ((12, 4), 6, (2, 2)), ((7,), 2, (3,))],
                         ids=["one_row", "two_rows_first_columns", "1d"])
def test_add_rows_is_the_operators(shape, row, update_shape, dtype):
    g = torch.Generator().manual_seed(1)
    want = (torch.randint(0, 100, shape, generator=g)).to(dtype)
    got = want.clone().to(DEVICE)
    for _ in range(3):
        update = torch.randint(-5, 50, update_shape, generator=g).to(dtype)
        add_rows_(want, row, update)
        kb.add_rows(got, row, update.to(DEVICE))
        assert torch.equal(got.cpu(), want)
    assert not torch.equal(want, torch.randint(0, 100, shape, generator=torch.Generator().manual_seed(1)).to(dtype))


def test_set_level_is_the_operators():
    """Levels set (Inf, a number, a new number) and steps counted per slot, other slots untouched."""
    want = (torch.full((6,), float("inf")), torch.zeros(6, dtype=torch.int64))
    got = tuple(t.clone().to(DEVICE) for t in want)
    for slot, level in ((2, 3.5), (2, 0.25), (5, float("inf")), (0, 7.0)):
        lv = torch.tensor(level)
        set_level_(*want, slot, lv)
        kb.set_level(*got, slot, lv.reshape(1).to(DEVICE))
        assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1]), slot
    assert want[1].tolist() == [1, 0, 2, 0, 0, 1] and float(want[0][2]) == 0.25


def test_take_count_is_the_operators():
    """The value read, then the counter advanced on training calls only, from 0 and past 2^32 (the
    counter is 64 bits; the key takes both words)."""
    for start in (0, (1 << 32) - 1):
        want = torch.tensor(start, dtype=torch.int64)
        got = want.clone().to(DEVICE)
        for advance in (True, False, True, True):
            expect = take_count_(want, advance)
            out = torch.empty((), dtype=torch.int64, device=DEVICE)
            kb.take_count(got, out, advance)
            assert int(out) == int(expect) and int(got) == int(want), (start, advance)
        assert int(want) == start + 3


def test_bad_input_names_the_problem():
    ring = torch.zeros(4, device=DEVICE)
    count = torch.zeros((), dtype=torch.int64, device=DEVICE)
    one = torch.zeros(1, device=DEVICE)
    with pytest.raises(ValueError, match="count must be a single int64"):
        kb.delayed_step(ring, count.int(), one, True, one.clone())
    with pytest.raises(ValueError, match="ring must be"):
        kb.delayed_step(ring.double(), count, one, True, one.clone())
    buf = torch.zeros(4, 3, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="outside the buffer"):
        kb.add_rows(buf, 3, torch.ones(2, 3, dtype=torch.int64, device=DEVICE))
    with pytest.raises(ValueError, match="buffer's dtype"):
        kb.add_rows(buf, 0, torch.ones(1, 3, device=DEVICE))
    levels, steps = torch.zeros(6, device=DEVICE), torch.zeros(6, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="slot 6 outside"):
        kb.set_level(levels, steps, 6, one)
    with pytest.raises(ValueError, match="one length"):
        kb.set_level(levels, steps[:5], 0, one)
    with pytest.raises(ValueError, match="count must be a single int64"):
        kb.take_count(count.int(), count.clone(), True)
    with pytest.raises(ValueError, match="out must be a single int64"):
        kb.take_count(count, torch.zeros(2, dtype=torch.int64, device=DEVICE), True)
