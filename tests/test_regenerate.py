"""Regeneration from committed runs (`snakemake regenerate --config reuse_runs=true`): the GaussWS
tables rebuilt from copies of its committed tiny run folders, without training, equal the committed
tables byte for byte; from a partial copy, the runs that are not committed are left out, listed in
the report, and the claims that need them are not run."""

import shutil
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "1"]
PAPER, SCALE = "gaussws", "tiny"
CONFIG = ["--config", f"scale={SCALE}", f"papers=[{PAPER}]", "reuse_runs=true"]


def _copy_committed_runs(dest: Path, methods=None) -> list[Path]:
    """The files of each run folder (what git holds: checkpoints/ and logs/ are ignored); with
    ``methods``, only the runs of those methods."""
    src_root = REPO / "results" / "runs" / SCALE / PAPER
    runs = sorted(p.parent for p in src_root.rglob("provenance.json"))
    assert runs, f"no committed runs under {src_root}"
    if methods is not None:
        runs = [r for r in runs if r.parent.name in methods]
    for run in runs:
        out = dest / "results" / run.relative_to(REPO / "results")
        out.mkdir(parents=True)
        for f in run.iterdir():
            if f.is_file():
                shutil.copy(f, out / f.name)  # fresh mtimes, newer than any committed table
    return runs


def _snakemake(args, cwd):
    return subprocess.run(SNAKEMAKE + args, cwd=cwd, capture_output=True, text=True)


