"""Block-scaled FP8 GEMM (lowprec.kernels.block_fp8_gemm): DeepSeek-style 1x128 x 1x128 blocks against a
float64 GEMM of the dequantized codes, bit for bit against the MoR GEMM's FP8 loop in the
interpreter (the same products, scalings and accumulation order), reached from the fast path's
``operand_mm``, and its errors.

CUDA when present, else the Triton interpreter on CPU (tiny shapes). Tolerance: products of E4M3
codes are exact in fp32, so the result differs from float64 only by fp32 accumulation and the
scales' reciprocals: SQNR >= 120 dB in the interpreter, 60 dB on CUDA (FP8 MMA accumulation within
a K-step).
"""


import pytest
import torch

from conftest import INTERPRETER_WARNINGS, kernel_devices, kernel_modules  # noqa: E402

kb, kg = kernel_modules("lowprec.kernels.block_fp8_gemm", "lowprec.kernels.mor_gemm")

from lowprec import gemm  # noqa: E402
from lowprec.numerics import QuantSpec, sqnr_db  # noqa: E402
from lowprec.numerics.scaling import expand_blocks  # noqa: E402

DEVICE = kernel_devices(kb)[0]

pytestmark = INTERPRETER_WARNINGS

FLOOR_DB = 120.0 if DEVICE == "cpu" else 60.0
SPEC = QuantSpec("e4m3", "block", block=(1, 128))


def _data(shape, seed):
    g = torch.Generator().manual_seed(seed)
    # ten decades across columns: one scale per row would lose the small ones
    return (torch.randn(*shape, generator=g) * torch.logspace(-6, 4, shape[1])).to(DEVICE)


def _values(q):
    return (q.codes.double() / expand_blocks(q.scale, tuple(q.codes.shape), (1, 128)).double()).cpu()


# (M, K, N): an N of no multiple of 16 keeps whole-block pairs off cuBLAS (``gemm.shape_fits``)
@pytest.mark.parametrize("shape", [(64, 256, 88), (40, 384, 72), (33, 100, 17)])
def test_equals_float64_gemm_of_the_codes_through_operand_mm(shape, count_calls):
    """Partial tiles in M and N, K not a multiple of the K-step (and, at 100, one partial block):
    shapes that cuBLAS refuses, so that the Triton kernel multiplies on CUDA too."""
    m, k, n = shape
    a, b = _data((m, k), 21), _data((n, k), 22)
    qa, qb = gemm.FP8Operand.of(a, SPEC), gemm.FP8Operand.of(b.t().contiguous().t(), SPEC)  # b from a view
    assert gemm.hardware_route(qa, qb) == "triton"
    calls = count_calls(kb, "block_scaled_mm")
    out = gemm.operand_mm(qa, qb, torch.float32)
    assert calls["n"] == 1
    assert sqnr_db(_values(qa) @ _values(qb).t(), out.double().cpu()) >= FLOOR_DB
    assert sqnr_db(a.double().cpu() @ b.double().cpu().t(), out.double().cpu()) < 40  # really E4M3


@pytest.mark.skipif(DEVICE != "cpu", reason="tile order is the interpreter's; the GPU test holds an SQNR floor")
def test_bit_identical_to_the_mor_gemm_fp8_loop():
    a, b = gemm.FP8Operand.of(_data((48, 256), 1), SPEC), gemm.FP8Operand.of(_data((40, 256), 2), SPEC)
    out = kb.block_scaled_mm(a.codes, a.scale, (1, 128), b.codes, b.scale, (1, 128))

    def mor(q):  # an operand that chose E4M3 (error 0 against threshold 0)
        return kg.MoROperand(q.codes.float(), q.codes, q.scale, (1, 128), torch.zeros(()), 0.0)
    info = torch.empty(3, dtype=torch.int32)
    ref = kg.mor_gemm(mor(a), mor(b), torch.float32, backend="triton", info=info)
    assert info[2] == 1  # the FP8 loop ran there
    assert torch.equal(out, ref)


