"""The kernels Inductor generates for one transformer block of an arm, forward and backward, as it
would for a GPU, on a machine without one: its Triton kernels (reductions and pointwise), their
launches, the bytes those launches move by Inductor's estimate, and the calls it leaves to other
code (GEMMs, the suite's operators), per graph; torchao's float8 arms, the peers, are planned the same
way (where torchao is installed), so that a plan compares the suite's fast path with theirs.

    python -m lowprec.bench.inductor_plan --shape llama_100m --arms bf16_compiled,fp8_delayed \\
        --out results/bench/inductor_plan_cpu.csv --sources DIR

What a change to a fast path does to a step's kernels (does an amax fuse into its cast? does a
decision cost a pass of its own?) shows here in seconds of CPU time, before a GPU minute is spent
on it. How: Inductor compiles the block with its Triton backend for the CPU device
(``cpu_backend = "triton"``), and the generated module's source is taken before it is loaded, so
no Triton kernel is compiled and nothing runs on a GPU. The scheduler and its fusion heuristics
are the GPU's (its GPU-only passes run for the CPU's nodes, ``_schedule_as_gpu``); what differs
is what the suite's code decides by the device: paths that need CUDA take their CPU form (MoR's
cast pass, the cuBLAS block-scaled pair of blockwise FP8 and per-block MoR, which shows as a BF16
``mm`` here, flash attention), and the GPU's Triton autotuning does not happen (launch
configurations are not part of the plan). The INT8 recipes' arms (``KERNEL_FORM``) are planned in their
GPU form: their quantize and GEMM operators run on the CPU too (``lowprec.methods.int8_ops``), so
the graph holds them as the GPU's does, one node each (whose own traffic is not counted: with
``second_parts: sparse`` the GEMM operator's passes add into an fp32 product inside it, which the
plan does not see), with Inductor's kernels around them. Both graphs come from one compilation: AOTAutograd lowers the backward with the forward (its eager backward lowering), and
the traced call stops where the forward would first run. The block is one layer of the shape's
model (``lowprec.bench.e2e_step.SHAPES``), compiled as training compiles it
(``lowprec.linear.compiled``: the eager numerics, the graph passes), under bf16 autocast, with the
fast paths on (``LOWPREC_FAST_PATH=all``) and delayed scaling in its steady state (histories
recorded, ``QLinear.histories_recorded``). ``--tokens`` sets the tokens of the traced call (default
the shape's step: reductions over a whole tensor split by its size). ``--inductor KEY=VALUE``
(repeatable, as in ``lowprec.bench.e2e_step``) plans under other Inductor settings, named in each
row's ``inductor_options``: ``combo_kernels=true``, for one, shows how many launches Inductor's
combo kernels (independent kernels of a graph launched as one) would save; Inductor groups them for
GPU devices only, so the plan groups the CPU's nodes as it would a GPU's (``_combo_groups``). Every
plan compiles afresh (Inductor's caches off: a cached graph would not show a setting's effect).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import sys
from pathlib import Path

from .common import bench_parser, fail, inductor_options, inductor_options_text, parse_names, write_rows

PROG = "inductor_plan"
FIELDS = ["shape", "arm", "graph", "tokens", "triton_kernels", "reductions", "pointwise", "launches",
          "triton_gb", "extern_calls", "inductor_options", "commit"]
GRAPHS = ("forward", "backward")


class _Captured(Exception):
    """Raised by a call of a generated module that was captured, not loaded."""


class NoFastPath(ValueError):
    """An arm whose recipe has no fast plan: its compiled step is the emulation's, not planned."""


class _Unloaded:
    """Stands for a generated module that was not loaded: its ``call`` stops the traced call
    (``_Captured``); it has no other attribute, as a module without a runner has none."""

    def __init__(self, path: str):
        self.path = self.__file__ = path

    def call(self, *args, **kwargs):
        raise _Captured(self.path)


