"""The fused GaussWS Triton kernel against the torch reference in lowprec.methods.gaussws, bit for bit.

Runs on CUDA when a device is present, else under the Triton interpreter on CPU (a few seconds).
As in test_kernels_quantize.py, TRITON_INTERPRET must be set before lowprec.kernels.gaussws_noise (and
lowprec.kernels._common, whose jit helpers it calls) is first imported (the kernel uses Triton builtins
only, so an earlier import of triton itself does not matter); the modules are reloaded if someone
imported them before without the variable.

The contract: kernel(W, seed) == gaussws_reference(W, bits=<the kernel's Philox words>), and those
words are lowprec.methods.gaussws.philox_bits(shape, seed), Philox4x32-10 as in tl.randint4x.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import INTERPRETER_WARNINGS, kernel_devices, kernel_modules  # noqa: E402

[kg] = kernel_modules("lowprec.kernels.gaussws_noise")

from lowprec.methods import gaussws as gw  # noqa: E402
from lowprec import linear as lin  # noqa: E402

DEVICES = kernel_devices(kg)

pytestmark = INTERPRETER_WARNINGS

SEED = 0x1234_5678_9ABC  # > 32 bits: both Philox key halves are used


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def _weights(shape, dtype, device, seed=0, std=0.02):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(shape, generator=g) * std
    return w.to(dtype).to(device)


def _same_bf16(a, b):
    """Bitwise equal, except that NaNs only need to be NaN in both (their bits differ by code path)."""
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not torch.equal(nan_a, nan_b):
        return False
    ia, ib = a.view(torch.int16), b.view(torch.int16)
    return torch.equal(torch.where(nan_a, 0, ia), torch.where(nan_b, 0, ib))


def _check(w, b, block, seed=SEED):
    res = kg.gaussws_noise_ex(w, b, block, seed, return_r=True, return_delta=True, return_bits=True)
    bits = res.bits.to(torch.int64) & 0xFFFFFFFF
    assert torch.equal(bits.cpu(), gw.philox_bits(tuple(w.shape), seed)), "Philox words"
    ref_wc, ref_r, ref_delta = gw.gaussws_reference(w, b, block, bits=bits)
    assert torch.equal(res.r, ref_r), "R"
    assert torch.equal(res.delta, ref_delta), "Delta"
    assert _same_bf16(res.w_c, ref_wc), "W_c"
    # and the reference drawing its own Philox words agrees
    assert _same_bf16(gw.gaussws_reference(w, b, block, seed=seed, rng="philox")[0], ref_wc)
    return res


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("block", [(32, 32), (16, 16)])
def test_kernel_matches_reference(device, dtype, block):
    w = _weights((64, 64), dtype, device)
    w[:16, 16:32] = 0.0                       # a zero block (16x16) / part of one (32x32)
    w[32:, 32:] *= 2.0**-12                   # a block of small weights: its own Delta
    res = _check(w, 6, block)
    if block == (16, 16):
        assert torch.all(res.w_c[:16, 16:32] == 0) and res.delta[0, 1] == 0
        assert (res.r[:16, 16:32] != 0).any()  # R was drawn, Delta 0 keeps the block exactly zero
    assert (res.w_c.float() != w.float()).float().mean() > 0.2  # noise was added


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_ragged_shapes_and_b_grid(device, dtype):
    w = _weights((50, 70), dtype, device, seed=1)       # rows not a multiple of 4 or 32
    _check(w, 9, (32, 32))
    b = torch.tensor([[4, 7, 10], [5, 6, 16]], dtype=torch.int32, device=device)
    res = _check(w, b, (32, 32))
    want = gw.block_delta(w, b, (32, 32))
    assert torch.equal(res.delta, want)
    _check(_weights((7, 5), dtype, device, seed=2), 4, (4, 4))


def test_kernel_wide_index_path(device, monkeypatch):
    # tensors past 2^31 elements use int64 offsets and split 64-bit Philox counters; same bits
    monkeypatch.setattr(kg, "_FORCE_WIDE", True)
    _check(_weights((40, 72), torch.bfloat16, device, seed=8), 7, (16, 16))


def test_kernel_nan_inf(device):
    w = _weights((64, 32), torch.float32, device, seed=3)
    w[1, 2], w[5, 6], w[40, 7] = float("nan"), float("inf"), float("-inf")
    res = _check(w, 5, (32, 32))
    assert torch.isnan(res.w_c[1, 2]) and res.w_c[5, 6] == float("inf") and res.w_c[40, 7] == float("-inf")
    clean = torch.where(torch.isfinite(w), w, torch.zeros_like(w))
    assert torch.equal(res.delta, gw.block_delta(clean, 5, (32, 32)))  # NaN/Inf left out of the amax


def test_kernel_bf16_cast_paths_agree(device):
    w = _weights((64, 64), torch.float32, device, seed=4)
    w[3, 3] = float("nan")
    a = kg.gaussws_noise(w, 6, (32, 32), 7, bf16_cast="emulated")
    b = kg.gaussws_noise(w, 6, (32, 32), 7)
    assert _same_bf16(a, b)
    if device == "cpu":
        assert a[3, 3].view(torch.int16).item() == 0x7FC0  # the written-out cast's NaN


def test_kernel_distribution(device):
    res = kg.gaussws_noise_ex(_weights((256, 256), torch.float32, device, seed=5), 6, (32, 32), 99, return_r=True)
    r = res.r.cpu().to(torch.int64).clamp(-2, 2)
    frac = torch.bincount(r.flatten() + 2, minlength=5).double() / r.numel()
    pmf = gw.rounded_gaussian_pmf()
    # 65536 draws: a standard error of 0.0018 for P(0), 0.0014 for P(+-1)
    assert frac[2].item() == pytest.approx(pmf[0], abs=0.008)
    assert frac[1].item() == pytest.approx(pmf[-1], abs=0.006) and frac[3].item() == pytest.approx(pmf[1], abs=0.006)


def test_kernel_rejects_unsupported(device):
    w = _weights((64, 64), torch.float32, device)
    assert kg.supports_block((32, 32)) and kg.supports_block((4, 7)) and not kg.supports_block((3, 32))
    assert not kg.supports_block((256, 256))
    with pytest.raises(ValueError, match="multiple of 4"):
        kg.gaussws_noise(w, 6, (6, 32))
    with pytest.raises(ValueError, match="grid"):
        kg.gaussws_noise(w, torch.full((3, 3), 6), (32, 32))
    for b in (0, 6.5, float("nan"), 25):
        with pytest.raises(ValueError, match=rf"^b: must be an integer >= 1 and <= 24, got {b}"):
            kg.gaussws_noise(w, b, (32, 32))
    with pytest.raises(ValueError, match=r"^b: must hold integers in 1..24, got 0"):
        kg.gaussws_noise(w, torch.tensor([[6, 0], [6, 6]]), (32, 32))
    with pytest.raises(ValueError, match=r"^w: empty tensor of shape \(0, 64\)"):
        kg.gaussws_noise(w[:0], 6, (32, 32))
    with pytest.raises(ValueError, match=r"must be a positive int or two positive ints"):
        kg.gaussws_noise(w, 6, (0, 32))


def test_kernel_writes_into_out(device):
    """``out=``: W_c written into the given tensor (the same values as a new one), which is returned;
    an out of the wrong dtype, shape or layout is named."""
    w = _weights((64, 96), torch.float32, device, seed=4)
    want = kg.gaussws_noise_ex(w, 6, (32, 32), seed=9).w_c
    out = torch.zeros((64, 96), dtype=torch.bfloat16, device=device)
    got = kg.gaussws_noise_ex(w, 6, (32, 32), seed=9, out=out).w_c
    assert got is out and _same_bf16(out, want) and (out != 0).any()
    for bad in (torch.empty((64, 96), device=device), torch.empty((96, 64), dtype=torch.bfloat16, device=device),
                torch.empty((96, 64), dtype=torch.bfloat16, device=device).t()):
        with pytest.raises(ValueError, match=r"out must be a contiguous bfloat16 tensor of shape \(64, 96\)"):
            kg.gaussws_noise_ex(w, 6, (32, 32), seed=9, out=bad)


@pytest.fixture
def launches(monkeypatch):
    """The grids of the grouped kernel's launches, appended as they are made."""
    grids = []
    real = kg._gaussws_group_kernel

    class Counting:
        def __getitem__(self, grid):
            grids.append(grid)
            return real[grid]
    monkeypatch.setattr(kg, "_gaussws_group_kernel", Counting())
    return grids


