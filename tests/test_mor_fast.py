"""Tensor-level MoR on the fast path (lowprec.methods.mor_fast) on the CPU: its codes, scales, errors and
decisions against the emulation's (lowprec.methods.mor, itself checked against independent references),
its GEMMs against the emulation's on both branches, the decision counts of the coverage table,
and the compiled model."""

import math

import pytest
import torch
from torch import nn

import lowprec.linear as lin
from conftest import compiled_and_eager_mor_models, fast_and_emulated_mor_steps
from lowprec import convert
from lowprec.gemm import FastPlan
from lowprec.methods.mor import COUNT_COLUMNS, MoRQuantizer, _relative_error, layer_counts, mor_recipe, quantize_e4m3
from lowprec.methods.mor_fast import ERROR_ATOL, fast_mor_quantizer, mor_mm, mor_operand
from lowprec.numerics import sqnr_db

PARTITIONS = ["tensor", "channel", "block"]


def _data(rows=256, cols=384, seed=0):
    g = torch.Generator().manual_seed(seed)
    # columns of very different magnitude: per-tensor E4M3 loses the small ones (large error)
    return (torch.randn(rows, cols, generator=g) * torch.logspace(-3, 2, cols)).bfloat16()


@pytest.mark.parametrize("scale", ["gam", "e8", "fp32"])
@pytest.mark.parametrize("partition", PARTITIONS)
def test_operand_equals_emulation(partition, scale):
    x = _data()
    x[3, 5] = float("nan")
    q = MoRQuantizer(partition=partition, scale=scale)
    got = mor_operand(q, x)
    ref = quantize_e4m3(x.float(), partition, scale=scale)
    assert torch.equal(got.fp8.scale, ref.scale)
    assert torch.equal(got.fp8.codes.float().nan_to_num(9.0), ref.codes.nan_to_num(9.0))
    assert not bool(got.e4m3)  # a NaN makes the error NaN: BF16
    x[3, 5] = 1.0
    got, ref = mor_operand(q, x), quantize_e4m3(x.float(), partition, scale=scale)
    err = _relative_error(x.float(), ref.dequantize())
    assert bool(got.e4m3) == bool(err <= q.threshold)


def _emulated_error(x2d, partition, scale):
    ref = quantize_e4m3(x2d.float(), partition, scale=scale)
    return float(_relative_error(x2d.float(), ref.dequantize()))


@pytest.mark.parametrize("scale", ["gam", "e8", "fp32"])
@pytest.mark.parametrize("partition", PARTITIONS)
def test_operand_error_is_the_emulations_statistic(partition, scale):
    """Zeros are left out, a flushed value counts 1, a saturated Inf makes it NaN: as the emulation;
    elsewhere within ERROR_ATOL of it, and not zero (the codes really are E4M3)."""
    from lowprec.methods.mor_fast import operand_error
    x = _data(256, 384, seed=3)
    x[5, 1], x[6, 2] = 0.0, 1e-30  # a zero, a value that flushes
    got = mor_operand(MoRQuantizer(partition=partition, scale=scale), x)
    err = float(operand_error(x, got.fp8))
    ref = _emulated_error(x, partition, scale)
    assert err > 1e-3 and err == pytest.approx(ref, abs=ERROR_ATOL)
    x[4, 9] = float("inf")
    assert math.isnan(float(operand_error(x, mor_operand(MoRQuantizer(partition=partition, scale=scale), x).fp8)))
    zeros = torch.zeros(8, 128, dtype=torch.bfloat16)
    assert float(operand_error(zeros, mor_operand(MoRQuantizer(partition=partition), zeros).fp8)) == 0.0


