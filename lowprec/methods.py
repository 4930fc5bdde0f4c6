"""Methods: what a run's ``method`` section does to the model before training.

A method names a ``recipe``.  ``bf16`` is the baseline: Lightning's ``bf16-mixed`` on GPU; on CPU the
run keeps fp32 (bf16 autocast is about 3x slower than fp32 on CPU cores) and says so in its outputs.
"""

from __future__ import annotations

from torch import nn

RECIPES = ("bf16",)


def resolve_precision(requested: str, on_gpu: bool) -> str:
    if requested != "auto":
        return requested
    return "bf16-mixed" if on_gpu else "32-true"


def apply_method(model: nn.Module, method_cfg: dict, precision: str) -> dict:
    """Prepare ``model`` for the method in place; return a description for the run's provenance."""
    recipe = method_cfg.get("recipe", "bf16")
    if recipe not in RECIPES:
        raise ValueError(f"method.recipe: unknown recipe {recipe!r}; known: {list(RECIPES)}")
    if recipe == "bf16":
        numerics = "bf16 autocast (Lightning bf16-mixed)" if precision.startswith("bf16") else \
            f"{precision} stand-in for the bf16 baseline (CPU)"
        return {"recipe": recipe, "numerics": numerics}
    raise AssertionError("unreachable")
