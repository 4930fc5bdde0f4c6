"""Sub-tensor MoR on the fast path (lowprec.methods.mor_subtensor_fast) on the CPU: its codes, scales and
choices against the emulation's (lowprec.methods.mor, itself checked against independent references),
the plan that runs it, a layer trained on it against the emulation, its block counts, and the
compiled model. The Triton GEMM it multiplies on: tests/test_kernels_block_fp8_gemm.py."""


import pytest
import torch
from torch import nn

import lowprec.linear as lin
from conftest import compiled_and_eager_mor_models, fast_and_emulated_mor_steps
from lowprec.gemm import FastPlan
from lowprec.methods.mor import BF16, E4M3, E5M2, SubTensorMoRQuantizer, mor_recipe, subtensor_mor
from lowprec.methods.mor_subtensor_fast import fast_subtensor_quantizer, subtensor_mm, subtensor_operand
from lowprec.numerics import sqnr_db


def _data(rows=256, cols=384, seed=0, block=128):
    g, b = torch.Generator().manual_seed(seed), block
    x = torch.randn(rows, cols, generator=g) * torch.logspace(-3, 2, cols)
    x[:b, :b] *= torch.logspace(-12, 0, b)  # a block whose dynamic range no FP8 format holds
    # one that E5M2 holds better than E4M3 (six decades: a quarter of it below E4M3's normals)
    mags = torch.logspace(-6, 0, b * b)[torch.randperm(b * b, generator=g)].reshape(b, b)
    signs = torch.randint(0, 2, (b, b), generator=g) * 2 - 1
    x[b:2 * b, b:2 * b] = (mags * signs)[: max(rows - b, 0)]
    return x.bfloat16()


def test_which_quantizers_take_the_fast_path():
    assert fast_subtensor_quantizer(SubTensorMoRQuantizer())
    assert fast_subtensor_quantizer(SubTensorMoRQuantizer(block=(64, 64), mode="three_way", scale="gam"))
    assert not fast_subtensor_quantizer(SubTensorMoRQuantizer(block=(64, 128)))  # its transpose's blocks differ
    assert not fast_subtensor_quantizer(SubTensorMoRQuantizer(block=(48, 48)))   # the K-step must divide 48
    assert not fast_subtensor_quantizer(SubTensorMoRQuantizer(dequant="bf16"))
    plan = FastPlan.for_recipe(mor_recipe({"partition": "subtensor"}))
    assert {kind for kind, _, _ in plan.gemms.values()} == {"mor_sub"}
    assert plan.reused == {("dgrad", "w"), ("wgrad", "dy"), ("wgrad", "x")}
    assert "sub-tensor two_way" in plan.describe()
    assert FastPlan.for_recipe(mor_recipe({"partition": "subtensor", "dequant": "bf16"})) is None


@pytest.mark.parametrize("scale", ["fp32", "gam", "e8"])
@pytest.mark.parametrize("mode", ["two_way", "three_way"])
def test_operand_is_the_emulations_values_bit_for_bit(mode, scale):
    x = _data()
    x[200, 300] = float("nan")
    q = SubTensorMoRQuantizer(mode=mode, scale=scale)
    got = subtensor_operand(q, x)
    ref = subtensor_mor(x.float(), q.block, mode, scale)
    assert torch.equal(got.choice, ref.choice)
    assert got.values.dtype == torch.bfloat16
    assert torch.equal(got.dequantized().nan_to_num(7.0), ref.values.nan_to_num(7.0))
    assert int(got.choice[1, 2]) == BF16 and bool(got.values[200, 300].isnan())  # the NaN's block
    formats = {int(c) for c in got.choice.unique()}
    assert E4M3 in formats and (E5M2 if mode == "three_way" else BF16) in formats
    assert torch.equal(got.scale[got.choice == BF16], torch.ones_like(got.scale[got.choice == BF16]))


def test_gemm_multiplies_the_emulations_values():
    q = SubTensorMoRQuantizer(mode="three_way")
    a, b = _data(256, 384, seed=1), _data(128, 384, seed=2)
    qa, qb = subtensor_operand(q, a), subtensor_operand(q, b)
    out = subtensor_mm(qa, qb, torch.float32)
    va, vb = (subtensor_mor(t.float(), q.block, "three_way").values.double() for t in (a, b))
    assert sqnr_db(va @ vb.t(), out.double()) > 100               # accumulation order only
    assert sqnr_db(a.double() @ b.double().t(), out.double()) < 60  # really quantized


