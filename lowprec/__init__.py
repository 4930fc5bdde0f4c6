"""lowprec: a reproducibility suite for low-precision LLM training papers."""

__version__ = "0.1.0"

# The layer API loads on first use, so that `python -m lowprec.<light module>` (the workflow's small
# jobs) does not pay for importing torch.
_LAZY = {"QLinear": "linear", "convert": "linear", "RECIPES": "recipes", "Recipe": "recipes",
         "recipe_from_config": "recipes"}
__all__ = list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
