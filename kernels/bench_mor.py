"""GPU benchmark: a MoR linear layer's forward + backward, decision included, against a BF16
linear and an FP8 (E4M3, per-tensor current scaling) linear, after a correctness check of the MoR
GEMM kernel on the same GPU.

    PYTHONUNBUFFERED=1 python -m lowprec.kernels.bench_mor --hidden 8192 --out results/mor/linear_h200.csv

A square linear layer (hidden x hidden weight) on ``--tokens`` tokens runs its three GEMMs:
fprop Y = X W^T, dgrad dX = dY W, wgrad dW = dY^T X. X, W, dY are bf16. Per configuration the CSV
records the median step time (triton.testing.do_bench), the time spent before the GEMMs
(quantization and, for MoR, the decision), its share of the step, the GEMM time alone on
pre-quantized operands, TFLOP/s, the speed-up over BF16 and the ratio to FP8 current scaling,
which GEMMs ran in FP8 and on what, every operand's MoR error and format, whether the quantization
kernel's codes, scales and error equal the torch reference (lowprec.methods.mor) for X, and for MoR the
time before the GEMMs beyond FP8 current scaling's own quantization (decide_extra_ms and its share
of the step: what deciding costs).

Methods:
  bf16             three BF16 matmuls
  fp8_current      X, W, dY quantized once to E4M3 with per-tensor current scaling
                   (lowprec.kernels.quantize), codes transposed for the backward GEMMs, three
                   torch._scaled_mm calls with bf16 output (the fp8_tensorwise_current recipe)
  mor_<p>          QLinear's path: every GEMM quantizes its two operand views
                   (MoRQuantizer.fused_gemm: lowprec.kernels.mor_quant, transposed views read
                   through their strides) and multiplies them with lowprec.kernels.mor_gemm, which
                   reads the decisions on the device (no host sync); fp32 output, as fused_gemm
                   returns. Six quantizations per step.
  mor_<p>_once     the same kernels arranged as fp8_current is: X, W, dY quantized and decided once,
                   the backward GEMMs reading transposed copies of their codes, bf16 output (tensor
                   and square-block partitions; per-row scales differ between a tensor and its
                   transpose, so channel quantizes the six views). A transposed view's decision is
                   its tensor's: the same error up to fp32 summation order.
  mor_<p>_hostsync the previous implementation: each decision read by the host (one sync per
                   operand), per-tensor / per-row E4M3 GEMMs on torch._scaled_mm, block-scaled ones
                   in BF16 after upcasting.
``--thresholds 0.045,0`` also times the all-BF16 path (a threshold of 0 rejects any error):
Gaussian data gives E4M3 everywhere (error ~2.3 %).

Before the timings, ``check`` rows (printed and written to <out>_check.csv) compare the GEMM kernel
with float64 GEMMs of the emulation's values (torch reference quantization) for every partition and
format combination, on both backends, and QLinear's fused path with the emulated one (forward and
both gradients) including a step under torch.cuda.set_sync_debug_mode("error"). After the layer
timings, the GEMM alone (<out>_gemm.csv): torch BF16, torch._scaled_mm tensorwise, and the MoR
kernel per partition, backend and accumulation, FP8 and BF16 loops. ``--budget-s`` skips what is
left once the run has taken that long (the skipped rows are listed). A summary table is printed
last. A JSON provenance file (GPU, driver, CUDA, torch, triton, git commit, UTC time) is written
beside the CSV.
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path
from typing import NamedTuple

from lowprec.bench.common import (add_do_bench_args, bench_parser, do_bench_median, fail, gpu_provenance,
                                  parse_int_list, parse_list, require_cuda_triton, write_provenance)

PROG = "bench_mor"
DEVICE = "cuda"

DEFAULT_HIDDEN = "8192"
DEFAULT_TOKENS = 8192
MOR_PARTITIONS = ("tensor", "block", "channel")

FIELDS = [
    "method", "partition", "scale", "block", "threshold", "tokens", "hidden", "backend", "out_dtype", "step_ms",
    "quant_ms", "quant_share", "gemm_ms", "tflops", "speedup_vs_bf16", "vs_fp8_current", "fp8_gemms", "formats",
    "rel_err_x", "rel_err_w", "rel_err_dy", "matches_ref", "decide_extra_ms", "decide_extra_share",
]
GEMM_FIELDS = ["variant", "partition", "backend", "fp8_accum", "loop", "m", "n", "k", "ms", "tflops",
               "vs_scaled_mm_tensorwise", "vs_bf16"]
CHECK_FIELDS = ["check", "partition", "backend", "formats", "ran", "sqnr_db", "floor_db", "ok"]
# (backend, (M, N, K), SQNR floor): ragged tiles and K-blocks for the Triton loop; shapes that
# torch._scaled_mm's row- and blockwise scalings take (bf16 output: a lower floor)
CHECK_SHAPES = [("triton", (200, 136, 264), 60.0), ("scaled_mm", (256, 384, 512), 40.0)]
QLINEAR_SHAPE = (256, 512, 384)  # tokens, in, out


def _parse(argv):
    p = bench_parser("lowprec.kernels.bench_mor", __doc__)
    p.add_argument("--hidden", default=DEFAULT_HIDDEN, help=f"comma-separated hidden sizes (default {DEFAULT_HIDDEN})")
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help=f"tokens per step (default {DEFAULT_TOKENS})")
    p.add_argument("--partitions", default=",".join(MOR_PARTITIONS), help="MoR partitions to time")
    p.add_argument("--block", default="128x128", help="square block for partition block (default 128x128)")
    p.add_argument("--scale", default="gam", choices=("gam", "e8", "fp32"), help="MoR scale rule (default gam)")
    p.add_argument("--thresholds", default="0.045,0", help="comma-separated MoR thresholds (default 0.045,0)")
    add_do_bench_args(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, default=300.0,
                   help="skip the remaining timings once the run has taken this long (default 300)")
    p.add_argument("--precompile", type=int, default=3,
                   help="processes that compile the timed kernels while the checks run (default 3, one per "
                        "partition; 0: compile on first use)")
    p.add_argument("--no-check", action="store_true", help="skip the correctness checks")
    p.add_argument("--no-hostsync", action="store_true", help="skip the previous (host-sync) MoR arms")
    p.add_argument("--no-gemm", action="store_true", help="skip the GEMM-alone timings")
    return p.parse_args(argv)


def _provenance(timer: str) -> dict:
    return gpu_provenance(timer=timer, flops="3 GEMMs x 2 * tokens * hidden^2",
                          data="X, dY ~ N(0, 1), W ~ N(0, 0.02^2), bf16")


class _Budget:
    def __init__(self, seconds: float):
        self.t0, self.seconds, self.skipped = time.monotonic(), seconds, []

    def allows(self, what: str) -> bool:
        if time.monotonic() - self.t0 <= self.seconds:
            return True
        self.skipped.append(what)
        print(f"# skipped (budget {self.seconds:.0f} s spent): {what}", flush=True)
        return False

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


# ----------------------------------------------------------------------------------------------
# The linear-layer variants of the previous implementation (host-sync decisions). Everything here
# works on any device except torch._scaled_mm.


class Operand(NamedTuple):
    hp: "object"            # bf16 tensor in its GEMM orientation (reduction dim last)
    codes: "object"         # float8_e4m3fn in the same orientation, or None where no FP8 GEMM reads it
    scales: "object"        # fp32 encode-scale grid matching codes
    fmt: str                # "e4m3" | "bf16"
    err: float
    up: "object" = None     # BF16 values a BF16 GEMM multiplies, where computed ahead


def _inv_scale(op: Operand, right: bool):
    inv = 1.0 / op.scales.float()
    if op.scales.numel() == 1:
        return inv.reshape(())
    # row-wise scaling: (M, 1) for the left operand, (1, N) for the right one
    return inv.reshape(1, -1).contiguous() if right else inv.reshape(-1, 1).contiguous()


def _fp8_gemm(a: Operand, b: Operand):
    """a (M, R) @ b (N, R)^T on FP8 tensor cores; b's codes go in column-major."""
    import torch
    return torch._scaled_mm(a.codes, b.codes.t(), scale_a=_inv_scale(a, False), scale_b=_inv_scale(b, True),
                            out_dtype=torch.bfloat16)