@pytest.mark.parametrize("scale", ["gam", "e8"])
@pytest.mark.parametrize("partition", PARTITIONS)
def test_transposed_operand_error_is_summed_over_its_row_major_base(partition, scale):
    """A transposed view (the weight gradient's X^T, dY^T) has its error read from its row-major base
    (never through the transposed codes): the emulation's error of the view within ERROR_ATOL, and
    the decision it makes away from the threshold by more than that."""
    from lowprec.methods.mor_fast import operand_error
    base = _data(384, 256, seed=7)
    base[4, 9], base[5, 1], base[6, 2] = float("inf"), 0.0, 1e-30  # saturates, zero, flushes
    q = MoRQuantizer(partition=partition, scale=scale)
    got = mor_operand(q, base.t())
    assert got.hp_t and got.hp.data_ptr() == base.data_ptr() and not bool(got.e4m3)  # the Inf: BF16
    base[4, 9] = 1.0
    got = mor_operand(q, base.t())
    ref = _emulated_error(base.t(), partition, scale)
    assert float(operand_error(base, got.fp8, transposed=True)) == pytest.approx(ref, abs=ERROR_ATOL)
    assert bool(got.e4m3) == (ref <= q.threshold)
    for margin, e4m3 in ((10 * ERROR_ATOL, True), (-10 * ERROR_ATOL, False)):
        q_at = MoRQuantizer(partition=partition, scale=scale, threshold=ref + margin)
        assert bool(mor_operand(q_at, base.t()).e4m3) == e4m3


def test_decision_counts_live_on_the_layers_device():
    with torch.device("meta"):  # a model built on its device before convert (as on a GPU)
        model = nn.Sequential(nn.Linear(256, 128))
    convert(model, mor_recipe({"partition": "tensor"}))
    # one row per operand slot, one column per count (sub-tensor MoR's blocks too: one layout), in
    # a tensor per pass
    for t in (model[0].mor_counts, model[0].mor_counts_backward, layer_counts(model[0])):
        assert t.device.type == "meta" and t.shape == (6, len(COUNT_COLUMNS))
    assert not any("mor_counts" in k for k in model.state_dict())  # not a checkpoint's business (coverage restarts)


def test_which_quantizers_take_the_fast_path(monkeypatch):
    assert all(fast_mor_quantizer(MoRQuantizer(p)) for p in ("tensor", "channel", "block"))
    assert not fast_mor_quantizer(MoRQuantizer("block", block=(64, 64)))
    assert not fast_mor_quantizer(MoRQuantizer("tensor", dequant="bf16"))
    assert not fast_mor_quantizer(MoRQuantizer("tensor", gemm="kernel"))
    for partition in ("tensor", "block"):
        plan = FastPlan.for_recipe(mor_recipe({"partition": partition}))
        assert plan.has_mor and plan.reused == {("dgrad", "w"), ("wgrad", "dy"), ("wgrad", "x")}
    # per-channel scales of a tensor and of its transpose differ: unless the forward quantizes each
    # operand with its transpose (CHANNEL_WITH_TRANSPOSE, the default), the backward quantizes again
    from lowprec.methods import mor_fast
    monkeypatch.setattr(mor_fast, "CHANNEL_WITH_TRANSPOSE", False)
    assert FastPlan.for_recipe(mor_recipe({"partition": "channel"})).reused == frozenset()


def test_channel_plan_reuses_the_transposes_quantized_with_their_tensors(monkeypatch):
    from lowprec.methods import mor_fast
    from lowprec.config import env_switch
    monkeypatch.delenv(mor_fast.CHANNEL_WITH_TRANSPOSE_ENV, raising=False)
    assert env_switch(mor_fast.CHANNEL_WITH_TRANSPOSE_ENV)  # on by default
    monkeypatch.setattr(mor_fast, "CHANNEL_WITH_TRANSPOSE", True)
    plan = FastPlan.for_recipe(mor_recipe({"partition": "channel"}))
    assert plan.reused == {("dgrad", "w"), ("wgrad", "dy"), ("wgrad", "x")}
    assert plan.with_transpose == {("fprop", "w"), ("dgrad", "dy"), ("fprop", "x")}


