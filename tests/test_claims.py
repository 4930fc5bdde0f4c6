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
    welch = cl._loss_gap(CLAIM, runs, "small")
    assert welch["verdict"] == cl.INCONCLUSIVE
    assert "Welch p=" in welch["detail"] and "paired p=" in welch["detail"] and "over 3 seeds" in welch["detail"]
    paired = {**CLAIM, "test": {**CLAIM["test"], "statistic": "paired"}}
    assert cl._loss_gap(paired, runs, "small")["verdict"] == cl.REPRODUCED
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
    verdict = {s: cl.evaluate("mor", "small", runs, tmp_path, s).set_index("claim").loc["loss_per_tensor", "verdict"]
               for s in ("welch", "paired")}
    assert verdict == {"welch": cl.INCONCLUSIVE, "paired": cl.REPRODUCED}


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


def test_registry_files_validate_and_every_claim_gets_a_verdict(tmp_path):
    for paper in ("gaussws",):
        table = cl.evaluate(paper, "tiny", pd.DataFrame(columns=["model", "method", "seed", "status", "final_val_loss"]),
                            tmp_path)
        assert len(table) == len(cl.load_claims(paper)) > 0
        assert set(table["verdict"]) <= {cl.REPRODUCED, cl.NOT_REPRODUCED, cl.INCONCLUSIVE, cl.NOT_RUN}
