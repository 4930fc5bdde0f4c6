"""lowprec: a reproducibility suite for low-precision LLM training papers."""

__version__ = "0.1.0"
