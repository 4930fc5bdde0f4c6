"""The workflow on a fresh copy of the repository keeps its committed results: whatever the file
times, the default plan trains nothing, reads no checkpoint and rewrites no run folder; a larger grid
trains exactly its runs that are not committed; a changed config or `retrain` trains exactly the runs
it names; and a job that fails leaves every committed file byte for byte as it was."""

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from lowprec import config as lpc

SNAKEMAKE = [sys.executable, "-m", "snakemake"]
# rules that train or read a checkpoint, and data preparation, which only a training run needs
TRAINING_RULES = {"train", "prepare_data", "gaussws_export_eval", "gaussws_exactness_run", "int8_outliers_run"}
EVALUATIONS = ("export.csv", "exactness.csv", "outliers.csv", "outlier_ccdf.csv")


def _clone(dest: Path) -> Path:
    """The files a clone of the working tree would hold (tracked, and new files git does not ignore)."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                 cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    for rel in filter(None, listing.decode().split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest / rel)
    return dest


def _level(rel: str) -> int:
    """A file's depth in the workflow's graph: sources 0, run folders 1, fine-tuning run folders
    (they start from other runs) 2, per-run evaluations 3, tables and figures 4, reports 5."""
    parts = rel.split("/")
    if parts[0] != "results":
        return 0
    if parts[1] == "runs":
        if parts[-1] in EVALUATIONS:
            return 3
        return 2 if parts[3].endswith("_finetune") else 1
    if re.fullmatch(r"REPORT(_\w+)?\.md", parts[1]):
        return 5
    if len(parts) > 3 and parts[2] in lpc.SCALES:
        return 4
    return 0  # committed measurements (results/<paper>/*_h200.csv, results/bench, results/kernels)


def _set_times(root: Path, order: str):
    """File times in an adversarial order: ``outputs_older`` (every output older than every input
    it is made from) or ``outputs_newer``."""
    base = 1_700_000_000
    for p in root.rglob("*"):
        if p.is_file():
            t = base + (1000 if order == "outputs_newer" else -1000) * _level(p.relative_to(root).as_posix())
            os.utime(p, (t, t))


def _snakemake(root: Path, *args, env=None, check=True):
    proc = subprocess.run([*SNAKEMAKE, *args], cwd=root, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _plan(root: Path, *config) -> list[tuple[str, tuple[str, ...]]]:
    """(rule, outputs) of each job a dry run plans."""
    proc = _snakemake(root, "-n", "--cores", "1", *(["--config", *config] if config else []))
    log = proc.stdout + proc.stderr
    assert "Job stats:" in log or "Nothing to be done" in log, log[-3000:]
    jobs, rule = [], None
    for line in log.splitlines():
        if m := re.match(r"(?:local)?rule (\w+):$", line.strip()):
            rule = m.group(1)
            jobs.append((rule, ()))
        elif rule and line.strip().startswith("output:"):
            jobs[-1] = (rule, tuple(f.strip().removesuffix(" (update)") for f in line.split(":", 1)[1].split(",")))
    return jobs


def _trained(jobs) -> set[str]:
    """Run names (<paper>/<model>/<method>/s<seed>) of the planned training jobs."""
    return {lpc.run_name(Path(outs[0]).parent) for rule, outs in jobs if rule == "train"}


def _grid(scale: str, papers) -> dict[str, str]:
    """Run name -> folder of every run, fine-tuning runs included, of ``papers`` at ``scale``."""
    runs = {}
    for paper in papers:
        grid = lpc.experiment_grid(paper, scale)
        runs.update({f"{paper}/{m}/{meth}/s{s}": f"results/runs/{scale}/{paper}/{m}/{meth}/s{s}"
                     for m in grid["models"] for meth in grid["methods"] for s in grid["seeds"]})
        ft = lpc.finetune_grid(paper, scale)
        if ft:
            runs.update({f"{paper}_finetune/{m}/{meth}/s{s}": f"results/runs/{scale}/{paper}_finetune/{m}/{meth}/s{s}"
                         for m in ft["models"] for meth in ft["methods"] for s in ft["seeds"]})
    return runs


def _uncommitted(root: Path, scale: str, papers) -> set[str]:
    return {name for name, d in _grid(scale, papers).items()
            if not all((root / d / f).is_file() for f in ("metrics.csv", "config.yaml", "provenance.json"))}


def _digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((root / "results").rglob("*")) if p.is_file()}


PAPERS = lpc.papers()  # the default selection (configs/config.yaml: papers: all)


@pytest.mark.slow
@pytest.mark.parametrize("order", ["outputs_older", "outputs_newer"])
def test_fresh_clone_trains_nothing_committed_whatever_the_file_times(tmp_path, order):
    root = _clone(tmp_path)
    _set_times(root, order)
    jobs = _plan(root)  # the default scale: every run is committed
    assert not {r for r, _ in jobs} & TRAINING_RULES, sorted({r for r, _ in jobs} & TRAINING_RULES)
    assert not [f for _, outs in jobs for f in outs if f.startswith(("results/runs/", "results/data/"))]

    # a larger grid: exactly its runs that are not committed train, nothing reads a checkpoint of
    # a committed run, and no committed run folder is an output
    jobs = _plan(root, "scale=small")
    missing = _uncommitted(root, "small", PAPERS)
    assert _trained(jobs) == missing
    folders = {_grid("small", PAPERS)[n] for n in missing}
    written = {str(Path(f).parent) for _, outs in jobs for f in outs if f.startswith("results/runs/")}
    assert written <= folders, sorted(written - folders)


def test_small_plans_exactly_the_runs_that_are_not_committed(tmp_path):
    root = _clone(tmp_path)
    papers = ["gaussws", "int8_fallback", "mor"]
    # the whole small grid is committed: take two runs (one with evaluations) out of the copy
    removed = {"mor/nemotron/mor_sub_three_way/s4", "gaussws/gpt2/gaussws_b6/s3"}
    grid = _grid("small", papers)
    for name in removed:
        shutil.rmtree(root / grid[name])
    missing = _uncommitted(root, "small", papers)
    assert missing == removed
    jobs = _plan(root, "scale=small", f"papers=[{','.join(papers)}]")
    assert _trained(jobs) == missing
    # the committed H200 runs are never rewritten: no job writes into their folders
    assert not [f for _, outs in jobs for f in outs
                if f.startswith("results/runs/") and lpc.run_name(Path(f).parent) not in missing]


def test_a_new_method_trains_exactly_its_runs(tmp_path):
    root = _clone(tmp_path)
    exp = root / "configs" / "experiments" / "baselines.yaml"
    text = exp.read_text()
    assert "\n  int8_rowwise: {recipe: int8_rowwise}\n" in text
    exp.write_text(text.replace("\n  int8_rowwise: {recipe: int8_rowwise}\n",
                                "\n  int8_rowwise: {recipe: int8_rowwise}\n  fp8_delayed_2: {recipe: fp8_delayed}\n"))
    jobs = _plan(root)
    models = lpc.experiment_grid("baselines", "tiny")["models"]
    assert _trained(jobs) == {f"baselines/{m}/fp8_delayed_2/s0" for m in models}


def test_changed_config_and_retrain_train_exactly_the_runs_they_name(tmp_path):
    root = _clone(tmp_path)
    # a key that changes the numbers: the runs it reaches are stale
    exp = root / "configs" / "experiments" / "gaussws.yaml"
    text = exp.read_text()
    assert "    train: {max_steps: 150, val_every: 25}\n" in text
    exp.write_text(text.replace("    train: {max_steps: 150, val_every: 25}\n",
                                "    train: {max_steps: 150, val_every: 25, lr: 0.002}\n"))
    jobs = _plan(root, "papers=[gaussws]")
    assert _trained(jobs) == set(_grid("tiny", ["gaussws"]))
    # and their evaluations are made from the new checkpoints
    assert {r for r, _ in jobs} >= {"gaussws_export_eval", "gaussws_exactness_run"}
    exp.write_text(text)

    # keys that do not change the numbers (threads, processes): nothing trains
    assert not _trained(_plan(root, "threads=2", "devices=1", "strategy=ddp"))

    # asked by name: that run, its evaluations, and the fine-tuning runs that start from it
    jobs = _plan(root, "retrain=int8_fallback/llama2/bf16/s0")
    ft = lpc.finetune_grid("int8_fallback", "tiny")
    assert _trained(jobs) == {"int8_fallback/llama2/bf16/s0"} | {
        f"int8_fallback_finetune/llama2/{m}/s0" for m in ft["methods"]}
    assert [outs for r, outs in jobs if r == "int8_outliers_run"] == [
        ("results/runs/tiny/int8_fallback/llama2/bf16/s0/outliers.csv",
         "results/runs/tiny/int8_fallback/llama2/bf16/s0/outlier_ccdf.csv")]

    # a cluster job's own Snakemake process finds its job after the runs it follows have trained
    # (here: complete and current)
    _snakemake(root, "-n", "--mode", "remote", "--target-jobs", "train:run=int8_fallback_finetune/llama2/bf16/s0",
               "gaussws_export_eval:run=gaussws/gpt2/bf16/s0")

    proc = _snakemake(root, "-n", "--config", "retrain=gaussws/gpt5/*", check=False)
    assert proc.returncode != 0
    assert "config key 'retrain': ['gaussws/gpt5/*'] match(es) no run" in proc.stdout + proc.stderr


def _failing_python(tmp_path: Path, body: str) -> dict:
    """An environment in which the workflow's jobs (``python -m ...`` from PATH) run ``body`` at
    start-up (a sitecustomize); Snakemake itself runs unchanged."""
    inject, bin_dir = tmp_path / "inject", tmp_path / "bin"
    inject.mkdir()
    bin_dir.mkdir()
    (inject / "sitecustomize.py").write_text(body)
    wrapper = bin_dir / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={inject}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.slow
def test_failing_report_jobs_leave_every_committed_file_as_it_was(tmp_path):
    """Every writer of the report jobs replaces its output with other bytes and then the job fails:
    the committed tables, figures and report come back byte for byte, with their times, so the
    failed jobs run again next time."""
    root = _clone(tmp_path / "repo")
    _set_times(root, "outputs_older")
    env = _failing_python(tmp_path, '''
import contextlib
import lowprec.io as io

_atomic_path = io.atomic_path


@contextlib.contextmanager
def atomic_path(path):
    with _atomic_path(path) as tmp:
        yield tmp
        tmp.write_bytes(b"written by a job that then fails\\n")
    raise RuntimeError(f"injected failure after replacing {path}")


io.atomic_path = atomic_path
''')
    before = _digests(root)
    times = {f: (root / f).stat().st_mtime_ns for f in before}
    config = ["--config", "papers=[gaussws]"]
    planned = _plan(root, *config[1:])
    rules = {r for r, _ in planned}
    assert {"final_loss_table", "loss_curves", "gaussws_exactness", "report_md"} <= rules

    proc = _snakemake(root, "--cores", "2", "--keep-going", *config, env=env, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "injected failure after replacing" in log
    assert "Restored previous version of results/gaussws/tiny/tables/final_loss.csv" in log
    # the report itself: its inputs are committed, so it may run alone
    proc = _snakemake(root, "--cores", "1", "--allowed-rules", "report_md", "all", *config, env=env, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Restored previous version of results/REPORT.md" in log

    after = _digests(root)
    assert {f: after.get(f) for f in before} == before
    assert {f: (root / f).stat().st_mtime_ns for f in before} == times
    assert sorted(_plan(root, *config[1:])) == sorted(planned)  # nothing that failed looks done


@pytest.mark.slow
def test_failing_training_job_leaves_the_committed_run_as_it_was(tmp_path):
    """A committed run asked to train again whose job removes and rewrites its files and then fails
    (as a crash after lowprec.train clears the folder would): the committed files come back."""
    root = _clone(tmp_path / "repo")
    run = "gaussws/gpt2/bf16/s0"
    cfg = lpc.resolve_run("tiny", "gaussws", "gpt2", "bf16", 0)
    data = root / cfg["data"]["dir"]
    data.mkdir(parents=True)
    for f in ("train.bin", "val.bin", "tokenizer.json", "manifest.json"):  # no data preparation
        (data / f).write_text("{}")
    env = _failing_python(tmp_path, '''
import sys
from pathlib import Path

import yaml

if sys.argv[1:2] == ["--config"]:  # python -m lowprec.train --config <run config>
    out = Path(yaml.safe_load(Path(sys.argv[2]).read_text())["output_dir"])
    (out / "metrics.csv").unlink()
    (out / "provenance.json").write_text("{}")
    sys.exit("injected failure of a training job")
''')
    before = _digests(root)
    target = f"results/runs/tiny/{run}/provenance.json"
    assert _trained(_plan(root, "papers=[gaussws]", f"retrain={run}")) == {run}
    proc = _snakemake(root, "--cores", "1", target, "--config", "papers=[gaussws]", f"retrain={run}",
                      env=env, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "injected failure of a training job" in (root / f"results/logs/train/tiny/{run}.log").read_text()
    assert f"Restored previous version of results/runs/tiny/{run}/metrics.csv" in log
    after = _digests(root)
    assert {f: after.get(f) for f in before} == before
