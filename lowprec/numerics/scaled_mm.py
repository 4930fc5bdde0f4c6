"""``torch._scaled_mm`` with the scale layouts cuBLAS takes, checked on an H200 with torch 2.11.

The one place that knows them, below both the fast path (``lowprec.gemm``) and the kernels that hand
an FP8 product to cuBLAS (``lowprec.kernels.mor_gemm``). Operands are row-major FP8 codes
(a (M, K), b (N, K)) with their encode-scale grids (x ~= code / scale) of a kind:

    tensor x tensor      scale_a (), scale_b ()                           any output dtype
    row x row            scale_a (M, 1), scale_b (1, N)                   bf16 output
    1x128 x 128x128      scale_a (M, K/128), scale_b (K/128, N/128),       bf16 output, CUDA only,
                         strides below; K a multiple of 512
    1x128 x 1x128        scale_a (M, K/128), scale_b (K/128, N) row-major  the same, any K
(a tensor scale pairs with a row scale by broadcasting it to a vector; a 128x128 grid on the left
goes as the 1x128 scales of its rows, and so does one on the right where K holds no multiple of 4
blocks, ``blocks_aligned``). 1x128 x 1x128 is the weight gradient of DeepSeek-style
recipes.
"""

from __future__ import annotations

import torch

_TENSOR = "tensor"

# the one binding every FP8 GEMM of the suite calls (the tests count calls here, never by patching
# torch itself: Dynamo keeps the torch functions it first saw, and a wrapper seen once would stay)
_scaled_mm = torch._scaled_mm


def _cpu_takes_row_scales() -> bool:
    """Whether this torch's CPU ``_scaled_mm`` takes per-row scales: torch 2.13's does; 2.11's
    (oneDNN) asserts that both scales are single numbers. Asked once, at import, so that routing
    reads a constant (Dynamo never traces the probe)."""
    try:
        a = torch.zeros(16, 16).to(torch.float8_e4m3fn)
        _scaled_mm(a, a.t(), scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16), out_dtype=torch.bfloat16)
        return True
    except Exception:  # noqa: BLE001 - a refusal of any kind means the fp32 GEMM of the codes
        return False


CPU_ROW_SCALES = _cpu_takes_row_scales()


def blocks_aligned(k: int) -> bool:
    """Whether K holds a multiple of 4 blocks of 128, as cuBLAS's 128x128 scale grids need."""
    return k % 512 == 0


def _decode(scale: torch.Tensor) -> torch.Tensor:
    return torch.reciprocal(scale.float())


def fp8_mm(a8: torch.Tensor, scale_a: torch.Tensor, kind_a: str, b8: torch.Tensor, scale_b: torch.Tensor,
           kind_b: str, out_dtype: torch.dtype, fast_accum: bool = False) -> torch.Tensor:
    """``dequant(a) @ dequant(b).T`` on FP8 tensor cores: a8 (M, K) and b8 (N, K) row-major codes
    with their encode-scale grids (``lowprec.gemm.quantize_fp8``) of the given kinds (the layouts
    above). ``fast_accum``: Hopper's FP8 accumulation without the periodic promotion to fp32
    (faster, fewer bits; ``lowprec.gemm.FAST_ACCUM``), for tensor and row scales (block scales
    always promote)."""
    inv_a, inv_b = _decode(scale_a), _decode(scale_b)
    if kind_a == "128x128":  # each row takes its block's scale
        inv_a, kind_a = inv_a.repeat_interleave(128, dim=0)[: a8.shape[0]], "1x128"
    if kind_b == "128x128" and not blocks_aligned(a8.shape[1]):
        # cuBLAS's 128x128 grid wants its K-blocks padded to a multiple of 4 (pytorch/pytorch#166752),
        # a layout torch 2.11 refuses and whose unpadded form gave NaN on the H200; the 1x128 x 1x128
        # pair has no such rule, so b's rows take their block's scale, as a's do above
        inv_b, kind_b = inv_b.repeat_interleave(128, dim=0)[: b8.shape[0]], "1x128"
    if kind_a == "1x128":
        # a's grid (M, K/128) with stride 1 along M ("outer-dim-major"); b's 128x128 grid
        # transposed to (K/128, N/128) with stride 1 along K/128 (K/128 a multiple of 4), or b's 1x128
        # grid transposed to a row-major (K/128, N) (any whole blocks: K = 640, 768, 1152 checked): the
        # layouts that ran on the H200 (torch 2.11); cuBLAS refused the 1x128 one in b's 128x128 layout
        inv_a = inv_a.t().contiguous().t()
        inv_b = inv_b.contiguous().t() if kind_b == "128x128" else inv_b.t().contiguous()
        # no fast accumulation here: cuBLAS refuses it with block scales (torch 2.11, H200)
        return _scaled_mm(a8, b8.t(), scale_a=inv_a, scale_b=inv_b, out_dtype=torch.bfloat16).to(out_dtype)
    if kind_a == kind_b == _TENSOR:
        return _scaled_mm(a8, b8.t(), scale_a=inv_a.reshape(()), scale_b=inv_b.reshape(()),
                                out_dtype=out_dtype, use_fast_accum=fast_accum)
    # row-wise on either side: both scales as vectors, bf16 output (cuBLASLt's rule)
    inv_a = inv_a.reshape(-1, 1).expand(a8.shape[0], 1).contiguous()
    inv_b = inv_b.reshape(1, -1).expand(1, b8.shape[0]).contiguous()
    return _scaled_mm(a8, b8.t(), scale_a=inv_a, scale_b=inv_b, out_dtype=torch.bfloat16,
                            use_fast_accum=fast_accum).to(out_dtype)