def _transposed(op: Operand) -> Operand:
    """The same quantized tensor in the other orientation (per-tensor scales): FP8 GEMMs need
    row-major left and column-major right operands, so the codes are copied transposed."""
    return Operand(op.hp.t(), op.codes.t().contiguous(), op.scales.t().contiguous(), op.fmt, op.err)


class HostSyncMoRLinear:
    """Forward + backward of y = x W^T with tensor-level MoR on all six operand slots, each decision
    read by the host."""

    def __init__(self, partition: str, block, scale: str, threshold: float):
        from lowprec.kernels import mor_quant as km
        if partition == "block" and block[0] != block[1]:
            raise ValueError("bench_mor: blocks must be square (a transposed operand reuses its blocks)")
        self.km, self.partition, self.block, self.scale, self.threshold = km, partition, tuple(block), scale, threshold

    def operand(self, t) -> Operand:
        codes, scales, err, fmt = self.km.mor_decide(t, self.threshold, self.partition, self.block, self.scale)
        return Operand(t, codes, scales, fmt, float(err))

    def operands(self, x, w, dy) -> dict:
        """{slot: Operand} for fprop.x, fprop.w, dgrad.dy, dgrad.w, wgrad.dy, wgrad.x."""
        if self.partition == "channel":
            return {"fprop.x": self.operand(x), "fprop.w": self.operand(w), "dgrad.dy": self.operand(dy),
                    "dgrad.w": self.operand(w.t().contiguous()), "wgrad.dy": self.operand(dy.t().contiguous()),
                    "wgrad.x": self.operand(x.t().contiguous())}
        ox, ow, ody = self.operand(x), self.operand(w), self.operand(dy)
        if self.partition == "block":
            # Block-scaled E4M3 only ever feeds BF16 GEMMs: upcast each tensor once, reuse transposed.
            from lowprec.numerics.scaling import apply_blocks
            import torch
            ox, ow, ody = (o._replace(up=o.hp if o.fmt != "e4m3" else
                                      apply_blocks(o.codes.float(), o.scales, self.block, torch.div).to(torch.bfloat16))
                           for o in (ox, ow, ody))
            tx, tw, tdy = (Operand(o.hp.t(), None, None, o.fmt, o.err, o.up.t()) for o in (ox, ow, ody))
        else:
            tx, tw, tdy = (_transposed(o) if o.fmt == "e4m3" else Operand(o.hp.t(), None, None, o.fmt, o.err)
                           for o in (ox, ow, ody))
        return {"fprop.x": ox, "fprop.w": ow, "dgrad.dy": ody, "dgrad.w": tw, "wgrad.dy": tdy, "wgrad.x": tx}

    def _fp8(self, a: Operand, b: Operand) -> bool:
        return a.fmt == b.fmt == "e4m3" and self.partition in ("tensor", "channel")

    def _bf16(self, op: Operand):
        if op.up is not None:
            return op.up
        if op.fmt != "e4m3":
            return op.hp
        import torch
        # per-tensor (1, 1) or per-row (M, 1) scales broadcast over the codes
        return (op.codes.float() / op.scales).to(torch.bfloat16)

    def gemm(self, a: Operand, b: Operand):
        if self._fp8(a, b):
            return _fp8_gemm(a, b)
        return self._bf16(a) @ self._bf16(b).t()

    def gemms(self, ops: dict):
        return (self.gemm(ops["fprop.x"], ops["fprop.w"]), self.gemm(ops["dgrad.dy"], ops["dgrad.w"]),
                self.gemm(ops["wgrad.dy"], ops["wgrad.x"]))

    def step(self, x, w, dy):
        return self.gemms(self.operands(x, w, dy))

    def summary(self, ops: dict) -> dict:
        fp8 = sum(self._fp8(ops[a], ops[b]) for a, b in _PAIRS)
        return {"fp8_gemms": fp8, "formats": " ".join(f"{k}:{v.fmt}" for k, v in ops.items()),
                "rel_err_x": ops["fprop.x"].err, "rel_err_w": ops["fprop.w"].err, "rel_err_dy": ops["dgrad.dy"].err}


