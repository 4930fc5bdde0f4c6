"""Regeneration from committed runs (`snakemake regenerate --config reuse_runs=true`): the GaussWS
tables rebuilt from copies of its committed tiny run folders, without training, equal the committed
tables byte for byte."""

import shutil
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "1"]
PAPER, SCALE = "gaussws", "tiny"
CONFIG = ["--config", f"scale={SCALE}", f"papers=[{PAPER}]", "reuse_runs=true"]


def _copy_committed_runs(dest: Path) -> list[Path]:
    """The files of each run folder (what git holds: checkpoints/ and logs/ are ignored)."""
    src_root = REPO / "results" / "runs" / SCALE / PAPER
    runs = sorted(p.parent for p in src_root.rglob("provenance.json"))
    assert runs, f"no committed runs under {src_root}"
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


def test_missing_run_folder_is_named(tmp_path):
    runs = _copy_committed_runs(tmp_path)
    gone = tmp_path / "results" / runs[0].relative_to(REPO / "results")
    shutil.rmtree(gone)
    proc = _snakemake(["-n", "regenerate", *CONFIG], tmp_path)
    assert proc.returncode != 0
    assert str(gone.relative_to(tmp_path)) in proc.stderr + proc.stdout


def test_regenerate_without_reuse_runs_refuses(tmp_path):
    proc = _snakemake(["-n", "regenerate", "--config", "scale=smoke"], tmp_path)
    assert proc.returncode != 0 and "reuse_runs=true" in proc.stderr + proc.stdout
