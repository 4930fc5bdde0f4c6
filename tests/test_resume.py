"""A killed run keeps its curve, and bad checkpoints or data are named, never trusted.

The kill test runs ``python -m lowprec.train`` as a user would, SIGKILLs it once its first
checkpoint exists and it has logged rows past it, and runs the same command again."""

import builtins
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from conftest import smoke_run_config
from lowprec import checkpoint as ckptlib
from lowprec import train
from lowprec.steplog import METRIC_COLUMNS
from lowprec.io import write_yaml
from test_train import Crash, CrashAt

# time- and process-dependent columns; every other column must match exactly
TIMING = ["tokens_per_s", "peak_mem_mb"]
RUN = "runs/smoke/baselines/gpt2/bf16/s0"


def _cli(config, log):
    """``python -m lowprec.train --config CONFIG`` with stdout and stderr to ``log``.out/.err."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(f"{log}.out", "w") as out, open(f"{log}.err", "w") as err:
        return subprocess.Popen([sys.executable, "-m", "lowprec.train", "--config", str(config)],
                                stdout=out, stderr=err, env=env)


def _read(log):
    return open(f"{log}.out").read(), open(f"{log}.err").read()


def _train_rows(path):
    try:
        m = pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return []
    return list(m.dropna(subset=["train_loss"])["step"])


def test_sigterm_saves_the_step_the_process_ended_and_the_next_start_resumes_there(prepared_data, tmp_path):
    """As a job's time limit stops it (the packer's --resumable): ``python -m lowprec.train`` ends
    the step it is in, saves it although no periodic checkpoint is due, exits non-zero with a
    message, and the same command resumes at that step."""
    kw = dict(max_steps=24, ckpt_every=20, val_every=20, log_every=1, threads=1)
    cfg = smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path / "t", **kw)
    write_yaml(tmp_path / "t.yaml", cfg)
    out = tmp_path / "t" / RUN
    proc = _cli(tmp_path / "t.yaml", tmp_path / "first")
    deadline = time.time() + 240
    while max(_train_rows(out / "metrics.csv"), default=0) < 5:
        assert proc.poll() is None, "the run ended before it could be stopped:\n" + _read(tmp_path / "first")[1][-3000:]
        assert time.time() < deadline, "no training rows within the time limit"
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    stdout, stderr = _read(tmp_path / "first")
    assert proc.returncode == 1 and "lowprec.train: stopped (SIGTERM)" in stderr, stderr[-3000:]
    assert not (out / "provenance.json").exists()
    ckpt_step = torch.load(out / "checkpoints/last.ckpt", weights_only=True)["global_step"]
    assert 5 <= ckpt_step < 20 and ckpt_step == max(_train_rows(out / "metrics.csv"))
    proc = _cli(tmp_path / "t.yaml", tmp_path / "second")
    proc.wait(timeout=300)
    stdout, stderr = _read(tmp_path / "second")
    assert proc.returncode == 0, stderr[-3000:]
    assert f"resuming from {out / 'checkpoints/last.ckpt'} at step {ckpt_step}" in stdout
    assert _train_rows(out / "metrics.csv") == list(range(1, 25))


def test_kill_9_after_first_checkpoint_resumes_to_the_uninterrupted_curve(prepared_data, tmp_path):
    kw = dict(max_steps=60, ckpt_every=10, val_every=10, log_every=1, threads=1)
    ref = smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path / "ref", **kw)
    train.run(ref)
    cfg = smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path / "k", **kw)
    write_yaml(tmp_path / "k.yaml", cfg)
    out = tmp_path / "k" / RUN

    proc = _cli(tmp_path / "k.yaml", tmp_path / "first")
    deadline = time.time() + 240
    while not ((out / "checkpoints/last.ckpt").exists() and max(_train_rows(out / "metrics.csv"), default=0) >= 13):
        assert proc.poll() is None, "the run ended before it could be killed:\n" + _read(tmp_path / "first")[1][-3000:]
        assert time.time() < deadline, "no checkpoint within the time limit"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "provenance.json").exists()
    killed = pd.read_csv(out / "metrics.csv")
    ckpt_step = torch.load(out / "checkpoints/last.ckpt", weights_only=True)["global_step"]
    # on disk when killed: every row up to the kill, including those after the last checkpoint
    steps = _train_rows(out / "metrics.csv")
    assert steps == list(range(1, steps[-1] + 1)) and steps[-1] > ckpt_step >= 10

    proc = _cli(tmp_path / "k.yaml", tmp_path / "second")
    proc.wait(timeout=300)
    stdout, stderr = _read(tmp_path / "second")
    assert proc.returncode == 0, stderr[-3000:]
    assert f"resuming from {out / 'checkpoints/last.ckpt'} at step {ckpt_step}" in stdout
    assert "ETA" in stdout and "step 60/60 (100%)" in stdout  # progress lines in the job's log

    got, want = pd.read_csv(out / "metrics.csv"), pd.read_csv(tmp_path / "ref" / RUN / "metrics.csv")
    assert list(got.columns) == list(want.columns) == list(METRIC_COLUMNS)
    assert got["step"].tolist() == list(range(1, 61))  # each step once: none lost, none twice
    pd.testing.assert_frame_equal(got.drop(columns=TIMING), want.drop(columns=TIMING), check_exact=True)
    # rows before the checkpoint are the killed process's own, not recomputed
    before = got[got["step"] <= ckpt_step]
    pd.testing.assert_frame_equal(before.reset_index(drop=True),
                                  killed[killed["step"] <= ckpt_step].groupby("step", as_index=False).last())
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["status"] == "completed" and prov["resumed_from"].endswith("last.ckpt")


def test_metrics_rows_are_on_disk_as_they_are_logged(prepared_data, tmp_path):
    """Each logged row is in metrics.csv (and synced) when the next step starts."""
    seen = {}

    class Peek(Callback):
        def on_train_batch_start(self, trainer, *args):
            seen[trainer.global_step] = _train_rows(tmp_path / RUN / "metrics.csv")

    cfg = smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path, max_steps=6, log_every=2)
    train.run(cfg, callbacks=[Peek()])
    assert seen == {0: [], 1: [], 2: [2], 3: [2], 4: [2, 4], 5: [2, 4]}


# --------------------------------------------------------------------------- corrupt checkpoints

def _killed_run(prepared_data, tmp_path, crash_at, tag="k"):
    kw = dict(max_steps=12, ckpt_every=4, log_every=1, val_every=4)
    cfg = smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path / tag, **kw)
    with pytest.raises(Crash):
        train.run(cfg, callbacks=[CrashAt(crash_at)])
    return cfg, tmp_path / tag / RUN


def _reference(prepared_data, tmp_path):
    kw = dict(max_steps=12, ckpt_every=4, log_every=1, val_every=4)
    train.run(smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path / "ref", **kw))
    return pd.read_csv(tmp_path / "ref" / RUN / "metrics.csv").drop(columns=TIMING)


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def test_truncated_last_checkpoint_resumes_from_the_previous_one(prepared_data, tmp_path, capsys):
    want = _reference(prepared_data, tmp_path)
    cfg, out = _killed_run(prepared_data, tmp_path, crash_at=10)  # checkpoints at steps 4 and 8
    ckpts = out / "checkpoints"
    assert torch.load(ckpts / ckptlib.PREVIOUS, weights_only=True)["global_step"] == 4
    _truncate(ckpts / "last.ckpt")
    capsys.readouterr()
    rec = train.run(cfg)
    err = capsys.readouterr().err
    assert f"lowprec.train: warning: {ckpts / 'last.ckpt'}: not a readable checkpoint, truncated or corrupt" in err
    assert "moved to last.ckpt.corrupt-1" in err and f"resuming from {ckpts / ckptlib.PREVIOUS} (step 4)" in err
    assert (ckpts / "last.ckpt.corrupt-1").is_file()
    assert rec["resumed_from"] == str(ckpts / ckptlib.PREVIOUS) and len(rec["unreadable_checkpoints"]) == 1
    got = pd.read_csv(out / "metrics.csv").drop(columns=TIMING)
    pd.testing.assert_frame_equal(got, want, check_exact=True)  # rows 5-10 of the killed run once, redone
    assert not (ckpts / ckptlib.PREVIOUS).exists()  # a completed run keeps last.ckpt only


def test_truncated_only_checkpoint_restarts_from_step_0_with_a_warning(prepared_data, tmp_path, capsys):
    want = _reference(prepared_data, tmp_path)
    cfg, out = _killed_run(prepared_data, tmp_path, crash_at=6)  # one checkpoint, at step 4
    ckpts = out / "checkpoints"
    assert not (ckpts / ckptlib.PREVIOUS).exists()
    _truncate(ckpts / "last.ckpt")
    (ckpts / "last.ckpt.corrupt-1").write_bytes(b"an earlier one")  # numbering continues
    capsys.readouterr()
    rec = train.run(cfg)
    err = capsys.readouterr().err
    assert "moved to last.ckpt.corrupt-2" in err
    assert f"no earlier checkpoint in {ckpts}: training restarts from step 0" in err
    assert rec["resumed_from"] is None and rec["steps"] == 12
    assert (ckpts / "last.ckpt.corrupt-1").read_bytes() == b"an earlier one"  # kept for inspection
    assert (ckpts / "last.ckpt.corrupt-2").is_file()
    pd.testing.assert_frame_equal(pd.read_csv(out / "metrics.csv").drop(columns=TIMING), want, check_exact=True)


# --------------------------------------------------------------------------- foreign pickles

MARKER = "ran.txt"


class Payload:
    """Unpickling this would write a file: what a malicious checkpoint would do instead."""

    def __init__(self, where):
        self.where = where

    def __reduce__(self):
        return builtins.exec, (f"open({str(self.where / MARKER)!r}, 'w').write('code ran')",)


def _plant(path, where):
    ckpt = torch.load(path, weights_only=True)
    ckpt["extra"] = Payload(where)
    torch.save(ckpt, path)


def test_foreign_object_in_a_checkpoint_is_refused_everywhere(prepared_data, tmp_path):
    src = tmp_path / "src" / RUN
    train.run(smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path / "src", max_steps=4))
    ckpt = src / "checkpoints" / "last.ckpt"
    _plant(ckpt, tmp_path)
    message = rf"{ckpt}: refusing to load: the checkpoint holds pickled object\(s\) of type builtins.exec"

    with pytest.raises(ckptlib.UnsafeCheckpointError, match=message):
        ckptlib.load(ckpt)
    from lowprec import evaluate
    with pytest.raises(ckptlib.UnsafeCheckpointError, match=message):
        evaluate.load_trained(src)
    with pytest.raises(SystemExit) as e:
        evaluate.main(["--run", str(src), "--out", str(tmp_path / "export.csv")])
    assert str(e.value.code).startswith(f"lowprec.evaluate: error: {ckpt}: refusing to load")
    assert not (tmp_path / "export.csv").exists()
    cfg = smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path / "ft", max_steps=2,
                           init_from=str(ckpt))
    with pytest.raises(ckptlib.UnsafeCheckpointError, match="train.init_from: " + message):
        train.run(cfg)
    # a resumed run does not move such a file aside as damaged: it stops and says why
    cfg, out = _killed_run(prepared_data, tmp_path, crash_at=6)
    _plant(out / "checkpoints" / "last.ckpt", tmp_path)
    with pytest.raises(ckptlib.UnsafeCheckpointError, match="cannot resume from it"):
        train.run(cfg)
    assert (out / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / MARKER).exists()


def test_checkpoints_we_write_need_nothing_outside_the_allow_list(prepared_data, tmp_path):
    """Quantized recipes with extra state (delayed-scaling histories, fallback levels), the
    logged rows and Lightning's loop and callback state all load with weights_only=True."""
    for paper, model, method in [("baselines", "gpt2", "fp8_delayed"), ("int8_fallback", "llama2", "int8_fallback"),
                                 ("gaussws", "llama2", "gaussws_learnable")]:
        cfg = smoke_run_config(paper, model, method, prepared_data, tmp_path / method, max_steps=2, log_every=1)
        train.run(cfg)
        path = tmp_path / method / f"runs/smoke/{paper}/{model}/{method}/s0/checkpoints/last.ckpt"
        ckpt = ckptlib.load(path)
        assert ckpt["global_step"] == 2 and [r["step"] for r in ckpt["callbacks"]["StepLogger"]["rows"]][:2] == [1, 2]
        assert ckptlib._foreign_globals(path) == []


