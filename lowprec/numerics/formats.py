"""Number formats and the rounding cast that every other numerics path is measured against.

One `FloatFormat` describes any small binary float ExMy (E2M1, E3M2, E2M3, E4M3, E5M2, FP16, BF16):
its maximum, minimum and subnormal step are *derived* from the bit widths, the bias and which special
values the encoding reserves, so a new format is one line. `IntFormat` describes symmetric INT8.

`cast(x, fmt)` emulates "round x into fmt, then widen back" in plain fp32 torch arithmetic, so it
runs on any device and any torch >= 2.4 and can be ported line by line to a Triton kernel:

* RNE: with e = clamp(floor(log2|x|), emin, emax) and quantum = 2^(e - man_bits), the result is
  round_half_even(|x| / quantum) * quantum with the sign of x. Clamping e at emin is what gives
  subnormals their fixed step; clamping at emax keeps values past the top binade on the top binade's
  grid so the overflow test below sees the correctly rounded value.
* Stochastic rounding works on the magnitude, like hardware that adds random bits below the kept
  mantissa and truncates: floor(|x| / quantum + u) * quantum with the sign of x, u ~ U[0, 1).
  E[result] = x exactly (before saturation), and a zero result keeps the sign of x.
* Overflow (a rounded magnitude above max_normal):
  saturate=True  clamps to +-max_normal (also +-Inf -> +-max_normal).
  saturate=False does what the encoding implies, which is also what ml_dtypes 0.6 does:
  E5M2/FP16/BF16 (IEEE, have Inf) -> +-Inf; E4M3 ("fn": NaN but no Inf) -> NaN; E2M1/E3M2/E2M3
  (no Inf, no NaN) -> +-max_normal, so for them the two settings differ only in name.
* NaN stays NaN for every float format and both settings. ml_dtypes maps NaN to a zero of the
  *opposite* sign for formats without a NaN encoding; we deliberately do not copy that: our codes live
  in fp32, where NaN is representable, and a silent zero would hide a diverging run.
* Signed zero is preserved (as in ml_dtypes): -1e-30 rounds to -0.0.

INT8 (`IntFormat`): x is assumed already scaled onto the integer grid. Values are rounded (RNE or
stochastic) and always clamped to [qmin, qmax] (the `saturate` flag is ignored). NaN maps to 0, the
usual rule of saturating float->int conversions (LLVM's fptosi.sat, Rust's `as`); raising instead
would need a device sync on every cast. So that a NaN or Inf is not lost there, scaled INT8
quantization (`lowprec.numerics.scaling`) gives a block that holds one a NaN scale. -0 becomes +0:
an integer code has no sign of zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch

from .checks import one_of

__all__ = [
    "FloatFormat",
    "IntFormat",
    "Format",
    "FORMATS",
    "get_format",
    "cast",
    "to_torch_dtype",
    "to_native",
    "round_cast",
    "pow2",
    "ilog2",
]

# fp32 is the compute type; its exponent range bounds which formats cast() can emulate exactly.
_FP32_EMIN = -126
_FP32_EMAX = 127
_FP32_MIN_SUBNORMAL_EXP = -149


@dataclass(frozen=True)
class FloatFormat:
    """A sign-magnitude binary float with `exp_bits` exponent and `man_bits` mantissa bits.

    inf: the all-ones exponent is reserved for Inf (and NaN), IEEE style.
    nan: some encoding is NaN. With nan and not inf (the "fn" variants such as E4M3FN), only the
    all-ones exponent with all-ones mantissa is NaN, so the top binade is usable minus one value.
    Neither: every encoding is a finite number (OCP MX FP6/FP4).
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    inf: bool
    nan: bool

    def __post_init__(self):
        if self.exp_bits < 1 or self.man_bits < 0:
            raise ValueError(f"{self.name}: exp_bits must be >= 1 and man_bits >= 0")
        if self.inf and not self.nan:
            raise ValueError(f"{self.name}: an Inf encoding implies NaN encodings (IEEE)")
        if self.nan and not self.inf and self.man_bits == 0:
            raise ValueError(f"{self.name}: an fn-style NaN needs at least one mantissa bit")
        # cast() clamps the fp32 exponent at emin; fp32 subnormals then fall below every format's
        # emin, which is what lets it read exponents straight from the fp32 bits.
        if self.emin < _FP32_EMIN or self.emax > _FP32_EMAX:
            raise ValueError(f"{self.name}: exponent range exceeds fp32, cannot emulate in fp32")

    @property
    def _top_exponent_field(self) -> int:
        all_ones = (1 << self.exp_bits) - 1
        return all_ones - 1 if self.inf else all_ones

    @property
    def _top_mantissa_field(self) -> int:
        all_ones = (1 << self.man_bits) - 1
        # fn formats spend the all-ones mantissa of the top exponent on NaN.
        return all_ones - 1 if (self.nan and not self.inf) else all_ones

    @property
    def emax(self) -> int:
        return self._top_exponent_field - self.bias

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def max_normal(self) -> float:
        return 2.0 ** self.emax * (1.0 + self._top_mantissa_field / 2.0 ** self.man_bits)

    @property
    def min_normal(self) -> float:
        return 2.0 ** self.emin

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.man_bits)

    @property
    def fmax(self) -> float:
        """Largest finite magnitude; the number scales map a block's amax onto."""
        return self.max_normal


