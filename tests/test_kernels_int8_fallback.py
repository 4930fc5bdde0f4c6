"""Triton fallback kernels (lowprec.kernels.int8_fallback_gemm) against the torch reference in
lowprec.methods.int8_fallback: the quantize pass bit for bit, the GEMM equal to the exact integer emulation
bit for bit (under the interpreter; to fp32 rounding on CUDA).

Runs on CUDA when present, else under the Triton interpreter on CPU (a few seconds, tiny shapes).
The kernels (lowprec.kernels.int8_fallback_kernels) call the jit helpers of lowprec.kernels.quantize
and lowprec.kernels._common, so the three modules must be built in the same mode: with
TRITON_INTERPRET=1 set here, whichever was imported earlier without it is reloaded, with the modules
after it (_common, quantize, int8_fallback_kernels, then the host side int8_fallback_gemm).
"""

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from conftest import (INTERPRETER_WARNINGS, assert_equal_or_both_nan, compiled_probe, kernel_devices,  # noqa: E402
                      kernel_modules)

_KQ, _KK, _KF = ("lowprec.kernels.quantize", "lowprec.kernels.int8_fallback_kernels",
                 "lowprec.kernels.int8_fallback_gemm")
_, _, kf = kernel_modules(_KQ, _KK, _KF)
kt = importlib.import_module("lowprec.kernels.int8_fallback_tuning")
_ka = importlib.import_module("lowprec.kernels.int8_gemm_async")
_KA_AVAILABLE = not kf.interpreter_active() and _ka.available()

from lowprec.methods.int8_fallback import (  # noqa: E402
    block_int8_error,
    fallback_quantize,
    int8_block_gemm_reference,
    select_blocks,
)
from lowprec.numerics import block_amax  # noqa: E402

DEVICES = kernel_devices(kf)

