import re
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


def test_readme_is_short_and_its_links_resolve():

    text = (REPO / "README.md").read_text()
    assert len(text.encode()) < 20_000, f"README.md is {len(text.encode())} bytes; long text goes to docs/"
    for target in re.findall(r"\]\(([^)#]+?)(?:#[^)]*)?\)", text):
        if not target.startswith("http"):
            assert (REPO / target).exists(), f"README links to {target}, which is not in the repository"
    for doc, anchor in re.findall(r"\]\((docs/[^)#]+)#([^)]+)\)", text):
        headings = [re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
                    for h in re.findall(r"^#+ (.*)$", (REPO / doc).read_text(), flags=re.M)]
        assert anchor in headings, f"README links to {doc}#{anchor}; headings there: {headings}"


def test_verdict_table_says_where_each_number_comes_from():
    import csv

    import yaml

    rows = {}
    for line in readme.verdict_table(REPO / "results", ["gaussws", "int8_fallback", "mor"])[2:]:
        paper, claim, _, ours, source, verdict, _why = [c.strip() for c in line.strip("|").split(" | ")]
        rows[(paper, claim)] = (ours, source, verdict)
    for paper in ("gaussws", "int8_fallback", "mor"):
        registry = yaml.safe_load((REPO / "configs" / "claims" / f"{paper}.yaml").read_text())["claims"]
        with (REPO / "results" / paper / "small" / "tables" / "claims.csv").open(newline="") as f:
            small = {r["claim"]: r for r in csv.DictReader(f)}
        for claim in registry:
            ours, source, verdict = rows[(paper, claim["id"])]
            file = str(claim["metric"].get("file", ""))
            if verdict == "not run at this scale":
                assert source == "–"
            elif file.startswith("/"):  # a committed GPU measurement, whatever the scale
                assert source.startswith("H200 benchmark") and f"(results{file})" in source, source
            elif claim["id"] in small and small[claim["id"]]["verdict"] in ("reproduced", "not reproduced"):
                assert re.fullmatch(r"`small` \(H200, \d+(-\d+)? seeds?\)", source) or "benchmark" in source, source
                assert ours == (small[claim["id"]]["ours"] or "–")
