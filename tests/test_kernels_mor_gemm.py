"""MoR GEMM kernel (lowprec.kernels.mor_gemm) and MoRQuantizer.fused_gemm against float64 GEMMs of
the emulation's values (lowprec.methods.mor): every format combination, every partition, shapes that are
not multiples of the tiles, the decision read on the device, and which main loop ran (the Triton
backend; tests/test_gpu.py covers the torch._scaled_mm one).

CUDA when present, else the Triton interpreter on CPU (tiny shapes). Each operand is quantized once
and its decision moved by the threshold (0: BF16 for any non-zero error, 1: E4M3), so the four
combinations share codes. Tolerance: the kernel multiplies exact products and differs from a
float64 GEMM only by fp32 accumulation and the scale factors' roundings: SQNR >= 120 dB in the
interpreter; 60 dB on CUDA, where FP8 tensor cores accumulate with fewer bits within a K-step.
"""


import numpy as np
import pytest
import torch

from conftest import INTERPRETER_WARNINGS, compiled_probe, kernel_devices, kernel_modules  # noqa: E402

km, kg = kernel_modules("lowprec.kernels.mor_quant", "lowprec.kernels.mor_gemm")

from lowprec.methods import mor  # noqa: E402
from lowprec.numerics import sqnr_db  # noqa: E402
from lowprec.recipes import OperandCall  # noqa: E402

DEVICE = kernel_devices(kg)[0]

pytestmark = INTERPRETER_WARNINGS

FLOOR_DB = 120.0 if DEVICE == "cpu" else 60.0
BLOCK = (32, 32)
E4M3_TH, BF16_TH = 1.0, 0.0   # thresholds that force each format (errors here are ~0.03)


def _grid_block(partition, shape):
    return km._scale_block(partition, BLOCK, *shape)


def _operand(x, partition, threshold=mor.DEFAULT_THRESHOLD):
    codes, scales, err = km.mor_quantize_e4m3(x, partition, BLOCK)
    return kg.MoROperand(x, codes, scales, _grid_block(partition, x.shape), err, threshold)


def _emulated(x, partition, threshold):
    """fp64 values the emulation multiplies (torch reference quantization) and its format."""
    r = mor.mor_tensor(x.cpu().float(), partition, BLOCK, "gam", threshold)
    return r.values.double(), r.format