@dataclass(frozen=True)
class IntFormat:
    """Signed integer codes. symmetric=True gives [-127, 127] for 8 bits (no lonely -128, so
    negation and the scale are exact); symmetric=False gives the full [-128, 127]."""

    name: str
    bits: int = 8
    symmetric: bool = True

    def __post_init__(self):
        if not 2 <= self.bits <= 24:  # 24: integers stay exact in the fp32 compute type
            raise ValueError(f"{self.name}: bits must be in [2, 24]")

    @property
    def qmax(self) -> int:
        return (1 << (self.bits - 1)) - 1

    @property
    def qmin(self) -> int:
        return -self.qmax if self.symmetric else -(1 << (self.bits - 1))

    @property
    def fmax(self) -> float:
        return float(self.qmax)

    @property
    def emax(self) -> int:
        """floor(log2(qmax)): the exponent MX-style power-of-two scaling aligns a block's amax to
        (OCP MXINT8 with its 2^-6 element scale folded into the integer codes)."""
        return self.bits - 2


Format = Union[FloatFormat, IntFormat]

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        FloatFormat("e2m1", 2, 1, 1, inf=False, nan=False),
        FloatFormat("e3m2", 3, 2, 3, inf=False, nan=False),
        FloatFormat("e2m3", 2, 3, 1, inf=False, nan=False),
        FloatFormat("e4m3", 4, 3, 7, inf=False, nan=True),
        FloatFormat("e5m2", 5, 2, 15, inf=True, nan=True),
        FloatFormat("fp16", 5, 10, 15, inf=True, nan=True),
        FloatFormat("bf16", 8, 7, 127, inf=True, nan=True),
        IntFormat("int8", 8, symmetric=True),
    )
}


def get_format(fmt: Union[str, Format]) -> Format:
    if isinstance(fmt, (FloatFormat, IntFormat)):
        return fmt
    try:
        return FORMATS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"unknown format {fmt!r}; known formats: {', '.join(FORMATS)}") from None


# ----------------------------------------------------------------------------------------------
# Exact power-of-two helpers. torch.exp2/log2 go through libm and are not guaranteed exact at
# subnormal or boundary values; bit construction and frexp are.


def pow2(n: torch.Tensor) -> torch.Tensor:
    """2**n as fp32 for integer n in [-149, 127], built from bits (exact, subnormals included)."""
    n = n.to(torch.int32)
    normal = ((n.clamp(min=_FP32_EMIN) + 127) << 23).view(torch.float32)
    subnormal = (
        torch.ones_like(n) << (n.clamp(_FP32_MIN_SUBNORMAL_EXP, _FP32_EMIN - 1) - _FP32_MIN_SUBNORMAL_EXP)
    ).view(torch.float32)
    return torch.where(n >= _FP32_EMIN, normal, subnormal)


def ilog2(x: torch.Tensor) -> torch.Tensor:
    """floor(log2(x)) as int32 for positive finite fp32 x, exact for subnormals too."""
    _, e = torch.frexp(x.to(torch.float32))
    return e - 1