@contextlib.contextmanager
def triton_codegen_on_cpu(sources: list):
    """Inductor generates Triton code for CPU tensors; each generated module's source is appended
    to ``sources`` and its loading raises ``_Captured``. Restores Inductor's settings after."""
    import torch._inductor.config as inductor_config
    import torch.utils._triton as torch_triton
    from torch._inductor import codecache

    def capture(key, path, *args, **kwargs):
        sources.append(Path(path).read_text())
        return _Unloaded(path)

    from torch._inductor.scheduler import ForeachKernelSchedulerNode as combos

    saved = (inductor_config.cpu_backend, torch_triton.triton_hash_with_backend,
             codecache.PyCodeCache.__dict__["load_by_key_path"], os.environ.pop("TRITON_INTERPRET", None),
             combos.group_algorithm_for_combo_kernels, inductor_config.force_disable_caches)
    # without a GPU Triton has no active driver to name the backend's hash with
    inductor_config.cpu_backend = "triton"
    inductor_config.force_disable_caches = True
    torch_triton.triton_hash_with_backend = lambda: "cpu-plan"
    codecache.PyCodeCache.load_by_key_path = staticmethod(capture)
    combos.set_group_algorithm_for_combo_kernels(_combo_groups)
    undo_gpu = _schedule_as_gpu()
    # under the Triton interpreter Inductor loads each kernel's source in the process as it
    # generates it; here kernels are only generated
    try:
        yield sources
    finally:
        inductor_config.cpu_backend, torch_triton.triton_hash_with_backend = saved[:2]
        codecache.PyCodeCache.load_by_key_path = saved[2]
        if saved[3] is not None:
            os.environ["TRITON_INTERPRET"] = saved[3]
        combos.set_group_algorithm_for_combo_kernels(saved[4])
        inductor_config.force_disable_caches = saved[5]
        undo_gpu()


def _schedule_as_gpu():
    """Make Inductor's scheduler decide for the CPU's Triton nodes as it does for a GPU's; returns
    what undoes it. Some of its passes run for GPU nodes only: loop ordering after fusion (a node's
    loops kept unmerged, so that a consumer may fuse in another loop order: e.g. a transposed store
    into a row reduction, which the H200's profile of per-channel MoR shows and a plan without it
    did not) and the reindexing and loop inversion that go with it. Here the scheduler's device
    test (``is_gpu``) answers yes for the CPU and a node's ``is_cpu`` no, except where a GPU's
    answer is not about scheduling: creating the device's backend (which asks a GPU for its index)
    and 0-d CPU tensors, which on a GPU are host scalars (here every tensor is the CPU's, as none is
    on a GPU). Other GPU-only decisions (mixed-order reductions, for CUDA and XPU by name) stay the
    CPU's."""
    from torch._inductor import scheduler

    saved = (scheduler.is_gpu, scheduler.BaseSchedulerNode.is_cpu, scheduler.Scheduler.create_backend,
             scheduler.Scheduler.update_zero_dim_cpu_tensor)
    device_is_gpu, create_backend = saved[0], saved[2]

    def create_backend_as_itself(self, device):
        scheduler.is_gpu = device_is_gpu
        try:
            return create_backend(self, device)
        finally:
            scheduler.is_gpu = is_gpu

    def is_gpu(device_type) -> bool:
        return device_type == "cpu" or device_is_gpu(device_type)

    scheduler.is_gpu = is_gpu
    scheduler.BaseSchedulerNode.is_cpu = lambda self: False
    scheduler.Scheduler.create_backend = create_backend_as_itself
    scheduler.Scheduler.update_zero_dim_cpu_tensor = lambda self: None

    def undo():
        (scheduler.is_gpu, scheduler.BaseSchedulerNode.is_cpu, scheduler.Scheduler.create_backend,
         scheduler.Scheduler.update_zero_dim_cpu_tensor) = saved
    return undo


def _combo_groups(scheduler) -> list:
    """The candidate groups of combo kernels (``combo_kernels=True``) for a plan on the CPU: in each
    set of nodes that the scheduler's topological order leaves independent of one another, the
    nodes with a device, in runs of at most ``combo_kernel_max_num_nodes``. Inductor's own grouping
    is the same for a GPU's nodes but leaves a CPU's out; nodes that read the outputs of a fused
    mix-order reduction stay out here as there. Which groups become combo kernels is then
    Inductor's decision, as on a GPU."""
    import torch._inductor.config as inductor_config
    from torch._inductor import scheduler as inductor_scheduler

    fused_mixed = getattr(inductor_scheduler, "FusedMixOrderReductions", ())  # absent from older torch
    layers = scheduler._topological_sort_nodes()
    mixed = {name for layer in layers for node in layer if isinstance(node, fused_mixed)
             for name in node.get_buffer_names()}
    size = inductor_config.combo_kernel_max_num_nodes
    groups = []
    for layer in layers:
        nodes = [n for n in layer if n.get_device() is not None and not (n.used_buffer_names() & mixed)]
        groups += [nodes[i:i + size] for i in range(0, len(nodes), size)]
    return groups