def _data(shape, seed, dtype=torch.float32, wide=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    if wide:  # ten decades across columns: E4M3's error is far above 4.5 % under one scale
        x = x * torch.logspace(-6, 4, shape[1])
    return x.to(dtype).to(DEVICE)


COMBOS = [(E4M3_TH, E4M3_TH, 1), (BF16_TH, E4M3_TH, 2), (E4M3_TH, BF16_TH, 2), (BF16_TH, BF16_TH, 2)]


@pytest.mark.parametrize("partition", ["tensor", "channel", "block"])
def test_kernel_equals_float64_gemm_of_emulated_values(partition):
    # 40 x 72 @ (24 x 72)^T: neither M, N nor K a multiple of the 32-wide tiles; K spans 3 K-blocks
    a = _data((40, 72), 1)
    b = _data((72, 24), 2, torch.bfloat16).t()  # bf16, read transposed through its strides
    oa, ob = _operand(a, partition), _operand(b, partition)
    for th_a, th_b, loop in COMBOS:
        info = torch.full((3,), -1, dtype=torch.int32, device=DEVICE)
        got = kg.mor_gemm(oa._replace(threshold=th_a), ob._replace(threshold=th_b), backend="triton", info=info)
        va, fa = _emulated(a, partition, th_a)
        vb, fb = _emulated(b, partition, th_b)
        assert (fa, fb) == ("e4m3" if th_a else "bf16", "e4m3" if th_b else "bf16")
        assert info.tolist() == [int(fa == "e4m3"), int(fb == "e4m3"), loop]
        assert got.dtype == torch.float32 and got.shape == (40, 24)
        assert sqnr_db(va @ vb.t(), got.cpu().double()) > FLOOR_DB, (partition, fa, fb)


def test_kernel_fp8_and_bf16_loops_differ_where_the_values_do():
    """The FP8 loop multiplies the codes, the BF16 loop bf16(x) for a BF16 choice: for an operand
    whose E4M3 values are far from x, the two results must be the two emulated GEMMs."""
    a = _data((36, 64), 3, wide=True)
    b = _data((20, 64), 4)
    oa, ob = _operand(a, "tensor"), _operand(b, "tensor")
    out8 = kg.mor_gemm(oa._replace(threshold=E4M3_TH), ob._replace(threshold=E4M3_TH)).cpu().double()
    out16 = kg.mor_gemm(oa._replace(threshold=BF16_TH), ob._replace(threshold=E4M3_TH)).cpu().double()
    ref8 = _emulated(a, "tensor", E4M3_TH)[0] @ _emulated(b, "tensor", E4M3_TH)[0].t()
    ref16 = _emulated(a, "tensor", BF16_TH)[0] @ _emulated(b, "tensor", E4M3_TH)[0].t()
    assert sqnr_db(ref8, ref16) < 40  # the formats really give different products here
    assert sqnr_db(ref8, out8) > FLOOR_DB and sqnr_db(ref16, out16) > FLOOR_DB


def test_bf16_choice_rounded_before_the_gemm_is_the_kernels_rounding():
    """The fast path hands the GEMM an fp32 operand's BF16 choice already rounded
    (``mor_fast.bf16_choice``, torch's round to nearest even), so that the K loop converts nothing:
    the product is the one of the kernel rounding the fp32 values itself, bit for bit, ties included,
    and it is the BF16 product (not the FP8 one)."""
    from lowprec.methods.mor_fast import bf16_choice
    a = _data((40, 72), 21)
    a[0, :4] = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 3 * 2 ** -9 + 2 ** -17], device=DEVICE)
    b = _data((24, 72), 22)
    oa, ob = _operand(a, "tensor", BF16_TH), _operand(b, "tensor", E4M3_TH)
    pre = bf16_choice(a)
    assert pre.dtype == torch.bfloat16 and torch.equal(pre, a.to(torch.bfloat16))
    assert bf16_choice(pre) is pre
    got = kg.mor_gemm(oa, ob)
    assert torch.equal(kg.mor_gemm(oa._replace(hp=pre), ob), got)
    assert not torch.equal(kg.mor_gemm(oa._replace(threshold=E4M3_TH), ob), got)


def test_transposed_codes_through_strides():
    """A square-block operand's transposed use (W^T in dgrad) can read its codes and scale grid
    transposed instead of being quantized again: the same result as quantizing the transpose."""
    w = _data((64, 40), 5)
    a = _data((24, 64), 6)
    ow = _operand(w, "block", E4M3_TH)
    wt = kg.MoROperand(w.t(), ow.codes.t(), ow.scales.t(), BLOCK, ow.rel_error, E4M3_TH)
    oa = _operand(a, "block", E4M3_TH)
    got = kg.mor_gemm(oa, wt).cpu().double()
    ref = _emulated(a, "block", E4M3_TH)[0] @ _emulated(w.t().contiguous(), "block", E4M3_TH)[0].t()
    assert sqnr_db(ref, got) > FLOOR_DB


def test_decision_threshold_in_fp32_is_the_fp64_test():
    for th in (0.045, 0.0, 1e-30, 0.1, float(np.float32(0.045)), 3.5e38, float("inf")):
        t32 = np.float32(kg.fp32_threshold(th))
        assert float(t32) <= th
        # the fp32 errors around it decide as float64(error) <= threshold does
        with np.errstate(over="ignore"):
            around = (t32, np.nextafter(t32, np.float32(0)), np.nextafter(t32, np.float32(np.inf)))
        for e in around:
            assert (e <= t32) == (float(e) <= th), (th, e)