class Fp8CurrentLinear:
    """E4M3 everywhere, per-tensor current scaling, every GEMM on FP8 tensor cores."""

    def __init__(self):
        from lowprec.kernels import quantize as kq
        self.kq = kq

    def operands(self, x, w, dy) -> dict:
        ops = {}
        for name, t in (("x", x), ("w", w), ("dy", dy)):
            codes, scale = self.kq.quantize_fp8(t, "e4m3", "tensor")
            ops[name] = Operand(t, codes, scale, "e4m3", float("nan"))
        return {"fprop.x": ops["x"], "fprop.w": ops["w"], "dgrad.dy": ops["dy"], "dgrad.w": _transposed(ops["w"]),
                "wgrad.dy": _transposed(ops["dy"]), "wgrad.x": _transposed(ops["x"])}

    def gemms(self, ops: dict):
        return (_fp8_gemm(ops["fprop.x"], ops["fprop.w"]), _fp8_gemm(ops["dgrad.dy"], ops["dgrad.w"]),
                _fp8_gemm(ops["wgrad.dy"], ops["wgrad.x"]))

    def step(self, x, w, dy):
        return self.gemms(self.operands(x, w, dy))


def bf16_step(x, w, dy):
    return x @ w.t(), dy @ w, dy.t() @ x


_PAIRS = (("fprop.x", "fprop.w"), ("dgrad.dy", "dgrad.w"), ("wgrad.dy", "wgrad.x"))


# ----------------------------------------------------------------------------------------------
# MoR with the decision on the device (lowprec.kernels.mor_gemm)


