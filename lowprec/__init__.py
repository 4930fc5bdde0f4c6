"""lowprec: a reproducibility suite for low-precision LLM training papers."""

__version__ = "0.1.0"

from .linear import QLinear, convert  # noqa: E402,F401
from .recipes import RECIPES, Recipe, recipe_from_config  # noqa: E402,F401
