import math
from pathlib import Path

import pandas as pd
import pytest

from lowprec.report import claims as cl


def _runs(gaps, base=5.0, seeds=3, noise=0.003, status="completed"):
    rows = []
    for model, gap in gaps.items():
        for s in range(seeds):
            jitter = noise * (s - (seeds - 1) / 2)
            rows.append({"model": model, "method": "bf16", "seed": s, "status": "completed", "final_val_loss": base + jitter})
            rows.append({"model": model, "method": "m", "seed": s, "status": status, "final_val_loss": base + gap - jitter})
    return pd.DataFrame(rows)


CLAIM = {"metric": {"kind": "loss_gap", "method": "m", "baseline": "bf16"},
         "test": {"kind": "noninferiority", "margin": 0.02, "seeds": 3, "alpha": 0.05}}


@pytest.mark.parametrize("gaps, seeds, verdict", [
    ({"a": 0.0, "b": -0.01}, 3, cl.REPRODUCED),
    ({"a": 0.0, "b": 0.08}, 3, cl.NOT_REPRODUCED),
    ({"a": 0.0}, 1, cl.INCONCLUSIVE),
    ({"a": 0.019}, 3, cl.INCONCLUSIVE),   # too close to the margin to decide with 3 seeds
])
def test_noninferiority_verdicts(gaps, seeds, verdict):
    assert cl._loss_gap(CLAIM, _runs(gaps, seeds=seeds), "small")["verdict"] == verdict


def test_diverged_and_missing_runs():
    assert cl._loss_gap(CLAIM, _runs({"a": 0.0}, status="diverged"), "small")["verdict"] == cl.NOT_REPRODUCED
    empty = pd.DataFrame(columns=["model", "method", "seed", "status", "final_val_loss"])
    assert cl._loss_gap(CLAIM, empty, "small")["verdict"] == cl.NOT_RUN


def test_welch_matches_scipy():
    from scipy import stats
    import numpy as np

    a, b = np.array([5.01, 5.02, 5.00, 5.03]), np.array([5.00, 4.99, 5.01])
    p = cl._welch_one_sided(a, b, 0.0, less=False)
    assert p == pytest.approx(stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)


def test_paired_matches_scipy():
    from scipy import stats
    import numpy as np

    a, b = np.array([5.012, 4.951, 4.998]), np.array([5.010, 4.946, 4.994])
    for less, alternative in ((True, "less"), (False, "greater")):
        p = cl._paired_one_sided(a - b, 0.02, less=less)
        assert p == pytest.approx(stats.ttest_rel(a - 0.02, b, alternative=alternative).pvalue)


def _seed_matched(spread=0.05, gap=0.004, wobble=0.001):
    """Seeds far apart (spread) with a steady per-seed gap: Welch cannot decide, the paired test can."""
    rows = []
    for s, (level, w) in enumerate(zip((-spread, 0.0, spread), (-wobble, 0.0, wobble))):
        rows.append({"model": "a", "method": "bf16", "seed": s, "status": "completed", "final_val_loss": 5.0 + level})
        rows.append({"model": "a", "method": "m", "seed": s, "status": "completed",
                     "final_val_loss": 5.0 + level + gap + w})
    return pd.DataFrame(rows)


def test_paired_statistic_uses_the_seed_pairs():
    runs = _seed_matched()
    welch = cl._loss_gap(CLAIM, runs, "small", "welch")
    assert welch["verdict"] == cl.INCONCLUSIVE
    assert "Welch p=" in welch["detail"] and "paired p=" in welch["detail"] and "over 3 seeds" in welch["detail"]
    # paired is the default; the entry's own statistic wins over the workflow's
    default = cl._loss_gap(CLAIM, runs, "small")
    assert default["verdict"] == cl.REPRODUCED and default["detail"].startswith("a: paired p=")
    assert default["detail"].endswith("(Welch p=" + welch["detail"].split("Welch p=")[1].split(" ")[0] + ")")
    paired = {**CLAIM, "test": {**CLAIM["test"], "statistic": "paired"}}
    assert cl._loss_gap(paired, runs, "small", "welch")["verdict"] == cl.REPRODUCED
    pinned = {**CLAIM, "test": {**CLAIM["test"], "statistic": "welch"}}
    assert cl._loss_gap(pinned, runs, "small")["verdict"] == cl.INCONCLUSIVE
    far = _seed_matched(gap=0.03)   # a steady gap above the 0.02 margin
    assert cl._loss_gap(paired, far, "small")["verdict"] == cl.NOT_REPRODUCED
    # seeds that do not match (bf16 ran 0-2, the method 3-5) leave nothing to pair
    shifted = runs.assign(seed=[s + 3 if m == "m" else s for s, m in zip(runs["seed"], runs["method"])])
    out = cl._loss_gap(paired, shifted, "small")
    assert out["verdict"] == cl.INCONCLUSIVE and "fewer than 2 seeds in common" in out["detail"]


