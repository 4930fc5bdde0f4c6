"""lowprec.io: whole-or-nothing writes, and the YAML writer the workflow's config rules run."""

import json
import subprocess
import sys

import pytest
import yaml

from lowprec.io import atomic_path, main, write_yaml


def test_atomic_path_leaves_nothing_when_the_block_fails(tmp_path):
    out = tmp_path / "sub" / "x.yaml"
    with pytest.raises(RuntimeError):
        with atomic_path(out) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_yaml_cli_writes_the_object_as_write_yaml_does(tmp_path):
    cfg = {"paper": "mor", "seed": 0, "train": {"lr": 1.0e-3, "betas": [0.9, 0.95]}, "x": None,
           "name": "it's \"quoted\""}
    main(["yaml", str(tmp_path / "a.yaml"), json.dumps(cfg)])
    write_yaml(tmp_path / "b.yaml", cfg)
    assert (tmp_path / "a.yaml").read_text() == (tmp_path / "b.yaml").read_text()
    assert yaml.safe_load((tmp_path / "a.yaml").read_text()) == cfg


def test_yaml_cli_rejects_bad_json_without_output(tmp_path):
    out = tmp_path / "c.yaml"
    r = subprocess.run([sys.executable, "-m", "lowprec.io", "yaml", str(out), "{bad"], capture_output=True, text=True)
    assert r.returncode != 0 and "JSON argument" in r.stderr and not out.exists()


def test_light_modules_do_not_import_torch():
    # the workflow's small jobs start in a fraction of a second only while this holds
    code = "import sys, lowprec.io, lowprec.report.tables; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"
