"""``results/REPORT.md`` (``REPORT_<scale>.md`` at a scale other than the default one): per paper,
the loss-curve figure, the final-loss table, our settings and the provenance of the runs; when
regenerating from a partial set of committed runs, the runs of the grid that are not committed; then
the scale's committed size-sweep tables (``size_sweep``) and the committed GPU training-speed
benchmark (``speed``).
Reads only files that the workflow produced."""

from __future__ import annotations

import argparse
import os
from collections import Counter
from pathlib import Path

from .. import config as cfglib
from ..io import write_text
from .claims import NOT_RUN
from .markdown import markdown_lines
from .runs import load_runs
from .size_sweep import sweep_lines
from .speed import speed_lines


def _provenance_summary(runs) -> list[str]:
    commits = Counter((r.provenance.get("git_commit") or "unknown")[:10] + (" (dirty)" if r.provenance.get("git_dirty") else "")
                      for r in runs)
    devices = Counter((r.provenance.get("device") or {}).get("gpu") or "CPU" for r in runs)
    versions = Counter(" ".join(f"{k} {v}" for k, v in sorted((r.provenance.get("versions") or {}).items()) if v)
                       for r in runs)
    statuses = Counter(r.status for r in runs)
    return [
        f"- runs: {len(runs)} ({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))})",
        f"- code: {', '.join(f'{c} ×{n}' for c, n in sorted(commits.items()))}",
        f"- device: {', '.join(f'{d} ×{n}' for d, n in sorted(devices.items()))}",
        f"- versions: {'; '.join(sorted(versions))}",
    ]


GENERIC_TABLES = ("final_loss", "claims")
GENERIC_FIGURES = ("loss_curves",)


def _verdict_table(results: Path, scale: str, papers: list[str]) -> list[str]:
    import pandas as pd

    frames = [pd.read_csv(p) for p in (results / paper / scale / "tables" / "claims.csv" for paper in papers)
              if p.is_file() and p.stat().st_size > 0]
    frames = [f for f in frames if len(f)]
    if not frames:
        return []
    claims = pd.concat(frames, ignore_index=True)
    lines = ["## Verdicts", "", *markdown_lines(
        ["paper", "claim", "paper's number", f"ours ({scale})", "verdict"],
        ([r["paper"], f"{r['claim']}: {r['statement']}", r["paper_value"], r["ours"], r["verdict"]]
         for _, r in claims.iterrows()))]
    # most frequent first, ties by name: the same text on every rebuild
    counts = sorted(claims["verdict"].value_counts().items(), key=lambda vn: (-vn[1], vn[0]))
    lines += ["", "Totals: " + ", ".join(f"{n} {v}" for v, n in counts), ""]
    return lines


def _missing_section(scale: str, papers: list[str], missing: dict[str, list[str]]) -> list[str]:
    """Regeneration from a partial set of committed runs (``reuse_runs``): the runs of the grid that
    are not committed at this scale, one row per arm with its seeds, so that the tables above are
    read knowing what they leave out."""
    # a paper without any committed run is one line, not its whole grid; with no committed run at
    # all (a scale whose grid has not been trained yet) the grid is the whole report
    left_out = [p for p in missing if missing[p] and p not in papers] if papers else []
    rows = {}  # (run group, model, method) -> seeds; the group is the paper or <paper>_finetune
    for paper, dirs in missing.items():
        for d in dirs if paper not in left_out else []:
            *_, group, model, method, seed = Path(d).parts
            # a complete folder left out is stale: committed under a config the grid no longer has
            stale = " (config changed)" if not cfglib.missing_run_files(d) else ""
            rows.setdefault((paper, group, model, method), []).append(seed.removeprefix("s") + stale)
    if not rows and not left_out:
        return []
    n = sum(len(d) for d in missing.values())
    lines = ["## Runs not committed at this scale", "",
             f"Regenerated from the committed run folders under `results/runs/{scale}/`; these {n} run(s) of "
             "the grid (`configs/experiments/*.yaml`) are not committed, or were committed under a config that has "
             "changed since (marked: they train again with `--config retrain=<run>`), so the tables and figures "
             f"leave them out and a claim that needs them says `{NOT_RUN}`.", ""]
    for paper in left_out:
        lines += [f"No run of `{paper}` ({len(missing[paper])} in its grid) is committed: it is not in this report.", ""]
    if rows:
        lines += [*markdown_lines(["paper", "runs", "model", "method", "seeds"],
                                  ([paper, "fine-tuning" if group != paper else "pre-training", model, method,
                                    ", ".join(sorted(seeds, key=lambda s: int(s.split()[0])))]
                                   for (paper, group, model, method), seeds in rows.items())), ""]
    return lines