pytestmark = INTERPRETER_WARNINGS


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def _x(shape, seed=0, device="cpu", special=False):
    """Gaussian with a hot block, a spike, and (special) NaN/Inf/-0."""
    g = torch.Generator().manual_seed(seed)
    m, n = shape
    x = torch.randn(m, n, generator=g)
    x[: max(1, m // 8), : max(1, n // 8)] *= 40.0
    x[m - 3, n - 5] = 300.0
    if special:
        x[1, 2] = float("nan")
        x[2, 3] = float("inf")
        x[3, 4] = -0.0
    return x.to(device)


def _same_as_reference(got, ref):
    q1, s1, q2, s2, flags = got
    assert q1.dtype == q2.dtype == flags.dtype == torch.int8
    assert torch.equal(q1.float().cpu(), ref.codes.cpu())
    assert_equal_or_both_nan(s1, ref.scale)
    assert torch.equal(q2.float().cpu(), ref.residual.cpu())
    assert_equal_or_both_nan(s2, ref.residual_scale)
    assert torch.equal(flags.bool().cpu(), ref.mask.cpu())


# ----------------------------------------------------------------------------------------------
# Quantize


@pytest.mark.parametrize("shape,block", [((64, 96), (32, 32)), ((40, 72), (32, 32)), ((32, 256), (1, 128)),
                                         ((40, 60), (8, 16))], ids=str)
def test_quantize_pass_matches_reference(device, shape, block):
    x = _x(shape, device=device, special=True)
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to(dtype)
        mask, thr = select_blocks(xd.float(), block, "absmax")
        ref = fallback_quantize(xd, block, mask)
        assert ref.mask.any()
        _same_as_reference(kf.quantize_fallback_int8(xd, block, mask=mask), ref)
        # one pass with the threshold decided in the kernel: the same blocks
        _same_as_reference(kf.quantize_fallback_int8(xd, block, threshold=thr), ref)
    # no fallback: plain block INT8
    _same_as_reference(kf.quantize_fallback_int8(x, block), fallback_quantize(x, block))


def test_quantize_stochastic_rounding_matches_reference(device):
    x = _x((64, 64), seed=1, device=device)
    g = torch.Generator().manual_seed(2)
    u1, u2 = torch.rand(64, 64, generator=g).to(device), torch.rand(64, 64, generator=g).to(device)
    u1[0, 0] = u2[0, 1] = 0.99999994  # the 128 -> 127 clamp
    mask, _ = select_blocks(x, (32, 32), "topk", rho=0.5)
    ref = fallback_quantize(x, (32, 32), mask, rounding="stochastic", noise=(u1, u2))
    got = kf.quantize_fallback_int8(x, (32, 32), mask=mask, noise=(u1, u2))
    _same_as_reference(got, ref)
    assert not torch.equal(got[0], kf.quantize_fallback_int8(x, (32, 32), mask=mask)[0])


def test_quantize_reads_strides_and_draws_the_rounding_stream(device):
    """A transposed view read through its strides and the rounding stream's draws made in the kernel
    (``keys``): the codes of ``fallback_quantize`` with ``uniforms`` of the two part keys, bit for
    bit, bf16 and fp32, NaN/Inf included; ``first_only`` gives the first part alone, unchanged."""
    from lowprec.numerics import rounding_stream as rs

    key = rs.call_key(torch.tensor(0xC0FFEE), torch.tensor(3))
    keys = torch.stack([rs.part_key(key, p) for p in range(2)]).to(device)
    for dtype in (torch.float32, torch.bfloat16):
        x = _x((72, 40), seed=4, device=device, special=True).to(dtype).t()  # (40, 72), column-major
        assert not x.is_contiguous()
        mask, _ = select_blocks(x.float(), (32, 32), "absmax")
        noise = tuple(rs.uniforms(k, tuple(x.shape)).to(device) for k in keys.cpu())
        ref = fallback_quantize(x, (32, 32), mask, "stochastic", noise=noise)
        assert ref.mask.any()
        got = kf.quantize_fallback_int8(x, (32, 32), mask=mask, keys=keys, transposed=True)
        _same_as_reference(got[:5], ref)
        # the codes' transposes, row-major, from the same pass (what a backward GEMM takes)
        for codes, codes_t in ((got[0], got[5]), (got[2], got[6])):
            assert codes_t.is_contiguous() and torch.equal(codes_t, codes.t())
        first = kf.quantize_fallback_int8(x, (32, 32), keys=keys, first_only=True)
        assert first[2:] == (None, None, None)
        first_t = kf.quantize_fallback_int8(x, (32, 32), keys=keys, first_only=True, transposed=True)
        assert torch.equal(first_t[5], first[0].t()) and first_t[6] is None
        assert torch.equal(first[0].float().cpu(), ref.codes.cpu())
        assert_equal_or_both_nan(first[1], ref.scale)
        # the draws matter: nearest rounding gives other codes
        assert not torch.equal(first[0], kf.quantize_fallback_int8(x, (32, 32), first_only=True)[0])
    with pytest.raises(ValueError, match="keys"):
        kf.quantize_fallback_int8(x, (32, 32), keys=keys[:1])
    with pytest.raises(ValueError, match="first_only"):
        kf.quantize_fallback_int8(x, (32, 32), mask=mask, first_only=True)


@pytest.mark.parametrize("chunk,cols", [(64, None), (512, None), (256, 8), (64, 16)])
def test_quantize_pass_in_chunks(device, chunk, cols, monkeypatch):
    """A program that takes its blocks a few rows, columns or both at a time (as the 128x128 blocks
    are on the GPU):
    ragged blocks, a NaN/Inf block, flagged and unflagged blocks in one tensor, nearest and
    stochastic rounding (the stream's draws made in the kernel, in each pass that needs them), a
    transposed view read through its strides and the codes' transposes: the reference bit for bit."""
    from lowprec.numerics import rounding_stream as rs

    monkeypatch.setattr(kf, "_QUANT_CHUNK", chunk)
    monkeypatch.setattr(kf, "_QUANT_CHUNK_COLS", cols)
    _, _, _, _, _, _, t, _ = kf._prep_x(torch.zeros(96, 80, device=device), (32, 32), chunked=True)
    assert t["CH"] * t["CW"] < 32 * 32 and t["G"] == 1  # several chunks per block: rows, columns or both
    keys = torch.stack([rs.part_key(rs.call_key(torch.tensor(7), torch.tensor(1)), p) for p in range(2)])
    x = _x((80, 96), seed=9, device=device, special=True).t()  # (96, 80): the last block-column ragged
    mask = torch.zeros(3, 3, dtype=torch.bool, device=device)
    mask[0, 0] = mask[2, 1] = mask[1, 2] = True
    for rounding in ("nearest", "stochastic"):
        kw = dict(keys=keys.to(device)) if rounding == "stochastic" else {}
        noise = tuple(rs.uniforms(k, tuple(x.shape)).to(device) for k in keys) if kw else None
        ref = fallback_quantize(x, (32, 32), mask, rounding, noise=noise)
        got = kf.quantize_fallback_int8(x, (32, 32), mask=mask.to(device), transposed=True, **kw)
        _same_as_reference(got[:5], ref)
        assert torch.equal(got[5], got[0].t()) and torch.equal(got[6], got[2].t())
        assert got[2].any() and not got[2][:32, 32:64].any()
    assert torch.isnan(got[1]).any()  # the special values' block


# Inductor's analysis of which arguments a user Triton kernel writes, asked of the kernel compiled
# for a Hopper target (no GPU needed) in a process without the interpreter; prints the names
_WRITES_PROBE = """
import sys, torch, triton
from triton.backends.compiler import GPUTarget
from torch._higher_order_ops import triton_kernel_wrap as tkw
analyze = getattr(tkw, "identify_accessed_tensors", None)
if analyze is None or not hasattr(triton.runtime.driver, "set_active"):
    print("SKIP"); sys.exit()
class Hopper:
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)
triton.runtime.driver.set_active(Hopper())
from lowprec.kernels import int8_fallback_kernels as kk
n = 256
f32, i8, q = torch.empty(4, 4), torch.empty(4, 4, dtype=torch.int8), torch.empty(n, n, dtype=torch.int8)
kwargs = dict(x_ptr=torch.empty(n, n, dtype=torch.int16), sx0=n, sx1=1, u1_ptr=f32, u2_ptr=f32,
              key_ptr=torch.empty(2, dtype=torch.int64), q1_ptr=q, s1_ptr=f32, q2_ptr=q, s2_ptr=f32,
              flag_ptr=i8, mask_ptr=f32, thr_ptr=f32, q1t_ptr=q, q2t_ptr=q, M=n, N=n, n_brow=2, n_bcol=2,
              BR=128, BC=128, CH=32, CW=128, G=1, IN_KIND=1, ROUNDING=2, MODE=1, SECOND=SECOND_, TRANS=TRANS_,
              X_LAYOUT=0)
print(" ".join(sorted(d.name for d in analyze(kk._fallback_quant_kernel, kwargs, {}).read_writes.writes)))
"""


@pytest.mark.parametrize("second,trans", [(True, True), (False, False)])
def test_quantize_kernel_writes_only_its_outputs(second, trans):
    """The quantize pass launched from a compiled graph (``lowprec.methods.int8_ops``): Inductor's
    analysis finds it writing the codes, scales, flags and transposes, never x, the draws or the
    keys. An input counted as written is copied before every launch, or fails to compile (x, a
    bf16 operand read as int16 words: "make_reindexer NYI on DtypeView"); a store through offsets
    returned by a helper that also took x made x count as written."""
    code = _WRITES_PROBE.replace("SECOND_", str(second)).replace("TRANS_", str(trans))
    out = compiled_probe(code, "this torch / Triton has no write analysis to ask", timeout=300)
    want = {"q1_ptr", "s1_ptr"} | ({"q2_ptr", "s2_ptr", "flag_ptr"} if second else set())
    want |= ({"q1t_ptr"} | ({"q2t_ptr"} if second else set())) if trans else set()
    assert set(out.split()) == want


# The GEMM kernel's warp-specialized tuning candidates compiled for a Hopper target (no GPU
# needed) in a process without the interpreter; prints one line per candidate: its label, and
# whether the compiled loop is warp-specialized, or the error that stopped it
_WS_PROBE = """
import inspect, sys
from dataclasses import replace
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from lowprec.kernels import int8_fallback_gemm as kf
from lowprec.kernels import int8_fallback_kernels as kk
from lowprec.kernels import int8_fallback_tuning as kt
names = list(inspect.signature(kk._gemm_kernel.fn).parameters)
ptrs = dict.fromkeys(("a_ptr", "b_ptr", "c_ptr", "ra_ptr", "fa_ptr", "rb_ptr", "fb_ptr"), "*i8")
ptrs.update(dict.fromkeys(("da_ptr", "db_ptr", "dra_ptr", "drb_ptr"), "*fp32"), c_ptr="*fp32")
ptrs.update(dict.fromkeys(("M", "N", "K", "n_kb"), "i32"))
# second parts: none, in the main loop, or after it (a tail of A's or of B's: the 4-warp tiles
# are no candidates there, since Triton fails to compile them so)
for gk, fused, tail in ((128, False, ""), (32, False, ""), (128, True, ""), (128, True, "a"), (128, True, "b")):
    cands = [c for c in kt.candidate_configs(gk, tail=bool(tail)) if c.warp_specialize]
    kinds = {}  # the first candidate of each kind (warps, loads): each a compilation of seconds
    for c in cands:
        kinds.setdefault((c.num_warps, c.tma), c)
    want = {(8, False), (8, True)} | (set() if tail else {(4, True)})
    assert {kind for kind in kinds} == want, sorted(c.label() for c in cands)
    assert all(c.num_warps == 8 or (c.block_m, c.block_n) == (64, 128) for c in cands)
    for c in (list(kinds.values()) if not fused or tail else cands[:1]):
        sig = {n: ptrs.get(n, "constexpr") for n in names}
        const = dict(BMS=gk, BNS=gk, GK=gk, BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=gk, KG=c.k_groups,
                     GROUP_M=c.group_m, EVEN_K=True, MAGIC=True, USE_TMA=c.tma, HAS_RA=fused and tail != "b",
                     HAS_RB=fused and tail != "a", WS=True, PIPE=False, TAIL=bool(tail), KCHUNK=16,
                     NRB=kf._blocks_met(c.block_m, gk), NCB=kf._blocks_met(c.block_n, gk))
        try:
            k = triton.compile(ASTSource(kk._gemm_kernel, sig, constexprs=const), target=GPUTarget("cuda", 90, 32),
                               options={"num_warps": c.num_warps, "num_stages": c.num_stages})
        except Exception as e:
            if "ptxas" in str(e) or "backend" in str(e).lower():
                print("SKIP"); sys.exit()
            print(c.label(), fused, tail or "-", "error", type(e).__name__); continue
        print(c.label(), fused, tail or "-", "warp_specialize" in k.asm["ttgir"])
"""


def test_warp_specialized_candidates_compile_for_hopper():
    """The warp-specialized tuning candidates are of three kinds (the 8-warp tiles on pointer and on
    descriptor loads, the 64x128 4-warp tile on descriptor loads), and one of each at group 128 in
    128-row scale blocks (INT8 fallback's 128x128 blocks) and at Jetfire's 32, and one with the
    fused second parts, compiles for sm_90 into a warp-specialized loop; the 4-warp tiles on pointer
    loads, which Triton does not compile so, are not among them. With a tail (A's or B's second part
    after the main loop) the 8-warp kinds alone, and each compiles."""
    out = compiled_probe(_WS_PROBE, "this Triton cannot compile for sm_90 here")
    lines = [line.split() for line in out.splitlines()]
    assert len(lines) == 11 and all(line[-1] == "True" for line in lines), out


# The GEMM kernel's main loop compiled for sm_90 (no GPU needed) in a process without the
# interpreter: the instruction counts of the untuned CUDA configuration and of the 4-warp tile, at
# Jetfire's group and blocks (32, 32x32 scale blocks), one line of key=value pairs each
_SASS_PROBE = """
import sys
from lowprec.bench import kernel_sass as ks
from lowprec.kernels import int8_fallback_tuning as kt
if ks.nvidia_tool("cuobjdump") is None:
    print("SKIP"); sys.exit()
for cfg in (kt.default_config(32), kt.GemmConfig(64, 128, kt.default_config(32).k_groups, 4, 4)):
    row = ks.int8_gemm_row(cfg, 32, 32)
    print(f"k_groups={cfg.k_groups}", " ".join(f"{k}={row[k]}" for k in (
        "config", "loop_instructions", "per_element_group", "fmul", "global_loads", "spills", "mma", "error") if k in row))
"""


def test_gemm_loop_loads_and_multiplies_each_scale_block_once():
    """In the main loop of the GEMM as compiled for the H100/H200, a thread loads each 32-row scale
    block's scale and forms each product of a row block's and a column block's scale once per
    K-group (its rows meet one row block, its 128 columns four column blocks), not once per
    element, and spills nothing: about three and a half instructions per output element and
    K-group, where the int32 product's exact rescale needs three (before: 5.9, with 256 products,
    144 loads and 162 spilled registers per loop iteration). The loop holds k_groups MMAs."""
    out = compiled_probe(_SASS_PROBE, "this Triton ships no cuobjdump")
    rows = [dict(kv.split("=", 1) for kv in line.split()) for line in out.splitlines()]
    assert len(rows) == 2, out
    for row in rows:
        assert "error" not in row, row
        groups = int(row["k_groups"])
        assert int(row["mma"]) == groups, row
        assert int(row["spills"]) == 0 and int(row["fmul"]) <= 4 * groups, row
        assert int(row["global_loads"]) <= 8 * groups, row
        assert 3.0 <= float(row["per_element_group"]) < 4.0, row


# the quantize pass of Jetfire's 32x32 blocks on stream draws, compiled for sm_90 with the strides
# as a compiled graph may pass them: plain integers, the other stride known divisible by 16 (as
# Inductor marks sizes), the unit one not specialized; per layout
_QUANT_LOADS_PROBE = """
import sys
from lowprec.bench import kernel_sass as ks
if ks.nvidia_tool("cuobjdump") is None:
    print("SKIP"); sys.exit()
from lowprec.kernels import int8_fallback_kernels as kk
ptrs = dict(x_ptr="*i16", u1_ptr="*fp32", u2_ptr="*fp32", key_ptr="*i64", q1_ptr="*i8", s1_ptr="*fp32", q2_ptr="*i8",
            s2_ptr="*fp32", flag_ptr="*i8", mask_ptr="*i8", thr_ptr="*fp32", q1t_ptr="*i8", q2t_ptr="*i8")
kinds = {**ptrs, **dict.fromkeys(("sx0", "sx1", "M", "N", "n_brow", "n_bcol"), "i32")}
for layout in (0, 1):
    const = dict(BR=32, BC=32, CH=32, CW=32, G=1, IN_KIND=1, ROUNDING=2, MODE=2, SECOND=False, TRANS=True,
                 X_LAYOUT=layout)
    aligned = ("x_ptr", "q1_ptr", "q1t_ptr", "M", "N", "sx1" if layout else "sx0")
    k = ks.compile_sm90(kk._fallback_quant_kernel, kinds, const, aligned, 4)
    instrs, _ = ks.disassemble(k.asm["cubin"])
    loads = sorted({i.opcode for i in instrs if i.op == "LDG"})
    print(layout, len(instrs), " ".join(loads))
"""


def test_quantize_pass_loads_vectorize_whatever_the_launch_specializes():
    """The quantize pass reads x along its unit stride, spelled out (``_common._strided``), so its
    bf16 loads are 16 bytes wide even where a compiled graph's launch leaves the strides plain
    integers (sm_90, Jetfire's 32x32 blocks: with the unit stride unknown every element was a
    2-byte load, 65 instructions an element against 59 nearest, 80 against 75 on stream draws)."""
    out = compiled_probe(_QUANT_LOADS_PROBE, "this Triton ships no cuobjdump")
    rows = {int(line.split()[0]): line.split()[1:] for line in out.splitlines()}
    assert set(rows) == {0, 1}, out
    for layout, (n, *loads) in rows.items():
        assert "LDG.E.U16" not in loads and "LDG.E.128" in loads, out
    assert int(rows[0][0]) <= 620, out  # 600 on Triton 3.9 (before: 640)


def test_block_stats_and_rules(device):
    x = _x((64, 128), seed=3, device=device, special=True)
    amax, err = kf.block_stats_int8(x, (32, 32))
    assert torch.equal(amax, block_amax(x, (32, 32)))
    torch.testing.assert_close(err, block_int8_error(x, (32, 32)), rtol=1e-5, atol=1e-7)
    for rule, kw in (("absmax", {}), ("topk", {"rho": 0.25}), ("error", {"error_threshold": 0.02}), ("none", {})):
        got = kf.quantize_fallback_rule(x, (32, 32), rule, **kw)
        mask, _ = select_blocks(x, (32, 32), rule, **kw)
        assert torch.equal(got[4].bool(), mask), rule
        _same_as_reference(got, fallback_quantize(x, (32, 32), mask))


# ----------------------------------------------------------------------------------------------
# GEMM


def _operands(x, w, block_a, block_b, rho_b=0.25):
    fa = fallback_quantize(x, block_a, select_blocks(x, block_a, "absmax")[0])
    fb = fallback_quantize(w, block_b, select_blocks(w, block_b, "topk", rho=rho_b)[0])
    assert fa.mask.any() and fb.mask.any()
    return fa, fb


def _reference(impl, A, B, block_a, block_b, ra=(None, None, None), rb=(None, None, None)):
    """What int8_fallback_gemm computes, in its order of fp32 sums, from the torch reference: the
    fused kernel in int8_block_gemm_reference's own order, the tail in its "tail" order; the sparse
    passes as (first parts + A's second part) + B's second part, each sum from zero over the K-groups."""
    ref = int8_block_gemm_reference
    if impl != "sparse" or (ra[0] is None and rb[0] is None):
        return ref(*A[:2], *B[:2], block_a, block_b, *ra, *rb, order="tail" if impl == "tail" else "k")
    y = ref(*A[:2], *B[:2], block_a, block_b)
    if ra[0] is not None:
        r, dr, f = ra
        y = y + ref(r, torch.where(f.bool(), dr, torch.zeros_like(dr)), *B[:2], block_a, block_b)
    if rb[0] is not None:
        r, dr, f = rb
        y = y + ref(*A[:2], r, torch.where(f.bool(), dr, torch.zeros_like(dr)), block_a, block_b, *ra)
    return y


def _assert_gemm_equal(got, want, device):
    if device == "cpu":
        assert torch.equal(got, want)
    else:  # FMA contraction on the GPU: one rounding fewer per term
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


def _assert_rounded_bf16(half, want, device):
    """``half`` is the fp32 product ``want`` rounded once to the nearest bf16: bit for bit on the CPU.
    On the GPU the kernel's fp32 sum may differ from ``want`` in its last bits (FMA contraction), which
    moves a value lying near the midpoint of two bf16 neighbours to the other one: there a bf16 may
    differ, by one step, and only where ``want`` is that close to the midpoint (a truncating or
    otherwise wrong rounding differs far from midpoints, on about half the elements)."""
    near = want.to(torch.bfloat16)
    if device == "cpu":
        assert torch.equal(half, near)
        return
    off = half != near
    if off.any():
        a, b, w = half[off].float().cpu(), near[off].float().cpu(), want[off].cpu()
        step = (torch.nextafter(b.to(torch.bfloat16), a.to(torch.bfloat16)).float() - b).abs()
        assert torch.equal((a - b).abs(), step), "a bf16 further than one step from the nearest"
        tol = 1e-5 * float(want.abs().max())
        assert float(((a + b) / 2 - w).abs().max()) <= tol, "a bf16 off where the product is far from a midpoint"


@pytest.mark.parametrize("impl", kf.FALLBACK_IMPLS)
@pytest.mark.parametrize("dims,block_a,block_b,tile", [
    ((64, 64, 64), (32, 32), (32, 32), None),         # the Jetfire shape
    ((64, 64, 64), (32, 32), (32, 32), (16, 16)),     # tiles smaller than blocks: some skip the branch
    ((40, 24, 80), (1, 32), (16, 32), None),          # ragged M, N and a partial K-group
    ((32, 48, 72), (8, 24), (4, 24), (16, 32)),       # a K-group that is not a power of two
], ids=["64^3", "small-tiles", "ragged", "group24"])
def test_gemm_equals_integer_emulation(device, dims, block_a, block_b, tile, impl):
    M, N, K = dims
    x = _x((M, K), seed=4, device=device)
    w = _x((N, K), seed=5, device=device) * 0.05
    fa, fb = _operands(x, w, block_a, block_b)
    A, B = fa.gemm_operands(), fb.gemm_operands()
    kw = {} if tile is None else {"block_m": tile[0], "block_n": tile[1]}
    results = {}
    for use_a in (False, True):
        for use_b in (False, True):
            ra = A[2:] if use_a else (None, None, None)
            rb = B[2:] if use_b else (None, None, None)
            got = kf.int8_fallback_gemm(A[0], A[1], B[0], B[1], block_a, block_b, *ra, *rb, fallback=impl, **kw)
            _assert_gemm_equal(got, _reference(impl, A, B, block_a, block_b, ra, rb), device)
            results[use_a, use_b] = got
    # the second parts did something, and brought the product closer to the exact one
    exact = (x.double() @ w.double().t())
    errs = {k: float((v.double() - exact).norm() / exact.norm()) for k, v in results.items()}
    assert max(errs[True, False], errs[False, True]) < errs[False, False], errs
    assert errs[True, True] < min(errs[True, False], errs[False, True]) / 2, errs


def _int_operands(M, N, K, rows_a, rows_b, group, seed, pattern="random", ratio=0.3, device="cpu"):
    """Integer codes in [-127, 127], positive decode scales, and second parts whose codes are zero
    outside the flagged blocks (as the quantizer writes them), flags by pattern: "random" blocks,
    whole block-"rows", "none" or "all"."""
    g = torch.Generator().manual_seed(seed)
    nkb = -(-K // group)

    def part(rows_total, rows):
        q = torch.randint(-127, 128, (rows_total, K), generator=g, dtype=torch.int8)
        d = (torch.rand(-(-rows_total // rows), nkb, generator=g) + 0.5) / 127
        if pattern == "rows":
            f = (torch.rand(d.shape[0], 1, generator=g) < ratio).expand(-1, nkb)
        else:
            f = torch.rand(d.shape, generator=g) < {"random": ratio, "none": -1.0, "all": 2.0}[pattern]
        full = f.repeat_interleave(rows, 0)[:rows_total].repeat_interleave(group, 1)[:, :K]
        r = torch.where(full, torch.randint(-127, 128, (rows_total, K), generator=g, dtype=torch.int8),
                        torch.zeros((), dtype=torch.int8))
        # scales of unflagged blocks are garbage on purpose: the kernels must not read them
        dr = torch.where(f, d / 254, torch.full_like(d, float("nan")))
        return tuple(t.to(device) for t in (q, d, r, dr, f.to(torch.int8).contiguous()))

    return part(M, rows_a), part(N, rows_b)


@pytest.mark.parametrize("dims,rows,group,config", [
    ((64, 64, 256), (32, 32), 32, kt.GemmConfig(32, 32, k_groups=4, num_warps=4, num_stages=1)),  # 4 groups an iteration
    ((64, 48, 192), (16, 8), 32, kt.GemmConfig(64, 16, k_groups=2, num_warps=4, num_stages=1, magic=False)),
    ((50, 33, 160), (32, 32), 32, kt.GemmConfig(32, 32, k_groups=4, num_warps=4, num_stages=1)),  # 5 groups: 1 a step
    ((48, 40, 128), (1, 8), 64, kt.GemmConfig(32, 16, k_groups=2, num_warps=4, num_stages=1, tma=True)),
    ((40, 56, 100), (8, 8), 32, kt.GemmConfig(16, 32, k_groups=2, num_warps=4, num_stages=1, tma=True)),  # K tail
    ((96, 40, 96), (64, 8), 32, kt.GemmConfig(32, 16, k_groups=1, num_warps=4, num_stages=1)),  # A's scale per tile
    ((40, 80, 96), (8, 32), 32, kt.GemmConfig(16, 16, k_groups=3, num_warps=4, num_stages=1, magic=False)),  # B's
    ((50, 33, 160), (8, 16), 32, kt.GemmConfig(32, 32, num_warps=4, num_stages=1, pipelined=True)),
    ((40, 56, 100), (32, 32), 32, kt.GemmConfig(32, 32, num_warps=4, num_stages=1, tma=True, pipelined=True)),
    ((24, 40, 64), (64, 8), 64, kt.GemmConfig(16, 32, k_groups=2, num_warps=4, num_stages=1, pipelined=True)),
], ids=["kg4", "kg2-cvt", "kg-odd-groups", "tma", "tma-ragged", "uniform-a", "uniform-b", "pipelined",
        "pipelined-tma-uniform", "pipelined-one-group"])
def test_gemm_configurations_are_bit_identical(device, dims, rows, group, config):
    """Every configuration (groups per iteration, tiles that do not divide the shape, the exact
    int32 -> fp32 add trick or the conversion, descriptor loads, a scale block covering the tile on
    one side or both, the software-pipelined loop down to a single K-group) gives the reference's
    result."""
    M, N, K = dims
    (qa, da, *_), (qb, db, *_) = _int_operands(M, N, K, rows[0], rows[1], group, seed=11, device=device)
    block_a, block_b = (rows[0], group), (rows[1], group)
    want = int8_block_gemm_reference(qa, da, qb, db, block_a, block_b)
    _assert_gemm_equal(kf.int8_fallback_gemm(qa, da, qb, db, block_a, block_b, config=config), want, device)


def test_scratch_allocator_is_set_by_every_thread_that_launches():
    """Triton keeps the scratch allocator of device-made descriptors in a context variable, which a
    thread does not inherit: a thread that launches (autograd runs the backward's launches on one
    of its own) sets it itself, whatever another thread set before. The GPU run of a once-a-process
    setting failed with "no allocator was set"."""
    import threading

    from lowprec.kernels import _common as _c

    allocation = pytest.importorskip("triton.runtime._allocation")
    seen = []

    def launching_thread():
        seen.append(allocation._allocator.get() is _c._scratch)
        _c.set_scratch_allocator()
        seen.append(allocation._allocator.get() is _c._scratch)

    for _ in range(2):  # the first thread sets it, the second starts without it all the same
        thread = threading.Thread(target=launching_thread)
        thread.start()
        thread.join()
    assert seen == [False, True, False, True]


def test_traced_launch_takes_descriptor_loads(device):
    """A traced launch (its launcher wraps the kernel, as ``wrap_triton`` does in the compiled
    training step) loads through TMA descriptors too, which the kernel makes on the device, and
    gives the reference's result; it never takes the Gluon kernel, whose descriptors are made on
    the host."""
    M, N, K, rows, group = 40, 56, 160, (8, 8), 32  # rows of 160 bytes: TMA reads them
    (qa, da, *_), (qb, db, *_) = _int_operands(M, N, K, rows[0], rows[1], group, seed=13, device=device)
    block_a, block_b = (rows[0], group), (rows[1], group)
    seen = {}

    class Recorder:  # stands for wrap_triton: launches the kernel and keeps its launch options
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            def call(*args, **meta):
                seen.update(meta)
                return self.kernel[grid](*args, **meta)
            return call

    cfg = kt.GemmConfig(16, 32, k_groups=2, num_warps=4, num_stages=1, tma=True)
    got = kf.int8_fallback_gemm(qa, da, qb, db, block_a, block_b, config=cfg, launcher=Recorder)
    assert seen["USE_TMA"] is True
    _assert_gemm_equal(got, int8_block_gemm_reference(qa, da, qb, db, block_a, block_b), device)
    gemm = kf._Gemm(qa, da, qb, db, block_a, block_b, *(None,) * 6, launcher=Recorder)
    assert gemm.tma_usable and not gemm.async_usable
    assert not any(c.async_mma for c in gemm.candidates()) and any(c.tma for c in gemm.candidates())


@pytest.mark.parametrize("pattern", ["none", "random", "rows", "all"])
@pytest.mark.parametrize("impl", kf.FALLBACK_IMPLS)
def test_fallback_patterns(device, pattern, impl):
    """No flag, scattered blocks, whole block-rows and every block: both implementations equal the
    reference in their order of sums; without a flag the second parts change nothing at all."""
    M, N, K, block_a, block_b = 72, 40, 160, (8, 32), (16, 32)
    (qa, da, ra, dra, fa), (qb, db, rb, drb, fb) = _int_operands(M, N, K, 8, 16, 32, seed=12, pattern=pattern,
                                                                 device=device)
    A, B = (qa, da), (qb, db)
    plain = kf.int8_fallback_gemm(qa, da, qb, db, block_a, block_b, fallback=impl)
    for sides in ("a", "b", "ab"):
        pa = (ra, dra, fa) if "a" in sides else (None, None, None)
        pb = (rb, drb, fb) if "b" in sides else (None, None, None)
        got = kf.int8_fallback_gemm(qa, da, qb, db, block_a, block_b, *pa, *pb, fallback=impl)
        _assert_gemm_equal(got, _reference(impl, A, B, block_a, block_b, pa, pb), device)
        if pattern == "none":
            assert torch.equal(got, plain)
        else:
            assert not torch.equal(got, plain)


@pytest.mark.parametrize("dims,rows,config", [
    ((72, 40, 160), (8, 16), kt.GemmConfig(32, 32, num_warps=4, num_stages=1)),            # tiles over several blocks
    ((96, 64, 320), (32, 32), kt.GemmConfig(32, 32, num_warps=4, num_stages=1, pipelined=True, tma=True)),  # uniform
    ((50, 33, 352), (16, 8), kt.GemmConfig(16, 16, k_groups=1, num_warps=4, num_stages=1)),  # 11 groups, 3 chunks
    ((40, 48, 96), (64, 64), kt.GemmConfig(32, 16, num_warps=4, num_stages=1)),             # blocks over tiles
], ids=["multi-block", "pipelined-tma", "chunks", "tall-blocks"])
def test_tail_second_parts_and_bf16_output(device, dims, rows, config, monkeypatch):
    """The second parts after the main loop equal the reference in its "tail" order whatever the
    tile against the blocks (several row-blocks a tile, one block over several tiles), with the
    pipelined and descriptor-load loops and with more K-groups than one load of flags holds; a
    bf16 C is the fp32 result rounded once to nearest, from every implementation."""
    monkeypatch.setattr(kf, "_TAIL_KCHUNK", 4)  # flags a few K-groups at a time: several loads of them
    M, N, K = dims
    group = 32
    (qa, da, ra, dra, fa), (qb, db, rb, drb, fb) = _int_operands(M, N, K, rows[0], rows[1], group, seed=14,
                                                                 ratio=0.15, device=device)
    block_a, block_b = (rows[0], group), (rows[1], group)
    pa, pb = (ra, dra, fa), (rb, drb, fb)
    for impl in kf.FALLBACK_IMPLS:
        want = _reference(impl, (qa, da), (qb, db), block_a, block_b, pa, pb)
        got = kf.int8_fallback_gemm(qa, da, qb, db, block_a, block_b, *pa, *pb, fallback=impl, config=config)
        _assert_gemm_equal(got, want, device)
        half = kf.int8_fallback_gemm(qa, da, qb, db, block_a, block_b, *pa, *pb, fallback=impl, config=config,
                                     out_dtype=torch.bfloat16)
        assert half.dtype == torch.bfloat16
        _assert_rounded_bf16(half, want, device)
    plain = kf.int8_fallback_gemm(qa, da, qb, db, block_a, block_b, config=config, out_dtype=torch.bfloat16)
    assert torch.equal(plain, int8_block_gemm_reference(qa, da, qb, db, block_a, block_b).to(torch.bfloat16)) \
        or device != "cpu"
    assert not torch.equal(half, plain)  # the second parts were added


@pytest.mark.parametrize("residual,rows", [
    (kt.ResidualConfig(block_r=16, block_y=16, num_stages=1, programs=1, k_chunk=2), (8, 4)),   # y tiles looped, chunks
    (kt.ResidualConfig(block_r=32, block_y=32, num_stages=1, programs=1000), (1, 32)),          # 32 one-row blocks a program
    (kt.ResidualConfig(block_r=16, block_y=16, num_stages=1, programs=3, k_chunk=4), (32, 8)),  # blocks taller than a program
], ids=["chunks", "row-blocks", "tall-blocks"])
def test_sparse_pass_configurations(device, residual, rows):
    """The second-part pass visits exactly the flagged K-groups whatever its tiling: flag chunks
    smaller than the K-groups, programs looping over several tiles of the other operand, programs
    spanning several row-blocks or part of one."""
    M, N, K, group = 80, 48, 320, 32
    (qa, da, ra, dra, fa), (qb, db, rb, drb, fb) = _int_operands(M, N, K, rows[0], rows[1], group, seed=13,
                                                                 ratio=0.2, device=device)
    block_a, block_b = (rows[0], group), (rows[1], group)
    got = kf.int8_fallback_gemm(qa, da, qb, db, block_a, block_b, ra, dra, fa, rb, drb, fb, residual=residual)
    want = _reference("sparse", (qa, da), (qb, db), block_a, block_b, (ra, dra, fa), (rb, drb, fb))
    _assert_gemm_equal(got, want, device)


_ASYNC_ON_GPU = pytest.mark.skipif(not _KA_AVAILABLE, reason="the asynchronous kernel needs a Hopper GPU")


@_ASYNC_ON_GPU
@pytest.mark.parametrize("dims,rows,group,tile", [
    ((256, 256, 512), (32, 32), 32, (128, 128, 8, 4)),     # Jetfire's blocks, 16 K-groups (even)
    ((200, 136, 480), (32, 32), 32, (128, 128, 8, 3)),     # ragged M and N, 15 K-groups (odd)
    ((256, 384, 1024), (128, 128), 128, (128, 128, 8, 4)),  # 128x128 blocks: one scale a tile and group
    ((192, 130, 256), (128, 128), 128, (64, 128, 4, 4)),    # two K-groups; blocks taller than the tile
    ((130, 192, 128), (1, 64), 64, (128, 64, 4, 4)),        # one K-group; per-row scales
    ((96, 160, 192), (32, 16), 64, (128, 64, 4, 4)),        # three K-groups; A's and B's blocks differ
], ids=["jetfire-even", "ragged-odd", "b128", "b128-two-groups", "one-group-rows", "three-groups"])
def test_async_kernel_equals_reference(dims, rows, group, tile, monkeypatch):
    """The Gluon kernel of asynchronous MMAs gives the reference's result (to the FMA contraction's
    rounding) for an even, an odd, two and one K-groups, ragged tiles, scales per row, per 32-row
    block and per tile; and it is the kernel that ran."""
    M, N, K = dims
    (qa, da, *_), (qb, db, *_) = _int_operands(M, N, K, rows[0], rows[1], group, seed=21, device="cuda")
    block_a, block_b = (rows[0], group), (rows[1], group)
    calls = []
    real = _ka.int8_block_gemm_async
    monkeypatch.setattr(_ka, "int8_block_gemm_async", lambda *a, **k: calls.append(a[-1]) or real(*a, **k))
    cfg = kt.GemmConfig(tile[0], tile[1], 1, tile[2], tile[3], tma=True, async_mma=True)
    got = kf.int8_fallback_gemm(qa, da, qb, db, block_a, block_b, config=cfg)
    assert len(calls) == 1
    _assert_gemm_equal(got, int8_block_gemm_reference(qa, da, qb, db, block_a, block_b), "cuda")


@_ASYNC_ON_GPU
@pytest.mark.parametrize("impl", kf.FALLBACK_IMPLS)
def test_async_kernel_with_second_parts(impl):
    """With second parts the sparse pass adds them to the asynchronous kernel's first parts; the
    fused loop, which the Gluon kernel does not hold, runs the Triton kernel in the same tile: both
    the reference's result."""
    M, N, K, rows, group = 256, 192, 640, (32, 32), 32
    (qa, da, ra, dra, fa), (qb, db, rb, drb, fb) = _int_operands(M, N, K, *rows, group, seed=22, ratio=0.2,
                                                                 device="cuda")
    block_a, block_b = (rows[0], group), (rows[1], group)
    cfg = kt.GemmConfig(128, 128, 1, 8, 4, tma=True, async_mma=True)
    got = kf.int8_fallback_gemm(qa, da, qb, db, block_a, block_b, ra, dra, fa, rb, drb, fb, fallback=impl, config=cfg)
    want = _reference(impl, (qa, da), (qb, db), block_a, block_b, (ra, dra, fa), (rb, drb, fb))
    _assert_gemm_equal(got, want, "cuda")


# The asynchronous kernel compiled for sm_90 (no GPU needed): per tile of ASYNC_TILES at Jetfire's
# group and blocks and at group 128 in 128-row blocks, one line of key=value pairs
_ASYNC_SASS_PROBE = """
import sys
from lowprec.bench import kernel_sass as ks
from lowprec.kernels import int8_fallback_tuning as kt
if ks.nvidia_tool("cuobjdump") is None:
    print("SKIP"); sys.exit()
for group, rows in ((32, 32), (128, 128)):
    for bm, bn, w, st in kt.ASYNC_TILES[:1] + kt.ASYNC_TILES[3:]:
        row = ks.int8_gemm_row(kt.GemmConfig(bm, bn, 1, w, st, tma=True, async_mma=True), group, rows)
        keys = ("config", "mma_in_flight", "spills", "mma", "error")
        print(" ".join(f"{k}={str(row[k]).replace(' ', '_')}" for k in keys if k in row))
"""


def test_async_kernel_keeps_a_product_in_flight_on_hopper():
    """Compiled for the H100/H200, the Gluon kernel's K loop leaves a warpgroup MMA in flight at
    every wait (where each Triton candidate waits for the last one: mma_in_flight 0), issues the
    MMAs of two K-groups an iteration and spills nothing."""
    out = compiled_probe(_ASYNC_SASS_PROBE, "this Triton ships no cuobjdump or no Gluon")
    rows = [dict(kv.split("=", 1) for kv in line.split()) for line in out.splitlines()]
    assert len(rows) == 4, out
    for row in rows:
        assert "error" not in row, row
        assert int(row["mma_in_flight"]) >= 1 and int(row["spills"]) == 0 and int(row["mma"]) >= 2, row


def test_configuration_space():
    """Tuning candidates fit the shared-memory budget, take about 128 bytes of K per iteration for
    every group size, and the loop takes whole iterations."""
    for gk in (16, 32, 64, 128, 256):
        cands = kt.candidate_configs(gk)
        assert len(cands) == len(set(cands)) >= 6
        assert all(kt.smem_bytes(c, gk) <= kt.SMEM_BUDGET for c in cands)
        assert {c.tma for c in cands} == {False, True} and not any(c.tma for c in kt.candidate_configs(gk, tma=False))
        assert max(c.k_groups * gk for c in cands) >= 128 and min(c.k_groups for c in cands) >= 1
        # every group also tries the conversion instruction in place of the add trick
        assert any(not c.magic for c in cands) and any(c.magic for c in cands)
    assert [kt.whole_k_groups(4, n) for n in (256, 6, 5, 1)] == [4, 2, 1, 1]
    assert kt.default_config(32).k_groups == (1 if kf.interpreter_active() else 4)
    assert "_tma" in kt.GemmConfig(tma=True).label() and "_cvt" in kt.GemmConfig(magic=False).label()


def test_kernel_path_end_to_end(device):
    """Quantize kernel -> GEMM kernel equals the torch FallbackQTensor path -> reference GEMM, and
    the dequantized fp32 product that QLinear multiplies, to fp32 summation order."""
    x = _x((64, 64), seed=6, device=device)
    w = _x((32, 64), seed=7, device=device) * 0.05
    mask, _ = select_blocks(x, (32, 32), "absmax")
    q1, s1, q2, s2, flags = kf.quantize_fallback_int8(x, (32, 32), mask=mask)
    wq1, ws1, _, _, _ = kf.quantize_fallback_int8(w, (32, 32))
    y = kf.int8_fallback_gemm(q1, 1.0 / s1, wq1, 1.0 / ws1, (32, 32), (32, 32), q2,
                              torch.where(flags.bool(), 1.0 / s2, torch.zeros_like(s2)), flags)
    fa, fb = fallback_quantize(x, (32, 32), mask), fallback_quantize(w, (32, 32))
    y_t = kf.gemm_fallback_qtensors(fa, fb)
    if device == "cpu":
        assert torch.equal(y, y_t)
    y64 = fa.dequantize().double() @ fb.dequantize().double().t()
    assert float((y_t.double() - y64).abs().max() / y64.abs().max()) < 1e-6


def test_argument_errors(device):
    q = torch.zeros(32, 32, dtype=torch.int8, device=device)
    d = torch.ones(1, 1, device=device)
    with pytest.raises(TypeError):
        kf.int8_fallback_gemm(q.float(), d, q, d)
    with pytest.raises(ValueError, match="K-group"):
        kf.int8_fallback_gemm(q, d, q, d, (32, 32), (32, 16))
    with pytest.raises(ValueError, match="scale grid"):
        kf.int8_fallback_gemm(q, torch.ones(2, 1, device=device), q, d)
    with pytest.raises(ValueError, match="ra needs"):
        kf.int8_fallback_gemm(q, d, q, d, ra=q)
    with pytest.raises(ValueError, match="fa: flag grid"):
        kf.int8_fallback_gemm(q, d, q, d, ra=q, dra=d, fa=torch.zeros(2, 1, dtype=torch.int8))
    with pytest.raises(ValueError, match="fallback must be one of"):
        kf.int8_fallback_gemm(q, d, q, d, fallback="dense")
    with pytest.raises(ValueError, match=r"out_dtype must be one of \(torch.float32, torch.bfloat16\), got torch.float16"):
        kf.int8_fallback_gemm(q, d, q, d, out_dtype=torch.float16)
    x = torch.randn(32, 32, device=device)
    with pytest.raises(ValueError, match="not both"):
        kf.quantize_fallback_int8(x, mask=torch.zeros(1, 1, dtype=torch.bool), threshold=1.0)
    with pytest.raises(ValueError, match="mask grid"):
        kf.quantize_fallback_int8(x, mask=torch.zeros(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="at most"):
        kf.quantize_fallback_int8(x, (256, 128))
    with pytest.raises(ValueError, match="dynamic"):
        kf.quantize_fallback_rule(x, rule="dynamic")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_realistic_sizes():
    g = torch.Generator(device="cuda").manual_seed(8)
    x = torch.randn(1024, 2048, device="cuda", generator=g)
    x[:, 100] *= 60.0
    w = torch.randn(512, 2048, device="cuda", generator=g) * 0.02
    fa, fb = _operands(x, w, (32, 32), (32, 32), rho_b=0.001)
    A, B = fa.gemm_operands(), fb.gemm_operands()
    got = kf.int8_fallback_gemm(A[0], A[1], B[0], B[1], (32, 32), (32, 32), *A[2:])
    want = int8_block_gemm_reference(A[0], A[1], B[0], B[1], (32, 32), (32, 32), *A[2:])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    mask = select_blocks(x, (32, 32), "absmax")[0]
    _same_as_reference(kf.quantize_fallback_int8(x, (32, 32), mask=mask), fallback_quantize(x, (32, 32), mask))


def test_import_without_triton(monkeypatch):
    """The module imports without Triton; the kernels then raise a clear RuntimeError."""
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)

    def load_without_triton(name: str, as_name: str):
        """Module `name` executed afresh (no Triton now) under `as_name`, and put where its importers
        look for `name`."""
        spec = importlib.util.spec_from_file_location(as_name, Path(sys.modules[name].__file__))
        mod = importlib.util.module_from_spec(spec)
        mod.__package__ = "lowprec.kernels"
        monkeypatch.setitem(sys.modules, as_name, mod)  # dataclasses look their module up there
        spec.loader.exec_module(mod)
        monkeypatch.setitem(sys.modules, name, mod)
        monkeypatch.setattr(sys.modules["lowprec.kernels"], name.rsplit(".", 1)[1], mod, raising=False)
        return mod

    # the Triton-less kernel modules for the host side to import, then the host side itself
    load_without_triton(_KQ, "lowprec.kernels._quantize_nt")
    kk = load_without_triton(_KK, "lowprec.kernels._fallback_kernels_nt")
    assert kk._JIT_FNS == () and not kk.interpreter_active()
    mod = load_without_triton(_KF, "lowprec.kernels._fallback_nt")
    assert not mod.triton_available() and not mod.interpreter_active()
    with pytest.raises(RuntimeError, match="Triton"):
        mod.quantize_fallback_int8(torch.ones(2, 2))


@pytest.mark.parametrize("rule", ["absmax", "topk", "dynamic", "error"])
def test_quantizer_fused_path_equals_torch_path(device, rule, monkeypatch):
    """FallbackInt8Quantizer on the kernels (what CUDA runs) against its torch path: the same codes,
    scales, mask and threshold, nearest and stochastic slots, and the dynamic rule's EMA state."""
    import lowprec.methods.int8_fallback as i8
    from lowprec.methods import int8_ops
    from lowprec.recipes import OperandCall

    class Layer:
        name = "layer"

    def run(fused):
        monkeypatch.setattr(int8_ops, "quantizes_on_kernels", lambda device: fused)
        q = i8.FallbackInt8Quantizer(rule=rule, rho=0.25, error_threshold=0.01,
                                     fallback_operands=("x", "dy"))
        out = []
        for i, (gemm, op) in enumerate([("fprop", "x"), ("wgrad", "dy"), ("fprop", "x")]):
            x = _x((64, 96), seed=10 + i, device=device)
            fq, stats = q.quantize_operand(x, OperandCall(Layer(), gemm, op, seed=7 + i, training=True))
            out.append((fq, stats["fallback_threshold"], stats["n_fallback"]))
        return out, q.state_dict()

    (fused, fstate), (ref, rstate) = run(True), run(False)
    for (a, ta, na), (b, tb, nb) in zip(fused, ref):
        for f in ("codes", "scale", "residual", "residual_scale", "mask"):
            assert torch.equal(getattr(a, f), getattr(b, f)), f
        assert torch.equal(a.dequantize(), b.dequantize())
        assert na == nb and (ta == tb or (ta != ta and tb != tb))
    assert sum(n for _, _, n in fused) > 0  # blocks really fell back
    assert {k: v["level"].item() for k, v in fstate.items()} == {k: v["level"].item() for k, v in rstate.items()}


@pytest.mark.skipif(not kf.interpreter_active(), reason="the dry run needs the interpreter")
def test_benchmark_dry_run(tmp_path, capsys, monkeypatch):
    """The GPU benchmark end to end under the interpreter (its timings mean nothing): every sweep
    writes its rows, the checks pass bit for bit, the summary comes last, and a variant that fails
    is reported without losing the others."""
    import csv as _csv

    from lowprec.bench import int8_gemm as bench

    out = tmp_path / "gemm.csv"
    argv = ["--out", str(out), "--sizes", "32", "--groups", "32", "--ratio-groups", "32", "--ratios", "0.25",
            "--patterns", "random", "--shapes", "32x16x64", "--shape-group", "32", "--ablation-groups", "32",
            "--block-rows", "16", "--quant-chunks", "64x8", "--sweeps", "check,group,ratio,shapes,ablation,quantize"]
    assert bench.main(argv, _device="cpu") == 0
    rows = list(_csv.DictReader(out.open()))
    assert {r["sweep"] for r in rows} == {"check", "baseline", "group", "ratio", "shapes", "ablation", "quantize"}
    # the ablation's ratios are to the baselines it timed, written beside them
    abl = [r for r in rows if r["sweep"] == "ablation"]
    assert {r["kind"] for r in abl} >= {"bf16_matmul", "int_mm", "int8_block", "int8_fallback"}
    t_bf16 = float(next(r["ms"] for r in abl if r["kind"] == "bf16_matmul"))
    tuned = next(r for r in abl if r["kind"] == "int8_block" and r["variant"] == "tuned")
    assert float(tuned["speedup_vs_bf16"]) == pytest.approx(t_bf16 / float(tuned["ms"]), abs=0.006)
    assert {r["kind"] for r in rows if r["sweep"] == "quantize"} == {
        f"quantize_fallback_{m}" for m in ("threshold", "mask", "training", "training_chunk64x8")}
    checks = [r for r in rows if r["sweep"] == "check"]
    assert len(checks) > 10 and all(r["bitwise_equal"] == "true" for r in checks)
    assert {r["kind"] for r in rows if r["sweep"] == "ratio"} == {"int8_fallback", "int8_fallback_fused",
                                                                  "int8_fallback_tail"}
    assert all(r["config"] for r in rows if r["kind"].startswith("int8") and r["sweep"] != "check")
    assert (tmp_path / "gemm.provenance.json").is_file() and (tmp_path / "gemm_tune.csv").is_file()
    printed = capsys.readouterr().out
    assert "---- summary" in printed and "FAILED" not in printed

    real = kf.int8_fallback_gemm

    def broken(*a, **kw):
        if kw.get("fallback") == "fused":
            raise RuntimeError("no such kernel")
        return real(*a, **kw)

    monkeypatch.setattr(kf, "int8_fallback_gemm", broken)
    assert bench.main([*argv[:-1], "group,ratio"], _device="cpu") == 1
    rows = list(_csv.DictReader(out.open()))
    assert {r["kind"] for r in rows if r["sweep"] == "ratio"} == {"int8_fallback", "int8_fallback_tail"}
    assert "# FAILED: fused 32 g=32 random 0.25: RuntimeError: no such kernel" in capsys.readouterr().out
# ----------------------------------------------------------------------------------------------
# Non-finite values and bad arguments


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_block_gives_nan_rows_like_the_reference(device, bad):
    """A block holding NaN/Inf: NaN first-part scale and zero codes in the quantize kernel, for a
    fallback block and a plain one; the GEMM kernel then gives NaN in exactly the reference's
    rows, whether the extra products run or not, and the other rows unchanged."""
    x = _x((64, 64), seed=8, device=device)
    x[40, 3] = bad                                     # block (1, 0), not a fallback block
    x[10, 40] = bad                                    # block (0, 1), forced to fall back below
    w = _x((32, 64), seed=9, device=device) * 0.05
    mask, _ = select_blocks(x, (32, 32), "absmax")
    mask[0, 1] = True
    got = kf.quantize_fallback_int8(x, (32, 32), mask=mask)
    ref = fallback_quantize(x, (32, 32), mask)
    _same_as_reference(got, ref)
    assert got[1].isnan().sum() == 2 and not got[0][32:, :32].any() and not got[0][:32, 32:].any()
    fw = fallback_quantize(w, (32, 32))
    for fa in (ref, fallback_quantize(x, (32, 32))):   # with and without second parts
        want = int8_block_gemm_reference(*fa.gemm_operands()[:2], *fw.gemm_operands()[:2], (32, 32), (32, 32),
                                         *fa.gemm_operands()[2:])
        for impl in kf.FALLBACK_IMPLS:
            for dtype in (torch.float32, torch.bfloat16):  # NaN survives the rounding to bf16
                y = kf.gemm_fallback_qtensors(fa, fw, fallback=impl, out_dtype=dtype)
                assert y.isnan().all()                 # both block-rows hold a NaN block
                assert torch.equal(y.isnan(), want.isnan())
    y = kf.gemm_fallback_qtensors(fallback_quantize(x[32:], (32, 32)), fw)
    assert y.isnan().all()
    y = kf.gemm_fallback_qtensors(fallback_quantize(x[:32, :32], (32, 32)), fallback_quantize(w[:, :32], (32, 32)))
    assert torch.isfinite(y).all()                     # block (0, 0) is clean


def test_invalid_parameters_and_empty_tensors_are_named(device):
    x = torch.randn(32, 32, device=device)
    for kw, msg in (({"tau": -1.0}, r"^tau: must be a finite number > 0, got -1.0"),
                    ({"tau": float("nan")}, r"^tau: .* got nan"),
                    ({"rho": 2.0}, r"^rho: .* got 2.0"),
                    ({"error_threshold": float("inf")}, r"^error_threshold: .* got inf")):
        with pytest.raises(ValueError, match=msg):
            kf.quantize_fallback_rule(x, (32, 32), "topk", **kw)
    with pytest.raises(ValueError, match=r"^threshold: must be a finite number >= 0, got nan"):
        kf.quantize_fallback_int8(x, threshold=float("nan"))
    with pytest.raises(ValueError, match=r"^block: must be two positive ints"):
        kf.quantize_fallback_int8(x, (0, 32))
    empty = torch.zeros(0, 32, device=device)
    for fn in (lambda: kf.quantize_fallback_int8(empty), lambda: kf.block_stats_int8(empty),
               lambda: kf.quantize_fallback_rule(empty)):
        with pytest.raises(ValueError, match=r"^x: empty tensor of shape \(0, 32\)"):
            fn()
    q = torch.zeros(32, 32, dtype=torch.int8, device=device)
    d = torch.ones(1, 1, device=device)
    with pytest.raises(ValueError, match=r"^qa: empty tensor of shape \(0, 32\)"):
        kf.int8_fallback_gemm(q[:0], d[:0], q, d)
    with pytest.raises(ValueError, match=r"^block_a: must be two positive ints"):
        kf.int8_fallback_gemm(q, d, q, d, (-32, 32))


def test_a_recorded_configuration_is_checked_on_a_stand_in_before_it_is_taken(monkeypatch):
    """A recorded configuration names a speed, not a product: the first use in a process runs it on
    a stand-in of the call's shapes (unit scales) and compares with the integer product; a kernel
    that writes nothing, or that the compiler refuses, is named."""
    torch.manual_seed(0)
    qa = torch.randint(-127, 128, (300, 96), dtype=torch.int8)
    qb = torch.randint(-127, 128, (70, 96), dtype=torch.int8)
    blk = (32, 32)
    gemm = kf._Gemm(qa, torch.rand(10, 3), qb, torch.rand(3, 3), blk, blk, *(None,) * 6)
    cfg = kt.GemmConfig(block_m=32, block_n=32, num_warps=4, num_stages=1)
    assert gemm._check_recorded(cfg) is None
    with monkeypatch.context() as m:
        m.setattr(kf._Gemm, "launch_main", lambda self, c, *a, **k: c.zero_())
        assert gemm._check_recorded(cfg).startswith("max error")

    def refuse(self, c, *a, **k):
        raise RuntimeError("out of resources: shared memory\nmore")
    monkeypatch.setattr(kf._Gemm, "launch_main", refuse)
    assert gemm._check_recorded(cfg) == "RuntimeError: out of resources: shared memory"


def test_tuning_rules_out_a_configuration_whose_product_is_wrong(monkeypatch):
    """Tuning times configurations on a stand-in of unit scales, whose product is the integer one:
    a configuration whose output is not that product (a kernel that skips work is also fast) is
    logged and ruled out however fast, and a right one is kept. The GPU's timing is replaced here by
    a table of times (the check runs on this device's tensors)."""
    import triton.testing

    torch.manual_seed(0)
    qa = torch.randint(-127, 128, (300, 96), dtype=torch.int8)
    qb = torch.randint(-127, 128, (70, 96), dtype=torch.int8)
    blk = (32, 32)
    gemm = kf._Gemm(qa, torch.ones(10, 3), qb, torch.ones(3, 3), blk, blk, *(None,) * 6)
    right = (qa.double() @ qb.double().t()).float()
    c = torch.empty(300, 70)
    outputs = {"fast_but_zero": torch.zeros_like(right), "slow_and_right": right}
    times = {"fast_but_zero": 0.01, "slow_and_right": 1.0}

    class Cfg:
        def __init__(self, name):
            self.name = name

        def label(self):
            return self.name

    current = {}

    def launch(cfg, warmup=False):
        c.copy_(outputs[cfg.name])
        current["cfg"] = cfg

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **kw: (fn(), times[current["cfg"].name])[1])
    monkeypatch.setattr(kt, "precompile", lambda warm, cands: None)
    monkeypatch.setattr(kt, "_resources", lambda kernel: {})
    assert gemm._wrong(right.clone()) is None
    assert "max error" in gemm._wrong(torch.zeros_like(right))
    before = len(kt.tuning_log())
    best, ms = kt.time_candidates(("test",), [Cfg("fast_but_zero"), Cfg("slow_and_right")], launch, "cpu",
                                  wrong=lambda: gemm._wrong(c))
    assert best.label() == "slow_and_right" and ms == 1.0
    log = kt.tuning_log()[before:]
    assert log[0]["config"] == "fast_but_zero" and log[0]["error"].startswith("wrong output: max error")
    with pytest.raises(RuntimeError, match="no configuration"):
        kt.time_candidates(("test",), [Cfg("fast_but_zero")], launch, "cpu", wrong=lambda: gemm._wrong(c))