def test_group_launch_equals_one_launch_per_weight(device, monkeypatch, launches):
    """``gaussws_noise_group``: each weight's W_c bit for bit its own launch's (shapes of one tiling
    and of two, ragged sizes, fp32 and bf16 weights, a b and a seed per weight, into given outs or
    new tensors), with the launches counted: one per (tiling, dtype)."""
    shapes = [(64, 64), (96, 64), (64, 160), (50, 70), (64, 64)]
    dtypes = [torch.float32, torch.float32, torch.float32, torch.float32, torch.bfloat16]
    ws = [_weights(s, d, device, seed=20 + i) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    ws[3][7, 9] = float("nan")
    seeds, bs = [SEED + i for i in range(5)], [6, 5, 9, 4, 6]
    outs = [torch.zeros(s, dtype=torch.bfloat16, device=device) if i % 2 else None for i, s in enumerate(shapes)]
    got = kg.gaussws_noise_group(ws, bs, (32, 32), seeds, outs=outs)
    groups = {(tuple(sorted(kg._tiling(32, 32, -(-m // 32), -(-n // 32)).items())), d)
              for (m, n), d in zip(shapes, dtypes)}
    assert len(launches) == len(groups) < len(ws)
    for i, w in enumerate(ws):
        want = kg.gaussws_noise(w, bs[i], (32, 32), seeds[i])
        assert _same_bf16(got[i], want), i
        assert outs[i] is None or got[i] is outs[i]
        assert (got[i].float() != w.float()).any()  # noise was drawn
    # a shared b, the int64 path
    monkeypatch.setattr(kg, "_FORCE_WIDE", True)
    again = kg.gaussws_noise_group(ws[:2], 7, (16, 16), seeds[:2])
    for i in range(2):
        assert _same_bf16(again[i], kg.gaussws_noise(ws[i], 7, (16, 16), seeds[i]))
    assert kg.gaussws_noise_group([], 6, (32, 32), []) == []
    with pytest.raises(ValueError, match="2 weights need as many seeds"):
        kg.gaussws_noise_group(ws[:2], 6, (32, 32), seeds[:1])
    with pytest.raises(ValueError, match=r"outs\[1\] must be a contiguous bfloat16 tensor"):
        kg.gaussws_noise_group(ws[:2], 6, (32, 32), seeds[:2], outs=[None, torch.empty(3, device=device)])
    with pytest.raises(ValueError, match=r"^b: must be an integer"):
        kg.gaussws_noise_group(ws[:2], [6, 0], (32, 32), seeds[:2])


def test_weight_transform_uses_kernel_and_matches_torch_path(device):
    w = torch.nn.Parameter(_weights((96, 64), torch.float32, device, seed=6))
    tk = gw.GaussWSWeight(w.shape, seed=11, b=5, backend="triton")
    tt = gw.GaussWSWeight(w.shape, seed=11, b=5, backend="torch", rng="philox")
    a, b = tk(w), tt(w)
    assert tk.last_backend == "triton" and tt.last_backend == "torch"
    assert torch.equal(a, b)
    # learnable b through the kernel: same W_c and the same b gradient as the torch path
    lk = gw.GaussWSWeight(w.shape, seed=11, learnable_b=True, backend="triton").to(device)
    lt = gw.GaussWSWeight(w.shape, seed=11, learnable_b=True, backend="torch", rng="philox").to(device)
    g = torch.randn(w.shape, device=device)
    (lk(w) * g).sum().backward()
    (lt(w) * g).sum().backward()
    assert torch.equal(lk._cache["w_c"], lt._cache["w_c"])
    assert torch.equal(lk.bits.grad, lt.bits.grad)
    # Conv1D-style transposed weights: the stored block is transposed, the noise drawn on the stored layout
    ct = gw.GaussWSWeight((64, 96), seed=3, transposed=True, block=(32, 16), backend="triton")
    cr = gw.GaussWSWeight((64, 96), seed=3, transposed=True, block=(32, 16), backend="torch", rng="philox")
    wt = _weights((64, 96), torch.float32, device, seed=7)
    assert ct.stored_block == (16, 32) and torch.equal(ct(wt), cr(wt))
    # stable_output (CUDA graphs): the kernel draws into one tensor, the same values
    st = gw.GaussWSWeight(w.shape, seed=11, b=5, backend="triton")
    st.stable_output = True
    first = st(w, torch.bfloat16)
    assert st.last_backend == "triton" and torch.equal(first.float(), a)
    gw.mark_step()
    second = st(w, torch.bfloat16)
    assert second.data_ptr() == first.data_ptr() == st._out.data_ptr() and not torch.equal(second.float(), a)


def test_forward_many_draws_in_one_launch_what_each_transform_draws(device, launches):
    """``GaussWSWeight.forward_many`` (what a compiled model calls before each step): every W_c,
    gradient and draw count the same bit for bit as each transform's own call, with the fixed-b
    training draws in one launch and handed out detached, for the layer to link with the identity
    gradient (``lowprec.linear.linked_weight``); evaluation and a learnable b take their
    own calls; a second call in the step draws nothing, the next step draws again, and with
    ``stable_output`` into the same tensors."""
    shapes = [(96, 64), (64, 96), (96, 64), (64, 64)]

    def make(stable):
        ts = [gw.GaussWSWeight(s, seed=40 + i, b=5 + i % 2, backend="triton", transposed=i == 1,
                               block=(32, 16) if i == 1 else (32, 32)) for i, s in enumerate(shapes)]
        ts.append(gw.GaussWSWeight((64, 64), seed=9, learnable_b=True, backend="triton"))
        for t in ts:
            t.stable_output = stable
            t.to(device)
        return ts
    ws = [torch.nn.Parameter(_weights(s, torch.float32, device, seed=30 + i))
          for i, s in enumerate(shapes + [(64, 64)])]
    dtypes = [torch.bfloat16, None, torch.bfloat16, torch.float32, torch.bfloat16]
    gs = [torch.randn(w.shape, generator=torch.Generator().manual_seed(i)).to(device) for i, w in enumerate(ws)]
    tilings = set()
    for t in make(False)[:4]:
        (br, bc), (m, n) = t.stored_block, t.shape
        tilings.add((br, bc, tuple(sorted(kg._tiling(br, bc, -(-m // br), -(-n // bc)).items()))))
    for stable in (False, True):
        one, many = make(stable), make(stable)
        for step in range(2):
            launches.clear()
            want = [t(w, d) for t, w, d in zip(one, ws, dtypes)]
            sum((y.float() * g).sum() for y, g in zip(want, gs)).backward()
            want_grads = [w.grad.clone() for w in ws]
            for w in ws:
                w.grad = None
            got = gw.GaussWSWeight.forward_many(many, ws, dtypes)
            assert len(launches) == len(tilings) < 4  # a launch per stored block and tiling
            assert not any(y.requires_grad for y in got[:4]) and got[4].requires_grad  # learnable b: its own
            got = [lin.linked_weight(w, y) for w, y in zip(ws, got)]
            sum((y.float() * g).sum() for y, g in zip(got, gs)).backward()
            for i in range(5):
                assert got[i].dtype == want[i].dtype
                assert _same_bf16(got[i].to(torch.bfloat16), want[i].to(torch.bfloat16))
                assert torch.equal(ws[i].grad, want_grads[i]), i
                assert many[i].samples == one[i].samples == step + 1
                assert not torch.equal(got[i].float(), ws[i].detach().float())  # noised
                if stable:
                    assert many[i]._cache["w_c"].data_ptr() == many[i]._out.data_ptr()
            assert torch.equal(many[4].bits.grad, one[4].bits.grad)
            for w in ws:
                w.grad = None
            launches.clear()
            again = gw.GaussWSWeight.forward_many(many, ws, dtypes)  # the same step: the cached draws
            assert not launches and all(torch.equal(a, b) for a, b in zip(again, got))
            gw.mark_step()
    for t in many:
        t.eval()
    evaluated = gw.GaussWSWeight.forward_many(many, ws, dtypes)
    assert not launches and torch.equal(evaluated[0], ws[0].detach().to(torch.bfloat16))
    with pytest.raises(ValueError, match=r"weight shape \(64, 96\) != the transform's \(96, 64\)"):
        gw.GaussWSWeight.forward_many(many[:1], ws[1:2], dtypes[:1])


def test_compiled_model_draws_its_layers_in_one_launch_and_trains_like_the_model(device, monkeypatch, launches):
    """``lowprec.linear.compiled`` (blocks left uncompiled here: what is tested is the call before
    them) hands a GaussWS model's layers their W_c through ``forward_many``: a grouped launch a
    step for each tiling among the model's weights, and the loss and every gradient the same bit for
    bit as the model called directly (each layer drawing its own); the last block's master weights
    have their gradients before the first block's backward begins (each layer links its W_c in its
    own graph: DDP reduces a block's gradients while the blocks before it run backward)."""
    import copy

    from lowprec.models import build_model
    from lowprec.recipes import recipe_from_config

    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: None)
    torch.manual_seed(0)
    base = build_model({"family": "llama", "layers": 2, "d_model": 64, "heads": 2, "ffn": 128,
                        "max_seq_len": 32}, 128).to(device)
    recipe = recipe_from_config({"recipe": "gaussws", "b": 6, "backend": "triton"})
    plain, wrapped = copy.deepcopy(base), copy.deepcopy(base)
    lin.convert(plain, recipe)
    lin.convert(wrapped, recipe)
    model = lin.compiled(wrapped)
    layers = lin.transformed_layers(wrapped)
    tilings = set()
    for m in layers:
        (br, bc), (rows, cols) = m.weight_transform.stored_block, m.weight.shape
        tilings.add((br, bc, kg._tiling_items(br, bc, -(-rows // br), -(-cols // bc))))
    ids = torch.randint(0, 128, (2, 16), device=device)
    blocks = lin.repeated_blocks(wrapped)
    events = []
    blocks[0].register_full_backward_pre_hook(lambda module, grads: events.append("first block's backward"))
    for b, block in enumerate(blocks):
        for m in lin.transformed_layers(block):
            m.weight.register_post_accumulate_grad_hook(lambda p, b=b: events.append(b))
    for _ in range(2):
        launches.clear()
        events.clear()
        losses = []
        for m, call in ((plain, plain), (wrapped, model)):
            m.zero_grad()
            loss = call(ids).logits.float().square().mean()
            loss.backward()
            losses.append(loss.detach())
        assert len(launches) == len(tilings) < len(layers)  # a launch per tiling, not per weight
        per_block = len(layers) // len(blocks)
        assert events == [1] * per_block + ["first block's backward"] + [0] * per_block, events
        assert torch.equal(losses[0], losses[1])
        for (name, a), b in zip(plain.named_parameters(), wrapped.parameters()):
            assert (a.grad is None) == (b.grad is None) and (a.grad is None or torch.equal(a.grad, b.grad)), name
        gw.mark_step()
    assert all(m.weight_transform.samples == 2 for m in lin.transformed_layers(wrapped))


def test_forward_many_falls_back_to_one_launch_per_weight_when_the_group_fails(device, monkeypatch):
    """A grouped launch that fails (a Triton or GPU it does not build for) is said once, and every
    draw from then on takes its own launch, with the draws an uninterrupted run makes."""
    ts = [gw.GaussWSWeight((64, 64), seed=s, b=6, backend="triton").to(device) for s in (1, 2)]
    ref = [gw.GaussWSWeight((64, 64), seed=s, b=6, backend="triton").to(device) for s in (1, 2)]
    ws = [torch.nn.Parameter(_weights((64, 64), torch.float32, device, seed=s)) for s in (3, 4)]
    monkeypatch.setattr(gw.GaussWSWeight, "_group_error", None)

    def broken(*args, **kwargs):
        raise RuntimeError("PassManager::run failed\nmore lines")
    monkeypatch.setattr(kg, "gaussws_noise_group", broken)
    with pytest.warns(RuntimeWarning, match=r"grouped noise launch failed \(RuntimeError: PassManager::run failed\)"):
        got = gw.GaussWSWeight.forward_many(ts, ws, [None, None])
    assert all(torch.equal(a, r(w)) for a, r, w in zip(got, ref, ws))
    assert [t.samples for t in ts] == [1, 1] and not ts[0]._groupable(ws[0])
    gw.mark_step()
    again = gw.GaussWSWeight.forward_many(ts, ws, [None, None])  # no warning, no grouped call
    assert all(torch.equal(a, r(w)) for a, r, w in zip(again, ref, ws)) and ts[0].samples == 2


def test_philox_matches_triton_randint4x():
    # Cross-check with triton.language.random in a fresh interpreter (its @jit helpers only run
    # interpreted when TRITON_INTERPRET=1 is set before triton is imported).
    code = textwrap.dedent(f"""
        import os
        os.environ["TRITON_INTERPRET"] = "1"
        import torch, triton, triton.language as tl
        from lowprec.methods import gaussws as gw

        @triton.jit
        def k(out, seed, n: tl.constexpr):
            i = tl.arange(0, n)
            a, b, c, d = tl.randint4x(seed, i.to(tl.uint32))
            tl.store(out + 4 * i, a.to(tl.int64)); tl.store(out + 4 * i + 1, b.to(tl.int64))
            tl.store(out + 4 * i + 2, c.to(tl.int64)); tl.store(out + 4 * i + 3, d.to(tl.int64))

        seed = {SEED}
        k0, k1 = gw.philox_key(seed)
        out = torch.zeros(4 * 64, dtype=torch.int64)
        k[(1,)](out, k0 + (k1 << 32), 64)
        got = out.reshape(64, 4) & 0xFFFFFFFF
        ctr = torch.arange(64)
        want = torch.stack(gw.philox4x32(ctr, ctr * 0, k0, k1), dim=1)
        assert torch.equal(got, want), (got[:2], want[:2])
        print("ok")
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]