@pytest.mark.parametrize("mode", ["two_way", "three_way"])
def test_fast_layer_trains_like_the_emulation_and_counts_its_blocks(mode, monkeypatch):
    torch.manual_seed(0)
    # 64x64 blocks: several an operand at a quarter of the interpreted GEMMs' work of 128x128 ones
    base = nn.Sequential(nn.Linear(192, 128), nn.GELU(), nn.Linear(128, 192))
    x, g = _data(128, 192, seed=3, block=64).float().reshape(2, 64, 192), torch.randn(2, 64, 192)
    method = {"partition": "subtensor", "subtensor_mode": mode, "block": [64, 64]}
    got, want, rf, re = fast_and_emulated_mor_steps(base, method, x, g, monkeypatch)
    # the first layer's bf16 output rounds in another order (its GEMM's), so some of the second
    # layer's codes differ by a step, an E5M2 step in three-way (the GELU output's near-zero values
    # send its blocks there): agreement at the codes' own noise level
    for a, b in zip(got, want):
        assert sqnr_db(b, a) > 30
    cov_fast, cov_emu = rf.gemm("fprop")[0].coverage(), re.gemm("fprop")[0].coverage()
    assert len(cov_fast) == 12 and all(r["calls"] == 1 for r in cov_fast)
    key = ("layer", "gemm", "operand", "blocks", "e4m3_blocks", "e5m2_blocks", "bf16_blocks", "e4m3")
    assert [tuple(r[k] for k in key) for r in cov_fast] == [tuple(r[k] for k in key) for r in cov_emu]
    wide = "e5m2_blocks" if mode == "three_way" else "bf16_blocks"
    assert sum(r[wide] for r in cov_fast) > 0 and sum(r["e4m3_blocks"] for r in cov_fast) > 0


def test_every_gemm_of_a_step_gets_k_contiguous_operands(monkeypatch):
    """The backward's operands are transposes (reused or quantized from a transposed view); the
    kernel gets them K-contiguous, the layout it multiplies at full rate (the Triton route stood in
    for by the fp32 product, which the kernel equals to summation order)."""
    import lowprec.methods.mor_subtensor_fast as msf
    from lowprec.gemm import dequantized

    seen = []

    def kernel(a, sa, blk_a, b, sb, blk_b, out_dtype, **fp8_tiles):
        seen.append((a.stride(1), b.stride(1), fp8_tiles["a_e4m3"].stride(1), fp8_tiles["b_e4m3"].stride(1)))
        return (dequantized(a, sa, tuple(blk_a)) @ dequantized(b, sb, tuple(blk_b)).t()).to(out_dtype)

    monkeypatch.setattr(msf, "triton_runs_on", lambda device_type: True)
    monkeypatch.setattr(msf, "block_scaled_mm", kernel)
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(256, 128))
    got, want, _, _ = fast_and_emulated_mor_steps(base, {"partition": "subtensor"}, _data(128, 256, seed=4).float(),
                                                  torch.randn(128, 128), monkeypatch)
    assert len(seen) == 3 and all(s == (1, 1, 1, 1) for s in seen), seen
    for a, b in zip(got, want):
        assert sqnr_db(b, a) > 30


@pytest.mark.slow
def test_compiled_subtensor_model_has_one_graph_and_trains_like_eager(monkeypatch):
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    comp, eager, recipe_c = compiled_and_eager_mor_models({"partition": "subtensor", "block": [64, 64]}, width=128)
    # Inductor rounds the bf16 activations' producers (GELU and its backward) differently from eager
    for a, b in zip(comp.parameters(), eager.parameters()):
        assert sqnr_db(b.grad, a.grad) > 25
    cov = recipe_c.gemm("fprop")[0].coverage()
    # counted inside the graph; the first layer has no input gradient (dgrad)
    assert len(cov) == 10 and all(r["calls"] == 1 and r["blocks"] == 4 for r in cov)
