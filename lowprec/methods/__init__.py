"""Methods: the paper methods of this repository (one module or subpackage each, found by
``lowprec.recipes.registry``: every module here that exports ``METHODS``) and what a run's
``method`` section does to the model before training (``apply_method``).

A method names a ``recipe`` (``lowprec.recipes.RECIPES``) and may override any GEMM operand of it
(``fprop``/``dgrad``/``wgrad`` with ``a``/``b`` QuantSpec dicts), choose the layers (``include`` /
``exclude`` fnmatch patterns on module names; default: every linear layer but the LM head) and turn on
numerics telemetry (``telemetry_every``: record per layer/GEMM/operand metrics every N steps).

``bf16`` on GPU is Lightning's ``bf16-mixed`` with the model untouched; on CPU (where bf16 autocast is
about 3x slower than fp32) it is the emulated recipe: linear-layer operands rounded to bf16, fp32
accumulation, everything else fp32.  Every other recipe swaps the linear layers for ``QLinear``.
"""

from __future__ import annotations

from torch import nn

from ..gemm import FastPlan
from ..recipes import recipe_from_config
from ..telemetry import Telemetry


def resolve_precision(requested: str, on_gpu: bool) -> str:
    if requested != "auto":
        return requested
    return "bf16-mixed" if on_gpu else "32-true"


def apply_method(model: nn.Module, method_cfg: dict, precision: str, seed: int = 0) -> dict:
    """Prepare ``model`` in place; return a description for provenance, plus the telemetry collector
    (``telemetry``) and the recipe's term of the training loss (``extra_loss``, ``Recipe.extra_loss``),
    which the trainer takes out before recording the rest."""
    from ..linear import DEFAULT_EXCLUDE, convert  # lowprec.linear imports this package's MoR fast path

    recipe = recipe_from_config(method_cfg)  # validates the method's keys
    every = int(method_cfg.get("telemetry_every", 0) or 0)
    telemetry = Telemetry(every) if every else None
    native_bf16 = recipe.name == "bf16" and not recipe.quantized and precision.startswith("bf16")
    if native_bf16:
        return {"recipe": recipe.name, "numerics": "bf16 autocast (Lightning bf16-mixed)", "layers": [],
                "telemetry": None, "extra_loss": None}
    layers = convert(model, recipe, include=method_cfg.get("include"),
                     exclude=method_cfg.get("exclude", DEFAULT_EXCLUDE), telemetry=telemetry, seed=seed)
    # how it ran (fast path or emulation) depends on the device: the reports add it from the
    # provenance (``lowprec.report.runs.Run.numerics``)
    if recipe.quantized:
        numerics = f"{recipe.name}: {recipe.description}"
    else:
        numerics = f"{recipe.name}: {recipe.high_precision} GEMM operands"
    plan = FastPlan.for_recipe(recipe)
    return {"recipe": recipe.name, "numerics": numerics, "layers": layers, "recipe_spec": recipe.to_dict(),
            "fast_path": (plan.describe() + " (CUDA; telemetry steps emulated)") if plan else "none: emulated",
            "telemetry": telemetry, "extra_loss": recipe.extra_loss}
