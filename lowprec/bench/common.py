"""Plumbing shared by the benchmark scripts (``lowprec.bench.*``): the argument parser with ``--out``
and the do_bench options, exit code 2 with a message for a precondition or option that does not
hold, the CUDA / Triton checks, comma-separated list options, the median do_bench timer, a time
budget that skips what is left, the CSV writer, and the provenance JSON written beside each CSV.

Importing this module needs neither torch nor Triton (``--help`` works anywhere).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, NoReturn

from ..io import provenance_path  # noqa: F401 - the benchmarks import it from here


def bench_parser(prog: str, doc: str, out_help: str = "CSV path; the provenance JSON goes beside it",
                 **out_kw) -> argparse.ArgumentParser:
    """An ArgumentParser for ``python -m <prog>`` with the module docstring as description and --out
    (required unless out_kw gives a default)."""
    p = argparse.ArgumentParser(prog=f"python -m {prog}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required="default" not in out_kw, help=out_help, **out_kw)
    return p


def add_do_bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warmup", type=int, default=25, help="do_bench warmup, ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition time, ms")
    p.add_argument("--cudagraph", action="store_true",
                   help="time calls replayed from a CUDA graph (triton.testing.do_bench_cudagraph): the GPU's time "
                        "without the host's launches, which set the pace of small calls (a 2048^3 INT8 GEMM: 0.10 ms "
                        "a call launched, its kernel 0.036 ms); a call that waits for the host cannot be captured")


def fail(prog: str, msg: str) -> NoReturn:
    """'<prog>: <msg>' on stderr and exit code 2 (a precondition or an option does not hold)."""
    print(f"{prog}: {msg}", file=sys.stderr)
    sys.exit(2)


def inductor_options(prog: str, items: list) -> dict:
    """``--inductor`` KEY=VALUE items (``lowprec.bench.e2e_step``, ``inductor_plan``) as a dict of
    Inductor settings (true / false, integers and numbers converted); exit 2 naming an item that is
    not KEY=VALUE or a KEY Inductor lacks."""
    import torch._inductor.config as inductor_config

    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            fail(prog, f"--inductor: {item!r} is not KEY=VALUE")
        node = inductor_config
        for part in key.split("."):
            if not hasattr(node, part):
                fail(prog, f"--inductor: torch._inductor.config has no setting {key!r}")
            node = getattr(node, part)
        value = {"true": True, "false": False}.get(text.lower(), text)
        for conv in (int, float):
            if isinstance(value, str):
                try:
                    value = conv(value)
                except ValueError:
                    pass
        out[key] = value
    return out


def inductor_options_text(options: dict) -> str:
    """Inductor settings as a CSV cell, ``KEY=VALUE;...`` (the ``inductor_options`` column)."""
    return ";".join(f"{k}={v}" for k, v in options.items())


def require_cuda(prog: str, hint: str = ""):
    """torch, or exit 2 without a CUDA device; hint is appended to the message."""
    import torch

    if not torch.cuda.is_available():
        fail(prog, "needs a CUDA device (torch.cuda.is_available() is False)" + hint)
    return torch


def require_cuda_triton(prog: str, tests: str = ""):
    """(torch, triton) for timing compiled Triton kernels, or exit 2 when there is no CUDA device,
    TRITON_INTERPRET=1 is set, or Triton (with triton.testing) does not import. tests: the CPU
    correctness tests of the kernels, named in the no-CUDA message."""
    where = f" ({tests})" if tests else ""
    torch = require_cuda(prog, f"; the kernels' correctness tests run on CPU under TRITON_INTERPRET=1{where}, "
                               "but timings there mean nothing")
    if os.environ.get("TRITON_INTERPRET") == "1":
        fail(prog, "TRITON_INTERPRET=1 is set: interpreted kernels cannot be benchmarked; unset it")
    try:
        import triton
        import triton.testing  # noqa: F401
    except ImportError as exc:
        fail(prog, f"Triton is not importable ({exc})")
    return torch, triton


_KINDS = {int: "integers", float: "numbers"}


def fresh_compilation() -> None:
    """Forget every compiled graph before a case compiles its own: the cases of a benchmark compile
    the same code (one function, the decoder layer), so their graphs accumulate on it, and past
    Dynamo's recompile limit (8) a later case would run eagerly without a word (measured: six arms
    of the end-to-end benchmark at 0.02-0.1x); a case that hits the limit on its own fails."""
    import torch

    torch.compiler.reset()
    torch._dynamo.config.fail_on_recompile_limit_hit = True


def parse_list(prog: str, flag: str, text: str, conv: Callable = int) -> list:
    """The comma-separated values of option `flag` (empty items skipped), each through conv; exit 2
    if one does not convert."""
    try:
        return [conv(v) for v in text.split(",") if v.strip()]
    except ValueError:
        fail(prog, f"{flag}: expected comma-separated {_KINDS.get(conv, 'values')}, got {text!r}")


def parse_int_list(prog: str, flag: str, text: str, allowed=None) -> list:
    """parse_list of integers; with `allowed` (a range of integers, or a dict keyed by them) exit 2
    for values outside it."""
    values = parse_list(prog, flag, text, int)
    if allowed is not None:
        bad = [v for v in values if v not in allowed]
        if bad:
            fail(prog, f"{flag}: {bad} not in {min(allowed)}..{max(allowed)}")
    return values


def parse_shapes(prog: str, flag: str, text: str, dims: int = 3, form: str | None = None) -> list:
    """The comma-separated shapes of option `flag` as tuples of `dims` positive integers (M x N x K GEMM
    shapes by default, ROWS x COLS with dims=2; ``form`` names the items otherwise, as launch
    configurations); exit 2 for an item that is not one."""
    form = form or "x".join(("M", "N", "K") if dims == 3 else ("ROWS", "COLS") if dims == 2 else ("D",) * dims)
    out = []
    for item in parse_list(prog, flag, text, str.strip):
        try:
            shape = tuple(int(v) for v in item.lower().split("x"))
        except ValueError:
            shape = ()
        if len(shape) != dims:
            fail(prog, f"{flag}: {item!r} is not {form}")
        if min(shape) < 1:
            fail(prog, f"{flag}: {item!r} has an empty dimension")
        out.append(shape)
    return out


def parse_names(prog: str, flag: str, text: str, known) -> list:
    """parse_list of names, each one of `known`; exit 2 naming the unknown ones."""
    names = parse_list(prog, flag, text, str.strip)
    unknown = sorted(set(names) - set(known))
    if unknown:
        fail(prog, f"{flag}: unknown {unknown}; known: {list(known)}")
    return names


def do_bench_median(warmup: int, rep: int, cudagraph: bool = False):
    """(bench, description): bench(fn) is the median time in ms of triton.testing.do_bench, or with
    ``cudagraph`` of do_bench_cudagraph (``--cudagraph``, which has no warm-up of its own); the
    description goes into the provenance as its "timer"."""
    import triton.testing

    if cudagraph:
        def bench(fn) -> float:
            return triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median")

        return bench, f"triton.testing.do_bench_cudagraph(rep={rep}, return_mode='median'): calls replayed from a CUDA graph"

    def bench(fn) -> float:
        return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")

    return bench, f"triton.testing.do_bench(warmup={warmup}, rep={rep}, return_mode='median')"


class Budget:
    """Seconds a benchmark may run: once spent, ``allows(what)`` says no, prints and records `what`
    (``skipped``), so the run still writes what it measured and says what it left out. None: no
    limit. ``allows(what, need)``: no unless ``need`` more seconds fit (a step that cannot be cut
    short, whose time the steps before it tell)."""

    def __init__(self, seconds: float | None):
        self.t0, self.seconds, self.skipped = time.monotonic(), seconds, []

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def allows(self, what: str, need: float = 0.0) -> bool:
        if self.seconds is None or self.elapsed() + need <= self.seconds:
            return True
        self.skipped.append(what)
        print(f"# skipped (budget {self.seconds:.0f} s spent): {what}", flush=True)
        return False


def write_budgeted_run(out: Path, fields, rows, prov: dict, budget: Budget) -> None:
    """A budgeted benchmark's end, also when it stops on an error: its rows, and its provenance
    beside them with the time it took and what the budget left out."""
    write_rows(out, fields, rows)
    prov["elapsed_s"], prov["skipped"] = round(budget.elapsed(), 1), budget.skipped
    write_provenance(provenance_path(out), prov)
    print(f"# wrote {out} ({len(rows)} rows)")


def write_rows(path: Path, fields, rows, extrasaction: str = "raise") -> None:
    """A CSV of `rows` (dicts) with the columns `fields` in that order; a key a row lacks is an empty
    cell (creating the folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(fields), restval="", extrasaction=extrasaction)
        writer.writeheader()
        writer.writerows(rows)


