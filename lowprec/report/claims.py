"""Claims registry -> verdicts.

Each claim (``configs/claims/<paper>.yaml``) names a metric computed from this scale's outputs and a
test. Verdicts:
  reproduced       the test passes at a scale where the claim is meaningful
  not reproduced   it fails there
  inconclusive     too few seeds, or our number exists only at a scale too small to decide
  not exercised    a precondition of the claim fails: the phenomenon it is about (outliers that
                   exist, a fallback rule that fired, a format decision that was ever not E4M3) is
                   absent from our runs, so passing or failing the test would say nothing
  not run at this scale   the runs or files the metric (or a precondition) needs do not exist

Reasons (``reasons`` in an entry: ``{verdict, scales, text}``): a paragraph written by hand for a
verdict other than ``reproduced`` (the scale, a hardware ratio, our choice where the paper is silent,
or a real disagreement), shown under the claims table; it applies only while the verdict is that one.

Preconditions (``preconditions`` in an entry, each ``{what, metric, test}`` with a value metric and
a threshold test, read like a claim's own): evaluated after the claim's metric; the first that fails
gives ``not exercised`` with what failed and what the test alone would have said.

Tests:
  noninferiority   loss_gap = mean(method) - mean(baseline) over seeds, per model; reproduced when a
                   one-sided t-test rejects "gap >= margin" at alpha for every model (seeds rather
                   than single runs); not reproduced when the test in the other direction rejects
                   "gap <= margin"; else inconclusive. ``margin_pct`` instead of ``margin`` states
                   it in percent of the baseline's mean loss (claims such as "within 0.5 % of BF16").
                   The default tests the per-seed differences (a paired t-test): a seed gives every
                   arm the same initial weights and batch order, so the runs of two arms are matched
                   pairs and the pairing removes the seed-to-seed spread that a two-sample test
                   carries. ``statistic: welch`` (in the entry, or the workflow's
                   ``claims_statistic`` for entries that name none) uses a one-sided Welch t-test over
                   seeds instead; the detail shows both p-values either way.
  threshold        value (op) target, within tolerance. A value averaged over runs names the column
                   that counts them (``seeds_column``); fewer than the test's ``seeds`` (default 3)
                   behind any row reduced gives ``inconclusive``, as a loss claim's would.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from .. import config as cfglib
from ..config import FINETUNE, PRETRAIN
from ..io import write_text
from .markdown import markdown_lines

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_RUN = "reproduced", "not reproduced", "inconclusive", "not run at this scale"
NOT_EXERCISED = "not exercised"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, NOT_EXERCISED, INCONCLUSIVE, NOT_RUN)
STATISTICS = ("paired", "welch")  # of a noninferiority test; the first is the default


def load_claims(paper: str) -> list[dict]:
    path = cfglib.CONFIG_DIR / "claims" / f"{paper}.yaml"
    if not path.is_file():
        return []
    return cfglib.validate(cfglib.load_yaml(path), "claims", f"claims file {path.name}")["claims"]


def _one_sided_p(diff: float, se: float, df: float, less: bool) -> float:
    """p-value of H0: diff >= 0 (less=True) or diff <= 0 (less=False), diff ~ t(df) * se."""
    from scipy import stats

    if se == 0:
        return 0.0 if (diff < 0) == less and diff != 0 else 1.0
    t = diff / se
    return float(stats.t.cdf(t, df) if less else stats.t.sf(t, df))


def _welch_one_sided(a: np.ndarray, b: np.ndarray, margin: float, less: bool) -> float:
    """p-value of H0: mean(a) - mean(b) >= margin (less=True) or <= margin (less=False)."""
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    if va + vb == 0:
        return _one_sided_p(a.mean() - b.mean() - margin, 0.0, 1.0, less)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return _one_sided_p(a.mean() - b.mean() - margin, math.sqrt(va + vb), df, less)


def _paired_one_sided(d: np.ndarray, margin: float, less: bool) -> float:
    """The same hypotheses on per-seed differences d = a[seed] - b[seed] (paired t-test)."""
    return _one_sided_p(d.mean() - margin, d.std(ddof=1) / math.sqrt(len(d)), len(d) - 1, less)


LOSSES = {"val": "final_val_loss", "train": "final_train_loss"}  # a loss_gap metric's ``loss``


def _by_seed(runs: pd.DataFrame, model: str, method: str, claim: dict) -> pd.Series:
    """Final loss (validation, or training with ``loss: train``) per seed of one arm. A seed twice
    means two run folders for one run (e.g. a fine-tuning run passed with the pre-training runs): it
    would count as two samples."""
    rows = runs[(runs["model"] == model) & (runs["method"] == method)]
    twice = sorted(int(s) for s in rows["seed"][rows["seed"].duplicated()].unique())
    if twice:
        raise ValueError(f"claim {claim.get('id', '?')}: {model}/{method} has more than one run for seed(s) "
                         f"{twice}; pass each (model, method, seed) run folder once")
    column = LOSSES[claim["metric"].get("loss", "val")]
    if column not in rows:  # a runs table without that loss: the claim has no runs to read
        return pd.Series(dtype=float)
    return rows.set_index("seed")[column].astype(float).dropna()


def claim_arms(claim: dict) -> set[tuple[str, str]]:
    """(PRETRAIN or FINETUNE, method): the arms whose runs the claim's number and preconditions come
    from: a loss claim's method and baseline, a value claim's ``arms`` and ``finetune_arms`` (none
    for a number no run gives, such as a GPU measurement). ``metric.models`` narrows the models."""
    m = claim["metric"]
    methods = [m["method"], m["baseline"]] if m["kind"] == "loss_gap" else claim.get("arms", [])
    return {(PRETRAIN, x) for x in methods} | {(FINETUNE, x) for x in claim.get("finetune_arms", [])}


def _loss_gap(claim: dict, per_run: pd.DataFrame, scale: str, statistic: str = STATISTICS[0]) -> dict:
    m, t = claim["metric"], claim["test"]
    if "margin" not in t and "margin_pct" not in t:
        raise ValueError(f"claim {claim.get('id', '?')}: a noninferiority test needs 'margin' or 'margin_pct'")
    statistic = t.get("statistic", statistic)
    models = m.get("models") or sorted(per_run["model"].unique()) if len(per_run) else []
    ok = per_run[per_run["status"] == "completed"]
    gaps, pvals, verdicts = [], [], []
    for model in models:
        a, b = (_by_seed(ok, model, method, claim) for method in (m["method"], m["baseline"]))
        diverged = per_run[(per_run["model"] == model) & (per_run["method"] == m["method"])
                           & (per_run["status"] == "diverged")]
        if len(diverged):
            verdicts.append(NOT_REPRODUCED)
            gaps.append(f"{model}: {len(diverged)} diverged")
            continue
        if len(a) == 0 or len(b) == 0:
            verdicts.append(NOT_RUN)
            continue
        gap = a.mean() - b.mean()
        relative = "margin_pct" in t
        pct = f" ({100 * gap / b.mean():+.2f}%)" if relative else ""
        which = " train loss" if m.get("loss", "val") == "train" else ""
        gaps.append(f"{model}:{which} {gap:+.4f}{pct} (n={len(a)}/{len(b)})")
        need = t.get("seeds", 3)
        if min(len(a), len(b)) < max(2, need):
            verdicts.append(INCONCLUSIVE)
            continue
        margin = t["margin_pct"] / 100 * b.mean() if relative else t["margin"]
        # A seed fixes the initial weights and the batch order, so arms run with the same seeds are
        # matched pairs; the paired test removes the seed-to-seed spread that the Welch test carries.
        common = a.index.intersection(b.index)
        d = (a[common] - b[common]).to_numpy()
        p = {"welch": (_welch_one_sided(a.to_numpy(), b.to_numpy(), margin, less=True),
                       _welch_one_sided(a.to_numpy(), b.to_numpy(), margin, less=False))}
        if len(d) >= 2:
            p["paired"] = (_paired_one_sided(d, margin, less=True), _paired_one_sided(d, margin, less=False))
        said = {"welch": f"Welch p={p['welch'][0]:.3g}",
                "paired": f"paired p={p['paired'][0]:.3g} over {len(d)} seeds" if "paired" in p
                else "no paired test: fewer than 2 seeds in common"}
        pvals.append(f"{model}: {said[statistic]} ({said['paired' if statistic == 'welch' else 'welch']})")
        if statistic == "paired" and len(d) < max(2, need):
            verdicts.append(INCONCLUSIVE)
            continue
        p_ok, p_bad = p[statistic]
        alpha = t.get("alpha", 0.05)
        verdicts.append(REPRODUCED if p_ok < alpha else NOT_REPRODUCED if p_bad < alpha else INCONCLUSIVE)
    return {"ours": "; ".join(gaps) or "–", "detail": "; ".join(pvals), "verdict": _combine(verdicts)}


def committed_measurements(paper: str) -> list[Path]:
    """The committed GPU measurements (metric files "/x.csv") that ``paper``'s claims and their
    preconditions read and that exist: inputs of its claims table, so that a new measurement
    redecides them."""
    metrics = [m for c in load_claims(paper) for m in [c["metric"], *(p["metric"] for p in c.get("preconditions", []))]]
    paths = {cfglib.REPO_ROOT / "results" / m["file"].lstrip("/") for m in metrics
             if str(m.get("file", "")).startswith("/")}
    return sorted(p for p in paths if p.is_file())


def _read_rows(m: dict, paper_dir: Path) -> tuple[pd.DataFrame | None, str]:
    """A value metric's rows (the file's, after the query), or None and why they cannot be read."""
    # "/x.csv": a committed reference result (GPU measurements) under the repository's results/
    committed = m["file"].startswith("/")
    path = cfglib.REPO_ROOT / "results" / m["file"].lstrip("/") if committed else paper_dir / m["file"]
    if not path.is_file():
        return None, (f"not measured: results/{m['file'].lstrip('/')} (a committed GPU measurement) is absent"
                      if committed else f"missing {m['file']}: not produced at this scale")
    try:
        df = pd.read_csv(path)
        if m.get("query"):
            df = df.query(m["query"])
    except (ValueError, KeyError, NameError, SyntaxError) as e:  # empty file, query on a missing column
        return None, f"{path.name}: cannot evaluate {m.get('query')!r} ({type(e).__name__}: {e})"
    for col in (m["column"], m.get("per")):
        if col and col not in df:
            return None, f"{path.name} has no column {col!r}"
    if df.empty:
        return None, f"no rows for {m.get('query')}"
    return df, ""


def _reduce(df: pd.DataFrame, m: dict) -> tuple[float | None, str]:
    col = df[m["column"]].astype(float)
    value = {"mean": col.mean, "max": col.max, "min": col.min, "first": lambda: col.iloc[0]}[m.get("reduce", "first")]()
    if math.isnan(value):  # e.g. a GLU-vs-GPT2 ratio without one of the models: its runs are absent
        return None, (f"{Path(m['file']).name}: {m['column']} is empty for {m.get('query')!r} "
                      f"(its runs or arms are absent at this scale)")
    return float(value), ""


def _read_value(m: dict, paper_dir: Path) -> tuple[float | None, str]:
    """A value metric's number, or None and why it cannot be read."""
    df, why = _read_rows(m, paper_dir)
    return (None, why) if df is None else _reduce(df, m)