def test_error_equal_to_threshold_chooses_e4m3():
    a, b = _data((32, 32), 7), _data((32, 32), 8)
    oa, ob = _operand(a, "block"), _operand(b, "block")
    err_a = float(oa.rel_error)
    info = torch.zeros(3, dtype=torch.int32, device=DEVICE)
    kg.mor_gemm(oa._replace(threshold=err_a), ob._replace(threshold=E4M3_TH), backend="triton", info=info)
    assert info.tolist() == [1, 1, 1]
    below = float(np.nextafter(np.float32(err_a), np.float32(0)))
    kg.mor_gemm(oa._replace(threshold=below), ob._replace(threshold=E4M3_TH), backend="triton", info=info)
    assert info.tolist() == [0, 1, 2]


def test_nan_operand_goes_bf16_and_propagates():
    a = _data((32, 40), 9)
    a[3, 5] = float("nan")
    b = _data((16, 40), 10)
    info = torch.zeros(3, dtype=torch.int32, device=DEVICE)
    out = kg.mor_gemm(_operand(a, "tensor", E4M3_TH), _operand(b, "tensor", E4M3_TH), info=info).cpu()
    assert info.tolist() == [0, 1, 2]
    assert out[3].isnan().all() and not out[torch.arange(32) != 3].isnan().any()


def test_mor_gemm_argument_errors():
    a, b = _operand(_data((32, 64), 11), "block"), _operand(_data((16, 64), 12), "block")
    with pytest.raises(ValueError, match="reduction dimensions differ"):
        kg.mor_gemm(a, _operand(_data((16, 32), 13), "block"))
    with pytest.raises(ValueError, match=r"scales: an fp32 grid of shape \(1, 2\)"):
        kg.mor_gemm(a, b._replace(scales=b.scales[:, :1]))
    with pytest.raises(TypeError, match="codes must be float8_e4m3fn"):
        kg.mor_gemm(a, b._replace(codes=b.hp))
    with pytest.raises(ValueError, match="multiple of 32"):
        kg.mor_gemm(a, b._replace(block=(16, 16), scales=torch.ones(1, 4, device=DEVICE)))
    with pytest.raises(TypeError, match="out_dtype"):
        kg.mor_gemm(a, b, out_dtype=torch.float16)
    with pytest.raises(ValueError, match="fp8_accum"):
        kg.mor_gemm(a, b, fp8_accum="exact")
    assert kg.supported((16, 16), (1, 16), 16) and not kg.supported((16, 16), (128, 128), 64)


# ----------------------------------------------------------------------------------------------
# MoRQuantizer.fused_gemm


def _call(op):
    return OperandCall(layer=None, gemm="fprop", operand=op, seed=0, training=True)


@pytest.mark.parametrize("partition", ["tensor", "channel", "block"])
def test_fused_gemm_equals_emulated_gemm(partition):
    """Same decisions and codes as __call__, the emulation's fp32 GEMM to the SQNR floor, and the
    same coverage counts: a Gaussian X (E4M3 under every partition) times a Gaussian W (FP8 loop)
    and times a W spanning ten decades along K (BF16 under every partition: the BF16 loop)."""
    a = _data((40, 72), 14)
    g = torch.Generator().manual_seed(15)
    wide = (torch.randn(72, 36, generator=g) * torch.logspace(-6, 4, 72)[:, None]).to(DEVICE).t()
    for b, want in ((_data((72, 36), 16).t(), "e4m3"), (wide, "bf16")):  # transposed views, as in dgrad
        fast, emu = mor.MoRQuantizer(partition, BLOCK, gemm="kernel"), mor.MoRQuantizer(partition, BLOCK)
        got = fast.fused_gemm(fast, a, b, _call("x"), _call("w"))
        (va, sa), (vb, sb) = emu(a, _call("x")), emu(b, _call("w"))
        assert (sa["format"], sb["format"]) == ("e4m3", want)
        assert fast.coverage() == emu.coverage()
        assert [r["calls"] for r in fast.coverage()] == [1, 1]
        ref64 = va.cpu().double() @ vb.cpu().double().t()
        assert sqnr_db(ref64, got.cpu().double()) > FLOOR_DB
        assert sqnr_db((va @ vb.t()).cpu().double(), got.cpu().double()) > FLOOR_DB - 20  # fp32 vs fp32


