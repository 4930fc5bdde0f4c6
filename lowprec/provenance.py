"""What produced a result: code version, library versions, hardware, time."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from importlib import metadata

from .config import REPO_ROOT

PACKAGES = ("torch", "triton", "lightning", "transformers", "tokenizers", "numpy", "snakemake")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit() -> str | None:
    """HEAD of the repository this code runs from, or None outside a git checkout. A copy of the
    tree staged onto a compute node (without its .git, or with a stale one) names its commit in
    LOWPREC_GIT_COMMIT, which then wins."""
    return os.environ.get("LOWPREC_GIT_COMMIT") or _git("rev-parse", "HEAD")


def git_dirty() -> bool | None:
    """Whether the code has uncommitted changes (None: unknown). results/ is left out: a workflow
    that regenerates its outputs changes it while it runs, which says nothing about the code."""
    if os.environ.get("LOWPREC_GIT_DIRTY") in ("0", "1"):  # a staged copy, as in git_commit
        return os.environ["LOWPREC_GIT_DIRTY"] == "1"
    status = _git("status", "--porcelain", "--", ".", ":(exclude)results")
    return bool(status) if status is not None else None


def versions() -> dict:
    out = {"python": platform.python_version()}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def device_info() -> dict:
    import torch

    info = {"host": platform.node(), "platform": platform.platform(), "cpu": platform.processor() or platform.machine(),
            "torch_threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info.update(gpu=torch.cuda.get_device_name(0), gpu_count=torch.cuda.device_count(),
                    cuda=torch.version.cuda, capability=".".join(map(str, torch.cuda.get_device_capability(0))))
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10)
            info["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, IndexError):
            info["driver"] = None
    else:
        info["gpu"] = None
    return info


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# the environment settings that name the run's code (git_commit, git_dirty), bound the test
# harness (tests/conftest.py) or spare a GPU job the INT8 GEMM's tuning by reading the choices an
# earlier tuning on the same GPU, Triton and kernels recorded (the configurations run are in the
# benchmarks' provenance), not choose what it runs
_NOT_SWITCHES = ("LOWPREC_GIT_COMMIT", "LOWPREC_GIT_DIRTY", "LOWPREC_TEST_TIMEOUT", "LOWPREC_INT8_TUNED")


def switches() -> dict:
    """The ``LOWPREC_*`` environment settings of this process that switch a path of the suite (a
    kernel on or off, the fast path): a measurement taken under one is not the default's."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("LOWPREC_") and k not in _NOT_SWITCHES}


def collect() -> dict:
    return {
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "switches": switches(),
        "versions": versions(),
        "device": device_info(),
        "argv": sys.argv[1:],  # argv[0] is a local path that says nothing about the run
    }
