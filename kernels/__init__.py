"""Triton kernels, installed as ``lowprec.kernels`` (their benchmarks are in ``lowprec.bench``).

Importing this package never requires Triton: each kernel module checks for it, and the torch
emulation in ``lowprec`` is the reference the kernels are tested against.
"""

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

import torch


def _hand_the_top_level_name_over() -> None:
    """Give the import name ``kernels`` to the installed distribution of that name.

    This folder is found as a top-level ``kernels`` package whenever a checkout's root is on
    ``sys.path`` (``python -m`` from the root puts it first). That name belongs to the ``kernels``
    distribution, which transformers (>= 5.25) requires and imports names from, so shadowing it
    breaks every model build. Where the distribution is installed, it becomes ``sys.modules["kernels"]``,
    which is what the import statement returns; where it is not, this folder stays a harmless
    stand-in without a version, which transformers' probe reads as "not installed".
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    elsewhere = [p for p in sys.path if os.path.abspath(p or os.curdir) != root]
    spec = importlib.machinery.PathFinder.find_spec("kernels", elsewhere)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernels"] = module
    spec.loader.exec_module(module)


if __name__ == "kernels":
    _hand_the_top_level_name_over()


# The INT8 GEMM's tuning records (int8_fallback_tuning's module doc): the variable naming the file a
# process reads and adds to, and the checkout's committed file, read where none is named. Here, so
# that a job runner can name them without importing Triton.
INT8_TUNED_ENV = "LOWPREC_INT8_TUNED"
INT8_COMMITTED_RECORDS = Path(__file__).resolve().parents[1] / "results" / "bench" / "int8_gemm_tuned.json"


# A constant of the process for Dynamo: the check reads the kernel objects, which it cannot trace,
# and the answer never changes in a process; asked once per (module, device type) while tracing and
# baked into the graph. Here, not in a kernel module, so that asking imports Triton only on first use.
@torch.compiler.assume_constant_result
def runs_on(module: str, device_type: str) -> bool:
    """Whether the kernels of ``lowprec.kernels.<module>`` run on devices of ``device_type``."""
    kernels = importlib.import_module(f"lowprec.kernels.{module}")
    return kernels.triton_available(torch.device(device_type))


def loaded_int8_tuning():
    """The INT8 GEMM's tuning module (``int8_fallback_tuning``) where this process has met the GEMM
    and so imported it; None where it has not (asking imports nothing)."""
    return sys.modules.get(__name__ + ".int8_fallback_tuning")


def record_int8_tuning(device) -> tuple:
    """The INT8 GEMM classes this process tuned on ``device``, added to the file
    ``LOWPREC_INT8_TUNED`` names (``int8_fallback_tuning.record_named``): (how many, the file);
    (0, None) where it names none or the process never met the GEMM."""
    kt = loaded_int8_tuning()
    return kt.record_named(device) if kt is not None else (0, None)