def _until_captured(call, sources: list) -> None:
    """Run ``call`` with Inductor generating Triton code, until a captured module is called (the
    stop comes in whatever error Inductor wraps it in; any other error is raised)."""
    with triton_codegen_on_cpu(sources):
        try:
            call()
        except Exception as exc:
            if not (sources and _Captured.__name__ in f"{type(exc).__name__}: {exc}"):
                raise


_KERNEL_SOURCE = re.compile(r"async_compile\.triton\('(\w+)', '{3}(.*?)'{3}", re.DOTALL)


def summarize(source: str) -> dict:
    """A generated module's Triton kernels (``triton_per`` / ``triton_red``: reductions; the others
    pointwise; distinct by code and sizes, since the benchmark harness names each kernel's sizes),
    their launches, the gigabytes those launches move by Inductor's estimate (each
    kernel's ``kernel_num_gb``: its inputs read and outputs written once; empty where a launched
    kernel lacks it), and its calls to other code by name (``extern_kernels.mm``,
    ``torch.ops.<ns>.<op>``), whose traffic is not counted."""
    # each kernel's source is a string of the module (with a benchmark harness of its own that
    # launches it): kernels are counted by those strings, launches and calls outside them
    blocks = _KERNEL_SOURCE.findall(source)
    kernels = [name for name, _ in blocks if name.startswith("triton_")]
    outside = _KERNEL_SOURCE.sub("", source)
    externs = collections.Counter(
        re.findall(r"(extern_kernels\.\w+|torch\.ops\.\w+\.\w+)(?:\.\w+)?\(", outside))
    reductions = sum(k.startswith(("triton_per_", "triton_red_")) for k in kernels)
    launches = re.findall(r"^\s+(\w+)\.run\(", outside, re.MULTILINE)
    gb = {}
    for name, body in blocks:
        m = re.search(r"'kernel_num_gb': ([0-9.eE+-]+)", body)
        if m:
            gb[name] = float(m.group(1))
    moved = round(sum(gb[k] for k in launches), 4) if launches and all(k in gb for k in launches) else ""
    return {"triton_kernels": len(kernels), "reductions": reductions, "pointwise": len(kernels) - reductions,
            "launches": len(launches), "triton_gb": moved,
            "extern_calls": ";".join(f"{name}:{n}" for name, n in sorted(externs.items()))}


def _block_model(arm: str, shape: dict, recorded: bool, inductor: dict | None = None):
    """One layer of the shape's model, converted for the arm and wrapped as training compiles it
    (``inductor``: Inductor settings over the compiled blocks' own)."""
    import torch

    from ..gemm import FastPlan
    from ..linear import QLinear, compiled, convert
    from ..models import build_model
    from ..recipes import recipe_from_config
    from .e2e_step import BASELINE, METHODS, torchao_convert
    from .train_step import VOCAB

    torch.manual_seed(0)
    model = build_model({**shape["model"], "layers": 1}, VOCAB)
    model.train()
    if arm.startswith("torchao_"):
        torchao_convert(model, arm.split("_", 1)[1], prog=f"lowprec.bench.{PROG}")
    elif arm != BASELINE:
        recipe = recipe_from_config(METHODS[arm])
        convert(model, recipe)
        if FastPlan.for_recipe(recipe) is None:
            raise NoFastPath(f"{arm}: no fast path (its compiled training runs the emulation)")
    for m in model.modules():
        if isinstance(m, QLinear):
            m.histories_recorded = recorded
    return compiled(model, options=dict(inductor or {}))