def gpu_provenance(**extra) -> dict:
    """What produced a GPU benchmark result (lowprec.provenance, flattened): UTC time, git commit,
    GPU name and compute capability, driver, CUDA, torch, Triton, Python, host and argv, then
    the script's own keys."""
    import torch
    import triton

    from lowprec import provenance

    dev = provenance.device_info()
    return {
        "utc_time": provenance.now(),
        "git_commit": provenance.git_commit(),
        "gpu": dev["gpu"],
        "gpu_capability": dev["capability"],
        "driver": dev["driver"],
        "cuda": dev["cuda"],
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": provenance.versions()["python"],
        "host": dev["host"],
        "argv": sys.argv[1:],
        **extra,
    }


def jit_from_source(source: str, name: str, scope: dict):
    """The function ``name`` that Triton source text defines, executed with ``scope`` as its globals
    (the source's own ``@triton.jit`` applies). triton.jit reads a function's source from its file,
    so the text is written to a file first, and kept: the compiler may read it again."""
    import tempfile

    fh = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    fh.write(source)
    fh.close()
    exec(compile(source, fh.name, "exec"), scope)
    return scope[name]


def write_provenance(path: Path, prov: dict) -> None:
    """Write prov as JSON to path (creating its folder) and print the headline of the run."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(prov, indent=2) + "\n")
    print(f"# {prov['gpu']}  driver {prov['driver']}  torch {prov['torch']}  triton {prov['triton']}  "
          f"cuda {prov['cuda']}", flush=True)
