"""lowprec.io: whole-or-nothing writes, and writes that keep an unchanged file as it is."""

import subprocess
import sys

import pytest
import yaml

from lowprec.io import atomic_path, write_yaml


def test_atomic_path_leaves_nothing_when_the_block_fails(tmp_path):
    out = tmp_path / "sub" / "x.yaml"
    with pytest.raises(RuntimeError):
        with atomic_path(out) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_write_yaml_if_changed_keeps_an_unchanged_file_and_its_time(tmp_path):
    import os

    out = tmp_path / "run.yaml"
    cfg = {"paper": "mor", "seed": 0, "train": {"lr": 1.0e-3, "betas": [0.9, 0.95]}, "name": "it's"}
    assert write_yaml(out, cfg, if_changed=True)
    os.utime(out, ns=(1_000_000_000, 1_000_000_000))
    assert not write_yaml(out, cfg, if_changed=True)
    assert out.stat().st_mtime_ns == 1_000_000_000
    assert yaml.safe_load(out.read_text()) == cfg
    assert write_yaml(out, {**cfg, "seed": 1}, if_changed=True)
    assert out.stat().st_mtime_ns > 1_000_000_000 and yaml.safe_load(out.read_text())["seed"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["run.yaml"]  # no temporary file left


def test_light_modules_do_not_import_torch():
    # the workflow's small jobs start in a fraction of a second only while this holds
    code = "import sys, lowprec.io, lowprec.report.tables; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def test_telemetry_file_is_gzip_with_the_same_bytes_for_the_same_rows(tmp_path):
    """A run's telemetry is committed compressed; a rerun with the same rows writes the same bytes
    (no time in the gzip header), and a run that recorded none reads as None."""
    import gzip
    import time

    import pandas as pd

    from lowprec.telemetry import TELEMETRY_FILE, read_telemetry, write_telemetry

    rows = pd.DataFrame({"step": [0, 0, 20], "layer": ["a", "b", "a"], "gemm": ["fprop"] * 3,
                         "operand": ["x"] * 3, "sqnr_db": [31.25, float("nan"), 29.5]})
    assert read_telemetry(tmp_path) is None
    write_telemetry(tmp_path, rows)
    first = (tmp_path / TELEMETRY_FILE).read_bytes()
    assert gzip.decompress(first).decode() == rows.to_csv(index=False)
    time.sleep(1.1)
    write_telemetry(tmp_path, rows)
    assert (tmp_path / TELEMETRY_FILE).read_bytes() == first
    pd.testing.assert_frame_equal(read_telemetry(tmp_path), rows)
    assert [p.name for p in tmp_path.iterdir()] == [TELEMETRY_FILE]
    (tmp_path / TELEMETRY_FILE).rename(tmp_path / "telemetry.csv")
    with pytest.raises(FileNotFoundError, match="telemetry.csv: telemetry of an older version"):
        read_telemetry(tmp_path)