def test_fused_gemm_declines_what_it_does_not_run(monkeypatch):
    a, b = _data((32, 64), 16), _data((16, 64), 17)
    q = mor.MoRQuantizer("block", BLOCK, gemm="kernel")
    calls = (_call("x"), _call("w"))
    emulated = mor.MoRQuantizer("block", BLOCK)
    assert emulated.fused_gemm(emulated, a, b, *calls) is None  # gemm: emulated, the default
    assert q.fused_gemm(None, a, b, *calls) is None  # a BF16 (unquantized) other operand
    assert q.fused_gemm(mor.SubTensorMoRQuantizer(), a, b, *calls) is None
    assert q.fused_gemm(mor.MoRQuantizer("block", BLOCK, dequant="bf16", gemm="kernel"), a, b, *calls) is None
    narrow = mor.MoRQuantizer("block", (16, 16), gemm="kernel")
    assert narrow.fused_gemm(narrow, a, b, *calls) is None  # K-steps must divide the block width
    monkeypatch.setattr(mor, "USE_KERNEL", False)
    assert q.fused_gemm(q, a, b, *calls) is None
    assert q.coverage() == []


def test_fixup_mode_keeps_the_fp8_product_or_overwrites_it():
    """backend "scaled_mm" launches the kernel after torch._scaled_mm wrote the FP8 product: with
    both operands E4M3 it must leave the output alone; otherwise the BF16 loop replaces all of it."""
    a, b = _data((40, 72), 20), _data((24, 72), 21)
    oa, ob = _operand(a, "block"), _operand(b, "block")
    for th_a, ran in ((E4M3_TH, 3), (BF16_TH, 2)):
        out = torch.full((40, 24), 7.0, device=DEVICE)
        info = torch.zeros(3, dtype=torch.int32, device=DEVICE)
        kg._launch(oa._replace(threshold=th_a), ob._replace(threshold=E4M3_TH), out, info, "precise", None,
                   fixup=True)
        assert info.tolist() == [int(th_a == E4M3_TH), 1, ran]
        if ran == 3:
            assert bool((out == 7.0).all())
        else:
            ref = _emulated(a, "block", th_a)[0] @ _emulated(b, "block", E4M3_TH)[0].t()
            assert sqnr_db(ref, out.cpu().double()) > FLOOR_DB


def test_empty_operand_is_an_error_naming_it():
    a = _data((0, 64), 22)
    with pytest.raises(ValueError, match=r"^x: empty tensor of shape \(0, 64\)"):
        _operand(a, "tensor", E4M3_TH)


