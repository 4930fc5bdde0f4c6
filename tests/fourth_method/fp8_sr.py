"""FP8 training with stochastically rounded gradients: a method that plugs into lowprec through the
method contract alone (docs/adding-a-method.md walks through it).

Every GEMM operand is FP8 with one scale per tensor (current scaling): activations and weights E4M3
rounded to nearest, the output gradient dY E5M2 (or E4M3, ``grad_format``) rounded
stochastically, so that the rounding error of the gradients is zero in expectation. QLinear seeds
each stochastic rounding from the run seed, the layer, the call and the operand, so a run is
reproducible and a resumed one draws what an uninterrupted one would have drawn.
"""

from lowprec.numerics import QuantSpec
from lowprec.recipes import Gemm, Method, Recipe

GRAD_FORMATS = ("e5m2", "e4m3")
KEYS = {"grad_format": "e5m2"}  # the method's own keys and their defaults


def build_recipe(own: dict) -> Recipe:
    """The recipe of a method section's own keys (the core has refused unknown ones)."""
    fmt = own.get("grad_format", KEYS["grad_format"])
    if fmt not in GRAD_FORMATS:
        raise ValueError(f"method (fp8_sr): grad_format must be one of {GRAD_FORMATS}, got {fmt!r}")
    x = QuantSpec("e4m3", "tensor")
    dy = QuantSpec(fmt, "tensor", rounding="stochastic")
    return Recipe("fp8_sr", Gemm(x, x), Gemm(dy, x), Gemm(dy, x),
                  description=f"E4M3 activations and weights, {fmt.upper()} gradients stochastically rounded, "
                              "per-tensor current scaling")


METHODS = (Method("fp8_sr", KEYS, build_recipe),)
