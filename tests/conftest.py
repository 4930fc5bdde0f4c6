import importlib
import os
import random
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Keep torch's CPU thread pool small and tests deterministic on 2-core machines.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Inductor's C++ backend (torch.compile of CPU tensors) without SIMD code: generating the
# vectorized loops and their scalar tails took most of each compilation (a compiled INT8 layer's
# test 73 s -> 40 s, bit for bit the same result), and the tests check what a graph computes, not
# the CPU's vector code, which no GPU run uses. TORCHINDUCTOR_VEC_ISA_OK=1 tests the vector code.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")


def kernel_modules(*names: str) -> list:
    """The Triton kernel modules ``names`` (full names, dependencies first) for a kernel test file,
    called before the file imports anything of lowprec: compiled where CUDA is, else built for the
    Triton interpreter on the CPU (TRITON_INTERPRET is read when a kernel is decorated, so it is set
    first, and modules imported earlier without it are rebuilt). Skips the file when Triton is
    missing or can run nowhere."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    pytest.importorskip("triton")
    from lowprec.kernels._common import reload_for_interpreter

    reload_for_interpreter(*names)
    mods = [importlib.import_module(n) for n in names]
    if not kernel_devices(mods[0]):
        pytest.skip("Triton kernels need CUDA or TRITON_INTERPRET=1", allow_module_level=True)
    return mods


def kernel_devices(mod) -> list:
    """Where a kernel module's kernels run: the CPU if built for the interpreter, CUDA if present."""
    import torch

    return (["cpu"] if mod.interpreter_active() else []) + (["cuda"] if torch.cuda.is_available() else [])