class DeviceMoRLinear:
    """mode "layer": QLinear's fused path, MoRQuantizer.fused_gemm on each GEMM's operand views
    (fp32 output). mode "once": X, W, dY quantized once, transposed code copies for the backward
    GEMMs (tensor and square blocks; channel quantizes the six views), bf16 output."""

    def __init__(self, partition: str, block, scale: str, threshold: float, mode: str):
        from lowprec.methods import mor
        from lowprec.kernels import mor_gemm as kg
        if partition == "block" and block[0] != block[1]:
            raise ValueError("bench_mor: blocks must be square (a transposed operand reuses its blocks)")
        self.kg, self.mode = kg, mode
        self.q = mor.MoRQuantizer(partition, tuple(block), scale, threshold, gemm="kernel")
        self.partition = partition

    @staticmethod
    def _views(x, w, dy) -> dict:
        return {"fprop.x": x, "fprop.w": w, "dgrad.dy": dy, "dgrad.w": w.t(), "wgrad.dy": dy.t(), "wgrad.x": x.t()}

    def _transposed(self, op):
        rows, k = op.hp.shape
        block = (op.block[1], op.block[0]) if op.block != (rows, k) else (k, rows)
        return op._replace(hp=op.hp.t(), codes=op.codes.t().contiguous(), scales=op.scales.t(), block=block)

    def operands(self, x, w, dy) -> dict:
        if self.mode == "layer" or self.partition == "channel":
            return {k: self.q.gemm_operand(v) for k, v in self._views(x, w, dy).items()}
        ox, ow, ody = (self.q.gemm_operand(t) for t in (x, w, dy))
        return {"fprop.x": ox, "fprop.w": ow, "dgrad.dy": ody, "dgrad.w": self._transposed(ow),
                "wgrad.dy": self._transposed(ody), "wgrad.x": self._transposed(ox)}

    def gemms(self, ops: dict, infos=None):
        import torch
        out = torch.float32 if self.mode == "layer" else torch.bfloat16
        return tuple(self.kg.mor_gemm(ops[a], ops[b], out_dtype=out, info=None if infos is None else infos[i])
                     for i, (a, b) in enumerate(_PAIRS))

    def step(self, x, w, dy):
        if self.mode == "layer":  # exactly what QLinear.gemm calls on CUDA, coverage counts included
            from lowprec.recipes import OperandCall
            views, q = self._views(x, w, dy), self.q
            calls = {s: OperandCall(None, s.split(".")[0], s.split(".")[1], 0, True) for s in views}
            return tuple(q.fused_gemm(q, views[a], views[b], calls[a], calls[b]) for a, b in _PAIRS)
        return self.gemms(self.operands(x, w, dy))

    def summary(self, ops: dict) -> dict:
        import torch
        infos = torch.zeros(3, 3, dtype=torch.int32, device=ops["fprop.x"].hp.device)
        self.gemms(ops, infos)
        infos = infos.tolist()
        fmts = {k: "e4m3" if float(o.rel_error) <= o.threshold else "bf16" for k, o in ops.items()}
        return {"fp8_gemms": sum(i[2] in (1, 3) for i in infos), "backend": "/".join(_RAN[i[2]] for i in infos),
                "formats": " ".join(f"{k}:{v}" for k, v in fmts.items()),
                **{f"rel_err_{s}": float(ops[k].rel_error) for s, k in (("x", "fprop.x"), ("w", "fprop.w"),
                                                                         ("dy", "dgrad.dy"))}}


_RAN = {1: "fp8_loop", 2: "bf16_loop", 3: "scaled_mm"}


# ----------------------------------------------------------------------------------------------
# Correctness on the GPU


def _emulated_values(torch, x, partition, block, scale, threshold):
    """float64 values the emulation multiplies (torch reference quantization, not the kernels)."""
    from lowprec.methods import mor
    x2d = x.float()
    qt = mor.quantize_e4m3(x2d, partition, block, scale)
    err = mor.mor_relative_error(x2d, qt.dequantize())
    e4 = mor.decide(err, threshold) == "e4m3"
    return (qt.dequantize() if e4 else x2d.to(torch.bfloat16).float()).double(), "e4m3" if e4 else "bf16"


def _check_kernel(torch, kg, rows: list, block, scale, shape, backend: str, floor: float) -> None:
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
                ran = _RAN.get(int(info[2]), str(int(info[2])))
                want_ran = "bf16_loop" if "bf16" in (fa, fb) else ("fp8_loop" if backend == "triton" else "scaled_mm")
                ok = db > floor and ran == want_ran and info[:2].tolist() == [int(fa == "e4m3"), int(fb == "e4m3")]
            except Exception as exc:  # report and go on: the timings still say something
                db, ran, ok = float("nan"), f"error: {type(exc).__name__}: {exc}"[:200], False
            rows.append({"check": f"kernel {m}x{n}x{k}", "partition": part, "backend": backend,
                         "formats": f"{fa}/{fb}", "ran": ran, "sqnr_db": f"{db:.1f}", "floor_db": floor, "ok": ok})


