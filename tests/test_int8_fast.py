"""The INT8 recipes on the fast path (lowprec.methods.int8_fast) on the CPU: stochastic rounding's
random stream against a pure-Python reference, the fast layer against the emulation bit for bit
(eagerly and compiled), the fallback counts and dynamic levels the two keep, the INT8 GEMM operator,
and the traced step without graph breaks."""

import copy

import pytest
import torch
from torch import nn

import lowprec.linear as lin
from conftest import assert_no_buffer_written_back, assert_one_graph, autocast_loss, linear_reference64
from lowprec import convert
from lowprec.methods import int8_fast, int8_ops
from lowprec.methods.int8_fallback import fallback_quantize, int8_block_gemm_reference
from lowprec.methods.int8_fallback_state import FallbackBuffers
from lowprec.numerics import rounding_stream as rs
from lowprec.numerics import sqnr_db
from lowprec.recipes import recipe_from_config

ALL_SLOTS = {"fallback_gemms": ["fprop", "dgrad", "wgrad"], "fallback_operands": ["x", "w", "dy"]}
# Jetfire's block INT8, and INT8 fallback under each rule; some with blocks of every operand falling
# back, so that dY's two parts are both stochastically rounded
CONFIGS = {
    "int8_block": {"recipe": "int8_block"},
    "absmax": {"recipe": "int8_fallback", "tau": 4.0},
    "topk": {"recipe": "int8_fallback", "rule": "topk", "rho": 0.1, **ALL_SLOTS},
    "error": {"recipe": "int8_fallback", "rule": "error", "error_threshold": 0.009},
    "dynamic": {"recipe": "int8_fallback", "rule": "dynamic", "tau": 3.0, "ema": 0.5, **ALL_SLOTS},
    "none": {"recipe": "int8_fallback", "rule": "none"},
}


# ----------------------------------------------------------------------------------------------
# The random stream

M32 = 0xFFFFFFFF