def _title(stem: str) -> str:
    return stem.replace("_", " ").capitalize()


def build(results: Path, scale: str, papers: list[str], run_dirs: dict[str, list[str]], out: Path,
          missing: dict[str, list[str]] | None = None) -> str:
    lines = [f"# lowprec results ({scale} scale)", "",
             "Regenerated by `snakemake` from the run folders under `results/runs/`. "
             "Every number below comes from those files; rerun `snakemake --config scale=<scale>` to rebuild.", ""]
    lines += _verdict_table(results, scale, papers)
    lines += _missing_section(scale, papers, missing or {})
    for paper in papers:
        exp = cfglib.experiment_config(paper)
        base = results / paper / scale
        runs = load_runs(run_dirs[paper])
        rel = lambda p: os.path.relpath(p, out.parent)  # noqa: E731
        lines += [f"## {exp['title']} (`{paper}`, arXiv {exp['arxiv']})", "",
                  f"![loss curves]({rel(base / 'figures' / 'loss_curves.png')})", "",
                  "Final validation loss (mean over seeds; Δ against the baseline method):", "",
                  (base / "tables" / "final_loss.md").read_text().rstrip(), ""]
        claims_md = base / "tables" / "claims.md"
        if claims_md.is_file() and claims_md.read_text().count("\n") > 2:
            lines += ["Claims:", "", claims_md.read_text().rstrip(), ""]
        # one section per output name: its figure, then its table (e4m3_share.png beside e4m3_share.md)
        figs = {f.stem: f for f in (base / "figures").glob("*.png") if f.stem not in GENERIC_FIGURES}
        tables = {t.stem: t for t in (base / "tables").glob("*.md") if t.stem not in GENERIC_TABLES}
        for stem in sorted(figs.keys() | tables.keys()):
            lines += [f"### {_title(stem)}", ""]
            if stem in figs:
                lines += [f"![{stem}]({rel(figs[stem])})", ""]
            if stem in tables:
                lines += [tables[stem].read_text().rstrip(), ""]
        if exp.get("our_choices"):
            lines += ["Settings that are our choices where the paper is silent:", "",
                      *[f"- {c}" for c in exp["our_choices"]], ""]
        lines += ["Provenance:", "", *_provenance_summary(runs), ""]
        emulated = [r for r in runs if r.emulated]
        if emulated:
            fast = sum(r.fast_path for r in runs)
            which = "these runs" if len(emulated) == len(runs) else f"{len(emulated)} of these {len(runs)} runs"
            lines += [f"Note: {which} emulate their recipes (linear-layer GEMM operands quantized or "
                      "rounded to BF16, fp32 accumulation; attention products, norms and embeddings in "
                      "fp32)" + (f"; {fast} ran the GPU fast path, whose tensor-core GEMMs take the "
                                 "emulation's quantized values (docs/numerics.md)" if fast else "")
                      + ". On GPU the BF16 baseline is Lightning's bf16-mixed.", ""]
    lines += sweep_lines(results, scale, lambda p: os.path.relpath(p, out.parent))
    lines += speed_lines(results, lambda p: os.path.relpath(p, out.parent))
    text = "\n".join(lines)
    write_text(out, text)
    return text


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Write results/REPORT.md (or REPORT_<scale>.md) from the workflow's outputs.")
    ap.add_argument("--results", default="results")
    ap.add_argument("--scale", required=True)
    ap.add_argument("--paper", nargs=2, action="append", default=[], metavar=("PAPER", "RUN_DIRS"),
                    help="paper id and a comma-separated list of its run folders (repeat per paper)")
    ap.add_argument("--missing", nargs=2, action="append", default=[], metavar=("PAPER", "RUN_DIRS"),
                    help="reuse_runs: a paper and a comma-separated list of the run folders of its grid that "
                         "are not committed (repeat per paper; the paper may have no --paper)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    run_dirs = {p: dirs.split(",") for p, dirs in args.paper}
    missing = {p: dirs.split(",") for p, dirs in args.missing}
    build(Path(args.results), args.scale, list(run_dirs), run_dirs, Path(args.out), missing)


if __name__ == "__main__":
    main()