@pytest.mark.parametrize("threshold_a,threshold_b", [(E4M3_TH, E4M3_TH), (E4M3_TH, BF16_TH), (BF16_TH, BF16_TH)])
@pytest.mark.parametrize("partition", ["tensor", "channel", "block"])
def test_fast_path_fixup_reads_the_choice_on_the_device(partition, threshold_a, threshold_b, monkeypatch):
    """lowprec.methods.mor_fast's GEMM: the FP8 product of the codes, then this kernel's fix-up mode, which
    leaves it where both chose E4M3 and otherwise writes the product of the chosen values; the
    backward's operands come transposed (a view of the forward's codes and tensor). The fix-up counts
    the call and both choices into the GEMM's two rows of a layer's counts; the torch operator where
    Triton does not run computes and counts the same."""
    from lowprec.gemm import operand_mm
    from lowprec.methods.mor_fast import mor_mm, mor_operand
    from lowprec.recipes import OPERANDS, SLOTS

    a, b = _data((256, 128), 11).to(DEVICE), _data((256, 256), 12).to(DEVICE)
    qa = mor_operand(mor.MoRQuantizer(partition, block=(128, 128), threshold=threshold_a), a.t())
    qb = mor_operand(mor.MoRQuantizer(partition, block=(128, 128), threshold=threshold_b), b)
    assert qa.hp_t  # a.T travels as its row-major base
    counts = torch.full((len(SLOTS), 4), 5, dtype=torch.int64, device=DEVICE)
    out = mor_mm(qa, qb, torch.float32, counts=counts, gemm="wgrad")
    fp8 = operand_mm(qa.fp8_operand(), qb.fp8_operand(), torch.float32)
    (va, fa), (vb, fb) = (_emulated(x, partition, th) for x, th in ((a.t(), threshold_a), (b, threshold_b)))
    assert (fa, fb) == tuple("e4m3" if th == E4M3_TH else "bf16" for th in (threshold_a, threshold_b))
    if fa == fb == "e4m3":
        assert torch.equal(out, fp8)
    else:
        assert not torch.equal(out, fp8)
        assert sqnr_db(va @ vb.t(), out.double().cpu()) >= FLOOR_DB
    row = SLOTS.index(("wgrad", OPERANDS["wgrad"][0]))
    want = torch.full_like(counts, 5).cpu()
    want[row:row + 2, 0] += 1
    want[row:row + 2, 1] += torch.tensor([fa == "e4m3", fb == "e4m3"])
    assert torch.equal(counts.cpu(), want)
    with pytest.raises(ValueError, match="counts need the GEMM they count"):
        mor_mm(qa, qb, torch.float32, counts=counts)
    monkeypatch.setattr(kg, "triton_available", lambda device=None: False)
    if DEVICE == "cpu":  # the operator's torch branch (on CUDA the triton_op runs either way)
        again = mor_mm(qa, qb, torch.float32, counts=counts, gemm="wgrad")
        want[row:row + 2] += want[row:row + 2] - 5
        assert torch.equal(counts, want)
        assert torch.equal(again, out) if fa == fb == "e4m3" else sqnr_db(out.double(), again.double()) > FLOOR_DB


def test_fixup_counts_an_empty_product_and_names_bad_counts():
    """A GEMM of no tokens still counts its call and choices (the emulation counts it); a counts
    buffer the kernel cannot add to is an error naming it, before anything runs."""
    b = _operand(_data((24, 64), 23), "channel", E4M3_TH)
    a = b._replace(hp=b.hp[:0], codes=b.codes[:0], scales=b.scales[:0], threshold=BF16_TH)
    out = torch.empty((0, 24), device=DEVICE)
    counts = torch.zeros(6, 2, dtype=torch.int32, device=DEVICE)
    kg.bf16_fixup(a, b, out, counts=counts, count_row=4)
    assert counts.cpu().tolist() == [[0, 0]] * 4 + [[1, 0], [1, 1]]
    with pytest.raises(ValueError, match=r"count_row 5: rows 5 and 6 outside counts \(6, 2\)"):
        kg.bf16_fixup(a, b, out, counts=counts, count_row=5)
    with pytest.raises(ValueError, match="counts must be a 2-D integer tensor"):
        kg.bf16_fixup(a, b, out, counts=counts.float(), count_row=0)