def _lowbias32(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    return x ^ (x >> 16)


def _uniform(key: int, i: int) -> float:
    """Element i of the stream of ``key``, in Python integers (the module docstring's formula)."""
    step = (_lowbias32(key ^ 0x9E3779B9) & 0x7FFFFFFF) | 1
    h = _lowbias32((i * step + key) % 2**32)
    return (h >> 8) / 2**24


def test_uniforms_equal_the_reference_hash_and_look_uniform():
    key = 0xC0FFEE12
    u = rs.uniforms(key, (300, 700))
    assert u.dtype == torch.float32 and u.shape == (300, 700)
    for r, c in [(0, 0), (0, 1), (1, 0), (123, 456), (299, 699)]:
        assert u[r, c].item() == _uniform(key, r * 700 + c)
    words = torch.randint(0, 2**32, (1000,), generator=torch.Generator().manual_seed(0), dtype=torch.int64)
    assert rs.mix32(words).tolist() == [_lowbias32(w) for w in words.tolist()]
    # U[0, 1): mean 1/2, variance 1/12, no correlation between neighbours or between streams
    flat = u.flatten().double()
    assert abs(flat.mean() - 0.5) < 3e-3 and abs(flat.var() - 1 / 12) < 1e-3
    assert 0.0 <= flat.min() and flat.max() < 1.0
    assert abs(torch.corrcoef(torch.stack([flat[:-1], flat[1:]]))[0, 1]) < 0.01
    other = rs.uniforms(rs.part_key(key, 1), (300, 700)).flatten().double()
    assert abs(torch.corrcoef(torch.stack([flat, other]))[0, 1]) < 0.01


def test_uniforms_in_numpy_equal_the_torch_ops(monkeypatch):
    """An eager CPU call hashes in numpy's uint32 arithmetic; compiled code and CUDA run the torch
    ops: the same bits."""
    for key in (0, 7, 0xFFFFFFFF, 0x9E3779B9):
        fast = rs.uniforms(key, (33, 257))
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
        ops = rs.uniforms(key, (33, 257))
        monkeypatch.undo()
        assert torch.equal(fast, ops), key


def test_keys_differ_by_layer_call_slot_part_and_rank_and_advance_on_training_calls():
    seed, count = torch.tensor(1234), torch.tensor(5)
    base = rs.call_key(seed, count)
    others = [rs.call_key(torch.tensor(1235), count), rs.call_key(seed, torch.tensor(6)),
              rs.call_key(seed, count, rank=1), rs.call_key(seed, torch.tensor(5 + 2**32))]
    slots = [rs.operand_key(base, s) for s in range(6)]
    parts = [rs.part_key(slots[2], p) for p in range(3)]
    keys = [int(k) for k in [base, *others, *slots, *parts[1:]]]
    assert len(set(keys)) == len(keys) and all(0 <= k <= M32 for k in keys)
    assert torch.equal(parts[0], slots[2])  # part 0 is the operand's own stream
    got = rs.next_call_key_(seed, count, 0, True)
    assert int(got) == int(base) and int(count) == 6
    assert int(rs.next_call_key_(seed, count, 0, False)) == int(rs.call_key(seed, torch.tensor(6))) and int(count) == 6


# ----------------------------------------------------------------------------------------------
# The fast layer against the emulation


def _model(seed=0, transposed=False, layers=2):
    torch.manual_seed(seed)
    if transposed:  # GPT2's Conv1D: the weight stored (in, out)
        from transformers.pytorch_utils import Conv1D
        return nn.Sequential(Conv1D(192, 256), nn.ReLU(), Conv1D(256, 192))
    if layers == 1:
        return nn.Sequential(nn.Linear(256, 256))
    return nn.Sequential(nn.Linear(256, 192), nn.ReLU(), nn.Linear(192, 256))


def _batch(step):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(2, 64, 256, generator=g)
    x[0, 7, :40] *= 60.0  # planted outliers: blocks of X fall back
    return x, torch.randn(2, 64, 256, generator=g) * 1e-2


def _steps(model, steps=2, evaluate=True):
    """Training steps under bf16 autocast, then an evaluation pass: every output and gradient."""
    out = []
    model.train()
    for s in range(steps):
        x, g = _batch(s)
        x.requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = model(x)
        y.float().backward(g)
        out += [y.detach().float(), x.grad] + [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
    if evaluate:
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            out.append(model(_batch(steps)[0]).float())
    return out


def _state(model):
    """Each layer's call count, fallback counts and dynamic levels."""
    rows = {}
    for name, m in model.named_modules():
        if isinstance(m, lin.QLinear):
            bufs = FallbackBuffers.passes(m) and FallbackBuffers.merged(m)
            rows[name] = [int(m.calls)] + ([t.tolist() for t in bufs] if bufs else [])
    return rows


def _pair(config, transposed=False, layers=2):
    base = _model(transposed=transposed, layers=layers)
    fast, emu = copy.deepcopy(base), copy.deepcopy(base)
    convert(fast, recipe_from_config(config))
    convert(emu, recipe_from_config(config))
    return fast, emu


def _assert_fast_steps_equal_emulation(fast, emu, monkeypatch):
    """Two training steps of each, the fast layer's outputs and gradients bit for bit the emulation's."""
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    got = _steps(fast)
    monkeypatch.setattr(lin, "FAST_PATH", "off")
    want = _steps(emu)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("fast_path", ["all", "off"])
def test_each_pass_updates_its_own_buffers(fast_path, monkeypatch):
    """A layer's levels, steps and counts are a pair of tensors per pass
    (``layer_buffers.register_pass_buffers``): the forward's GEMM updates only its slots' rows of the
    forward tensors, the backward's only theirs of the backward tensors, on the fast path and on the
    emulation; the merged view is what the quantizer reports and checkpoints, and a level loaded
    into a fresh model lands in the pass of its slot."""
    from lowprec.methods.layer_buffers import FORWARD_SLOTS

    monkeypatch.setattr(lin, "FAST_PATH", fast_path)
    model = _model(layers=1)
    convert(model, recipe_from_config(CONFIGS["dynamic"]))
    _steps(model, steps=1, evaluate=False)
    layer = model[0]
    fwd, bwd = FallbackBuffers.passes(layer)
    others = [i for i in range(len(fwd.steps)) if i not in FORWARD_SLOTS]
    for own, rows, not_rows in ((fwd, list(FORWARD_SLOTS), others), (bwd, others, list(FORWARD_SLOTS))):
        assert bool((own.steps[rows] == 1).all()) and bool((own.counts[rows, 0] == 1).all())
        assert not own.steps[not_rows].any() and not own.counts[not_rows].any()
        assert bool(torch.isinf(own.levels[not_rows]).all()) and bool(torch.isfinite(own.levels[rows]).all())
    merged = FallbackBuffers.merged(layer)
    quantizer = layer.recipe.fprop.a
    assert [r["calls"] for r in quantizer.fallback_counts()] == [1] * len(merged.steps)
    state = quantizer.state_dict()
    assert len(state) == len(merged.steps)
    fresh = _model(layers=1)
    convert(fresh, recipe_from_config(CONFIGS["dynamic"]))
    fresh[0].recipe.fprop.a.load_state_dict(state)
    assert torch.equal(FallbackBuffers.merged(fresh[0]).levels, merged.levels)
    assert torch.equal(FallbackBuffers.passes(fresh[0])[1].levels[others], bwd.levels[others])


@pytest.mark.parametrize("name", CONFIGS)
def test_fast_layer_equals_the_emulation_bit_for_bit(name, monkeypatch):
    fast, emu = _pair(CONFIGS[name])
    assert fast[0].fast_plan.int8 and all(k == "int8" for k, _, _ in fast[0].fast_plan.gemms.values())
    _assert_fast_steps_equal_emulation(fast, emu, monkeypatch)
    assert _state(fast) == _state(emu) and _state(fast)["0"][0] == 2  # two training calls, no evaluation one
    if name != "int8_block":
        counts = fast[0].recipe.fprop.a.fallback_counts()
        assert counts == emu[0].recipe.fprop.a.fallback_counts() and len(counts) == 12
        fell = sum(r["fallback_blocks"] for r in counts)
        assert (fell == 0) == (name == "none")
    # the operands were really INT8: the output is far from the unquantized layer's
    x, _ = _batch(0)
    ref = linear_reference64(_model()[0], x[0], torch.zeros(64, 192))[0]
    fast.train()
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    assert sqnr_db(ref, fast[0](x[0]).double()) < 50


XW = {("wgrad", "x"), ("dgrad", "w")}
NEAREST_GRADIENTS = {"recipe": "int8_fallback", "stochastic_gradients": False}
FPROP_ONLY = {"recipe": "int8_fallback", "fallback_gemms": ["fprop"]}


@pytest.mark.parametrize("config,want", [
    (CONFIGS["int8_block"], XW), (CONFIGS["absmax"], XW), (CONFIGS["none"], XW),
    (CONFIGS["topk"], set()), (CONFIGS["dynamic"], set()),   # every slot falls back, by a rule not for this
    (CONFIGS["error"], {("dgrad", "w")}), (FPROP_ONLY, {("dgrad", "w")}),  # X falls back: by fp32 sums; in one slot
    (NEAREST_GRADIENTS, XW | {("wgrad", "dy")})],
    ids=["int8_block", "absmax", "none", "topk", "dynamic", "error", "fprop_only", "nearest_gradients"])
def test_backward_takes_transposed_operands_where_they_quantize_alike(config, want, monkeypatch):
    """A backward operand that is the transpose of another slot's (X^T, W^T, dY^T) is taken from it,
    transposed, where both quantize alike (square blocks, nearest rounding, the same slots falling
    back by a rule invariant under the transpose), and quantized again elsewhere; the forward keeps
    X^T's INT8 codes in place of X where X^T is taken. (The layer still equals the emulation bit for
    bit: test_fast_layer_equals_the_emulation_bit_for_bit, and below.)"""
    from lowprec.gemm import FastPlan
    fast, _ = _pair(config, layers=1)
    assert FastPlan.for_recipe(fast[0].recipe).reused == want
    saved = []
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    x, g = _batch(0)
    x.requires_grad_(True)  # the input gradient's GEMM runs (its dY is the weight gradient's dY^T)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = fast(x)

    def kept(shape, dtype):  # X is 128 x 256, W 256 x 256
        return sum(tuple(t.shape) == shape and t.dtype == dtype for t in saved)

    x_taken, w_taken = ("wgrad", "x") in want, ("dgrad", "w") in want
    # X^T's codes (256 x 128) kept in place of X where the weight gradient takes them
    assert kept((128, 256), torch.float32) == (not x_taken) and (kept((256, 128), torch.int8) > 0) == x_taken
    assert (kept((256, 256), torch.int8) > 0) == w_taken
    quantized = []
    real = int8_fast.int8_operand
    monkeypatch.setattr(int8_fast, "int8_operand", lambda spec, t, call, transposed=False: quantized.append(
        (call.gemm, call.operand)) or real(spec, t, call, transposed))
    out.backward(g)
    assert {("dgrad", "w"), ("wgrad", "dy"), ("wgrad", "x")} - set(quantized) == want
    if config is NEAREST_GRADIENTS:  # dY^T taken too (the second layer's input gradient runs): still exact
        _assert_fast_steps_equal_emulation(*_pair(config), monkeypatch)


@pytest.mark.parametrize("name", ["dynamic", "absmax"])
def test_fast_conv1d_layer_equals_the_emulation(name, monkeypatch):
    """A transposed weight (GPT2's Conv1D): the weight gradient comes back transposed."""
    fast, emu = _pair(CONFIGS[name], transposed=True)
    assert fast[0].transposed
    _assert_fast_steps_equal_emulation(fast, emu, monkeypatch)


def test_telemetry_rows_carry_the_slot_totals(monkeypatch):
    """A telemetry step (the emulation) reports the call's fallback and the slot's totals over every
    training call, the fast steps' included."""
    from lowprec.telemetry import Telemetry

    tel = Telemetry(every=2)
    model = _model()
    convert(model, recipe_from_config(CONFIGS["absmax"]), telemetry=tel)
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    for step in range(3):  # steps 0 and 2 record (the emulation), step 1 runs the fast path
        tel.step = step
        x, g = _batch(step)
        model(x).backward(g)
    rows = tel.frame().set_index(["step", "layer", "gemm", "operand"])
    r = rows.loc[(2, "0", "fprop", "x")]
    counts = {(c["gemm"], c["operand"]): c for c in model[0].recipe.fprop.a.fallback_counts() if c["layer"] == "0"}
    assert r["n_blocks_total"] == counts[("fprop", "x")]["blocks"] == 3 * r["n_blocks"]
    assert r["n_fallback_total"] == counts[("fprop", "x")]["fallback_blocks"] > r["n_fallback"] > 0
    assert counts[("fprop", "x")]["calls"] == 3


# ----------------------------------------------------------------------------------------------
# The INT8 GEMM operator


def _operands(seed, rows, cols, block, fallback):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(rows, cols, generator=g)
    t[3, :20] *= 80.0
    grid = (-(-rows // block[0]), -(-cols // block[1]))
    mask = torch.rand(grid, generator=g) < 0.3 if fallback else None
    return fallback_quantize(t, block, mask)


@pytest.mark.parametrize("fallback", [False, True])
def test_int8_block_mm_operator_is_the_kernel_reference(fallback, monkeypatch):
    from lowprec.kernels import int8_fallback_gemm as kf

    monkeypatch.setattr(kf, "triton_available", lambda device=None: False)  # the torch reference
    a = _operands(0, 96, 160, (32, 32), fallback)
    b = _operands(1, 64, 160, (32, 32), fallback)
    qa, da, ra, dra, fa = a.gemm_operands()
    qb, db, rb, drb, fb = b.gemm_operands()
    for second_parts in ("tail", "sparse"):
        got = int8_fast.int8_mm(a, b, kernel=True, second_parts=second_parts)
        order = "tail" if second_parts == "tail" else "k"
        want = int8_block_gemm_reference(qa, da, qb, db, (32, 32), (32, 32), ra, dra, fa, rb, drb, fb, order=order)
        if not fallback:
            want = int8_block_gemm_reference(qa, da, qb, db, (32, 32), (32, 32))
        assert torch.equal(got, want)
        # in the layer's dtype: the same sum rounded once
        half = int8_fast.int8_mm(a, b, kernel=True, out_dtype=torch.bfloat16, second_parts=second_parts)
        assert half.dtype == torch.bfloat16 and torch.equal(half, want.to(torch.bfloat16))
        # a dtype the kernel does not write (fp16): its fp32 product, cast
        assert torch.equal(int8_fast.int8_mm(a, b, kernel=True, out_dtype=torch.float16, second_parts=second_parts),
                           want.to(torch.float16))
    # the same product as the emulation's fp32 GEMM of the values, up to the order of the sums
    assert sqnr_db(a.dequantize().double() @ b.dequantize().double().t(), got.double()) > 120
    with torch._subclasses.FakeTensorMode() as mode:
        for dtype in (torch.float32, torch.bfloat16):
            fake = int8_ops.int8_block_mm(*(mode.from_tensor(t) for t in (qa, da)), None, None, None, [32, 32],
                                           *(mode.from_tensor(t) for t in (qb, db)), None, None, None, [32, 32],
                                           dtype, "tail")
            assert fake.shape == (96, 64) and fake.dtype == dtype


@pytest.mark.parametrize("fallback", [False, True])
def test_int8_quantize_operator_reference_is_row_major_as_its_fake(fallback, monkeypatch):
    """The quantize operator on its torch reference (no Triton) writes what its fake says, strides
    included, for a transposed view too (W^T and dY^T reach it so): torch's ops kept the view's
    strides, and a compiled graph's size-and-stride check refused the codes."""
    from lowprec.kernels import int8_fallback_gemm as kf

    monkeypatch.setattr(kf, "triton_available", lambda device=None: False)  # the torch reference
    g = torch.Generator().manual_seed(3)
    x = torch.randn(160, 96, generator=g)
    for t in (x, x.t()):
        grid = (-(-t.shape[0] // 32), -(-t.shape[1] // 32))
        mask = (torch.rand(grid, generator=g) < 0.3) if fallback else None
        out = int8_ops.int8_quantize(t, [32, 32], mask, None, True)
        assert all(o.is_contiguous() for o in out)
        torch.library.opcheck(int8_ops.int8_quantize, (t, [32, 32], mask, None, True),
                              test_utils=("test_schema", "test_faketensor"))


# ----------------------------------------------------------------------------------------------
# Compiled


@pytest.mark.parametrize("name", CONFIGS)
def test_traced_step_has_one_graph(name, monkeypatch):
    """Forward and backward trace into one graph (Dynamo traces the backward of the layer's
    autograd Function with its forward): no break for a host read or a generator."""
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    model = _model()
    convert(model, recipe_from_config(CONFIGS[name]))
    assert_one_graph(autocast_loss(*_batch(0)), model)


def _compiled_steps(model, backend="inductor"):
    import torch._dynamo as dynamo
    dynamo.reset()
    return _steps(torch.compile(model, backend=backend), evaluate=False)


@pytest.mark.slow
def test_compiled_layer_equals_the_emulation_bit_for_bit(monkeypatch):
    """Inductor's code for the fast path (the dynamic rule, every operand falling back, dY's two
    parts stochastically rounded) gives the emulation's outputs, gradients, counts and levels bit
    for bit, with Inductor keeping eager's roundings to bf16 (``emulate_precision_casts``; by
    default it keeps a fused bf16 intermediate, such as dX on its way back to fp32, in fp32)."""
    import torch._inductor.config as icfg
    from torch._inductor.utils import run_and_get_code
    fast, emu = _pair(CONFIGS["dynamic"], layers=1)  # one layer: compiling takes minutes on two cores
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    with icfg.patch(emulate_precision_casts=True):
        got, code = run_and_get_code(_compiled_steps, fast)
    assert_no_buffer_written_back(code)  # levels, steps and counts: a tensor per pass
    monkeypatch.setattr(lin, "FAST_PATH", "off")
    want = _steps(emu, evaluate=False)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert _state(fast) == _state(emu)
    assert 0 < sum(r["fallback_blocks"] for r in fast[0].recipe.fprop.a.fallback_counts())


def test_compiled_layer_multiplies_on_the_int8_operator(monkeypatch, count_calls):
    """With the operator's route on the CPU (its torch reference: the kernel's arithmetic), the
    compiled step keeps it as a graph node that runs for all three GEMMs of both layers, and agrees
    with the emulation to the order of the sums (traced through AOT autograd without Inductor's
    code generation: the operator is opaque to it either way)."""
    from lowprec.kernels import int8_fallback_gemm as kf

    monkeypatch.setattr(int8_ops, "KERNEL_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(kf, "triton_available", lambda device=None: False)
    calls = count_calls(int8_ops, "int8_block_gemm_reference")
    fast, emu = _pair(CONFIGS["absmax"])
    monkeypatch.setattr(lin, "FAST_PATH", "all")
    got = _compiled_steps(fast, backend="aot_eager")
    assert calls["n"] == 2 * 2 * 3  # two steps, two layers, three GEMMs
    monkeypatch.setattr(lin, "FAST_PATH", "off")
    want = _steps(emu, evaluate=False)
    for a, b in zip(got, want):
        assert sqnr_db(b.double(), a.double()) > 40  # bf16 outputs: a rounding step apart at most
    assert _state(fast) == _state(emu)