# --------------------------------------------------------------------------- data and command-line errors

def test_garbled_token_file_is_named_in_one_line(prepared_data, tmp_path):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(prepared_data, data)
    raw = np.fromfile(data / "train.bin", dtype=np.uint16)
    raw[1000:1100] = 60000  # same size, ids past the vocabulary
    raw.tofile(data / "train.bin")
    cfg = smoke_run_config("baselines", "gpt2", "bf16", data, tmp_path, max_steps=2)
    write_yaml(tmp_path / "run.yaml", cfg)
    proc = _cli(tmp_path / "run.yaml", tmp_path / "log")
    proc.wait(timeout=300)
    _, stderr = _read(tmp_path / "log")
    assert proc.returncode == 1
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"lowprec.train: error: {data / 'train.bin'}: sha256 ")
    assert "does not match manifest.json" in last and "prepare the data again" in last
    assert not (tmp_path / RUN).exists() or not any((tmp_path / RUN).iterdir())


@pytest.mark.parametrize("case, message", [
    ("missing", "config file not found: {tmp}/nope.yaml"),
    ("yaml", "{tmp}/bad.yaml: not valid YAML"),
    ("schema", "train.max_steps: 'many' is not of type 'integer'"),
    ("truncated_init", "train.init_from: {tmp}/cut.ckpt: not a readable checkpoint, truncated or corrupt"),
])
def test_user_errors_are_one_line(case, message, prepared_data, tmp_path):
    cfg = smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path, max_steps=2)
    path = tmp_path / "run.yaml"
    if case == "missing":
        path = tmp_path / "nope.yaml"
    elif case == "yaml":
        path = tmp_path / "bad.yaml"
        path.write_text("train: [unclosed\n")
    elif case == "schema":
        cfg["train"]["max_steps"] = "many"
        write_yaml(path, cfg)
    else:
        (tmp_path / "cut.ckpt").write_bytes(b"PK\x03\x04 cut short")
        cfg["train"]["init_from"] = str(tmp_path / "cut.ckpt")
        write_yaml(path, cfg)
    with pytest.raises(SystemExit) as e:
        train.main(["--config", str(path)])
    text = str(e.value.code)
    assert text.startswith("lowprec.train: error: ") and "\n" not in text
    assert message.format(tmp=tmp_path) in text


def test_killed_after_the_final_checkpoint_finishes_with_the_same_rows(prepared_data, tmp_path):
    """A kill between the final checkpoint and the run's last files: the rerun trains no step and
    writes the same metrics.csv (max_steps 10 is not a validation step: the last validation is redone)."""
    cfg = smoke_run_config("baselines", "gpt2", "bf16", prepared_data, tmp_path, max_steps=10, log_every=1,
                           val_every=4, ckpt_every=4)
    train.run(cfg)
    out = tmp_path / RUN
    want = pd.read_csv(out / "metrics.csv").drop(columns=TIMING)
    for f in ("provenance.json", "metrics.csv", "checkpoints/COMPLETE"):
        (out / f).unlink()
    rec = train.run(cfg)
    assert rec["resumed_from"].endswith("last.ckpt") and rec["steps"] == 10
    pd.testing.assert_frame_equal(pd.read_csv(out / "metrics.csv").drop(columns=TIMING), want, check_exact=True)
