"""Correctness of the MoR GEMM path on the GPU, before ``lowprec.bench.mor_linear`` times it: the
kernel against float64 GEMMs of the emulation's values for every partition and format combination,
QLinear's fused path against the emulated one (forward and both gradients, and one step under
``torch.cuda.set_sync_debug_mode("error")``), and the quantization kernel's codes, scales and
error against the torch reference. A failure is a row with ok False, never an exception: the
timings still say something.
"""

from __future__ import annotations

from lowprec.bench.mor_linear_arms import DEVICE, RAN
from lowprec.errors import error_text

CHECK_FIELDS = ["check", "partition", "backend", "formats", "ran", "sqnr_db", "floor_db", "ok"]
# (backend, (M, N, K), SQNR floor): ragged tiles and K-blocks for the Triton loop; shapes that
# torch._scaled_mm's row- and blockwise scalings take (bf16 output: a lower floor)
CHECK_SHAPES = [("triton", (200, 136, 264), 60.0), ("scaled_mm", (256, 384, 512), 40.0)]
QLINEAR_SHAPE = (256, 512, 384)  # tokens, in, out


def _emulated_values(torch, x, partition, block, scale, threshold):
    """float64 values the emulation multiplies (torch reference quantization, not the kernels)."""
    from lowprec.methods import mor
    x2d = x.float()
    qt = mor.quantize_e4m3(x2d, partition, block, scale)
    err = mor.mor_relative_error(x2d, qt.dequantize())
    e4 = mor.decide(err, threshold) == "e4m3"
    return (qt.dequantize() if e4 else x2d.to(torch.bfloat16).float()).double(), "e4m3" if e4 else "bf16"


def check_kernel(torch, kg, rows: list, block, scale, shape, backend: str, floor: float) -> None:
    """Every partition and format combination: the kernel against a float64 GEMM of the emulation's
    values. Thresholds 1 / 0 force E4M3 / BF16 (Gaussian errors are ~0.02)."""
    from lowprec.methods import mor
    from lowprec.numerics import sqnr_db
    m, n, k = shape
    gen = torch.Generator(device=DEVICE).manual_seed(7)
    a = torch.randn(m, k, device=DEVICE, generator=gen)
    b = (0.02 * torch.randn(k, n, device=DEVICE, generator=gen)).t()  # a transposed view, as W^T in dgrad
    for part in ("tensor", "channel", "block"):
        q = mor.MoRQuantizer(part, block, scale)
        oa, ob = q.gemm_operand(a), q.gemm_operand(b)
        for th_a, th_b in ((1.0, 1.0), (0.0, 1.0), (1.0, 0.0), (0.0, 0.0)):
            va, fa = _emulated_values(torch, a, part, block, scale, th_a)
            vb, fb = _emulated_values(torch, b, part, block, scale, th_b)
            info = torch.zeros(3, dtype=torch.int32, device=DEVICE)
            try:
                got = kg.mor_gemm(oa._replace(threshold=th_a), ob._replace(threshold=th_b), backend=backend, info=info)
                db = sqnr_db(va @ vb.t(), got.double())
                ran = RAN.get(int(info[2]), str(int(info[2])))
                want_ran = "bf16_loop" if "bf16" in (fa, fb) else ("fp8_loop" if backend == "triton" else "scaled_mm")
                ok = db > floor and ran == want_ran and info[:2].tolist() == [int(fa == "e4m3"), int(fb == "e4m3")]
            except Exception as exc:  # report and go on: the timings still say something
                db, ran, ok = float("nan"), f"error: {error_text(exc, 190)}", False
            rows.append({"check": f"kernel {m}x{n}x{k}", "partition": part, "backend": backend,
                         "formats": f"{fa}/{fb}", "ran": ran, "sqnr_db": f"{db:.1f}", "floor_db": floor, "ok": ok})