# The kernel compiled for sm_90 (no GPU needed) in a process without the interpreter: each K loop
# of each mode, bf16 hp operands, row-major and (fix-up) through transposed views, as
# ``lowprec.bench.kernel_sass`` counts them
_SASS_PROBE = """
import sys
from lowprec.bench import kernel_sass as ks
if ks.nvidia_tool("cuobjdump") is None:
    print("SKIP"); sys.exit()
for mode, view, loads in (("fixup", "rows", "pointer"), ("fixup", "transposed", "pointer"),
                          ("triton", "rows", "pointer"), ("fixup", "rows", "tma"), ("fixup", "transposed", "tma")):
    for row in ks.mor_gemm_rows(mode, "bf16", view, loads):
        print(mode + "_" + view + ("_tma" if loads == "tma" else ""), row.get("tile"), row.get("loop_instructions"),
              row.get("conversions"), row.get("spills"), row.get("global_loads"), row.get("mma_in_flight"),
              row.get("error", ""))
# the fix-up's pointer loops: registers a thread, warps and persistent programs an SM of each variant
from lowprec.kernels import mor_gemm as kg
for hp in ("bf16", "fp32"):
    for view in ("rows", "transposed"):
        row = ks.mor_gemm_rows("fixup", hp, view, "pointer")[0]
        cfg = kg._config(8192, 8192, 8192, [], hp == "fp32", True, True, False)
        print("fixup_residency", hp, view, row.get("registers"), cfg.num_warps, cfg.programs_per_sm)
# where the fix-up makes its TMA descriptors: their depth in the TTIR, the function's top level at 4
ttir = ks.compile_mor_gemm("fixup", "bf16", "rows", "tma").asm["ttir"].splitlines()
print("descriptor_depths", *sorted({len(l) - len(l.lstrip()) for l in ttir if "tt.make_tensor_descriptor" in l}))
"""


def test_bf16_loops_load_one_source_per_operand():
    """Where an operand chose BF16, the loop that runs reads one tensor per operand, fixed at
    compile time: two BF16 operands make a plain BF16 GEMM loop (no conversion between memory and
    the MMA), a mixed pair converts the codes' side only. With both sources of both operands in
    one loop, selected per element, every 64-deep K-step took 1322 instructions on sm_90, and the
    fix-up, the fast path's BF16 product, ran at about 36 TFLOP/s on the H200. The backward's
    transposed views (rows at unit stride) keep the async copies on whole tiles, where clamped row
    indices made every element a load of its own (64 a K-step, 349-461 instructions). Both modes
    compile (the interpreter type-checks nothing); the triton mode adds its FP8 loop.

    Every loop keeps a tensor-core product in flight while the next K-step loads (``mma_in_flight``
    >= 1): the decoded codes are the dot's first operand, read from registers (A's hp with B's codes
    computes the transposed product), and the FP8 loop loads its codes as fp8. Where a tile was
    converted in registers as the second operand, it went back to shared memory every K-step and each
    product waited for the last; with an fp32 hp operand the loops still do, which is why the fast path
    hands the GEMM bf16 copies (``lowprec.methods.mor_fast.bf16_choice``)."""
    out = compiled_probe(_SASS_PROBE, "this Triton ships no cuobjdump")
    lines = [line.split() for line in out.splitlines()]
    loops = {key: [line[2:] for line in lines if line[0] == key] for key in ("fixup_rows", "fixup_transposed", "triton_rows")}
    tiles = {line[0]: line[1] for line in lines if line and line[0] in loops}
    assert [len(v) for v in loops.values()] == [3, 3, 4], out
    for key, rows in loops.items():
        # the bounds of a 128 x 128 tile's 64-deep K-step, scaled to the shape's tile (the fix-up's
        # 128 x 256): loads by the elements a K-step loads, instructions by the longer side, which
        # the decoded codes may take (the transposed product)
        bm, bn, _ = (int(v) for v in tiles[key].split("x"))
        loads_per, instr_per = (bm + bn) / 256, max(bm, bn) / 128
        bf16 = rows[-3:]
        assert all(int(n) <= 220 * instr_per and int(spills) == 0 and int(loads) <= 8 * loads_per
                   for n, _, spills, loads, _ in bf16), out
        assert int(bf16[-1][0]) <= 100 * instr_per and int(bf16[-1][1]) == 0, out  # both hp: no conversion
    # the view as the forward reads it (the transposed FP8 codes of the triton mode need a transpose in
    # shared memory, which the fast path leaves to cuBLAS)
    assert all(int(r[4]) >= 1 for key in ("fixup_rows", "fixup_transposed") for r in loops[key]), out
    assert all(int(r[4]) >= 1 for r in loops["triton_rows"]), out
    # on TMA loads (Hopper's launch): the fix-up's three loops, no global load of their own, no
    # spill, the BF16 pair's loop a plain BF16 GEMM's; the mixed pairs' decode their codes (179-221
    # instructions a K-step with Triton 3.9, the transposed codes' the most)
    for key in ("fixup_rows_tma", "fixup_transposed_tma"):
        rows = [line[2:] for line in lines if line[0] == key]
        assert len(rows) == 3 and all(int(r[3]) == 0 and int(r[2]) == 0 for r in rows), out  # loads, spills
        assert all(int(r[0]) <= 240 for r in rows) and int(rows[-1][0]) <= 100 and int(rows[-1][1]) == 0, out
    # the descriptors are made inside the branch of a BF16 choice, never at the function's top level:
    # there every program of the common case (two E4M3 choices, nothing to do) made four, each a
    # global write, a fence and a barrier, before returning (7 us a call per block at 98 M on the H100)
    depths = next(line[1:] for line in lines if line[0] == "descriptor_depths")
    assert depths and all(int(d) > 4 for d in depths), out
    # every persistent program of the fix-up's pointer loops is resident at once (64K registers an
    # SM): a program that only queued behind another made a second wave, which the common case, where
    # each program reads the decision and returns, paid as launch latency
    residency = [line[1:] for line in lines if line[0] == "fixup_residency"]
    assert len(residency) == 4 and all(int(regs) * 32 * int(warps) * int(per_sm) <= 65536
                                       for _, _, regs, warps, per_sm in residency), out