def _biased_exponent_floor_log2(mag: torch.Tensor) -> torch.Tensor:
    # The exponent field minus the bias; a kernel does the same. Wrong for fp32 subnormals (-127),
    # but callers clamp at a format emin >= -126, where every fp32 subnormal belongs anyway.
    return ((mag.contiguous().view(torch.int32) >> 23) & 0xFF) - 127


# ----------------------------------------------------------------------------------------------

_ROUNDINGS = ("nearest", "stochastic")
_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _uniforms(x: torch.Tensor, generator, noise) -> torch.Tensor:
    if noise is not None:
        if generator is not None:
            raise ValueError("give either generator or noise, not both")
        if tuple(noise.shape) != tuple(x.shape):
            raise ValueError(f"noise shape {tuple(noise.shape)} != input shape {tuple(x.shape)}")
        return noise.to(device=x.device, dtype=torch.float32)
    # Drawn exactly like this so that a caller can reproduce the bits with the same generator state.
    return torch.rand(x.shape, generator=generator, dtype=torch.float32, device=x.device)


def _cast_float(x, fmt: FloatFormat, rounding, saturate, generator, noise):
    if saturate:
        # Clamping first is equivalent to clamping the rounded value (max_normal is on the grid and
        # rounding is monotonic) and keeps Inf out of the arithmetic. NaN passes through clamp.
        x = x.clamp(-fmt.max_normal, fmt.max_normal)
    mag = x.abs()
    e = _biased_exponent_floor_log2(mag).clamp(fmt.emin, fmt.emax)
    quantum = pow2(e - fmt.man_bits)
    # Exact: dividing by a power of two only moves the exponent (the result is >= 2^-149 or so tiny
    # that it rounds to 0 either way).
    y = mag / quantum
    if rounding == "nearest":
        r = torch.round(y)  # half to even
    else:
        r = torch.floor(y + _uniforms(x, generator, noise))
    q = torch.copysign(r * quantum, x)
    if not saturate:
        over = q.abs() > fmt.max_normal  # False for NaN, so NaN stays NaN
        if fmt.inf:
            q = torch.where(over, torch.copysign(torch.full_like(q, float("inf")), x), q)
        elif fmt.nan:
            q = torch.where(over, torch.full_like(q, float("nan")), q)
        else:
            q = torch.where(over, torch.copysign(torch.full_like(q, fmt.max_normal), x), q)
    return q


def _cast_int(x, fmt: IntFormat, rounding, generator, noise):
    x = torch.nan_to_num(x, nan=0.0).clamp(fmt.qmin, fmt.qmax)
    if rounding == "nearest":
        r = torch.round(x)
    else:
        r = torch.copysign(torch.floor(x.abs() + _uniforms(x, generator, noise)), x)
    # The clamp is already exact for RNE/SR of clamped inputs; adding +0.0 turns -0.0 into +0.0.
    return r.clamp(fmt.qmin, fmt.qmax) + 0.0


