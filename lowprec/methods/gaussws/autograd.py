"""GaussWS's autograd Functions: the cached W_c with an identity Jacobian for W (and -ln2 * R * Delta
for a learnable b), alone or several in one node, and the straight-through rounding of a learnable b."""

from __future__ import annotations

import math

import torch
from torch import nn

from .step import grid_shape

LN2 = math.log(2.0)


class _CachedWeight(torch.autograd.Function):
    """Hands the cached W_c to the GEMMs; the backward is the identity for W (the noise is a
    constant of the step, the bf16 cast straight-through) and -ln2 * R * Delta for a learnable b."""

    @staticmethod
    def forward(ctx, w, bits_eff, cache, unit, delta, block, transposed, out_dtype):
        ctx.w_dtype = w.dtype
        ctx.block, ctx.transposed = block, transposed
        if unit is not None:
            ctx.save_for_backward(unit, delta)
        if out_dtype == cache.dtype:
            return cache.view_as(cache)
        return cache.to(out_dtype)

    @staticmethod
    def backward(ctx, g):
        gw = g.to(ctx.w_dtype) if ctx.needs_input_grad[0] else None
        gb = None
        if ctx.needs_input_grad[1]:
            unit, delta = ctx.saved_tensors
            br, bc = ctx.block
            prod = g.to(torch.float32) * unit.to(torch.float32)
            rows, cols = prod.shape
            nr, nc = grid_shape((rows, cols), ctx.block)
            prod = nn.functional.pad(prod, (0, nc * bc - cols, 0, nr * br - rows))
            sums = prod.reshape(nr, br, nc, bc).sum(dim=(1, 3))
            gb = -LN2 * sums * delta
            if ctx.transposed:
                gb = gb.t()
        return gw, gb, None, None, None, None, None, None


class _CachedWeights(torch.autograd.Function):
    """``_CachedWeight`` of several fixed-b weights as one autograd node: W_c's in, the identity
    gradient out, each cast to its master weight's dtype by one multi-tensor copy. A model's draws
    thus add one node and one copy kernel to a step instead of one node and one cast per layer
    (98 M Llama with CUDA graphs: 84 of each, 3.7 ms of host time in a host-bound step). Its
    backward runs once every W_c has its gradient (the master weights' gradients then arrive
    together, at the end of the backward)."""

    @staticmethod
    def forward(ctx, caches_and_dtypes, *ws):
        caches, out_dtypes = caches_and_dtypes
        ctx.w_dtypes = [w.dtype for w in ws]
        ctx.set_materialize_grads(False)
        return tuple(c.view_as(c) if d == c.dtype else c.to(d) for c, d in zip(caches, out_dtypes))

    @staticmethod
    def backward(ctx, *gs):
        grads = [g if g is None or g.dtype == dt else None for g, dt in zip(gs, ctx.w_dtypes)]
        by_kind: dict = {}  # one copy per (device, dtypes) to cast: _foreach_copy_ wants them alike
        for i, g in enumerate(gs):
            if g is not None and grads[i] is None:
                by_kind.setdefault((g.device, g.dtype, ctx.w_dtypes[i]), []).append(i)
        for (_, _, w_dtype), idx in by_kind.items():
            dst = [torch.empty_like(gs[i], dtype=w_dtype) for i in idx]
            torch._foreach_copy_(dst, [gs[i] for i in idx])
            for i, d in zip(idx, dst):
                grads[i] = d
        return (None, *grads)


class _STEBits(torch.autograd.Function):
    @staticmethod
    def forward(ctx, b, lo, hi):
        return torch.round(b).clamp(lo, hi)

    @staticmethod
    def backward(ctx, g):
        return g, None, None