def _bf16_view(rows, k, seed, transposed):
    """A (rows, K) bf16 operand, row-major or the transpose of a row-major base (the backward's views)."""
    x = _data((k, rows) if transposed else (rows, k), seed, torch.bfloat16)
    return x.t() if transposed else x


def _run_tma_mode(mode, a, b, config):
    """(product, info) of the ``triton`` backend's GEMM, or of the fix-up over a buffer of sevens
    (``fixup``), in launch configuration ``config``."""
    info = torch.zeros(3, dtype=torch.int32, device=DEVICE)
    if mode == "triton":
        return kg.mor_gemm(a, b, backend="triton", info=info, config=config), info
    out = torch.full((a.hp.shape[0], b.hp.shape[0]), 7.0, device=DEVICE)
    kg.bf16_fixup(a, b, out, info=info, config=config)
    return out, info


@pytest.mark.parametrize("a_t,b_t,codes_t,e4m3,mode", [
    (False, False, False, "a", "fixup"), (True, True, True, "a", "fixup"), (False, True, False, "b", "fixup"),
    (True, False, True, "b", "triton")])
def test_one_e4m3_choice_loads_its_codes_through_tma(a_t, b_t, codes_t, e4m3, mode):
    """One operand chose E4M3, the other BF16: the TMA unit loads the codes too (info 4), in
    row-major and transposed layouts of the hp values and of the codes alike, over edges that no
    tile fits; the product equals the float64 GEMM of the chosen values and the pointer loop's
    (``tma=False``) up to the order of the sums, GAM blocks (scales that change along K, applied to
    each K-step's product) included. Row-major codes whose rows TMA cannot take (K = 72: rows of 72
    bytes) keep the pointer loop."""
    def operand(rows, k, seed, transposed, partition, e4):
        x = _bf16_view(rows, k, seed, transposed)
        op = _operand(x, partition, E4M3_TH if e4 else BF16_TH)
        codes = op.codes.t().contiguous().t() if codes_t else op.codes.contiguous()
        return op._replace(codes=codes), _emulated(x, partition, op.threshold)[0]

    # 48 and 80 rows: transposed codes' rows (of M or N bytes) on 16-byte boundaries, tiles cut at the edges
    # (per-row scales take the per-tensor path: the epilogue scales the sum)
    for (m, n, k), partition, tma_ran in (((48, 80, 96), "tensor", True), ((64, 64, 96), "block", True),
                                          ((48, 80, 72), "tensor", codes_t)):
        a, va = operand(m, k, 31, a_t, partition, e4m3 == "a")
        b, vb = operand(n, k, 32, b_t, partition, e4m3 == "b")
        cfg = kg._config(m, n, k, [32] if partition == "block" else [], False, True, mode == "fixup", True)
        got, info = _run_tma_mode(mode, a, b, cfg)
        want = [int(e4m3 == "a"), int(e4m3 == "b"), 4 if tma_ran else 2]
        assert info.tolist() == want, (partition, k, info)
        ref = va @ vb.t()
        assert sqnr_db(ref, got.cpu().double()) > FLOOR_DB
        plain, info = _run_tma_mode(mode, a, b, cfg._replace(tma=False))
        assert info.tolist()[2] == 2
        torch.testing.assert_close(got, plain, rtol=1e-6, atol=1e-6 * float(ref.abs().max()))