@pytest.mark.parametrize("view", [False, True], ids=["rows", "transposed_view"])
def test_channel_operand_with_its_transpose_is_both_quantizations(view):
    """Per channel, ``with_transpose`` quantizes the transpose with scales of its own (the columns')
    in the same call: its codes, scales and choice are those of quantizing the transpose alone, the
    operand's its own, and the kept operand's transpose multiplies them. The data make the two
    choices differ (rows of very different columns: per-row E4M3 loses the small ones, per-column
    keeps them), so a choice read from the wrong codes shows."""
    base = _data(256, 384, seed=7)
    x = base.t() if view else base
    errors = [float(_relative_error(v.float(), quantize_e4m3(v.float(), "channel").dequantize())) for v in (x, x.t())]
    assert abs(errors[0] - errors[1]) > 1e-3
    q = MoRQuantizer(partition="channel", threshold=sum(errors) / 2)
    op = mor_operand(q, x, with_transpose=True)
    alone, alone_t = mor_operand(q, x), mor_operand(q, x.t())
    assert bool(alone.e4m3) != bool(alone_t.e4m3)
    for got, want in ((op, alone), (op.t(), alone_t), (op.kept().t(), alone_t)):
        g, w = got.fp8_operand(), want.fp8_operand()
        assert torch.equal(g.codes.view(torch.uint8), w.codes.view(torch.uint8))
        assert torch.equal(g.scale, w.scale)
        assert bool(got.own()[3]) == bool(want.e4m3)
        assert torch.equal(got.values(), want.values())
    kept = op.kept()
    assert kept.fp8.codes_t is None and kept.e4m3_t is None
    # the product through the kept operand's transpose is the transpose's own
    b = mor_operand(q, _data(128, x.shape[0], seed=8))
    assert torch.equal(mor_mm(kept.t(), b, torch.float32), mor_mm(alone_t, b, torch.float32))


@pytest.mark.parametrize("threshold,fp8", [(0.045, True), (0.0, False)])
@pytest.mark.parametrize("partition", PARTITIONS)
def test_gemm_equals_emulation(partition, threshold, fp8):
    from lowprec.gemm import operand_mm

    q = MoRQuantizer(partition=partition, threshold=threshold)
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(256, 512, generator=g).bfloat16(), torch.randn(128, 512, generator=g).bfloat16()
    qa, qb = mor_operand(q, a), mor_operand(q, b)
    assert bool(qa.e4m3 & qb.e4m3) == fp8
    out = mor_mm(qa, qb, torch.float32)
    call = type("Call", (), {"training": False})()
    va, vb = q(a.float(), call)[0], q(b.float(), call)[0]
    if fp8:  # the FP8 product of the codes, left as it is
        assert torch.equal(out, operand_mm(qa.fp8, qb.fp8, torch.float32))
        assert sqnr_db(a.double() @ b.double().t(), out.double()) < 40  # really quantized
    else:  # overwritten by the product of the emulation's own values (fp32 accumulation: torch's
        # GEMM, or the Triton fix-up where the interpreter is active)
        assert not torch.equal(out, operand_mm(qa.fp8, qb.fp8, torch.float32))
        assert sqnr_db(va.double() @ vb.double().t(), out.double()) > 100
    assert sqnr_db(va.double() @ vb.double().t(), out.double()) > 40


def test_gemm_of_mixed_choices_multiplies_each_operands_choice():
    """One operand E4M3, the other BF16: the product of the dequantized codes and the BF16 values
    (not of both operands' codes), through transposed operands as the backward passes them."""
    q = MoRQuantizer(partition="tensor")
    g = torch.Generator().manual_seed(2)
    # small: under the interpreter the BF16 fix-up's GEMM is the test's time
    a = torch.randn(128, 64, generator=g).bfloat16()        # E4M3 suits it
    b = _data(64, 128, seed=4).t().contiguous()             # (128, 64): rows of very different size
    qa, qb = mor_operand(q, a).t(), mor_operand(q, b).t()   # a.T (64, 128) and b.T (64, 128)
    assert bool(qa.e4m3) and not bool(qb.e4m3) and qa.hp_t and qa.fp8_t
    out = mor_mm(qa, qb, torch.float32)
    call = type("Call", (), {"training": False})()
    va, vb = q(a.float().t(), call)[0], q(b.float().t(), call)[0]
    assert torch.equal(vb, b.float().t())  # the emulation's BF16 choice
    assert sqnr_db(va.double() @ vb.double().t(), out.double()) > 60  # orders of summation only
    assert sqnr_db(a.double().t() @ b.double(), out.double()) < 60    # a was quantized