def _check_qlinear(torch, rows: list, block, scale) -> None:
    """QLinear with a MoR recipe, per partition: the fused path (kernel GEMMs, counted) against the
    emulated one (LOWPREC_MOR_KERNEL off), forward and both gradients; then one fused step under
    torch.cuda.set_sync_debug_mode("error") (a host sync raises). An error is a failed row."""
    for part in ("tensor", "channel", "block"):
        try:
            rows.append(_check_qlinear_one(torch, part, block, scale))
        except Exception as exc:  # report and go on: the timings still say something
            rows.append({"check": "qlinear fused vs emulated (y, dx, dw)", "partition": part, "backend": "auto",
                         "ran": f"error: {type(exc).__name__}: {exc}"[:300], "ok": False})


def _check_qlinear_one(torch, part: str, block, scale: str) -> dict:
    import copy

    from torch import nn

    from lowprec import convert
    from lowprec.methods import mor
    from lowprec.kernels import mor_gemm as kg
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
        y = model(xi)
        y.backward(g)
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
    ran = ",".join(_RAN.get(int(i[2]), "?") for i in infos[:3])
    dbs = [sqnr_db(w.double(), f.double()) for w, f in zip(want, got)]
    fmts = ",".join(f"{int(i[0])}{int(i[1])}" for i in infos[:3])
    return {"check": "qlinear fused vs emulated (y, dx, dw)", "partition": part, "backend": "auto",
            "formats": f"e4m3 flags a/b per gemm {fmts}", "ran": f"{ran}; sync_free={sync_free}",
            "sqnr_db": "/".join(f"{d:.1f}" for d in dbs), "floor_db": 45.0,
            "ok": len(infos) == 6 and min(dbs) > 45.0 and sync_free is True}


# ----------------------------------------------------------------------------------------------


def _matches_reference(torch, km, x, partition, block, scale) -> bool:
    from lowprec.methods import mor
    codes, scales, err = km.mor_quantize_e4m3(x, partition, block, scale)
    ref = mor.quantize_e4m3(x, partition, block, scale)
    want = ref.codes.to(torch.float8_e4m3fn)
    same = torch.equal(codes.view(torch.uint8), want.view(torch.uint8)) and torch.equal(scales, ref.scale)
    ref_err = mor.mor_relative_error(x, ref.dequantize())
    del ref, want
    return bool(same and abs(float(err) - ref_err) <= 1e-5 * abs(ref_err))


_GEMM_VARIANTS = [("tensor", "triton", "precise"), ("tensor", "triton", "fast"), ("tensor", "scaled_mm", "precise"),
                  ("block", "triton", "precise"), ("block", "scaled_mm", "precise"),
                  ("channel", "triton", "precise"), ("channel", "scaled_mm", "precise")]


def _data(torch, tokens: int, h: int, seed: int):
    gen = torch.Generator(device=DEVICE).manual_seed(seed + h)
    x = torch.randn(tokens, h, device=DEVICE, generator=gen).to(torch.bfloat16)
    w = (0.02 * torch.randn(h, h, device=DEVICE, generator=gen)).to(torch.bfloat16)
    dy = torch.randn(tokens, h, device=DEVICE, generator=gen).to(torch.bfloat16)
    return x, w, dy


def _warm(part: str, block, scale: str, tokens: int, hidden: list, thresholds: list, seed: int) -> None:
    """Runs once, untimed, everything the timings will run for one partition, so that its Triton
    kernels are compiled (into Triton's on-disk cache) in a process of its own while the main one
    runs the checks: compiling takes longer than timing here."""
    import torch
    from lowprec.methods import mor
    from lowprec.kernels import mor_gemm as kg

    for h in hidden:
        x, w, dy = _data(torch, tokens, h, seed)
        if part == "tensor":
            Fp8CurrentLinear().step(x, w, dy)
        for mode in ("once", "layer"):
            for th in thresholds:
                lin = DeviceMoRLinear(part, block, scale, th, mode)
                lin.step(x, w, dy)
                lin.gemms(lin.operands(x, w, dy))
        if h == hidden[0]:
            for p, backend, accum in _GEMM_VARIANTS:
                if p == part:
                    q = mor.MoRQuantizer(p, block, scale)
                    oa, ob = q.gemm_operand(x), q.gemm_operand(w)
                    for th in (1.0, 0.0):
                        kg.mor_gemm(oa._replace(threshold=th), ob._replace(threshold=th), out_dtype=torch.bfloat16,
                                    fp8_accum=accum, backend=backend)
        torch.cuda.synchronize()
        del x, w, dy
        torch.cuda.empty_cache()


def _start_warmers(args, partitions, block, hidden, thresholds) -> list:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    procs = [ctx.Process(target=_warm, args=(p, block, args.scale, args.tokens, hidden, thresholds, args.seed),
                         name=f"warm-{p}") for p in partitions[:args.precompile]]
    for pr in procs:
        pr.start()
    return procs


