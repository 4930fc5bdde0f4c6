"""Triton kernels, installed as ``lowprec.kernels`` (their benchmarks are in ``lowprec.bench``).

Importing this package never requires Triton: each kernel module checks for it, and the torch
emulation in ``lowprec`` is the reference the kernels are tested against.
"""

import importlib

import torch


# A constant of the process for Dynamo: the check reads the kernel objects, which it cannot trace,
# and the answer never changes in a process; asked once per (module, device type) while tracing and
# baked into the graph. Here, not in a kernel module, so that asking imports Triton only on first use.
@torch.compiler.assume_constant_result
def runs_on(module: str, device_type: str) -> bool:
    """Whether the kernels of ``lowprec.kernels.<module>`` run on devices of ``device_type``."""
    kernels = importlib.import_module(f"lowprec.kernels.{module}")
    return kernels.triton_available(torch.device(device_type))