def _channel_variant(partition: str, monkeypatch) -> str:
    """``channel`` with each transpose quantized with its tensor in the forward (the default, set
    here whatever the environment says) or, for ``channel_without_transpose``, again in the
    backward; the partition to build."""
    from lowprec.methods import mor_fast
    if partition.startswith("channel"):
        monkeypatch.setattr(mor_fast, "CHANNEL_WITH_TRANSPOSE", partition == "channel")
        assert bool(FastPlan.for_recipe(mor_recipe({"partition": "channel"})).reused) == (partition == "channel")
    return "channel" if partition.startswith("channel") else partition


@pytest.mark.parametrize("partition", PARTITIONS + ["channel_without_transpose"])
def test_fast_layer_trains_like_the_emulation_and_counts_its_decisions(partition, monkeypatch):
    partition = _channel_variant(partition, monkeypatch)
    torch.manual_seed(0)
    # 128 features: FP8 GEMMs on the CPU take seconds at 256
    base = nn.Sequential(nn.Linear(128, 192), nn.GELU(), nn.Linear(192, 128))
    with torch.no_grad():  # layer 0's input has small columns: per-tensor MoR picks BF16 for it
        base[0].weight.mul_(torch.logspace(-3, 1, 128))
    x, g = _data(2 * 64, 128, seed=3).float().reshape(2, 64, 128), torch.randn(2, 64, 128)
    got, want, rf, re = fast_and_emulated_mor_steps(base, {"partition": partition}, x, g, monkeypatch)
    for a, b in zip(got, want):
        assert sqnr_db(b, a) > 30
    q_fast, q_emu = rf.gemm("fprop")[0], re.gemm("fprop")[0]
    cov_fast, cov_emu = q_fast.coverage(), q_emu.coverage()
    assert len(cov_fast) == 12 and all(r["calls"] == 1 for r in cov_fast)
    # the same decisions as the emulation's, operand by operand
    assert [(r["layer"], r["gemm"], r["operand"], r["e4m3"]) for r in cov_fast] == \
           [(r["layer"], r["gemm"], r["operand"], r["e4m3"]) for r in cov_emu]
    if partition != "block":
        assert 0 < sum(r["e4m3"] for r in cov_fast) < 12  # both formats occurred
    q_fast.reset_coverage()
    assert q_fast.coverage() == []


@pytest.mark.slow
# per channel quantizes transposed views in the backward; per tensor compiles block's graph with
# one scale (the GPU test compiles all three)
@pytest.mark.parametrize("partition", ["channel", "block", "channel_without_transpose"])
def test_compiled_mor_model_has_one_graph_and_trains_like_eager(partition, monkeypatch):
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    partition = _channel_variant(partition, monkeypatch)
    comp, eager, recipe_c = compiled_and_eager_mor_models({"partition": partition})
    # Inductor rounds the bf16 activations' producers (GELU and its backward) differently from eager,
    # so some E4M3 codes differ by one step: gradients agree to E4M3's own noise level (~30 dB)
    for a, b in zip(comp.parameters(), eager.parameters()):
        assert sqnr_db(b.grad, a.grad) > 25
    assert all(r["calls"] == 1 for r in recipe_c.gemm("fprop")[0].coverage())  # counted inside the graph


def test_kept_operand_takes_the_transposed_codes_its_pass_wrote():
    """An operand whose pass wrote the transpose's codes too is kept for the backward as the
    transpose's operand (``fp8_t`` flipped): its transpose then multiplies those codes with no copy,
    and its values are the operand's own."""
    from lowprec.gemm import FP8Operand
    x = _data(256, 384, seed=2)
    op = mor_operand(MoRQuantizer(partition="tensor"), x)
    f = op.fp8
    codes_t = f.codes.t().contiguous()
    full = op._replace(fp8=FP8Operand(f.codes, f.scale, f.spec, f.kind, codes_t, f.scale.t().contiguous()))
    kept = full.kept()
    assert kept.fp8.codes_t is None and kept.fp8_t and kept.fp8.codes is codes_t
    assert kept.t().fp8_operand().codes is codes_t
    assert torch.equal(kept.values(), op.values())
    assert op.kept() is op  # no transposed codes: kept as it is