def _seeds_behind(rows: pd.DataFrame, m: dict) -> int | None:
    """The fewest seeds behind any of a value metric's rows (its ``seeds_column``, the runs a row
    averages), None for a metric that names none (a GPU measurement, a quantity of one run)."""
    col = m.get("seeds_column")
    if not col:
        return None
    if col not in rows:
        raise ValueError(f"claim metric {m['file']}: no seeds column {col!r}")
    counts = pd.to_numeric(rows[col], errors="coerce")
    return 0 if counts.isna().any() else int(counts.min())


def _passes(value: float, t: dict) -> bool:
    target, tol = t["target"], t.get("tolerance", 0.0)
    return {"<=": value <= target + tol, ">=": value >= target - tol, "==": abs(value - target) <= tol,
            "<": value < target, ">": value > target}[t["op"]]


def _test_text(t: dict, unit: str) -> str:
    within = f" (±{t.get('tolerance', 0.0)})" if t["op"] in ("<=", ">=", "==") else ""
    return f"{t['op']} {t['target']}{unit}{within}"


def _value(claim: dict, paper_dir: Path, results: Path) -> dict:
    """A threshold test of one number, or (``per: <column>``) of one number per value of that
    column, each decided on its own and combined as the loss claims combine models."""
    m, t = claim["metric"], claim["test"]
    unit = m.get("unit", "")
    df, why = _read_rows(m, paper_dir)
    if df is None:
        return {"ours": "–", "detail": why, "verdict": NOT_RUN}
    groups = list(df.groupby(m["per"], sort=False)) if m.get("per") else [(None, df)]
    ours, details, verdicts = [], [], []
    for key, g in groups:
        value, why = _reduce(g, m)
        at = "" if key is None else f"{key}: "
        if value is None:
            details.append(at + why)
            verdicts.append(NOT_RUN)
            continue
        seeds, need = _seeds_behind(g, m), t.get("seeds", 3)
        few = seeds is not None and seeds < need
        ours.append(f"{at}{value:.4g}{unit}" + (f" (n={seeds})" if few else ""))
        verdicts.append(REPRODUCED if _passes(value, t) else NOT_REPRODUCED)
        if few:
            # an average of fewer runs than the claim asks for: the seed spread is unknown
            details.append(f"{at}{seeds} of the {need} seeds a verdict needs; the test alone: {verdicts[-1]}")
            verdicts[-1] = INCONCLUSIVE
        elif key is not None:
            details.append(f"{key}: {verdicts[-1]}")
    if not ours:
        return {"ours": "–", "detail": "; ".join(details), "verdict": _combine(verdicts)}
    notes = f" ({'; '.join(details)})" if details else ""
    return {"ours": "; ".join(ours), "detail": _test_text(t, unit) + notes, "verdict": _combine(verdicts)}