def test_bf16_output_and_nan_codes():
    a, b = gemm.FP8Operand.of(_data((32, 128), 3), SPEC), gemm.FP8Operand.of(_data((32, 128), 4), SPEC)
    codes = a.codes.clone()
    codes[5, 7] = float("nan")
    out = kb.block_scaled_mm(codes, a.scale, (1, 128), b.codes, b.scale, (1, 128), torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert out[5].isnan().all() and not out[torch.arange(32) != 5].isnan().any()
    ref = kb.block_scaled_mm(a.codes, a.scale, (1, 128), b.codes, b.scale, (1, 128))
    keep = torch.arange(32) != 5
    assert torch.equal(out[keep], ref[keep].to(torch.bfloat16))


def test_empty_reduction_gives_zeros():
    a8 = torch.empty((4, 0), dtype=torch.float8_e4m3fn, device=DEVICE)
    s = torch.empty((4, 0), dtype=torch.float32, device=DEVICE)
    out = kb.block_scaled_mm(a8, s, (1, 128), a8, s, (1, 128))
    assert out.shape == (4, 4) and not out.any()


def test_bad_operands_name_the_problem():
    q = gemm.FP8Operand.of(_data((32, 256), 5), SPEC)
    with pytest.raises(ValueError, match="a_codes must be a 2-D float8_e4m3fn"):
        kb.block_scaled_mm(q.codes.float(), q.scale, (1, 128), q.codes, q.scale, (1, 128))
    with pytest.raises(ValueError, match=r"b_scales: an fp32 grid of shape \(32, 2\)"):
        kb.block_scaled_mm(q.codes, q.scale, (1, 128), q.codes, q.scale[:, :1], (1, 128))
    with pytest.raises(ValueError, match="reduction dimensions differ"):
        kb.block_scaled_mm(q.codes, q.scale, (1, 128), q.codes[:, :128], q.scale[:, :1], (1, 128))
    with pytest.raises(ValueError, match="multiple of 32"):
        kb.block_scaled_mm(q.codes, q.scale.repeat_interleave(8, 1)[:, :16], (1, 16), q.codes, q.scale,
                               (1, 128))
    with pytest.raises(TypeError, match="out_dtype"):
        kb.block_scaled_mm(q.codes, q.scale, (1, 128), q.codes, q.scale, (1, 128), torch.float16)


@pytest.mark.parametrize("transposed", [False, True])
def test_bf16_code_grid_operands_equal_float64_through_subtensor_mm(transposed, count_calls):
    """Sub-tensor MoR's operands (BF16 values on each block's code grid, E4M3, E5M2 and BF16 blocks
    mixed, NaN in a BF16 block) on the kernel's BF16 loop, against a float64 GEMM of the emulation's
    own values; the backward's transposed views read in place."""
    from lowprec.methods.mor import SubTensorMoRQuantizer, subtensor_mor
    from lowprec.methods.mor_subtensor_fast import subtensor_mm, subtensor_operand

    q = SubTensorMoRQuantizer(block=(32, 32), mode="three_way")
    a, b = _data((64, 96), 31), _data((96, 96), 32)
    b[:32, :32] *= torch.logspace(-9, 0, 32, device=DEVICE)  # one block past E4M3's range
    b[40, 70] = float("nan")
    qa, qb = subtensor_operand(q, a), subtensor_operand(q, b)
    if transposed:  # b.T's operand from b's: views (the backward's reuse)
        qb = qb.t()
        b = b.t()
    assert {int(c) for c in qb.choice.unique()} >= {0, 2}
    calls = count_calls(kb, "block_scaled_mm")
    out = subtensor_mm(qa, qb, torch.float32)
    assert calls["n"] == 1
    va = subtensor_mor(a.cpu(), (32, 32), "three_way").values.double()
    vb = subtensor_mor(b.cpu(), (32, 32), "three_way").values.double()
    want = va @ vb.t()
    finite = want.isfinite()
    assert torch.equal(out.cpu().isfinite(), finite) and not bool(finite.all())  # the NaN's row or column
    assert sqnr_db(want[finite], out.double().cpu()[finite]) >= FLOOR_DB
    exact = (a.double().cpu() @ b.double().cpu().t())[finite]
    assert sqnr_db(exact, out.double().cpu()[finite]) < 60  # quantized


def _record_launches(monkeypatch) -> list:
    """Spies on the kernel's launches, recording each one's (SELECT, BF16 operands); a spy on the
    launch, not on the kernel, so that it sees the launches a ``triton_op`` makes on CUDA too."""
    launches, launch = [], kb._launch

    def spy(out, a_codes, b_codes, dec, cfg, select, rows, launcher, choices=None):
        launches.append((select, a_codes.dtype == torch.bfloat16))
        return launch(out, a_codes, b_codes, dec, cfg, select, rows, launcher, choices)

    monkeypatch.setattr(kb, "_launch", spy)
    return launches


def test_fp8_tiles_split_the_product_between_an_fp8_and_a_bf16_launch(monkeypatch):
    """With ``fp8_tiles``, the tiles whose two block-rows are flagged all-E4M3 multiply the FP8 copies
    (one launch on FP8 operands), the others the BF16 codes (a second launch): the product is the
    float64 one of the values either way, and each launch really ran its share."""
    g = torch.Generator().manual_seed(7)

    def operand(rows):
        codes = (torch.randn(rows, 256, generator=g) * 64).to(torch.float8_e4m3fn).float()
        codes[128:, 128:] = torch.randn(rows - 128, 128, generator=g) * 1e-3  # a BF16 block: off E4M3's grid
        scales = torch.rand(rows // 128, 2, generator=g) + 0.5
        scales[1, 1] = 1.0
        values = codes.double() / expand_blocks(scales, (rows, 256), (128, 128)).double()
        codes = codes.bfloat16().to(DEVICE)
        rows_fp8 = torch.tensor([1] + [0] * (rows // 128 - 1), dtype=torch.int8, device=DEVICE)
        return codes, scales.to(DEVICE), rows_fp8, values

    a, sa, fa, va = operand(256)
    b, sb, fb, vb = operand(384)
    launches = _record_launches(monkeypatch)
    tiles = (a.to(torch.float8_e4m3fn), fa, b.to(torch.float8_e4m3fn), fb)
    out = kb.block_scaled_mm(a, sa, (128, 128), b, sb, (128, 128), fp8_tiles=tiles)
    assert launches == [(1, False), (2, True)]
    want = va @ vb.t()
    assert sqnr_db(want, out.double().cpu()) >= FLOOR_DB
    plain = kb.block_scaled_mm(a, sa, (128, 128), b, sb, (128, 128))
    assert sqnr_db(plain.double().cpu(), out.double().cpu()) >= FLOOR_DB
    # the FP8 launch did compute its tile: with the flags cleared, the BF16 launch alone covers all
    none = torch.zeros_like(fa), torch.zeros_like(fb)
    out0 = kb.block_scaled_mm(a, sa, (128, 128), b, sb, (128, 128),
                              fp8_tiles=(tiles[0], none[0], tiles[2], none[1]))
    assert sqnr_db(want, out0.double().cpu()) >= FLOOR_DB
    with pytest.raises(ValueError, match="int8 of shape"):
        kb.block_scaled_mm(a, sa, (128, 128), b, sb, (128, 128), fp8_tiles=(tiles[0], fa[:1], tiles[2], fb))


def test_subtensor_mm_runs_all_e4m3_tiles_on_fp8(monkeypatch):
    """Sub-tensor MoR with 128x128 blocks: the tiles of block-rows that chose E4M3 throughout go to the
    FP8 launch, the rest to the BF16 one, and the product is the float64 one of the emulation's values."""
    from lowprec.methods.mor import BF16, E4M3, SubTensorMoRQuantizer, subtensor_mor
    from lowprec.methods.mor_subtensor_fast import subtensor_mm, subtensor_operand

    from lowprec.methods import mor_subtensor_fast as msf

    monkeypatch.setattr(msf, "FP8_TILES_ON_CUBLAS", False)  # the kernel's own FP8 launch
    launches = _record_launches(monkeypatch)
    q = SubTensorMoRQuantizer(mode="two_way")
    g = torch.Generator().manual_seed(41)
    a, b = (torch.randn(256, 256, generator=g).to(DEVICE) for _ in range(2))
    b[128:, :128] *= torch.logspace(-12, 0, 128, device=DEVICE)  # a block no FP8 format holds: BF16
    qa, qb = subtensor_operand(q, a), subtensor_operand(q, b)
    assert bool((qa.choice == E4M3).all()) and int(qb.choice[1, 0]) == BF16 and int(qb.choice[0, 0]) == E4M3
    out = subtensor_mm(qa, qb, torch.float32)
    assert launches == [(1, False), (2, True)]
    va = subtensor_mor(a.cpu(), (128, 128), "two_way").values.double()
    vb = subtensor_mor(b.cpu(), (128, 128), "two_way").values.double()
    assert sqnr_db(va @ vb.t(), out.double().cpu()) >= FLOOR_DB


def test_subtensor_mm_takes_the_all_e4m3_tiles_from_cublas_and_overwrites_the_others(monkeypatch):
    """With the all-E4M3 tiles on cuBLAS (``FP8_TILES_ON_CUBLAS``; here a stand-in for its block-scaled
    GEMM, the fp32 product of the E4M3 codes rounded to bf16 as cuBLAS's is), only the kernel's BF16
    launch runs: it overwrites the tiles that read a BF16 block with the float64 product of the
    emulation's values (or, the default, adds to them the K-blocks that read it) and leaves the
    all-E4M3 tiles as the stand-in made them, bit for bit."""
    from lowprec.methods import mor_subtensor_fast as msf
    from lowprec.methods.mor import SubTensorMoRQuantizer, subtensor_mor

    made, exact = [], []

    def cublas(a8, scale_a, kind_a, b8, scale_b, kind_b, out_dtype):
        assert (kind_a, kind_b) == ("128x128", "128x128") and a8.dtype == b8.dtype == torch.float8_e4m3fn
        exact.append(gemm.dequantized_mm(a8, scale_a, (128, 128), b8, scale_b, (128, 128)))
        made.append(exact[-1].to(torch.bfloat16))
        return made[-1].to(out_dtype)

    monkeypatch.setattr(msf, "fp8_mm", cublas)
    monkeypatch.setattr(msf, "_fp8_tiles_on_cublas", lambda a, b, a8, b8: msf.FP8_TILES_ON_CUBLAS)
    monkeypatch.setattr(msf, "MIXED_BLOCKS", False)  # first the whole tiles recomputed
    launches = _record_launches(monkeypatch)
    q = SubTensorMoRQuantizer(mode="two_way")
    g = torch.Generator().manual_seed(43)
    a, b = (torch.randn(256, 256, generator=g).to(DEVICE) for _ in range(2))
    b[128:, :128] *= torch.logspace(-12, 0, 128, device=DEVICE)  # a BF16 block: b's second block-row
    qa, qb = msf.subtensor_operand(q, a), msf.subtensor_operand(q, b)
    out = msf.subtensor_mm(qa, qb, torch.float32)
    assert launches == [(2, True)] and len(made) == 1
    va = subtensor_mor(a.cpu(), (128, 128), "two_way").values.double()
    vb = subtensor_mor(b.cpu(), (128, 128), "two_way").values.double()
    want = va @ vb.t()
    assert torch.equal(out[:, :128].cpu(), made[0][:, :128].float().cpu())   # all-E4M3 tiles: cuBLAS's
    assert sqnr_db(want[:, 128:], out[:, 128:].double().cpu()) >= FLOOR_DB  # the BF16 block's: the kernel's
    assert not torch.equal(out[:, 128:].cpu(), made[0][:, 128:].float().cpu())
    # MIXED_BLOCKS: cuBLAS's product of codes that are zero in the BF16 block sums the E4M3 blocks
    # alone, and the kernel adds the K-blocks that read the BF16 block, nothing else
    monkeypatch.setattr(msf, "MIXED_BLOCKS", True)
    del launches[:]
    mixed = msf.subtensor_mm(qa, qb, torch.float32)
    assert launches == [(3, True)] and len(made) == 2
    assert torch.equal(mixed[:, :128].cpu(), made[1][:, :128].float().cpu())
    # the rest: cuBLAS's bf16 sum of the E4M3 blocks plus the exact sum of the K-block with BF16 in b
    rest = made[1].double().cpu() + (want - exact[1].double().cpu())
    assert sqnr_db(rest[:, 128:], mixed[:, 128:].double().cpu()) >= FLOOR_DB
    assert not torch.equal(mixed[:, 128:].cpu(), made[1][:, 128:].float().cpu())  # the kernel added to them
    monkeypatch.setattr(msf, "FP8_TILES_ON_CUBLAS", False)
    del launches[:]
    assert sqnr_db(want, msf.subtensor_mm(qa, qb, torch.float32).double().cpu()) >= FLOOR_DB
    assert launches == [(1, False), (2, True)] and len(made) == 2


def test_the_rest_launch_names_bad_outputs_and_flags():
    codes = torch.zeros(256, 128, dtype=torch.bfloat16, device=DEVICE)
    scales, rows = torch.ones(2, 1, device=DEVICE), torch.ones(2, dtype=torch.int8, device=DEVICE)
    with pytest.raises(ValueError, match=r"out must be a contiguous \(256, 256\) tensor"):
        kb.block_scaled_mm_rest(torch.zeros(256, 128, device=DEVICE), codes, scales, (128, 128), codes, scales,
                                (128, 128), rows, rows)
    with pytest.raises(ValueError, match="b_rows must be int8 of shape"):
        kb.block_scaled_mm_rest(torch.zeros(256, 256, device=DEVICE), codes, scales, (128, 128), codes, scales,
                                (128, 128), rows, rows[:1])
    with pytest.raises(ValueError, match="only for bfloat16 codes"):
        kb.block_scaled_mm_rest(torch.zeros(256, 256, device=DEVICE), codes.to(torch.float8_e4m3fn), scales,
                                (128, 128), codes.to(torch.float8_e4m3fn), scales, (128, 128), rows, rows)
