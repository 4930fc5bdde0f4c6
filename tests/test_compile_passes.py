"""The compiled blocks' Inductor pass (lowprec.compile_passes): a tensor that several fixed-layout
consumers take is stored once, and what is computed does not change."""

import re

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import lowprec.linear as lin
from lowprec.compile_passes import realize_shared_operands


# A consumer as the suite's operators are: a custom operator of the lowprec namespace that mutates
# an output and reads its input at fixed strides.
@torch.library.custom_op("lowprec::_test_accumulate_", mutates_args=("out",))
def _accumulate_(out: torch.Tensor, x: torch.Tensor) -> None:
    out.add_(x.float())


@_accumulate_.register_fake
def _(out, x):
    return None


def _codes_then_two_consumers(x, out1, out2):
    codes = (x * 3.0).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    _accumulate_(out1, codes)
    _accumulate_(out2, codes)
    return codes.float().sum()


def _fp8_buffers(options: dict) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch._dynamo.reset()
    x = torch.randn(64, 48, generator=torch.Generator().manual_seed(0))
    out1, out2 = torch.zeros(64, 48), torch.zeros(64, 48)
    fn = torch.compile(_codes_then_two_consumers, options=options)
    with torch._inductor.config.patch(force_disable_caches=True):  # the generated code, not a cached graph
        total, codes = run_and_get_code(fn, x, out1, out2)
    allocations = re.findall(r"empty_strided_\w+\(\(64, 48\), \(48, 1\), torch\.float8_e4m3fn\)", "\n".join(codes))
    return len(allocations), total, out1, out2


@pytest.mark.parametrize("passes", [{}, lin.GRAPH_PASSES], ids=["inductor", "with_pass"])
def test_shared_operand_is_stored_once_and_values_unchanged(passes):
    """Without the pass Inductor stores the codes once per consumer (two buffers), with it once;
    both give eager's values."""
    n, total, out1, out2 = _fp8_buffers(passes)
    expected = (torch.randn(64, 48, generator=torch.Generator().manual_seed(0)) * 3.0).to(torch.float8_e4m3fn).float()
    assert torch.equal(out1, expected) and torch.equal(out2, expected)
    assert torch.equal(total, expected.sum())
    assert n == (1 if passes else 2)


def test_compiled_blocks_run_the_pass():
    assert lin.GRAPH_PASSES["post_grad_custom_post_pass"] is realize_shared_operands
    assert realize_shared_operands.uuid()  # a cache key, so that a changed pass recompiles