def test_a_seed_twice_is_named():
    runs = _runs({"a": 0.0})
    twice = pd.concat([runs, runs[runs["method"] == "m"].head(1)])
    with pytest.raises(ValueError, match=r"a/m has more than one run for seed\(s\) \[0\]"):
        cl._loss_gap({**CLAIM, "id": "c"}, twice, "small")


def test_workflow_statistic_decides_registry_claims_that_name_none(tmp_path):
    runs = _seed_matched(spread=0.05, gap=0.004).replace({"method": {"m": "mor_tensor"}}).assign(model="nemotron")
    (tmp_path / "mor" / "small" / "tables").mkdir(parents=True)   # the arm trained in E4M3 (its precondition)
    pd.DataFrame({"method": ["mor_tensor"], "group": ["all"], "e4m3_pct": [99.0]}).to_csv(
        tmp_path / "mor" / "small" / "tables" / "e4m3_share.csv", index=False)
    verdict = {s: cl.evaluate("mor", "small", runs, tmp_path, s).set_index("claim").loc["loss_per_tensor", "verdict"]
               for s in ("welch", "paired")}
    assert verdict == {"welch": cl.INCONCLUSIVE, "paired": cl.REPRODUCED}
    assert cl.evaluate("mor", "small", runs, tmp_path).set_index("claim").loc["loss_per_tensor", "verdict"] == cl.REPRODUCED
    # the command line's default is the library's
    assert cl.STATISTICS[0] == "paired"


def test_value_threshold_and_scale(tmp_path):
    paper_dir = tmp_path / "p" / "tiny"
    (paper_dir / "tables").mkdir(parents=True)
    pd.DataFrame({"method": ["x", "y"], "v": [1.2, 3.0]}).to_csv(paper_dir / "tables" / "t.csv", index=False)
    claim = {"metric": {"kind": "value", "file": "tables/t.csv", "query": "method == 'x'", "column": "v"},
             "test": {"kind": "threshold", "op": "<=", "target": 1.4}}
    assert cl._value(claim, paper_dir, tmp_path)["verdict"] == cl.REPRODUCED
    claim["test"]["target"] = 1.0
    assert cl._value(claim, paper_dir, tmp_path)["verdict"] == cl.NOT_REPRODUCED
    claim["test"] = {"kind": "threshold", "op": ">", "target": 1.2}   # strict: equal is not more
    assert cl._value(claim, paper_dir, tmp_path)["verdict"] == cl.NOT_REPRODUCED
    claim["test"]["target"] = 1.1999
    assert cl._value(claim, paper_dir, tmp_path)["verdict"] == cl.REPRODUCED
    claim["metric"]["file"] = "tables/missing.csv"
    assert cl._value(claim, paper_dir, tmp_path)["verdict"] == cl.NOT_RUN