def plan(arm: str, shape_name: str, tokens: int | None = None, recorded: bool = True,
         inductor: dict | None = None) -> dict:
    """{graph: generated source} of one block of ``shape_name`` under ``arm`` (``tokens``: of the
    traced call, whole sequences of the shape's length or one shorter sequence; default the shape's
    step). ``recorded``: delayed scaling's histories hold an amax (its steady state). ``inductor``:
    Inductor settings over the compiled blocks' own (``--inductor``)."""
    import torch
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    from .. import linear
    from .e2e_step import SHAPES

    shape = SHAPES[shape_name]
    tokens = tokens or shape["batch"] * shape["seq"]
    seq = min(shape["seq"], tokens)
    ids = torch.randint(0, 100, (max(1, tokens // seq), seq), generator=torch.Generator().manual_seed(0))
    from ..methods import int8_ops

    fast_path, linear.FAST_PATH = linear.FAST_PATH, "all"
    kernel_devices = int8_ops.KERNEL_DEVICES
    if _kernel_form(arm):
        int8_ops.KERNEL_DEVICES = (*kernel_devices, "cpu")
    sources: list = []
    torch._dynamo.reset()
    try:
        model = _block_model(arm, shape, recorded, inductor)
        # the backward lowered with the forward (AOTAutograd's eager backward lowering), so that
        # both are generated before the forward would run
        # benchmark_kernel: each kernel's metadata says the bytes it moves (kernel_num_gb)
        with functorch_config.patch(force_non_lazy_backward_lowering=True), \
                inductor_config.patch(benchmark_kernel=True), torch.autocast("cpu", dtype=torch.bfloat16):
            _until_captured(lambda: model(ids), sources)
    finally:
        linear.FAST_PATH = fast_path
        int8_ops.KERNEL_DEVICES = kernel_devices
        torch._dynamo.reset()
    if len(sources) != len(GRAPHS):
        raise RuntimeError(f"{arm}: Inductor generated {len(sources)} modules for one block, expected a forward and "
                           "a backward (is the block compiled, and does it take gradients?)")
    return dict(zip(GRAPHS, sources))


def _parse(argv):
    from .e2e_step import ARMS, SHAPES
    p = bench_parser(f"lowprec.bench.{PROG}", __doc__)
    p.add_argument("--shapes", default="llama_100m", help=f"comma-separated subset of {list(SHAPES)}")
    p.add_argument("--arms", default=",".join(_plannable(ARMS)),
                   help="comma-separated subset of the end-to-end benchmark's compiled arms (default: all)")
    p.add_argument("--tokens", type=int, default=None, help="tokens of the traced call (default: the shape's step)")
    p.add_argument("--inductor", action="append", default=[], metavar="KEY=VALUE",
                   help="an Inductor setting over the compiled blocks' own (e.g. combo_kernels=true); repeatable")
    p.add_argument("--sources", default=None,
                   help="write each graph's generated module to DIR/<shape>_<arm>_<graph>.py")
    return p.parse_args(argv)


def _plannable(arms) -> tuple:
    """The arms a plan is made for: the compiled ones, torchao's peers among them (eager BF16 has no
    graph)."""
    return tuple(a for a in arms if a != "bf16_eager")


# recipes whose GEMMs and quantization passes are Triton operators on CUDA: their arms are planned
# with the operators on the CPU too (``int8_ops.KERNEL_DEVICES``), as opaque nodes of the graph
# where the GPU's are
KERNEL_FORM = ("int8_block", "int8_fallback")


def _kernel_form(arm: str) -> bool:
    from .e2e_step import METHODS
    return arm in METHODS and METHODS[arm]["recipe"] in KERNEL_FORM


def main(argv=None) -> int:
    args = _parse(argv)
    from .. import provenance
    from ..io import provenance_path, write_json
    from .e2e_step import ARMS, SHAPES, torchao_available

    shapes = parse_names(PROG, "--shapes", args.shapes, tuple(SHAPES))
    arms = parse_names(PROG, "--arms", args.arms, _plannable(ARMS))
    if args.tokens is not None and args.tokens < 1:
        fail(PROG, f"--tokens must be positive, got {args.tokens}")
    inductor = inductor_options(PROG, args.inductor)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    commit = provenance.git_commit()
    rows, skipped = [], {}
    for shape in shapes:
        for arm in arms:
            if arm.startswith("torchao_") and not torchao_available():
                skipped[f"{shape}/{arm}"] = "torchao is not installed"
                print(f"# {shape} {arm}: skipped (torchao is not installed)", flush=True)
                continue
            try:
                sources = plan(arm, shape, args.tokens, inductor=inductor)
            except NoFastPath as exc:
                skipped[f"{shape}/{arm}"] = str(exc)
                print(f"# {shape} {arm}: skipped ({exc})", flush=True)
                continue
            for graph, source in sources.items():
                row = {"shape": shape, "arm": arm, "graph": graph, "tokens": args.tokens or "step",
                       **summarize(source), "inductor_options": inductor_options_text(inductor),
                       "commit": commit}
                rows.append(row)
                print(f"{shape:10s} {arm:24s} {graph:8s} {row['triton_kernels']:3d} kernels  {row['launches']:3d} "
                      f"launches  {row['triton_gb']} GB  {row['extern_calls']}", flush=True)
                if args.sources:
                    path = Path(args.sources) / f"{shape}_{arm}_{graph}.py"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(source)
    write_rows(Path(args.out), FIELDS, rows)
    write_json(provenance_path(Path(args.out)), {
        **provenance.collect(), "time": provenance.now(), "argv": sys.argv[1:] if argv is None else list(argv),
        "what": __doc__.strip().split("\n")[0], "skipped": skipped,
        "note": "generated on the CPU for Inductor's Triton backend: fusion decisions, not a GPU measurement"})
    print(f"# wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
