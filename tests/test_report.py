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


def test_verdict_row_takes_a_decided_verdict_else_the_larger_scale(tmp_path):
    """A decided verdict at `tiny` outranks an undecided one at `small`; between undecided ones the
    larger scale is shown (a phenomenon absent at `tiny`, present but too weak to decide at `small`)."""
    import pandas as pd

    verdicts = {"tiny": {"decided_small": "not exercised", "decided_tiny": "reproduced",
                         "undecided": "not exercised", "both": "reproduced"},
                "small": {"decided_small": "not reproduced", "decided_tiny": "inconclusive",
                          "undecided": "inconclusive", "both": "not reproduced"}}
    for scale, by_claim in verdicts.items():
        d = tmp_path / "mor" / scale / "tables"
        d.mkdir(parents=True)
        pd.DataFrame([{"claim": c, "paper_value": "1", "ours": f"{scale} {c}", "verdict": v, "why": ""}
                      for c, v in by_claim.items()]).to_csv(d / "claims.csv", index=False)
    rows = {r["claim"]: (r["scale"], r["verdict"]) for r in readme.verdict_rows(tmp_path, ["mor"])}
    assert rows == {"decided_small": ("small", "not reproduced"), "decided_tiny": ("tiny", "reproduced"),
                    "undecided": ("small", "inconclusive"), "both": ("small", "not reproduced")}