def _precondition(claim: dict, paper_dir: Path) -> tuple[str, str] | None:
    """None when every precondition holds; else (verdict, detail): ``not exercised`` for the first
    that fails, ``not run at this scale`` when one cannot be read (its table is absent)."""
    for pre in claim.get("preconditions", []):
        value, why = _read_value(pre["metric"], paper_dir)
        if value is None:
            return NOT_RUN, f"precondition ({pre['what']}) cannot be checked: {why}"
        if not _passes(value, pre["test"]):
            unit = pre["metric"].get("unit", "")
            return NOT_EXERCISED, (f"precondition fails: {pre['what']}: ours {value:.4g}{unit}, "
                                   f"needs {_test_text(pre['test'], unit)}")
    return None


def _combine(verdicts: list[str]) -> str:
    if not verdicts or all(v == NOT_RUN for v in verdicts):
        return NOT_RUN
    for v in (NOT_REPRODUCED, INCONCLUSIVE, NOT_RUN):
        if v in verdicts:
            return v
    return REPRODUCED


def evaluate(paper: str, scale: str, per_run: pd.DataFrame, results: Path, statistic: str = STATISTICS[0]) -> pd.DataFrame:
    """Verdicts of the paper's claims; ``statistic`` tests the loss claims whose entry names none."""
    rows = []
    paper_dir = results / paper / scale
    for c in load_claims(paper):
        out = _loss_gap(c, per_run, scale, statistic) if c["metric"]["kind"] == "loss_gap" else \
            _value(c, paper_dir, results)
        failed = _precondition(c, paper_dir) if out["verdict"] != NOT_RUN else None
        if failed:
            # the phenomenon is absent: the test's own outcome is kept in the detail, never the verdict
            verdict, why = failed
            out = {**out, "verdict": verdict,
                   "detail": f"{why}; the test alone: {out['verdict']}" + (f" ({out['detail']})" if out["detail"] else "")}
        if out["verdict"] in (REPRODUCED, NOT_REPRODUCED) and scale not in c["meaningful_at"]:
            out["detail"] = (out["detail"] + "; " if out["detail"] else "") + \
                f"{out['verdict']} at {scale}, meaningful at {', '.join(c['meaningful_at'])}"
            out["verdict"] = INCONCLUSIVE
        rows.append({"paper": paper, "claim": c["id"], "statement": c["statement"], "source": c["source"],
                     "paper_value": c["paper_value"], "scale": scale, **out,
                     "why": reason(c, scale, out["verdict"], short=True), "reason": reason(c, scale, out["verdict"])})
    return pd.DataFrame(rows, columns=["paper", "claim", "statement", "source", "paper_value", "scale",
                                       "ours", "detail", "verdict", "why", "reason"])


