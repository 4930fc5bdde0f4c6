"""GaussWS's autograd Functions: the cached W_c with an identity Jacobian for W (and -ln2 * R * Delta
for a learnable b), and the straight-through rounding of a learnable b."""

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


class _STEBits(torch.autograd.Function):
    @staticmethod
    def forward(ctx, b, lo, hi):
        return torch.round(b).clamp(lo, hi)

    @staticmethod
    def backward(ctx, g):
        return g, None, None