def _join_warmers(procs: list, budget) -> None:
    for pr in procs:
        pr.join(timeout=max(budget.seconds - budget.elapsed(), 1.0))
        if pr.is_alive():
            pr.terminate()
            pr.join()
        print(f"# {pr.name}: exit code {pr.exitcode}, {budget.elapsed():.0f} s so far", flush=True)


def _gemm_rows(torch, bench, kg, x, w, block, scale, budget) -> list:
    """The GEMM alone at (tokens, hidden, hidden): torch BF16, torch._scaled_mm tensorwise, and the
    MoR kernel per partition / backend / accumulation, FP8 loop (threshold 1) and BF16 loop (0)."""
    from lowprec.methods import mor
    m, k = x.shape
    n = w.shape[0]
    flops = 2 * m * n * k
    rows = []

    def add(variant, ms, **kw):
        rows.append({"variant": variant, "m": m, "n": n, "k": k, "ms": ms, **kw})

    add("torch_bf16", bench(lambda: x @ w.t()))
    a8, sa = mor.MoRQuantizer("tensor").gemm_operand(x)[1:3]
    b8, sb = mor.MoRQuantizer("tensor").gemm_operand(w)[1:3]
    ia, ib = sa.reciprocal().reshape(()), sb.reciprocal().reshape(())
    add("scaled_mm_tensorwise", bench(lambda: torch._scaled_mm(a8, b8.t(), scale_a=ia, scale_b=ib,
                                                               out_dtype=torch.bfloat16)), backend="cublas")
    add("scaled_mm_tensorwise_fast", bench(lambda: torch._scaled_mm(a8, b8.t(), scale_a=ia, scale_b=ib,
                                                                    out_dtype=torch.bfloat16, use_fast_accum=True)),
        backend="cublas", fp8_accum="fast")
    for part, backend, accum in _GEMM_VARIANTS:
        q = mor.MoRQuantizer(part, block, scale)
        oa, ob = q.gemm_operand(x), q.gemm_operand(w)
        for th, loop in ((1.0, "fp8"), (0.0, "bf16")):
            name = f"mor_{part}_{backend}_{accum}_{loop}"
            if not budget.allows(f"gemm {name}"):
                continue
            info = torch.zeros(3, dtype=torch.int32, device=DEVICE)
            args = (oa._replace(threshold=th), ob._replace(threshold=th))
            kw = dict(out_dtype=torch.bfloat16, fp8_accum=accum, backend=backend, info=info)
            try:
                ms = bench(lambda: kg.mor_gemm(*args, **kw))
                ran = _RAN.get(int(info[2]), "?")
            except Exception as exc:
                print(f"# gemm {name}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            add(name, ms, partition=part, backend=backend, fp8_accum=accum, loop=ran)
        del oa, ob
    ref = next(r["ms"] for r in rows if r["variant"] == "scaled_mm_tensorwise")
    bf = rows[0]["ms"]
    for r in rows:
        r["tflops"] = f"{flops / r['ms'] / 1e9:.1f}"
        r["vs_scaled_mm_tensorwise"] = f"{ref / r['ms']:.3f}"
        r["vs_bf16"] = f"{bf / r['ms']:.3f}"
        r["ms"] = f"{r['ms']:.4f}"
    return rows


def main(argv=None) -> int:
    args = _parse(argv)
    torch, _ = require_cuda_triton(PROG, "tests/test_kernels_mor.py, tests/test_kernels_mor_gemm.py")
    if not hasattr(torch, "_scaled_mm"):
        fail(PROG, f"torch {torch.__version__} has no torch._scaled_mm")
    if torch.cuda.get_device_capability() < (8, 9):
        fail(PROG, f"FP8 GEMMs need compute capability >= 8.9, got {torch.cuda.get_device_capability()}")
    from lowprec.kernels import mor_gemm as kg
    from lowprec.kernels import mor_quant as km

    hidden = parse_int_list(PROG, "--hidden", args.hidden)
    thresholds = parse_list(PROG, "--thresholds", args.thresholds, float)
    try:
        br, bc = (int(v) for v in args.block.lower().split("x"))
    except ValueError as exc:
        fail(PROG, f"bad --block: {exc}")
    if any(h % 16 for h in hidden) or args.tokens % 16:
        fail(PROG, "hidden sizes and tokens must be multiples of 16 (cuBLASLt FP8 GEMMs)")
    partitions = [p.strip() for p in args.partitions.split(",") if p.strip()]
    if not set(partitions) <= set(MOR_PARTITIONS):
        fail(PROG, f"--partitions: unknown partition in {partitions}; known: {MOR_PARTITIONS}")
    block = (br, bc)
    budget = _Budget(args.budget_s)

    out = Path(args.out)
    bench, timer = do_bench_median(args.warmup, args.rep)
    write_provenance(out.with_suffix(".json"), _provenance(timer))
    # compile the timed arms' kernels in parallel with the checks (nothing is timed meanwhile)
    warmers = _start_warmers(args, partitions, block, hidden, thresholds) if args.precompile else []

    checks = []
    if not args.no_check:
        for backend, shape, floor in CHECK_SHAPES:
            _check_kernel(torch, kg, checks, block, args.scale, shape, backend, floor)
        _check_qlinear(torch, checks, block, args.scale)
        _write(out.with_name(out.stem + "_check.csv"), CHECK_FIELDS, checks)
        for r in checks:
            print(f"check {'PASS' if r['ok'] else 'FAIL'} {r['check']:40s} {r['partition']:8s} {r['backend']:9s} "
                  f"{r['formats']:24s} ran={r['ran']} sqnr={r['sqnr_db']} dB (floor {r['floor_db']})", flush=True)
        print(f"# checks: {sum(r['ok'] for r in checks)}/{len(checks)} pass, {budget.elapsed():.0f} s so far",
              flush=True)

    _join_warmers(warmers, budget)
    all_rows, gemm_rows = [], []
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        for h in hidden:
            x, w, dy = _data(torch, args.tokens, h, args.seed)
            flops = 3 * 2 * args.tokens * h * h
            base = {"tokens": args.tokens, "hidden": h}
            rows = []

            def emit(row):
                row.update(base)
                rows.append(row)
                _finish(row, flops, rows)
                writer.writerow({k: row.get(k, "") for k in FIELDS})
                fh.flush()
                print(_line(row), flush=True)

            bf16_ms = bench(lambda: bf16_step(x, w, dy))
            emit({"method": "bf16", "step_ms": bf16_ms, "quant_ms": 0.0, "gemm_ms": bf16_ms, "fp8_gemms": 0,
                  "backend": "torch", "out_dtype": "bf16"})
            fp8 = Fp8CurrentLinear()
            ops = fp8.operands(x, w, dy)
            emit({"method": "fp8_current", "partition": "tensor", "scale": "fp32", "backend": "scaled_mm",
                  "out_dtype": "bf16", "step_ms": bench(lambda: fp8.step(x, w, dy)),
                  "quant_ms": bench(lambda: fp8.operands(x, w, dy)), "gemm_ms": bench(lambda: fp8.gemms(ops)),
                  "fp8_gemms": 3})
            del ops

            for part in partitions:
                match = "" if args.no_check else str(_matches_reference(torch, km, x, part, block, args.scale))
                common = {"partition": part, "scale": args.scale, "block": f"{br}x{bc}" if part == "block" else "",
                          "matches_ref": match}
                for mode, suffix, out_dtype in (("once", "_once", "bf16"), ("layer", "", "fp32")):
                    for th in thresholds:
                        name = f"mor_{part}{suffix} th={th}"
                        if not budget.allows(f"h={h} {name}"):
                            continue
                        try:
                            lin = DeviceMoRLinear(part, block, args.scale, th, mode)
                            ops = lin.operands(x, w, dy)
                            step_ms = bench(lambda: lin.step(x, w, dy))
                            emit({**common, "method": f"mor_{part}{suffix}", "threshold": th,
                                  "out_dtype": out_dtype, "step_ms": step_ms,
                                  "quant_ms": bench(lambda: lin.operands(x, w, dy)),
                                  "gemm_ms": bench(lambda: lin.gemms(ops)), **lin.summary(ops)})
                        except Exception as exc:  # one broken arm must not cost the others
                            print(f"# error in {name}: {type(exc).__name__}: {str(exc)[:500]}", flush=True)
                        ops = None
                        torch.cuda.empty_cache()

            if not args.no_gemm and h == hidden[0]:
                gemm_rows = _gemm_rows(torch, bench, kg, x, w, block, args.scale, budget)
                _write(out.with_name(out.stem + "_gemm.csv"), GEMM_FIELDS, gemm_rows)
                for r in gemm_rows:
                    print(f"gemm {r['variant']:42s} {r.get('loop', ''):10s} {r['ms']:>8s} ms {r['tflops']:>7s} TFLOP/s  "
                          f"x{r['vs_scaled_mm_tensorwise']} of scaled_mm tensorwise", flush=True)

            if not args.no_hostsync:
                for part in partitions:
                    if not budget.allows(f"h={h} mor_{part}_hostsync"):
                        continue
                    try:
                        lin = HostSyncMoRLinear(part, block, args.scale, thresholds[0])
                        ops = lin.operands(x, w, dy)
                        emit({"method": f"mor_{part}_hostsync", "partition": part, "scale": args.scale,
                              "block": f"{br}x{bc}" if part == "block" else "", "threshold": thresholds[0],
                              "backend": "host", "out_dtype": "bf16", "step_ms": bench(lambda: lin.step(x, w, dy)),
                              "quant_ms": bench(lambda: lin.operands(x, w, dy)),
                              "gemm_ms": bench(lambda: lin.gemms(ops)), **lin.summary(ops)})
                    except Exception as exc:
                        print(f"# error in mor_{part}_hostsync: {type(exc).__name__}: {str(exc)[:500]}", flush=True)
                    ops = None
                    torch.cuda.empty_cache()
            all_rows.extend(rows)
            del x, w, dy
            torch.cuda.empty_cache()

    print(f"# wrote {out}, {out.with_suffix('.json')} and the _check / _gemm CSVs beside it; "
          f"{budget.elapsed():.0f} s", flush=True)
    if budget.skipped:
        print(f"# skipped for the budget: {'; '.join(budget.skipped)}", flush=True)
    _summary(all_rows, gemm_rows, checks)
    return 0


def _finish(row: dict, flops: int, rows: list) -> None:
    """Ratios to the BF16 and FP8-current rows of the same hidden size (rows holds this one too)."""
    row["_step"], row["_quant"] = row["step_ms"], row["quant_ms"]
    bf = next(r["_step"] for r in rows if r["method"] == "bf16")
    fp8 = next((r["_step"] for r in rows if r["method"] == "fp8_current"), None)
    fp8_quant = next((r["_quant"] for r in rows if r["method"] == "fp8_current"), None)
    if row["method"].startswith("mor") and fp8_quant is not None:
        # what deciding costs beyond FP8 current scaling's own quantization (amax, scale, cast)
        extra = row["quant_ms"] - fp8_quant
        row["decide_extra_ms"] = f"{extra:.4f}"
        row["decide_extra_share"] = f"{extra / row['step_ms']:.4f}"
    row["quant_share"] = f"{row['quant_ms'] / row['step_ms']:.4f}"
    row["tflops"] = f"{flops / row['step_ms'] / 1e9:.1f}"
    row["speedup_vs_bf16"] = f"{bf / row['step_ms']:.3f}"
    row["vs_fp8_current"] = f"{(fp8 if fp8 is not None else row['step_ms']) / row['step_ms']:.3f}"
    for k in ("step_ms", "quant_ms", "gemm_ms"):
        row[k] = f"{row[k]:.4f}"
    for k in ("rel_err_x", "rel_err_w", "rel_err_dy"):
        if isinstance(row.get(k), float):
            row[k] = f"{row[k]:.6f}"


def _line(row: dict) -> str:
    return (f"h={row['hidden']:6d} {row['method']:18s} th={row.get('threshold', ''):<6} "
            f"step {row['step_ms']:>8s} ms  quant {row['quant_ms']:>8s} ms ({float(row['quant_share']):.1%})  "
            f"gemm {row['gemm_ms']:>8s} ms  x{row['speedup_vs_bf16']} vs bf16  x{row['vs_fp8_current']} vs fp8  "
            f"fp8 gemms {row['fp8_gemms']} ({row.get('backend', '')})  ref={row.get('matches_ref') or '-'}")


def _write(path: Path, fields: list, rows: list) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: r.get(k, "") for k in fields})