def reason(claim: dict, scale: str, verdict: str, short: bool = False) -> str:
    """The registry's hand-written reason for this verdict at this scale ("" if none), its paragraph
    or (``short``) its few words: a reason is written for one verdict, so that a verdict that
    changes loses its reason until one is written."""
    if verdict == REPRODUCED:
        return ""
    for r in claim.get("reasons", []):
        if r["verdict"] == verdict and scale in r.get("scales", cfglib.SCALES):
            return " ".join(r["short" if short else "text"].split())
    return ""


def to_markdown(table: pd.DataFrame) -> str:
    lines = markdown_lines(["claim", "paper", "ours", "verdict", "test", "source"],
                           ([f"{r['claim']}: {r['statement']}", r["paper_value"], r["ours"], f"**{r['verdict']}**",
                             r["detail"] or "–", r["source"]] for _, r in table.iterrows()))
    reasons = [f"- **{r['claim']}** ({r['verdict']}): {r['reason']}" for _, r in table.iterrows()
               if isinstance(r.get("reason"), str) and r["reason"]]
    if reasons:
        lines += ["", "Why the verdicts other than `reproduced` are what they are:", "", *reasons]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    from .runs import final_losses, load_runs

    ap = argparse.ArgumentParser(description="Verdicts for a paper's claims at one scale.")
    ap.add_argument("--paper", required=True)
    ap.add_argument("--scale", required=True)
    ap.add_argument("--results", default="results")
    ap.add_argument("--runs", nargs="*", default=[])
    ap.add_argument("--statistic", choices=STATISTICS, default=STATISTICS[0],
                    help="test of the loss claims whose registry entry names none")
    ap.add_argument("--csv", required=True)
    ap.add_argument("--md", required=True)
    args = ap.parse_args(argv)
    per_run = final_losses(load_runs(args.runs)) if args.runs else pd.DataFrame(
        columns=["model", "method", "seed", "status", "final_val_loss"])
    table = evaluate(args.paper, args.scale, per_run, Path(args.results), args.statistic)
    write_text(args.csv, table.to_csv(index=False))
    write_text(args.md, to_markdown(table))


if __name__ == "__main__":
    main()
