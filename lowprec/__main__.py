"""``python -m lowprec``: list the papers, recipes, methods, claims and scales (lowprec.cli)."""

from .cli import main

main()
