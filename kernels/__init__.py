"""Triton kernels and their benchmarks, installed as ``lowprec.kernels``.

Importing this package never requires Triton: each kernel module checks for it, and the torch
emulation in ``lowprec`` is the reference the kernels are tested against.
"""