def compiled_probe(code: str, skip_reason: str, timeout: int = 600) -> str:
    """The output of ``code`` run in a Python process without the Triton interpreter (the tests of
    kernels compiled for a GPU target on this machine: Inductor's analysis, machine code); the test
    is skipped with ``skip_reason`` where the probe prints SKIP (this Triton or torch lacks what it
    asks of them)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    if out.stdout.strip() == "SKIP":
        pytest.skip(skip_reason)
    return out.stdout


# the interpreter's numpy warnings (overflow in casts the kernels mean) in kernel test files
INTERPRETER_WARNINGS = pytest.mark.filterwarnings("ignore::RuntimeWarning:triton.runtime.interpreter")


LONGEST = "test_smoke_dag_end_to_end"  # minutes: the whole smoke workflow


def pytest_collection_modifyitems(items):
    """The longest test first, then the other end-to-end ones, then the rest in file order: under
    pytest-xdist (pyproject's addopts) the workers share out the short tests while the long ones
    run, instead of one worker finishing a minutes-long workflow run alone at the end."""
    items.sort(key=lambda item: (item.name != LONGEST, item.get_closest_marker("slow") is None))


TIMEOUT_ENV = "LOWPREC_TEST_TIMEOUT"


@pytest.fixture(autouse=True)
def _hang_guard():
    """With LOWPREC_TEST_TIMEOUT=S, a test still running after S seconds ends its process with
    every thread's traceback (the test's name in it): a GPU kernel that never returns cannot be
    interrupted from Python, and would otherwise hold the whole run. Under pytest-xdist the
    worker is replaced and the test reported failed; the other tests go on."""
    import faulthandler

    limit = float(os.environ.get(TIMEOUT_ENV, "0") or 0)
    if limit <= 0:
        yield
        return
    faulthandler.dump_traceback_later(limit, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_terminal_summary(terminalreporter):
    """The versions this run tested (those a run's provenance records): a fresh install takes the
    newest of each, so a failure that appears overnight reads them first."""
    from lowprec.provenance import versions

    terminalreporter.write_line("tested with " + ", ".join(f"{k} {v}" for k, v in versions().items() if v))


def _synthetic_play(seed: int, n_lines: int = 900) -> str:
    """Deterministic English-like text with structure a tiny model can learn quickly."""
    rng = random.Random(seed)
    speakers = ["KING", "QUEEN", "FOOL", "LORD", "LADY"]
    words = ("the my thy good lord sweet night day love death crown heart fair noble speak "
             "come go stay know see hear tell grace blood honour truth king queen fool").split()
    lines = []
    for i in range(n_lines):
        if i % 6 == 0:
            lines.append(f"\n{rng.choice(speakers)}.")
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(4, 9))).capitalize() + ".")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    for i in range(6):
        (d / f"play_{i}.txt").write_text(_synthetic_play(i))
    return d


@pytest.fixture(scope="session")
def prepared_data(corpus_dir, tmp_path_factory) -> Path:
    from lowprec.data import prepare

    out = tmp_path_factory.mktemp("data") / "synthetic"
    prepare({"source": "local", "path": str(corpus_dir), "vocab_size": 320, "val_fraction": 0.2}, out)
    return out


def smoke_run_config(paper, model, method, data_dir, out_root, **train):
    """A smoke-scale run config pointed at the synthetic corpus."""
    from lowprec.config import resolve_run

    cfg = resolve_run("smoke", paper, model, method, 0, results=str(out_root))
    cfg["data"]["dir"] = str(data_dir)
    cfg["train"].update(train)
    return cfg


def linear_reference64(ref, x, g):
    """Output, dX and dW of ``ref`` (an nn.Linear) for input x and output gradient g, in float64:
    the independent reference every quantized linear is measured against."""
    import torch  # noqa: F401

    x64 = x.double().requires_grad_()
    w64 = ref.weight.detach().double().requires_grad_()
    y = x64 @ w64.t() + ref.bias.detach().double()
    y.backward(g.double())
    return y.detach(), x64.grad, w64.grad


def assert_equal_or_both_nan(got, want):
    """Equal bit for bit (so -0.0 and +0.0 differ), except that a NaN only has to be a NaN at the
    same place: INT8 scales of blocks holding NaN/Inf are NaN, whose bits are platform-defined."""
    import torch

    got, want = got.cpu(), want.cpu()
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    gn, wn = torch.isnan(got), torch.isnan(want)
    assert torch.equal(gn, wn), f"NaN at {gn.nonzero().tolist()} vs {wn.nonzero().tolist()}"
    assert torch.equal(got[~gn], want[~wn]) and torch.equal(torch.signbit(got[~gn]), torch.signbit(want[~wn]))


@pytest.fixture
def count_calls(monkeypatch):
    """count_calls(obj, name) -> {"n": calls of obj.name so far}: the attribute wrapped by a counter
    (the way a test checks that a path really ran)."""
    def wrap(obj, name: str) -> dict:
        calls = {"n": 0}
        real = getattr(obj, name)

        def counting(*a, **kw):
            calls["n"] += 1
            return real(*a, **kw)

        monkeypatch.setattr(obj, name, counting)
        return calls
    return wrap


@pytest.fixture
def scaled_mm_calls(count_calls) -> dict:
    """{"n": calls of torch._scaled_mm so far}: the FP8 GEMMs that really ran on the FP8 path."""
    from lowprec.numerics import scaled_mm
    return count_calls(scaled_mm, "_scaled_mm")


def autocast_loss(x, g):
    """loss(model) = sum(model(x) * g) under CPU bf16 autocast: the step a compile test traces
    (``loss(model, inputs)`` takes another input than ``x``, e.g. one per step)."""
    import torch

    def loss(model, inputs=None):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return (model(x if inputs is None else inputs).float() * g).sum()
    return loss


def assert_one_graph(fn, *args) -> None:
    """Dynamo traces fn(*args) into one graph with no break (the reasons in the message)."""
    import torch._dynamo as dynamo
    dynamo.reset()
    explained = dynamo.explain(fn)(*args)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, \
        [str(b.reason)[:300] for b in explained.break_reasons]


def compiled_as_one_graph(fn):
    """torch.compile(fn) (Inductor, as is) whose first call asserts what ``assert_one_graph`` does:
    Dynamo traced fn into one graph with no break (the reasons in the message). The check is made on
    the compilation a test runs anyway, where ``assert_one_graph`` traces (and runs) fn once more."""
    import torch
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    dynamo.reset()
    compiled, first = torch.compile(fn), [True]

    def call(*args):
        if not first:
            return compiled(*args)
        first.clear()
        counters.clear()
        out = compiled(*args)
        graphs, breaks = counters["stats"]["unique_graphs"], counters["graph_break"]
        assert graphs == 1 and not breaks, (graphs, [str(b)[:300] for b in breaks])
        return out
    return call


def assert_no_buffer_written_back(code: list) -> None:
    """Inductor's generated ``code`` (``run_and_get_code``) of a training step holds no kernel that
    copies a layer buffer and writes it back: per-slot state that both passes update lives in a
    tensor per pass (``lowprec.methods.layer_buffers``); a tensor the forward updated too would be
    copied by the backward, in kernels named for the functional view (as_strided) of the buffer."""
    import re

    copies = re.findall(r"\b(?:cpp|triton)_\w*as_strided\w*", "\n".join(code))
    assert not copies, f"the compiled step copies a buffer back: {copies}"


def compiled_and_eager_mor_models(method: dict, width: int = 256):
    """Two copies of a two-layer model of ``width`` features converted under ``mor_recipe(method)``:
    one autocast step of each on ``width`` tokens, the same data, the compiled one's traced as one
    graph (asserted). Returns (compiled model, eager model, the compiled model's recipe) for their
    gradients and the decision counts the compiled graph made."""
    import copy

    import torch
    from torch import nn
    from torch._inductor.utils import run_and_get_code

    from lowprec import convert
    from lowprec.methods.mor import mor_recipe

    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))
    eager, comp = copy.deepcopy(base), copy.deepcopy(base)
    recipe_c = mor_recipe(dict(method))
    convert(eager, mor_recipe(dict(method)))
    convert(comp, recipe_c)
    loss = autocast_loss(torch.randn(2, width // 2, width), torch.randn(2, width // 2, width))
    _, code = run_and_get_code(lambda: compiled_as_one_graph(loss)(comp).backward())
    assert_no_buffer_written_back(code)
    loss(eager).backward()
    return comp, eager, recipe_c


def fast_and_emulated_mor_steps(base, method: dict, x, g, monkeypatch):
    """One autocast step of two copies of ``base`` converted under ``mor_recipe(method)``, one on the
    fast path and one on the emulation, from input ``x`` and output gradient ``g``. Returns their
    (output, input gradient, parameter gradients...) lists and their recipes (fast, emulated)."""
    import copy

    import torch

    import lowprec.linear as lin
    from lowprec import convert
    from lowprec.methods.mor import mor_recipe

    def step(model):
        xi = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = model(xi)
        y.float().backward(g)
        return [y.detach().float(), xi.grad.float()] + [p.grad.float() for p in model.parameters()]

    runs = []
    for fast_path in ("all", "off"):
        model, recipe = copy.deepcopy(base), mor_recipe(dict(method))
        convert(model, recipe)
        monkeypatch.setattr(lin, "FAST_PATH", fast_path)
        runs.append((step(model), recipe))
    (got, rf), (want, re) = runs
    return got, want, rf, re
