"""Number formats, scaled quantization and error metrics (pure torch, any device)."""

from .checks import as_2d
from .formats import (
    FORMATS,
    FloatFormat,
    Format,
    IntFormat,
    cast,
    get_format,
    ilog2,
    pow2,
    to_native,
    to_torch_dtype,
)
from .metrics import (
    amax,
    flush_fraction,
    relative_error,
    saturation_fraction,
    sqnr_db,
    tensor_stats,
    tensor_sums,
    stats_from_sums,
)
from .scaling import (
    SCALINGS,
    DelayedScaler,
    QTensor,
    QuantSpec,
    block_amax,
    compute_scale,
    expand_blocks,
    fake_quantize,
    gam_block_scales,
    gam_block_scales_bitwise,
    mx_block_scales,
    nonfinite_blocks,
    quantize,
    scale_from_amax,
)

__all__ = [
    "FORMATS", "FloatFormat", "Format", "IntFormat", "cast", "get_format", "ilog2", "pow2",
    "to_native", "to_torch_dtype",
    "amax", "flush_fraction", "relative_error", "saturation_fraction", "sqnr_db", "tensor_stats", "tensor_sums",
    "stats_from_sums",
    "SCALINGS", "DelayedScaler", "QTensor", "QuantSpec", "as_2d", "block_amax", "compute_scale",
    "expand_blocks", "fake_quantize", "gam_block_scales", "gam_block_scales_bitwise",
    "mx_block_scales", "nonfinite_blocks", "quantize", "scale_from_amax",
]