def test_a_value_averaged_over_too_few_seeds_decides_nothing(tmp_path):
    """A number averaged over runs (``seeds_column``) decides only with the test's seeds behind every
    row it reduces (default 3), as a loss claim does: one fine-tuning run far from BF16 is a run,
    not a verdict. A metric without the column is read as it is; a column the table lacks is an
    error that names it."""
    paper_dir = tmp_path / "p" / "medium"
    (paper_dir / "tables").mkdir(parents=True)
    claim = {"metric": {"kind": "value", "file": "tables/t.csv", "query": "method == 'x'", "column": "v",
                        "reduce": "max", "seeds_column": "n"},
             "test": {"kind": "threshold", "op": "<=", "target": 0.02}}

    def value(v, n, **test):
        pd.DataFrame({"method": ["x"] * len(v), "v": v, "n": n}).to_csv(paper_dir / "tables" / "t.csv", index=False)
        return cl._value({**claim, "test": {**claim["test"], **test}}, paper_dir, tmp_path)

    out = value([1.766], [1])
    assert out["verdict"] == cl.INCONCLUSIVE and out["ours"] == "1.766 (n=1)"
    assert out["detail"] == "<= 0.02 (±0.0) (1 of the 3 seeds a verdict needs; the test alone: not reproduced)"
    assert value([0.01], [2])["verdict"] == cl.INCONCLUSIVE
    assert value([0.01, 0.015], [3, 5])["verdict"] == cl.REPRODUCED
    assert value([0.01, 0.5], [3, 2])["verdict"] == cl.INCONCLUSIVE     # the fewest behind any row
    assert value([0.5], [3])["verdict"] == cl.NOT_REPRODUCED
    assert value([0.5], [1], seeds=1)["verdict"] == cl.NOT_REPRODUCED   # a claim may ask for fewer
    assert value([0.01], [""])["verdict"] == cl.INCONCLUSIVE            # a count that is missing: none
    per = {**claim, "metric": {**claim["metric"], "per": "method", "query": None}}
    pd.DataFrame({"method": ["x", "y"], "v": [0.01, 0.01], "n": [3, 1]}).to_csv(paper_dir / "tables" / "t.csv", index=False)
    out = cl._value(per, paper_dir, tmp_path)
    assert out["verdict"] == cl.INCONCLUSIVE and "y: 1 of the 3 seeds" in out["detail"] and "x: reproduced" in out["detail"]
    pd.DataFrame({"method": ["x"], "v": [0.01]}).to_csv(paper_dir / "tables" / "t.csv", index=False)
    with pytest.raises(ValueError, match=r"tables/t.csv: no seeds column 'n'"):
        cl._value(claim, paper_dir, tmp_path)


def test_registry_files_validate_and_every_claim_gets_a_verdict(tmp_path):
    for paper in ("gaussws", "int8_fallback", "mor"):
        table = cl.evaluate(paper, "tiny", pd.DataFrame(columns=["model", "method", "seed", "status", "final_val_loss"]),
                            tmp_path)
        assert len(table) == len(cl.load_claims(paper)) > 0
        assert set(table["verdict"]) <= set(cl.VERDICTS)


# --------------------------------------------------------------------------- preconditions

def _table(tmp_path, **cols):
    d = tmp_path / "p" / "small"
    (d / "tables").mkdir(parents=True, exist_ok=True)
    pd.DataFrame(cols).to_csv(d / "tables" / "t.csv", index=False)
    return d


PRE = {"what": "the phenomenon is there", "metric": {"file": "tables/t.csv", "query": "arm == 'x'", "column": "v"},
       "test": {"op": ">", "target": 0}}


def test_precondition_holds_fails_or_cannot_be_read(tmp_path):
    d = _table(tmp_path, arm=["x", "y"], v=[0.0, 5.0])
    assert cl._precondition({"preconditions": [PRE]}, d) == (
        cl.NOT_EXERCISED, "precondition fails: the phenomenon is there: ours 0, needs > 0")
    assert cl._precondition({}, d) is None   # an entry without preconditions is always exercised
    d = _table(tmp_path, arm=["x"], v=[0.25])
    assert cl._precondition({"preconditions": [PRE]}, d) is None
    # the first failing one is named
    second = {**PRE, "what": "a second phenomenon", "test": {"op": "<", "target": 0.1}}
    verdict, detail = cl._precondition({"preconditions": [PRE, second]}, d)
    assert verdict == cl.NOT_EXERCISED and detail.startswith("precondition fails: a second phenomenon: ours 0.25")
    (d / "tables" / "t.csv").unlink()
    verdict, detail = cl._precondition({"preconditions": [PRE]}, d)
    assert verdict == cl.NOT_RUN and "cannot be checked: missing tables/t.csv" in detail


