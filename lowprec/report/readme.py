"""Keep README.md's results block equal to the committed result tables.

``python -m lowprec.report.readme`` rewrites the block between the markers; a test checks that the
README on disk equals what this would write, so the README never disagrees with ``results/``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import config as cfglib
from ..io import write_text

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


SCALES = ("tiny", "small")  # the default (CPU) scale and the committed GPU reference
# verdicts at a scale where a claim is meaningful outrank those where it is not run or inconclusive
_RANK = {"reproduced": 3, "not reproduced": 3, "not exercised": 2, "inconclusive": 1, "not run at this scale": 0}


def _claims(results: Path, paper: str, scale: str):
    import pandas as pd

    path = results / paper / scale / "tables" / "claims.csv"
    return pd.read_csv(path, keep_default_na=False).set_index("claim") if path.is_file() else None


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ") if text != "" else "–"


def verdict_table(results: Path, papers: list[str]) -> list[str]:
    """One row per claim: the paper's number, ours at each scale, and the verdict of the most
    telling scale (a decided verdict over an inconclusive one, the larger scale on a tie)."""
    head = ["paper", "claim", "paper's number"] + [f"ours ({sc})" for sc in SCALES] + ["verdict"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for paper in papers:
        tables = {sc: _claims(results, paper, sc) for sc in SCALES}
        present = [t for t in tables.values() if t is not None]
        if not present:
            continue
        for claim in present[0].index:
            best, best_scale = None, None
            for sc in SCALES:
                t = tables[sc]
                if t is not None and claim in t.index:
                    v = t.loc[claim, "verdict"]
                    if best is None or _RANK.get(v, 0) >= _RANK.get(best, 0):
                        best, best_scale = v, sc
            ours = [_cell(tables[sc].loc[claim, "ours"]) if tables[sc] is not None and claim in tables[sc].index
                    else "–" for sc in SCALES]
            verdict = f"{best} ({best_scale})" if best != "not run at this scale" else best
            rows.append("| " + " | ".join([paper, claim, _cell(present[0].loc[claim, "paper_value"]), *ours,
                                           verdict]) + " |")
    return rows


def results_block(results: Path, scale: str = "tiny") -> str:
    papers = [p.stem for p in sorted((cfglib.CONFIG_DIR / "experiments").glob("*.yaml"))]
    parts = [BEGIN, "", "Verdicts over the committed results (`tiny`: CPU, one seed; `small`: H200, three seeds; "
             "full reports: [results/REPORT.md](results/REPORT.md), [results/REPORT_small.md](results/REPORT_small.md)):",
             "", *verdict_table(results, papers), ""]
    for paper in papers:
        exp = cfglib.experiment_config(paper)
        shown = False
        for sc in reversed(SCALES):
            table = results / paper / sc / "tables" / "final_loss.md"
            if not table.is_file():
                continue
            if not shown:
                parts += [f"**{exp['title']}** (`{paper}`, arXiv {exp['arxiv']})", ""]
                shown = True
            fig = results / paper / sc / "figures" / "loss_curves.png"
            if fig.is_file():
                parts += [f"![{paper} loss curves, {sc}]({fig.relative_to(results.parent).as_posix()})", ""]
            parts += [f"Final loss at `{sc}`:", "", table.read_text().rstrip(), ""]
    parts.append(END)
    return "\n".join(parts)


def render(readme_text: str, results: Path, scale: str = "tiny") -> str:
    head, sep, rest = readme_text.partition(BEGIN)
    if not sep or END not in rest:
        raise ValueError(f"README.md has no {BEGIN} ... {END} block")
    return head + results_block(results, scale) + rest.split(END, 1)[1]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readme", default=str(cfglib.REPO_ROOT / "README.md"))
    ap.add_argument("--results", default=str(cfglib.REPO_ROOT / "results"))
    ap.add_argument("--scale", default="tiny")
    args = ap.parse_args(argv)
    path = Path(args.readme)
    write_text(path, render(path.read_text(), Path(args.results), args.scale))


if __name__ == "__main__":
    main()
