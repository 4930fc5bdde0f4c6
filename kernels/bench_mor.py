"""GPU benchmark: a MoR linear layer's forward + backward, decision included, against a BF16
linear and an FP8 (E4M3, per-tensor current scaling) linear.

    python -m lowprec.kernels.bench_mor --out results/mor/linear_h200.csv

A square linear layer (hidden x hidden weight) on ``--tokens`` tokens runs its three GEMMs:
fprop Y = X W^T, dgrad dX = dY W, wgrad dW = dY^T X. Per configuration the CSV records the median
step time (triton.testing.do_bench), the time spent before the GEMMs (quantization and, for MoR,
the decision), its share of the step, the GEMM time alone on pre-quantized operands, TFLOP/s,
the speed-up over BF16, which GEMMs ran in FP8, every operand's MoR error and format, and whether
the kernel's codes, scales and error equal the torch reference (lowprec.mor) for X.

Methods:
  bf16          three BF16 matmuls
  fp8_current   X, W, dY quantized once to E4M3 with per-tensor current scaling
                (lowprec.kernels.quantize), codes transposed for the backward GEMMs, three
                torch._scaled_mm calls (the fp8_tensorwise_current recipe)
  mor_<p>       tensor-level MoR with partition p (tensor | channel | block): the MoR kernel
                (lowprec.kernels.mor_quant) gives codes, scales and the relative error of every
                GEMM operand; the error comes to the host (one sync per decision: it picks the
                GEMM kernel). A GEMM whose two operands are both E4M3 with per-tensor or per-row
                scales runs through torch._scaled_mm (per-row = cuBLASLt row-wise scaling); any
                other GEMM runs in BF16, E4M3 operands upcast (dequantized) to BF16 first, as
                block-scaled FP8 has no Hopper GEMM.
Per-tensor and square-block MoR decide X, W and dY once: the transposed view of a tensor has the
same blocks, scales and error, so the decision is the same in every GEMM (the emulation in
lowprec.linear decides each slot; the result is identical). Per-row scales differ between a
tensor and its transpose, so channel MoR quantizes all six operand views (transposed BF16
copies included in the decision time).

Random Gaussian data gives E4M3 everywhere (error ~2.3 %); ``--thresholds 0.045,0`` also times
the all-BF16 fallback path (a threshold of 0 rejects any error). A JSON provenance file (GPU,
driver, CUDA, torch, triton, git commit, UTC time) is written beside the CSV.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import NamedTuple

from lowprec.bench.common import (add_do_bench_args, bench_parser, do_bench_median, fail, gpu_provenance,
                                  parse_int_list, parse_list, require_cuda_triton, write_provenance)

PROG = "bench_mor"

DEFAULT_HIDDEN = "4096,8192,16384"
DEFAULT_TOKENS = 8192
MOR_PARTITIONS = ("tensor", "channel", "block")

FIELDS = [
    "method", "partition", "scale", "block", "threshold", "tokens", "hidden", "step_ms", "quant_ms",
    "quant_share", "gemm_ms", "tflops", "speedup_vs_bf16", "fp8_gemms", "formats", "rel_err_x",
    "rel_err_w", "rel_err_dy", "matches_ref",
]


def _parse(argv):
    p = bench_parser("lowprec.kernels.bench_mor", __doc__)
    p.add_argument("--hidden", default=DEFAULT_HIDDEN, help=f"comma-separated hidden sizes (default {DEFAULT_HIDDEN})")
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help=f"tokens per step (default {DEFAULT_TOKENS})")
    p.add_argument("--partitions", default=",".join(MOR_PARTITIONS), help="MoR partitions to time")
    p.add_argument("--block", default="128x128", help="square block for partition block (default 128x128)")
    p.add_argument("--scale", default="gam", choices=("gam", "e8", "fp32"), help="MoR scale rule (default gam)")
    p.add_argument("--thresholds", default="0.045", help="comma-separated MoR thresholds (default 0.045)")
    add_do_bench_args(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-check", action="store_true", help="skip the comparison with the torch reference")
    return p.parse_args(argv)


def _provenance(timer: str) -> dict:
    return gpu_provenance(timer=timer, flops="3 GEMMs x 2 * tokens * hidden^2",
                          data="X, dY ~ N(0, 1), W ~ N(0, 0.02^2), bf16")


# ----------------------------------------------------------------------------------------------
# The three linear-layer variants. Everything below works on any device except torch._scaled_mm,
# so the plumbing can be checked on CPU with an emulated _scaled_mm.


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


class MoRLinear:
    """Forward + backward of y = x W^T with tensor-level MoR on all six operand slots."""

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

    def fp8_gemms(self, ops: dict) -> int:
        return sum(self._fp8(ops[a], ops[b]) for a, b in (("fprop.x", "fprop.w"), ("dgrad.dy", "dgrad.w"),
                                                             ("wgrad.dy", "wgrad.x")))


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


def _matches_reference(torch, km, x, partition, block, scale) -> bool:
    from lowprec import mor
    codes, scales, err = km.mor_quantize_e4m3(x, partition, block, scale)
    ref = mor.quantize_e4m3(x, partition, block, scale)
    want = ref.codes.to(torch.float8_e4m3fn)
    same = torch.equal(codes.view(torch.uint8), want.view(torch.uint8)) and torch.equal(scales, ref.scale)
    ref_err = mor.mor_relative_error(x, ref.dequantize())
    del ref, want
    return bool(same and abs(float(err) - ref_err) <= 1e-5 * abs(ref_err))


def main(argv=None) -> int:
    args = _parse(argv)
    torch, _ = require_cuda_triton(PROG, "tests/test_kernels_mor.py")
    if not hasattr(torch, "_scaled_mm"):
        fail(PROG, f"torch {torch.__version__} has no torch._scaled_mm")
    if torch.cuda.get_device_capability() < (8, 9):
        fail(PROG, f"FP8 GEMMs need compute capability >= 8.9, got {torch.cuda.get_device_capability()}")
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

    out = Path(args.out)
    bench, timer = do_bench_median(args.warmup, args.rep)
    write_provenance(out.with_suffix(".json"), _provenance(timer))

    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        for h in hidden:
            gen = torch.Generator(device="cuda").manual_seed(args.seed + h)
            x = torch.randn(args.tokens, h, device="cuda", generator=gen).to(torch.bfloat16)
            w = (0.02 * torch.randn(h, h, device="cuda", generator=gen)).to(torch.bfloat16)
            dy = torch.randn(args.tokens, h, device="cuda", generator=gen).to(torch.bfloat16)
            flops = 3 * 2 * args.tokens * h * h
            base = {"tokens": args.tokens, "hidden": h}

            bf16_ms = bench(lambda: bf16_step(x, w, dy))
            rows = [{**base, "method": "bf16", "step_ms": bf16_ms, "quant_ms": 0.0, "gemm_ms": bf16_ms,
                     "fp8_gemms": 0, "formats": "", "matches_ref": ""}]

            fp8 = Fp8CurrentLinear()
            ops = fp8.operands(x, w, dy)
            rows.append({**base, "method": "fp8_current", "partition": "tensor", "scale": "fp32",
                         "step_ms": bench(lambda: fp8.step(x, w, dy)),
                         "quant_ms": bench(lambda: fp8.operands(x, w, dy)),
                         "gemm_ms": bench(lambda: fp8.gemms(ops)), "fp8_gemms": 3, "formats": "", "matches_ref": ""})
            del ops

            for part in partitions:
                match = "" if args.no_check else str(_matches_reference(torch, km, x, part, block, args.scale))
                for th in thresholds:
                    mor_lin = MoRLinear(part, block, args.scale, th)
                    ops = mor_lin.operands(x, w, dy)
                    rows.append({
                        **base, "method": f"mor_{part}", "partition": part, "scale": args.scale,
                        "block": f"{br}x{bc}" if part == "block" else "", "threshold": th,
                        "step_ms": bench(lambda: mor_lin.step(x, w, dy)),
                        "quant_ms": bench(lambda: mor_lin.operands(x, w, dy)),
                        "gemm_ms": bench(lambda: mor_lin.gemms(ops)),
                        "fp8_gemms": mor_lin.fp8_gemms(ops),
                        "formats": " ".join(f"{k}:{v.fmt}" for k, v in ops.items()),
                        "rel_err_x": f"{ops['fprop.x'].err:.6f}", "rel_err_w": f"{ops['fprop.w'].err:.6f}",
                        "rel_err_dy": f"{ops['dgrad.dy'].err:.6f}", "matches_ref": match,
                    })
                    del ops
                    torch.cuda.empty_cache()

            for row in rows:
                row["quant_share"] = f"{row['quant_ms'] / row['step_ms']:.4f}"
                row["tflops"] = f"{flops / row['step_ms'] / 1e9:.1f}"
                row["speedup_vs_bf16"] = f"{bf16_ms / row['step_ms']:.3f}"
                for k in ("step_ms", "quant_ms", "gemm_ms"):
                    row[k] = f"{row[k]:.4f}"
                writer.writerow({k: row.get(k, "") for k in FIELDS})
                print(f"h={h:6d} {row['method']:12s} th={row.get('threshold', ''):<6} step {row['step_ms']:>9s} ms  "
                      f"quant {row['quant_ms']:>9s} ms ({float(row['quant_share']):.1%})  "
                      f"gemm {row['gemm_ms']:>9s} ms  x{row['speedup_vs_bf16']} vs bf16  "
                      f"fp8 gemms {row['fp8_gemms']}  ref={row['matches_ref'] or '-'}",
                      flush=True)
            fh.flush()
            del x, w, dy
            torch.cuda.empty_cache()
    print(f"# wrote {out} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