def cast(
    x: torch.Tensor,
    fmt: Union[str, Format],
    rounding: str = "nearest",
    saturate: bool = True,
    generator: Optional[torch.Generator] = None,
    noise: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Round x onto fmt's grid; returns x's dtype, every value exactly representable in fmt.

    rounding: "nearest" (RNE) or "stochastic" (uniforms from `generator`, or from `noise`, a tensor
    of U[0,1) values with x's shape, so a kernel can be checked against the same random bits).
    See the module docstring for overflow, NaN and INT8 rules. The final conversion back to x's
    dtype is exact whenever fmt's values fit it: every format here in fp32, the 8/6/4-bit formats
    in bf16 and fp16 too.
    """
    f = get_format(fmt)
    one_of("rounding", rounding, _ROUNDINGS)
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"cast expects a float32/bfloat16/float16 tensor, got {x.dtype}")
    x32 = x.to(torch.float32)
    if isinstance(f, IntFormat):
        q = _cast_int(x32, f, rounding, generator, noise)
    elif rounding == "nearest" and saturate and _native_float_dtype(f) is not None:
        q = _cast_native(x32, f)
    else:
        q = _cast_float(x32, f, rounding, saturate, generator, noise)
    return q.to(x.dtype)


def _native_float_dtype(f: FloatFormat) -> Optional[torch.dtype]:
    return to_torch_dtype(f) if f.name in ("e4m3", "e5m2", "bf16", "fp16") else None


_DECODE_TABLES: dict = {}


def _decode_table(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # fp32 value of each of the 256 codes of an 8-bit float: a table lookup decodes several times
    # faster than torch's float8 -> float32 conversion on CPU
    key = (dtype, device)
    if key not in _DECODE_TABLES:
        _DECODE_TABLES[key] = torch.arange(256, dtype=torch.uint8, device=device).view(dtype).to(torch.float32)
    return _DECODE_TABLES[key]


def _cast_native(x32: torch.Tensor, f: FloatFormat) -> torch.Tensor:
    """RNE with saturation through torch's own cast: several times faster than the arithmetic in
    _cast_float and equal to it bit for bit (tested on every bf16 pattern), given the clamp, which
    keeps every torch version's disagreeing overflow rules out of play."""
    dtype = _native_float_dtype(f)
    codes = x32.clamp(-f.max_normal, f.max_normal).to(dtype)
    # compiled, the plain conversion: Inductor fuses it, and a table filled while tracing would fail
    # the traced graph's guard at the next call (a recompilation)
    if dtype.itemsize == 1 and not torch.compiler.is_compiling():
        table = _decode_table(dtype, codes.device)
        return torch.take(table, codes.view(torch.uint8).long()).reshape(x32.shape)
    return codes.to(torch.float32)


def round_cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x.to(dtype)``, where a compiled graph keeps the fp32 -> bf16 rounding.

    Inductor fuses the cast into its consumers and on the GPU (torch 2.11, Triton) reduces an amax
    over the unrounded fp32 values even with ``emulate_precision_casts`` on: the compiled scales of an
    fp32 activation that the layer rounds to bf16 differed from eager's by up to one bf16 step
    (tests/test_gpu.py). Compiled, the rounding is done on the bits (round to nearest, ties to even),
    which no graph pass can drop; eager, torch's own cast, equal to it bit for bit."""
    if not (torch.compiler.is_compiling() and x.dtype == torch.float32 and dtype == torch.bfloat16):
        return x.to(dtype)
    return _BitsRoundedBf16.apply(x)


class _BitsRoundedBf16(torch.autograd.Function):
    """fp32 -> bf16 rounded on the bits, with the cast's own gradient (the incoming one, widened).
    A function of its own rather than ``x + detached(rounded - x)``: that form's backward kept a mask
    of the finite values and made extra passes over every rounded activation; this one saves nothing
    and its backward is a cast."""

    @staticmethod
    def forward(ctx, x):
        return round_bits_to_bf16(x).to(torch.bfloat16)  # exact: the value is a bf16 already

    @staticmethod
    def backward(ctx, g):
        return g.to(torch.float32)


def round_bits_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """fp32 ``x`` rounded to its nearest bf16 value (ties to even) in integer arithmetic, as fp32;
    NaN stays NaN (its bits would round to Inf), +-Inf and overflow past bf16's max become +-Inf as
    in torch's cast."""
    bits = x.contiguous().view(torch.int32)
    kept_lsb = (bits >> 16) & 1
    rounded = ((bits + (0x7FFF + kept_lsb)) & -0x10000).view(torch.float32)
    return torch.where(torch.isnan(x), x, rounded)


def to_torch_dtype(fmt: Union[str, Format]) -> Optional[torch.dtype]:
    """The native torch dtype that stores fmt exactly, or None (E2M1/E3M2/E2M3 have none we use)."""
    name = get_format(fmt).name
    table = {
        # getattr: float8 dtypes are absent from old torch builds
        "e4m3": getattr(torch, "float8_e4m3fn", None),
        "e5m2": getattr(torch, "float8_e5m2", None),
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "int8": torch.int8,
    }
    return table.get(name)


def to_native(
    x: torch.Tensor,
    fmt: Union[str, Format],
    rounding: str = "nearest",
    generator: Optional[torch.Generator] = None,
    noise: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """cast() with saturation, then store in the native dtype. Because the values are already on
    the grid and in range, the final .to() is exact on every torch version (whose overflow
    behaviour for float8 differs: NaN in 2.11, saturation in 2.13)."""
    dtype = to_torch_dtype(fmt)
    if dtype is None:
        raise ValueError(f"format {get_format(fmt).name!r} has no native torch dtype here")
    q = cast(x, fmt, rounding=rounding, saturate=True, generator=generator, noise=noise)
    return q.to(torch.float32).to(dtype)