def check_qlinear(torch, rows: list, block, scale) -> None:
    """QLinear with a MoR recipe, per partition: the fused path (kernel GEMMs, counted) against the
    emulated one (LOWPREC_MOR_KERNEL off; on CUDA the compiled training path's fast path),
    forward and both gradients, on fp32 data and under bf16 autocast (training's: bf16 activations
    and gradients, an fp32 weight); then one fused step under torch.cuda.set_sync_debug_mode("error")
    (a host sync raises). An error is a failed row."""
    for autocast in (False, True):
        for part in ("tensor", "channel", "block"):
            try:
                rows.append(_check_qlinear_one(torch, part, block, scale, autocast))
            except Exception as exc:  # report and go on: the timings still say something
                rows.append({"check": _qlinear_check_name(autocast), "partition": part, "backend": "auto",
                             "formats": "", "ran": f"error: {error_text(exc, 290)}", "sqnr_db": "nan",
                             "floor_db": 45.0, "ok": False})


def _qlinear_check_name(autocast: bool) -> str:
    return "qlinear fused vs emulated (y, dx, dw)" + (", bf16 autocast" if autocast else "")


def _check_qlinear_one(torch, part: str, block, scale: str, autocast: bool = False) -> dict:
    import copy

    from torch import nn

    from lowprec import convert
    from lowprec.kernels import mor_gemm as kg
    from lowprec.methods import mor
    from lowprec.numerics import sqnr_db

    cfg = {"partition": part, "scale": scale, **({"block": list(block)} if part == "block" else {})}
    torch.manual_seed(0)
    tokens, d_in, d_out = QLINEAR_SHAPE
    base = nn.Sequential(nn.Linear(d_in, d_out)).to(DEVICE)
    fast, emu = copy.deepcopy(base), copy.deepcopy(base)
    convert(fast, mor.mor_recipe({**cfg, "gemm": "kernel"}))
    convert(emu, mor.mor_recipe(cfg))
    x, g = torch.randn(tokens, d_in, device=DEVICE), torch.randn(tokens, d_out, device=DEVICE)
    x[:, :8] *= 1e4  # eight huge features: X takes BF16 where a scale spans them, so formats mix

    infos, real = [], kg.mor_gemm

    def counting(a, b, **kw):
        kw.setdefault("info", torch.zeros(3, dtype=torch.int32, device=DEVICE))
        infos.append(kw["info"])
        return real(a, b, **kw)

    def run(model):
        model.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            y = model(xi)
        y.backward(g.to(y.dtype))
        return y.detach(), xi.grad, model[0].weight.grad

    kg.mor_gemm = counting
    try:
        got = run(fast)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            run(fast)
            sync_free = True
        except RuntimeError as exc:
            sync_free = f"host sync: {exc}"[:200]
        finally:
            torch.cuda.set_sync_debug_mode(0)
    finally:
        kg.mor_gemm = real
    mor.USE_KERNEL = False
    try:
        want = run(emu)
    finally:
        mor.USE_KERNEL = True
    ran = ",".join(RAN.get(int(i[2]), "?") for i in infos[:3])
    dbs = [sqnr_db(w.double(), f.double()) for w, f in zip(want, got)]
    fmts = ",".join(f"{int(i[0])}{int(i[1])}" for i in infos[:3])
    return {"check": _qlinear_check_name(autocast), "partition": part, "backend": "auto",
            "formats": f"e4m3 flags a/b per gemm {fmts}", "ran": f"{ran}; sync_free={sync_free}",
            "sqnr_db": "/".join(f"{d:.1f}" for d in dbs), "floor_db": 45.0,
            "ok": len(infos) == 6 and min(dbs) > 45.0 and sync_free is True}



def matches_reference(torch, km, x, partition, block, scale) -> bool:
    from lowprec.methods import mor
    codes, scales, err = km.mor_quantize_e4m3(x, partition, block, scale)
    ref = mor.quantize_e4m3(x, partition, block, scale)
    want = ref.codes.to(torch.float8_e4m3fn)
    same = torch.equal(codes.view(torch.uint8), want.view(torch.uint8)) and torch.equal(scales, ref.scale)
    ref_err = mor.mor_relative_error(x, ref.dequantize())
    del ref, want
    return bool(same and abs(float(err) - ref_err) <= 1e-5 * abs(ref_err))
