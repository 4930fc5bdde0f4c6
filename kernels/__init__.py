"""Triton kernels, installed as ``lowprec.kernels`` (their benchmarks are in ``lowprec.bench``).

Importing this package never requires Triton: each kernel module checks for it, and the torch
emulation in ``lowprec`` is the reference the kernels are tested against.
"""
