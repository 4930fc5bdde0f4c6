"""The linear-layer arms that ``lowprec.bench.mor_linear`` times: three BF16 matmuls, FP8 current
scaling on ``torch._scaled_mm``, MoR with the decision on the device (``lowprec.kernels.mor_gemm``),
the previous host-sync MoR, and the
training path's compiled layer (``FastPathLinear``) for FP8 current scaling and MoR. Each arm's ``operands(x, w, dy)`` quantizes the six operand slots
(fprop.x, fprop.w, dgrad.dy, dgrad.w, wgrad.dy, wgrad.x), ``gemms(ops)`` runs the three GEMMs and
``step`` does both. torch is imported inside, so the benchmark answers --help without it.
"""

from __future__ import annotations

from typing import NamedTuple

DEVICE = "cuda"
PAIRS = (("fprop.x", "fprop.w"), ("dgrad.dy", "dgrad.w"), ("wgrad.dy", "wgrad.x"))


# ----------------------------------------------------------------------------------------------
# The previous implementation (host-sync decisions). Everything here works on any device except
# torch._scaled_mm.


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
            raise ValueError("mor_linear: blocks must be square (a transposed operand reuses its blocks)")
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
        fp8 = sum(self._fp8(ops[a], ops[b]) for a, b in PAIRS)
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
            raise ValueError("mor_linear: blocks must be square (a transposed operand reuses its blocks)")
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
                     for i, (a, b) in enumerate(PAIRS))

    def step(self, x, w, dy):
        if self.mode == "layer":  # exactly what QLinear.gemm calls on CUDA, coverage counts included
            from lowprec.recipes import OperandCall
            views, q = self._views(x, w, dy), self.q
            calls = {s: OperandCall(None, s.split(".")[0], s.split(".")[1], 0, True) for s in views}
            return tuple(q.fused_gemm(q, views[a], views[b], calls[a], calls[b]) for a, b in PAIRS)
        return self.gemms(self.operands(x, w, dy))

    def summary(self, ops: dict) -> dict:
        import torch
        infos = torch.zeros(3, 3, dtype=torch.int32, device=ops["fprop.x"].hp.device)
        self.gemms(ops, infos)
        infos = infos.tolist()
        fmts = {k: "e4m3" if float(o.rel_error) <= o.threshold else "bf16" for k, o in ops.items()}
        return {"fp8_gemms": sum(i[2] in (1, 3) for i in infos), "backend": "/".join(RAN[i[2]] for i in infos),
                "formats": " ".join(f"{k}:{v}" for k, v in fmts.items()),
                **{f"rel_err_{s}": float(ops[k].rel_error) for s, k in (("x", "fprop.x"), ("w", "fprop.w"),
                                                                         ("dy", "dgrad.dy"))}}


class FastPathLinear:
    """The training path: one QLinear (``lowprec.convert``) of a recipe's config, bf16 activations
    under autocast, forward and backward compiled with ``torch.compile`` on the fast path
    (``lowprec.gemm.FastPlan``; MoR: ``lowprec.methods.mor_fast``), the weight gradient into an fp32
    master weight, as ``lowprec.bench.e2e_step`` trains."""

    def __init__(self, method: dict, hidden: int):
        import torch
        from torch import nn

        from lowprec import convert
        from lowprec.bench.common import fresh_compilation
        from lowprec.recipes import recipe_from_config
        self.torch = torch
        self.model = nn.Sequential(nn.Linear(hidden, hidden, bias=False)).to(DEVICE)
        convert(self.model, recipe_from_config(method))
        if self.model[0].fast_plan is None:
            raise ValueError(f"mor_linear: {method} has no fast path")

        def fwd_bwd(x, dy):
            with torch.autocast(DEVICE, dtype=torch.bfloat16):
                y = self.model(x)
            y.backward(dy)
        fresh_compilation()  # one arm at a time, each compiling the same fwd_bwd code
        self._step = torch.compile(fwd_bwd, dynamic=False)

    def step(self, x, w, dy):
        self.model[0].weight.grad = None
        # an input that asks for its gradient: the step's third GEMM (dgrad), which the other arms time
        self._step(x.detach().requires_grad_(), dy)


RAN = {1: "fp8_loop", 2: "bf16_loop", 3: "scaled_mm", 4: "bf16_tma_loop"}


def data(torch, tokens: int, h: int, seed: int):
    """X, W, dY of the timed layer: X, dY ~ N(0, 1), W ~ N(0, 0.02^2), bf16 on CUDA."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed + h)
    x = torch.randn(tokens, h, device=DEVICE, generator=gen).to(torch.bfloat16)
    w = (0.02 * torch.randn(h, h, device=DEVICE, generator=gen)).to(torch.bfloat16)
    dy = torch.randn(tokens, h, device=DEVICE, generator=gen).to(torch.bfloat16)
    return x, w, dy
