from pathlib import Path

from conftest import REPO
from lowprec.report import readme


def test_readme_results_block_matches_committed_tables():
    text = (REPO / "README.md").read_text()
    assert readme.render(text, REPO / "results") == text, \
        "README.md results block is stale: run `python -m lowprec.report.readme`"


def test_readme_has_the_two_fresh_machine_commands():
    text = (REPO / "README.md").read_text()
    assert "pip install -e . && snakemake --cores all" in text
    test_cmd = 'pip install -e ".[test]" && python -m pytest -q'
    assert test_cmd in text and test_cmd in (REPO / ".ci" / "run").read_text()