def test_share_claim_is_not_exercised_when_every_decision_was_e4m3(tmp_path):
    """100 % E4M3 passes ">= 98.38 - 1" whatever the threshold does: no decision ever needed BF16,
    so the paper's rate was not measured. One BF16 decision makes the share a measurement."""
    d = tmp_path / "mor" / "small" / "tables"
    d.mkdir(parents=True)
    per_run = pd.DataFrame(columns=["model", "method", "seed", "status", "final_val_loss"])

    def verdict(pct):
        pd.DataFrame({"method": ["mor_channel"], "group": ["all"], "e4m3_pct": [pct], "runs": [3]}).to_csv(
            d / "e4m3_share.csv", index=False)
        return cl.evaluate("mor", "small", per_run, tmp_path).set_index("claim").loc["e4m3_share_config1"]

    row = verdict(100.0)
    assert row["verdict"] == cl.NOT_EXERCISED and row["ours"] == "100%"
    assert "the test alone: reproduced" in row["detail"]
    assert verdict(99.0)["verdict"] == cl.REPRODUCED
    assert verdict(90.0)["verdict"] == cl.NOT_REPRODUCED


def test_not_exercised_is_never_turned_into_inconclusive_by_the_scale(tmp_path):
    # at tiny (not a meaningful scale of the outlier claims) a decided verdict becomes inconclusive;
    # a missing phenomenon stays "not exercised"
    d = tmp_path / "int8_fallback" / "tiny" / "tables"
    d.mkdir(parents=True)
    pd.DataFrame({"role": ["ffn_down"] * 2, "stat": ["max_over_median", "share_above_8"], "glu": [5.0, 0.0],
                  "gpt2": [2.0, 0.0], "glu_over_gpt2": [2.5, math.nan]}).to_csv(d / "outlier_contrast.csv", index=False)
    per_run = pd.DataFrame(columns=["model", "method", "seed", "status", "final_val_loss"])
    table = cl.evaluate("int8_fallback", "tiny", per_run, tmp_path).set_index("claim")
    assert table.loc["glu_sparse_outliers", "verdict"] == cl.NOT_EXERCISED


def test_a_precondition_without_what_is_a_config_error():
    from lowprec import config as cfglib

    entry = {"id": "c", "statement": "s", "source": "x", "paper_value": "1", "meaningful_at": ["small"],
             "metric": {"kind": "value", "file": "tables/t.csv", "column": "v"},
             "test": {"kind": "threshold", "op": ">", "target": 0},
             "preconditions": [{"metric": {"file": "tables/t.csv", "column": "v"}, "test": {"op": ">", "target": 0}}]}
    with pytest.raises(cfglib.ConfigError, match=r"claims\.0\.preconditions\.0: 'what' is a required property"):
        cfglib.validate({"paper": "p", "claims": [entry]}, "claims", "claims file p.yaml")