def _summary(rows: list, gemm_rows: list, checks: list) -> None:
    """The tables to read first: the checks' tally, the GEMM alone, and every layer arm with its
    step, deciding share and ratios."""
    if checks:
        bad = [f"{r['check']} {r['partition']} {r['backend']} {r['formats']}" for r in checks if not r["ok"]]
        print(f"\n# checks: {len(checks) - len(bad)}/{len(checks)} pass" + (f"; FAILED: {'; '.join(bad)}" if bad else ""))
    if gemm_rows:
        print("\n# GEMM alone (ms; ratio to torch._scaled_mm tensorwise, >1 = faster)")
        for r in gemm_rows:
            print(f"{r['variant']:42} {r.get('loop', ''):10} {r['ms']:>8} {r['vs_scaled_mm_tensorwise']:>7}")
    print("\n# summary: forward + backward step (ms), time before the GEMMs, ratios (>1 = faster)")
    print("# share: time before the GEMMs / step; extra: that time minus fp8_current's, / step")
    print(f"{'hidden':>6} {'method':18} {'th':>6} {'out':>4} {'step':>8} {'quant':>8} {'share':>6} {'extra':>6} "
          f"{'vs bf16':>8} {'vs fp8':>7} {'fp8 gemms':>9}  backend")
    for r in rows:
        extra = f"{float(r['decide_extra_share']):.1%}" if r.get("decide_extra_share") else ""
        print(f"{r['hidden']:>6} {r['method']:18} {str(r.get('threshold', '')):>6} {r.get('out_dtype', ''):>4} "
              f"{r['step_ms']:>8} {r['quant_ms']:>8} {float(r['quant_share']):>6.1%} {extra:>6} "
              f"{r['speedup_vs_bf16']:>8} {r['vs_fp8_current']:>7} {r['fp8_gemms']:>9}  {r.get('backend', '')}",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