def test_regenerated_tables_equal_committed(tmp_path):
    _copy_committed_runs(tmp_path)
    proc = _snakemake(["regenerate", *CONFIG], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rule train" not in proc.stderr and "rule gaussws_export_eval" not in proc.stderr
    committed = sorted((REPO / "results" / PAPER / SCALE / "tables").iterdir())
    assert {p.name for p in committed} >= {"final_loss.csv", "final_loss.md", "claims.csv", "export.csv"}
    for table in committed:
        ours = tmp_path / "results" / PAPER / SCALE / "tables" / table.name
        assert ours.is_file(), f"{table.name} was not regenerated"
        assert ours.read_bytes() == table.read_bytes(), f"{table.name} differs from the committed table"
    assert (tmp_path / "results" / "REPORT.md").is_file()
    assert (tmp_path / "results" / PAPER / SCALE / "figures" / "loss_curves.png").is_file()


def test_claims_statistic_reaches_the_claims_job(tmp_path):
    """configs/config.yaml's claims_statistic (paired) is what the claims job runs with, and
    --config claims_statistic=welch switches it back."""
    _copy_committed_runs(tmp_path)
    for extra, statistic in (([], "paired"), (["claims_statistic=welch"], "welch")):
        proc = _snakemake(["-n", "-p", "--forcerun", "claims", "regenerate", *CONFIG, *extra], tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        log = proc.stdout + proc.stderr
        assert f"python -m lowprec.report.claims --paper {PAPER} --scale {SCALE} --results results " \
               f"--statistic {statistic} " in log, log[-3000:]


def test_missing_run_folder_is_named(tmp_path):
    runs = _copy_committed_runs(tmp_path)
    gone = tmp_path / "results" / runs[0].relative_to(REPO / "results")
    shutil.rmtree(gone)
    proc = _snakemake(["-n", "regenerate", *CONFIG], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = proc.stdout + proc.stderr  # the warning, wherever Snakemake's logger writes
    assert "not committed" in log and str(gone.relative_to(tmp_path)) in log


def test_regenerate_from_partial_runs(tmp_path):
    """Two arms of the grid committed, the others (gaussws_b6 among them) not, no bf16 run with its
    exactness.csv and none with its export.csv: the tables are built from the arms present, the
    exactness figure keeps only its analytic reference, the export table that an earlier build left
    (of runs no longer here) is removed rather than read, REPORT.md lists the absent runs and the
    claims that need them are not run."""
    import pandas as pd

    from lowprec.report.claims import NOT_RUN

    kept = {"bf16", "gaussws_b4"}
    runs = _copy_committed_runs(tmp_path, kept)
    for run in runs:
        for name in ("exactness.csv", "export.csv"):
            (tmp_path / "results" / run.relative_to(REPO / "results") / name).unlink(missing_ok=True)
    tables = tmp_path / "results" / PAPER / SCALE / "tables"
    tables.mkdir(parents=True)
    for name in ("export.csv", "export.md"):  # an earlier build's, from runs that are not committed now
        shutil.copy(REPO / "results" / PAPER / SCALE / "tables" / name, tables / name)
    proc = _snakemake(["regenerate", *CONFIG], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    absent = f"results/runs/{SCALE}/{PAPER}/gpt2/gaussws_b6/s0"
    log = proc.stdout + proc.stderr
    assert "not committed" in log and absent in log
    assert "rule train" not in log and "rule gaussws_exactness_run" not in log
    assert "removed 2 output(s) of an earlier build" in log, log[-3000:]
    assert not (tables / "export.csv").exists() and not (tables / "export.md").exists()

    assert set(pd.read_csv(tables / "final_loss.csv")["method"]) == kept
    assert set(pd.read_csv(tables / "exactness.csv")["source"]) == {"N(0, 0.02²)"}  # no trained weights
    claims = pd.read_csv(tables / "claims.csv").set_index("claim")["verdict"]
    for claim in ("stable_vs_bf16", "fp6_parameters"):  # gaussws_b6 is absent
        assert claims[claim] == NOT_RUN, (claim, claims[claim])
    assert claims["nine_bit_limit"] == "reproduced"  # from the analytic reference alone
    assert claims["memory"] != NOT_RUN  # the committed H200 measurement is read as before

    report = (tmp_path / "results" / "REPORT.md").read_text()  # tiny is the default scale
    section = report[report.index("## Runs not committed at this scale"):]
    assert f"| {PAPER} | pre-training | gpt2 | gaussws_b6 | 0 |" in section
    assert "| bf16 |" not in section.split("\n## ")[0]


def test_report_path_per_scale():
    from lowprec.config import load_yaml, report_path

    default = load_yaml(REPO / "configs" / "config.yaml")["scale"]
    assert report_path("results", default) == "results/REPORT.md"
    other = next(s for s in ("tiny", "small") if s != default)
    assert report_path("out", other) == f"out/REPORT_{other}.md"


def test_regenerate_without_reuse_runs_refuses(tmp_path):
    proc = _snakemake(["-n", "regenerate", "--config", "scale=smoke"], tmp_path)
    assert proc.returncode != 0 and "reuse_runs=true" in proc.stderr + proc.stdout


def test_regenerate_an_untrained_grid_lists_it(tmp_path):
    """A scale with no committed run yet (its grid grows job by job): regenerate succeeds and the
    report is the list of the grid's runs, each arm with its seeds."""
    proc = _snakemake(["regenerate", "--config", "scale=medium", "papers=[gaussws]", "reuse_runs=true"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert "no run folder of gaussws at scale medium is committed" in log and "rule train" not in log
    report = (tmp_path / "results" / "REPORT_medium.md").read_text()
    section = report[report.index("## Runs not committed at this scale"):]
    assert "these 12 run(s) of the grid" in section
    for model in ("gpt2", "llama2"):
        for method in ("bf16", "gaussws_b6"):
            assert f"| gaussws | pre-training | {model} | {method} | 0, 1, 2 |" in section
    assert "## Gaussian" not in report  # no paper section without runs


def test_stale_committed_run_is_left_out_and_named(tmp_path):
    """A committed run whose config.yaml differs from what the grid resolves to now (a number that
    changes the run: its learning rate) answers another experiment: regeneration leaves it out,
    says which key changed, and the report marks its seed, while the runs of the current config stay."""
    import yaml

    from lowprec.report.build import _missing_section

    runs = _copy_committed_runs(tmp_path)
    stale = tmp_path / "results" / runs[0].relative_to(REPO / "results")
    cfg = yaml.safe_load((stale / "config.yaml").read_text())
    cfg["train"]["lr"] *= 2
    (stale / "config.yaml").write_text(yaml.safe_dump(cfg))
    proc = _snakemake(["-n", "regenerate", *CONFIG], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    name = "/".join(stale.parts[-4:])
    assert "1 committed run folder(s) hold another config" in log and f"{name}: train.lr" in log, log[-3000:]
    assert "not committed" not in log  # every other run is current

    lines = "\n".join(_missing_section(SCALE, [PAPER], {PAPER: [str(stale)]}))
    *_, method, seed = stale.parts
    assert f"| {method} | {seed.removeprefix('s')} (config changed) |" in lines, lines