def test_train_loss_gap_reads_the_training_loss():
    runs = _runs({"a": 0.0})
    runs["final_train_loss"] = runs["final_val_loss"] - 0.5 + [0.0, 0.05] * (len(runs) // 2)   # the method 0.05 higher
    claim = {**CLAIM, "metric": {**CLAIM["metric"], "loss": "train"}}
    out = cl._loss_gap(claim, runs, "small")
    assert out["ours"] == "a: train loss +0.0500 (n=3/3)" and out["verdict"] == cl.NOT_REPRODUCED
    assert cl._loss_gap(CLAIM, runs, "small")["ours"] == "a: +0.0000 (n=3/3)"
    # runs whose training loss was not logged (no column, or NaN) are no runs of this claim
    assert cl._loss_gap(claim, runs.drop(columns=["final_train_loss"]), "small")["verdict"] == cl.NOT_RUN
    assert cl._loss_gap(claim, runs.assign(final_train_loss=math.nan), "small")["verdict"] == cl.NOT_RUN


# --------------------------------------------------------------------------- reasons

def test_reason_applies_to_its_verdict_and_scales_only():
    claim = {"reasons": [{"verdict": cl.NOT_EXERCISED, "scales": ["small"], "short": "the  scale", "text": "why  it\n  is so"},
                         {"verdict": cl.NOT_REPRODUCED, "short": "ours", "text": "at every scale"}]}
    assert cl.reason(claim, "small", cl.NOT_EXERCISED) == "why it is so"
    assert cl.reason(claim, "small", cl.NOT_EXERCISED, short=True) == "the scale"
    assert cl.reason(claim, "tiny", cl.NOT_EXERCISED, short=True) == ""
    assert cl.reason(claim, "tiny", cl.NOT_EXERCISED) == ""           # written for small only
    assert cl.reason(claim, "tiny", cl.NOT_REPRODUCED) == "at every scale"
    assert cl.reason(claim, "small", cl.INCONCLUSIVE) == ""           # a verdict that changed loses it
    assert cl.reason({**claim, "reasons": [{**claim["reasons"][1], "verdict": cl.REPRODUCED}]},
                     "small", cl.REPRODUCED) == ""
    table = pd.DataFrame([{"claim": "c", "statement": "s", "paper_value": "1", "ours": "2", "verdict": cl.NOT_EXERCISED,
                           "detail": "d", "source": "x", "reason": "why it is so"},
                          {"claim": "e", "statement": "s", "paper_value": "1", "ours": "1", "verdict": cl.REPRODUCED,
                           "detail": "d", "source": "x", "reason": ""}])
    md = cl.to_markdown(table)
    assert md.endswith("\n\nWhy the verdicts other than `reproduced` are what they are:\n\n"
                       "- **c** (not exercised): why it is so\n")
    assert "Why the verdicts" not in cl.to_markdown(table.iloc[1:])


def _needs_reason(claim: dict, scale: str, verdict: str) -> bool:
    return verdict in (cl.NOT_REPRODUCED, cl.NOT_EXERCISED) or (verdict == cl.INCONCLUSIVE and scale in claim["meaningful_at"])


def test_every_committed_verdict_that_needs_a_reason_has_one():
    """Every committed `not reproduced` and `not exercised` verdict (and `inconclusive` at a scale
    where the claim is meaningful) carries its hand-written reason, in claims.csv, claims.md and the
    scale's report."""
    from lowprec import config as cfglib

    results = cfglib.REPO_ROOT / "results"
    checked = 0
    for csv in sorted(results.glob("*/*/tables/claims.csv")):
        paper, scale = csv.parts[-4], csv.parts[-3]
        claims = {c["id"]: c for c in cl.load_claims(paper)}
        table = pd.read_csv(csv, keep_default_na=False)
        md = (csv.parent / "claims.md").read_text()
        report = Path(cfglib.report_path(str(results), scale)).read_text()
        for _, row in table.iterrows():
            if not _needs_reason(claims[row["claim"]], scale, row["verdict"]):
                continue
            text = cl.reason(claims[row["claim"]], scale, row["verdict"])
            assert len(text) >= 80, f"{paper}/{scale}: {row['claim']} is {row['verdict']!r} without a reason in " \
                                    f"configs/claims/{paper}.yaml"
            assert row["reason"] == text, f"{csv}: {row['claim']}: regenerate the claims table"
            assert f"- **{row['claim']}** ({row['verdict']}): {text}" in md and text in report, (paper, scale, row["claim"])
            checked += 1
    assert checked >= 10


def test_every_verdict_of_the_readme_table_that_is_not_reproduced_has_its_reason():
    """At its most telling scale (the README's row), a claim that is not reproduced, not exercised or
    inconclusive carries its hand-written reason: the README's why column shows its few words, and
    the scale's report its paragraph."""
    from lowprec import config as cfglib
    from lowprec.report import readme

    results = cfglib.REPO_ROOT / "results"
    table = readme.verdict_table(results, ["gaussws", "int8_fallback", "mor"])
    assert "\n".join(table) in (cfglib.REPO_ROOT / "README.md").read_text()
    rows = readme.verdict_rows(results, ["gaussws", "int8_fallback", "mor"])
    needing = [r for r in rows if r["verdict"] in (cl.NOT_REPRODUCED, cl.NOT_EXERCISED, cl.INCONCLUSIVE)]
    assert needing
    for r in needing:
        claim = {c["id"]: c for c in cl.load_claims(r["paper"])}[r["claim"]]
        text = cl.reason(claim, r["scale"], r["verdict"])
        assert len(text) >= 80, (f"{r['paper']}/{r['claim']} is {r['verdict']!r} at {r['scale']} without a reason "
                                 f"in configs/claims/{r['paper']}.yaml")
        assert r["why"] == cl.reason(claim, r["scale"], r["verdict"], short=True) != "", \
            f"{r['paper']}/{r['claim']}: regenerate its claims table at {r['scale']}"
        assert text in Path(cfglib.report_path(str(results), r["scale"])).read_text(), (r["paper"], r["claim"])
    assert all(r["why"] == "–" for r in rows if r["verdict"] == cl.REPRODUCED)


def test_nine_bit_limit_is_decided_per_block_shape(tmp_path):
    d = tmp_path / "gaussws" / "small" / "tables"
    d.mkdir(parents=True)
    per_run = pd.DataFrame(columns=["model", "method", "seed", "status", "final_val_loss"])

    def row(peaks):
        rows = [{"source": "N(0, 0.02²)", "block": blk, "b": b, "kind": "expected", "is_peak": 1, "share": 0.99}
                for blk, b in peaks.items()]
        rows.append({"source": "trained gpt2", "block": "1x32", "b": 7, "kind": "expected", "is_peak": 1, "share": 0.9})
        pd.DataFrame(rows).to_csv(d / "exactness.csv", index=False)
        return cl.evaluate("gaussws", "small", per_run, tmp_path).set_index("claim").loc["nine_bit_limit"]

    both = row({"32x32": 9, "1x32": 9})
    assert both["verdict"] == cl.REPRODUCED and both["ours"] == "32x32: 9 bits; 1x32: 9 bits"
    assert both["detail"] == "== 9 bits (±0.0) (32x32: reproduced; 1x32: reproduced)"
    one = row({"32x32": 10, "1x32": 9})
    assert one["verdict"] == cl.NOT_REPRODUCED and one["ours"] == "32x32: 10 bits; 1x32: 9 bits"
    assert "32x32: not reproduced; 1x32: reproduced" in one["detail"]


# --------------------------------------------------------------------------- the registries' preconditions

def test_outlier_claims_need_hot_blocks(tmp_path):
    """No block above tau x the median: zero hot blocks is trivially 'few', so the sparsity claim is
    not exercised; with hot blocks the same test decides, either way."""
    d = tmp_path / "int8_fallback" / "small" / "tables"
    d.mkdir(parents=True)
    per_run = pd.DataFrame(columns=["model", "method", "seed", "status", "final_val_loss"])

    def verdicts(share_above_8):
        pd.DataFrame({"role": ["ffn_down"] * 2, "stat": ["max_over_median", "share_above_8"],
                      "glu": [12.0, share_above_8], "gpt2": [3.0, 0.0], "glu_over_gpt2": [4.0, math.nan]}
                     ).to_csv(d / "outlier_contrast.csv", index=False)
        return cl.evaluate("int8_fallback", "small", per_run, tmp_path).set_index("claim")

    none = verdicts(0.0)
    for claim in ("glu_sparse_outliers", "glu_larger_outliers"):
        assert none.loc[claim, "verdict"] == cl.NOT_EXERCISED, claim
    assert none.loc["glu_sparse_outliers", "detail"].startswith("precondition fails: hot blocks exist")
    assert "the test alone: reproduced" in none.loc["glu_sparse_outliers", "detail"]
    few = verdicts(0.01)
    assert few.loc["glu_sparse_outliers", "verdict"] == cl.REPRODUCED
    assert few.loc["glu_larger_outliers", "verdict"] == cl.REPRODUCED
    assert verdicts(0.2).loc["glu_sparse_outliers", "verdict"] == cl.NOT_REPRODUCED


def test_mor_loss_claims_need_the_arm_to_train_in_e4m3(tmp_path):
    """An arm that sent most decisions to BF16 matches BF16's loss whatever FP8 does to training."""
    d = tmp_path / "mor" / "small" / "tables"
    d.mkdir(parents=True)
    runs = _seed_matched(spread=0.05, gap=0.004).replace({"method": {"m": "mor_tensor"}}).assign(model="nemotron")

    def row(pct):
        pd.DataFrame({"method": ["mor_tensor"], "group": ["all"], "e4m3_pct": [pct]}).to_csv(d / "e4m3_share.csv", index=False)
        return cl.evaluate("mor", "small", runs, tmp_path).set_index("claim").loc["loss_per_tensor"]

    mostly_bf16 = row(20.0)
    assert mostly_bf16["verdict"] == cl.NOT_EXERCISED
    assert "kept most of its decisions in E4M3 (else it trained mostly in BF16" in mostly_bf16["detail"]
    assert "ours 20%, needs >= 50%" in mostly_bf16["detail"] and "the test alone: reproduced" in mostly_bf16["detail"]
    assert row(99.2)["verdict"] == cl.REPRODUCED
    # the table that says so is absent: the claim cannot be checked, never passed
    (d / "e4m3_share.csv").unlink()
    assert cl.evaluate("mor", "small", runs, tmp_path).set_index("claim").loc["loss_per_tensor", "verdict"] == cl.NOT_RUN


def test_memory_claim_needs_a_cost_to_bound(tmp_path):
    d = tmp_path / "gaussws" / "small" / "tables"
    d.mkdir(parents=True)
    per_run = pd.DataFrame(columns=["model", "method", "seed", "status", "final_val_loss"])

    def verdict(extra):
        pd.DataFrame({"where": ["analytic", "H200, held between steps"], "method": ["gaussws_b6", "gaussws"],
                      "extra_bytes_per_param": [2.0, extra]}).to_csv(d / "memory.csv", index=False)
        return cl.evaluate("gaussws", "small", per_run, tmp_path).set_index("claim").loc["memory", "verdict"]

    assert verdict(0.0) == cl.NOT_EXERCISED      # nothing held: "at most 2 bytes" would pass on nothing
    assert verdict(1.42) == cl.REPRODUCED
    assert verdict(2.5) == cl.NOT_REPRODUCED


def _quoted_methods(claim: dict, methods) -> set[str]:
    import re

    queries = [claim["metric"].get("query", "")] + [p["metric"].get("query", "") for p in claim.get("preconditions", [])]
    return {w for q in queries for w in re.findall(r"'([^']+)'", q or "") if w in methods}


def test_every_claim_names_the_arms_its_numbers_come_from():
    """The arms (claim_arms) are what a run of the grid is counted for (lowprec.packer orders the
    runs by the claims they decide): every method a claim's tables are read for is among them, each
    is a method of the experiment, and every value claim read from a table the runs make names its
    arms (``arms: []`` for a number no run gives)."""
    from lowprec import config as cfglib
    from lowprec.report.readme import MEASUREMENT_TABLES

    for paper in ("gaussws", "int8_fallback", "mor"):
        methods = cfglib.experiment_config(paper)["methods"]
        for claim in cl.load_claims(paper):
            arms = cl.claim_arms(claim)
            assert {m for _, m in arms} <= set(methods), (paper, claim["id"])
            file = claim["metric"].get("file", "")
            if file.startswith("/") or (paper, file) in MEASUREMENT_TABLES:
                continue   # a GPU measurement (its rows name benchmark series, not arms)
            assert _quoted_methods(claim, methods) <= {m for _, m in arms}, (paper, claim["id"])
            if claim["metric"]["kind"] == "value":
                assert "arms" in claim or "finetune_arms" in claim, f"{paper}/{claim['id']} reads {file}: name its arms"
    loss = {"metric": {"kind": "loss_gap", "method": "m", "baseline": "b"}}
    assert cl.claim_arms(loss) == {(cl.PRETRAIN, "m"), (cl.PRETRAIN, "b")}
    value = {"metric": {"kind": "value"}, "finetune_arms": ["x"], "arms": ["b"]}
    assert cl.claim_arms(value) == {(cl.FINETUNE, "x"), (cl.PRETRAIN, "b")}
    assert cl.claim_arms({"metric": {"kind": "value", "file": "/x.csv"}}) == set()


def test_claims_tables_depend_on_the_committed_measurements_they_read():
    """A claims table is an output of the measurements its claims read ("/x.csv" metrics, the
    preconditions' too): the workflow lists exactly the existing ones as its inputs."""
    from lowprec import config as cfglib

    results = cfglib.REPO_ROOT / "results"
    for paper in ("gaussws", "int8_fallback", "mor"):
        named = {results / m["file"].lstrip("/") for c in cl.load_claims(paper)
                 for m in [c["metric"], *(p["metric"] for p in c.get("preconditions", []))]
                 if str(m.get("file", "")).startswith("/")}
        assert named, paper
        assert cl.committed_measurements(paper) == sorted(p for p in named if p.is_file())
    assert results / "bench" / "e2e_h200.csv" in cl.committed_measurements("int8_fallback")
    assert "claim_measurements(w.paper)" in (cfglib.REPO_ROOT / "pipelines" / "report.smk").read_text()