@pytest.mark.parametrize("mode", ["triton", "fixup"])
@pytest.mark.parametrize("a_t,b_t", [(False, False), (False, True), (True, True), (True, False)])
def test_two_bf16_choices_load_through_tma_in_every_layout(a_t, b_t, mode):
    """Two BF16 choices of bf16 operands make a plain BF16 GEMM whose tiles the TMA unit loads
    (info 4), for row-major operands and transposed views alike (fprop, dgrad's W^T, wgrad's dY^T and
    X^T), over edges that no tile fits: the float64 GEMM of the bf16 values, and the pointer loop's
    result (``tma=False``, info 2) up to the order of the sums. Row strides TMA cannot take (66, 39
    or 23 bf16 values: not multiples of 16 bytes) go to the pointer loop. A traced launch takes the
    TMA loop too (its descriptors are made on the device)."""
    def operand(rows, k, seed, transposed):
        x = _bf16_view(rows, k, seed, transposed)
        codes, scales, _ = km.mor_quantize_e4m3(x.float(), "tensor", BLOCK)
        return kg.MoROperand(x, codes, scales, tuple(x.shape), torch.tensor(0.05, device=DEVICE), BF16_TH)

    cfg = kg._config(40, 24, 72, [], False, True, mode == "fixup")
    for m, n, k, tma_ran in ((40, 24, 72, True), (39, 23, 66, False)):
        a, b = operand(m, k, 31, a_t), operand(n, k, 32, b_t)
        got, info = _run_tma_mode(mode, a, b, cfg)
        ref = a.hp.cpu().double() @ b.hp.cpu().double().t()
        assert info.tolist() == [0, 0, 4 if tma_ran else 2], (k, info)
        assert sqnr_db(ref, got.cpu().double()) > FLOOR_DB
        plain, info = _run_tma_mode(mode, a, b, cfg._replace(tma=False))
        assert info.tolist() == [0, 0, 2]
        assert sqnr_db(ref, plain.cpu().double()) > FLOOR_DB
        # the same fp32 sums of the same exact products, up to their order within a K-step
        torch.testing.assert_close(got, plain, rtol=1e-6, atol=1e-6 * float(ref.abs().max()))
    if mode == "fixup":  # a traced launch (its launcher wraps the kernel)
        a, b = operand(40, 72, 31, a_t), operand(24, 72, 32, b_t)
        untraced, _ = _run_tma_mode(mode, a, b, None)
        out = torch.full((40, 24), 7.0, device=DEVICE)
        info = torch.zeros(3, dtype=torch.int32, device=DEVICE)
        kg.bf16_fixup(a, b, out, info=info, launcher=lambda kernel: kernel)
        assert info.tolist() == [0, 0, 4]
        assert torch.equal(out, untraced)
