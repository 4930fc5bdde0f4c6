"""End-to-end training-step throughput of every method against compiled BF16 and the peers a user
would pick instead (torchao float8 training), on one GPU:

    python -m lowprec.bench.e2e_step --out results/bench/e2e_h200.csv
    python -m lowprec.bench.e2e_step --shapes llama_1b --arms bf16_compiled,int8_fallback --merge

Shapes (``--shapes``): ``llama_100m`` (12 x 768, ffn 2048, 16 x 1024 tokens per step) and ``llama_1b``
(16 x 2048, ffn 5632, 16 heads, 8 x 2048 tokens per step), both Llama2-style (SwiGLU), vocab 8192.

Arms (``--arms``):
  bf16_eager              plain model under bf16 autocast
  bf16_compiled           the same with its transformer blocks under torch.compile (regional compilation,
                          ``lowprec.linear.compile_blocks``, as every compiled arm): the baseline of every ratio
  torchao_tensorwise      torchao float8 training (Float8LinearConfig "tensorwise"), compiled
  torchao_rowwise         torchao float8 training ("rowwise"), compiled
  <recipe or method>      the suite's recipes and methods (fp8_tensorwise_current, fp8_delayed, fp8_hybrid,
                          fp8_blockwise, mor_tensor, mor_tensor_all_bf16 (threshold 0: every operand
                          chooses BF16, so each GEMM is the FP8 product and the BF16 loop that replaces
                          it: the price of MoR's BF16 choice, which random batches never make at the
                          default threshold), mor_channel, mor_channel_without_transpose (each
                          transpose quantized again in the backward, not with its tensor in the
                          forward: the default before 236be2e's measurement), mor_block, mor_sub_two_way,
                          mor_sub_two_way_torch (its quantization by Inductor's fused torch ops, not
                          the Triton kernels of the default), gaussws,
                          int8_block, int8_fallback, int8_fallback_b128 (128x128 blocks),
                          int8_fallback_b128_sparse (the same with the second parts in passes of
                          their own, adding into an fp32 product: ``second_parts: sparse``)) through
                          lowprec.convert, compiled with lowprec.linear.compiled as training compiles
                          them on the GPU (train.compile: auto): on the fast path where the recipe has one (``FastPlan``), else the
                          emulation compiled (``path`` reads ``compiled emulation``, never with CUDA graphs)

Every arm's step is forward, loss, backward and a fused AdamW step, quantization included, timed in
the steady state of a training loop (``time_steps``: an untimed step refills the launch queue after
each sync, CUDA events time the rest). A run's ``timer`` in the provenance says so; runs without
one timed the steps between two syncs by the wall clock, the first step waiting for every launch.
Arms run
one after another (a 1B model with its AdamW state is ~18 GB: all arms at once do not fit); the
baseline is measured first and again last, and the ratios are against the mean of the two (their
spread is in the provenance as the drift of the run). ``lowp_gemms_per_step`` counts the
low-precision GEMMs of one profiled step (``aten::_scaled_mm`` calls, the Triton FP8 loop of
block-scaled pairs and the Triton INT8 GEMM kernels): 0 for an arm with a hardware path
(``HARDWARE_ARMS``) means nothing ran on low-precision hardware, and the run fails (sub-tensor
MoR's block-scaled GEMM counts, twice per GEMM with 128-high blocks: one launch for the tiles on FP8
tensor cores, one for the tiles on BF16 ones). For INT8 fallback arms the provenance also gives
each repeat's share of blocks that fell back (``fallback_ratio_reps``), which a second part's cost
follows, for MoR arms each repeat's share of operand calls that chose E4M3 (``mor_e4m3_share_reps``:
a BF16 choice pays the fix-up's BF16 product too), and every arm's INT8 GEMM configurations
(``int8_tuned``). ``peak_mem_gib`` is an arm's own peak: what is still allocated when it starts
(an earlier arm's leftovers) is left out and given in the provenance (``held_before_gib``; rows of
runs without it counted it in). An arm whose repeats spread by more than 10 % is warned about and
named in the provenance (``unsteady``).
``--cudagraphs`` compiles every compiled arm, the baseline included, with Inductor's CUDA graphs
(``compile_blocks(cudagraphs=True)``; ``path`` reads ``cudagraphs``): the host launches a graph per
block instead of each kernel (GaussWS's transforms then draw into the same tensors at every step;
an arm whose weight transform cannot stays without graphs, ``unstable_weight_layers``). Replayed
kernels leave no operator event, so the count then reads the kernels' names (``_LOWP_CUBLAS`` for
cuBLAS's).
``--inductor KEY=VALUE`` (repeatable) compiles every compiled arm, the baseline included, with that
Inductor setting over the ones that keep eager's numerics (``lowprec.linear.EAGER_NUMERICS``), to
measure what those cost (``inductor_options`` names them in each row; such a run writes to a file
of its own). With ``--inductor-arms-only`` the baseline compiles at the suite's defaults: the
ratios then read what a setting is worth to an arm against the BF16 a user runs (a setting that
helps one recipe and slows BF16, as combo kernels at 98 M, would otherwise cancel out).
``--budget-s`` fits the run to a GPU job of fixed length: an arm starts only if, with the closing
baseline, it fits as long as the longest arm so far took; the provenance names the arms left out
(``skipped``).
``--merge`` keeps the rows of other (shape, arm) pairs already in ``--out``; ``--merge-from`` merges the
CSVs of other runs (a GPU job's output) into ``--out`` without measuring. Each run measures its own
baseline: a row's ratio is against ``baseline_tokens_per_s`` of its own run (``commit``), and the
provenance lists every run that contributed, with its device.
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from pathlib import Path

from ..errors import error_text
from .common import (Budget, bench_parser, fail, fresh_compilation, inductor_options, inductor_options_text, parse_names,
                     provenance_path, require_cuda)
from .train_step import MODEL, optimizer, random_batches, step

PROG = "e2e_step"
SHAPES = {
    "llama_100m": {"model": MODEL, "batch": 16, "seq": 1024},
    "llama_1b": {"model": {"name": "llama2_1b", "family": "llama", "layers": 16, "d_model": 2048, "heads": 16,
                           "kv_heads": 16, "ffn": 5632, "max_seq_len": 2048, "tie_embeddings": False},
                 "batch": 8, "seq": 2048},
}
BASELINE = "bf16_compiled"
DEFAULT_OUT = "results/bench/e2e_h200.csv"
PEERS = ("bf16_eager", BASELINE, "torchao_tensorwise", "torchao_rowwise")
METHODS = {  # suite arm -> method config (lowprec.recipes.recipe_from_config)
    "fp8_tensorwise_current": {"recipe": "fp8_tensorwise_current"},
    "fp8_delayed": {"recipe": "fp8_delayed"},
    "fp8_hybrid": {"recipe": "fp8_hybrid"},
    "fp8_blockwise": {"recipe": "fp8_blockwise"},
    "mor_tensor": {"recipe": "mor", "partition": "tensor"},
    "mor_tensor_all_bf16": {"recipe": "mor", "partition": "tensor", "threshold": 0.0},
    "mor_channel": {"recipe": "mor", "partition": "channel"},
    # per-channel MoR with each transpose quantized again in the backward, as before the default
    # quantized it with its tensor in the forward (lowprec.methods.mor_fast.CHANNEL_WITH_TRANSPOSE)
    "mor_channel_without_transpose": {"recipe": "mor", "partition": "channel"},
    "mor_block": {"recipe": "mor", "partition": "block"},
    "mor_sub_two_way": {"recipe": "mor", "partition": "subtensor", "subtensor_mode": "two_way"},
    "mor_sub_two_way_torch": {"recipe": "mor", "partition": "subtensor", "subtensor_mode": "two_way",
                              "quantize": "torch"},
    "gaussws": {"recipe": "gaussws", "b": 6},
    "int8_block": {"recipe": "int8_block"},  # Jetfire's recipe (gemm: kernel is the INT8 recipes' default)
    "int8_fallback": {"recipe": "int8_fallback"},
    # the fallback recipe at 128x128 blocks: the K-group at which the INT8 GEMM nears BF16's rate on the
    # H200 (results/bench/int8_gemm_h200_1b_shapes/), against the paper's 32 above
    "int8_fallback_b128": {"recipe": "int8_fallback", "block": [128, 128]},
    # the same with the second parts in passes of their own over an fp32 C (the default before the tail)
    "int8_fallback_b128_sparse": {"recipe": "int8_fallback", "block": [128, 128], "second_parts": "sparse"},
}
ARMS = PEERS + tuple(METHODS)
# arms whose GEMMs run on low-precision codes on CUDA
HARDWARE_ARMS = {"torchao_tensorwise", "torchao_rowwise", "fp8_tensorwise_current", "fp8_delayed", "fp8_hybrid",
                 "fp8_blockwise", "mor_tensor", "mor_channel", "mor_channel_without_transpose", "mor_block",
                 "mor_sub_two_way",
                 "mor_sub_two_way_torch", "int8_block", "int8_fallback", "int8_fallback_b128",
                 "int8_fallback_b128_sparse"}
FIELDS = ["shape", "arm", "path", "tokens_per_s", "tokens_per_s_reps", "ratio_vs_bf16_compiled", "peak_mem_gib",
          "lowp_gemms_per_step", "step_ms", "batch", "seq", "n_params", "steps", "repeats", "baseline_tokens_per_s",
          "commit", "inductor_options"]
# kernels counted as low-precision GEMMs in the profiled step
# (the Triton FP8 loop of block-scaled pairs by its operator: the MoR kernel's launches include
# fix-ups that return at once, which are no GEMM)
_LOWP_OPS = ("aten::_scaled_mm", "lowprec::block_scaled_mm")
# by name prefix: lowprec.kernels.int8_fallback_kernels and lowprec.kernels.block_fp8_gemm (a
# triton_op's launch leaves no operator event, only its kernel's)
_LOWP_KERNELS = ("_gemm_kernel", "_block_scaled_gemm_kernel")
# cuBLAS's FP8 GEMM kernels on Hopper (cuBLAS 13: nvjet_sm90_qq..., both operands FP8), for steps
# replayed as CUDA graphs; Inductor's own kernels (triton_*) may name _scaled_mm among fused ops
_LOWP_CUBLAS = re.compile(r"^nvjet_sm\d+_qq|e4m3|f8f8", re.IGNORECASE)


def _parse(argv):
    p = bench_parser(f"lowprec.bench.{PROG}", __doc__, "CSV path; <name>.provenance.json goes beside it",
                     default=DEFAULT_OUT)
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated subset of {list(SHAPES)}")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {list(ARMS)}")
    p.add_argument("--steps", type=int, default=5, help="optimizer steps per timed repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed steps per arm (compilation happens here; fp8_delayed compiles its second graph "
                        "at its second step, once its histories hold an amax)")
    p.add_argument("--cudagraphs", action="store_true",
                   help="compiled arms (the baseline too) replay their blocks as CUDA graphs")
    p.add_argument("--merge", action="store_true", help="keep the rows of other (shape, arm) pairs in --out")
    p.add_argument("--merge-from", nargs="+", default=None, metavar="CSV",
                   help="merge these outputs of other runs into --out (newer rows win) and exit; nothing is measured")
    p.add_argument("--inductor", action="append", default=[], metavar="KEY=VALUE",
                   help="an Inductor setting for every compiled arm, the baseline included, over the ones that "
                        "keep eager's numerics (lowprec.linear.EAGER_NUMERICS), e.g. emulate_precision_casts=false; "
                        "repeatable; such a run writes to its own --out, never the default file or a --merge")
    p.add_argument("--inductor-arms-only", action="store_true",
                   help="apply the --inductor settings to the measured arms only; the baseline compiles at the "
                        "suite's defaults")
    p.add_argument("--budget-s", type=float, default=None,
                   help="start an arm only if it fits in these seconds with the closing baseline, as long as the "
                        "longest arm so far took (a GPU job of fixed length: the arms left out are named in the "
                        "provenance, and the baseline's second measurement still runs); default: no limit")
    p.add_argument("--profile-dir", default=None,
                   help="write the CUDA kernels of each arm's profiled step, by total time, to <dir>/<shape>_<arm>.txt, "
                        "and the source of its slowest Inductor-generated Triton kernels to <dir>/<shape>_<arm>.kernels.txt")
    return p.parse_args(argv)


def torchao_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("torchao") is not None


def torchao_convert(model, recipe: str, prog: str = PROG):
    """torchao's float8 training on every linear layer but the LM head, as a user converts a model
    (the peer arms of this benchmark and of ``lowprec.bench.inductor_plan``)."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError:
        fail(prog, f"arm torchao_{recipe} needs torchao (pip install torchao)")
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                               module_filter_fn=lambda mod, fqn: "lm_head" not in fqn)


def build_arm(arm: str, shape: dict, cudagraphs: bool = False, inductor: dict | None = None):
    """(callable model, its module, path) for one arm: path is 'compiled', 'cudagraphs', 'compiled
    emulation' (a recipe without a fast plan, compiled as training compiles it) or 'eager'.
    ``inductor``: settings over the compiled blocks' defaults (``--inductor``)."""
    options = {"options": inductor} if inductor else {}
    from ..gemm import FastPlan
    from ..linear import compiled, convert, unstable_weight_layers
    from ..recipes import recipe_from_config
    from .train_step import build_model

    model = build_model(shape["model"])
    model.train()
    if arm == "bf16_eager":
        return model, model, "eager"
    if arm.startswith("torchao_"):
        torchao_convert(model, arm.split("_", 1)[1])
    elif arm != BASELINE:
        recipe = recipe_from_config(METHODS[arm])
        plan = _plan(arm, recipe)
        convert(model, recipe)
        if plan is None:
            return compiled(model, **options), model, "compiled emulation"
    cudagraphs = cudagraphs and not unstable_weight_layers(model)  # compiled.__init__ says why
    return compiled(model, cudagraphs=cudagraphs, **options), model, "cudagraphs" if cudagraphs else "compiled"


def _plan(arm: str, recipe):
    """The recipe's fast plan, built under the arm's switch where it has one: a plan is cached per
    recipe, so the layers keep what the switch decided at its building."""
    from ..gemm import FastPlan
    from ..methods import mor_fast
    default = mor_fast.CHANNEL_WITH_TRANSPOSE
    mor_fast.CHANNEL_WITH_TRANSPOSE = default and arm != "mor_channel_without_transpose"
    try:
        return FastPlan.for_recipe(recipe)
    finally:
        mor_fast.CHANNEL_WITH_TRANSPOSE = default


def lowp_gemms(fn, opt, batches, table: Path | None = None, by_kernel: bool = False) -> int:
    """Low-precision GEMMs in one profiled step; with ``table``, the step's operators and kernels by
    CUDA time are written there (what a speed-up has to come from). ``by_kernel``: counted by kernel
    name alone (a step replayed as CUDA graphs has no operator events)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step(fn, opt, batches)
        torch.cuda.synchronize()
    if table is not None:
        table.parent.mkdir(parents=True, exist_ok=True)
        averages = prof.key_averages()
        table.write_text(averages.table(sort_by="cuda_time_total", row_limit=60, max_name_column_width=90))
        slowest = sorted((e for e in averages if e.key.startswith("triton_")),
                         key=lambda e: e.self_device_time_total, reverse=True)
        table.with_suffix(".kernels.txt").write_text(generated_sources(
            [(e.key, e.self_device_time_total / 1e3, e.count) for e in slowest[:KERNEL_SOURCES]]))
    return count_lowp(((e.name, e.device_type == torch.autograd.DeviceType.CUDA) for e in prof.events()), by_kernel)


KERNEL_SOURCES = 10  # slowest generated kernels whose source goes beside a profile


def generated_sources(kernels: list[tuple[str, float, int]]) -> str:
    """The source of Inductor-generated Triton kernels, ``(name, ms, calls)`` each, found by name in
    Inductor's cache (the profile table truncates names and cannot show what a fused kernel does):
    the kernel alone, from its decorator to its end, whether the cache file holds it alone or in a
    compiled graph's module."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    texts = [f.read_text(errors="replace") for f in Path(cache_dir()).rglob("*.py")]
    parts, seen = [], set()
    for name, ms, calls in kernels:
        if name in seen:  # the profile lists a kernel's launch and its GPU time under one name
            continue
        seen.add(name)
        parts.append(f"# {name}: {ms:.2f} ms in {calls} calls per step\n{kernel_source(texts, name)}\n")
    return "\n".join(parts)


def kernel_source(texts: list[str], name: str) -> str:
    """Kernel ``name``'s definition in the first of ``texts`` that defines it."""
    pattern = re.compile(rf"^def {re.escape(name)}\(", re.MULTILINE)
    for text in texts:
        found = pattern.search(text)
        if found:
            # Inductor's heuristics decorator stands above @triton.jit
            heuristics = text.rfind("@triton_heuristics", 0, found.start())
            start = heuristics if heuristics >= 0 else max(text.rfind("@triton.jit", 0, found.start()), 0)
            # a module holds each kernel as a string literal; a file of its own may hold more kernels
            ends = [i for i in (text.find("\'\'\'", found.end()), text.find("\n@triton", found.end())) if i >= 0]
            return text[start:min(ends, default=len(text))].rstrip() + "\n"
    return "# (source not found)\n"


def count_lowp(events, by_kernel: bool = False) -> int:
    """Low-precision GEMMs among a profiled step's ``(name, on the GPU)`` events: their operators and
    the Triton GEMM kernels, or with ``by_kernel`` the GPU kernels alone, cuBLAS's by name."""
    n = 0
    for name, on_gpu in events:
        if by_kernel:
            n += on_gpu and (name.startswith(_LOWP_KERNELS)
                             or (not name.startswith("triton_") and bool(_LOWP_CUBLAS.search(name))))
        else:
            n += name in _LOWP_OPS or (on_gpu and name.startswith(_LOWP_KERNELS))
    return n


# how a repeat is timed (the provenance's runs record it)
TIMER = ("steady state: one untimed step refills the launch queue after a sync, then CUDA events on the "
         "stream time --steps steps")


def time_steps(fn, opt, batches, steps: int) -> float:
    """Tokens/s of `steps` training steps in the steady state of a training loop, where the host
    queues a step's kernels while the GPU runs the last one's. After a sync the queue is empty and
    the first step waits for every launch: for GaussWS, whose 112 weight draws are launched before
    the first block (1 B), that exposed 14 ms of idle GPU against compiled BF16's 2 ms (profiled,
    2cdbf88), once per repeat, not per step of training. So one step refills the queue untimed and
    events recorded on the stream time the next ones: the GPU's time, or the host's where it falls
    behind."""
    import torch

    torch.cuda.synchronize()
    step(fn, opt, batches)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step(fn, opt, batches)
    end.record()
    end.synchronize()
    return sum(x.numel() for x, _ in batches) * steps / (start.elapsed_time(end) / 1e3)


def measure(arm: str, shape_name: str, args) -> dict:
    import torch

    shape = SHAPES[shape_name]
    fresh_compilation()
    forget_int8_tuning()
    held = held_memory()
    options = arm_inductor_options(arm, args)
    fn, model, path = build_arm(arm, shape, args.cudagraphs, options)
    opt = optimizer(model)
    batches = random_batches(shape["batch"], shape["seq"])
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step(fn, opt, batches)
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    table = Path(args.profile_dir) / f"{shape_name}_{arm}.txt" if args.profile_dir else None
    n_lowp = lowp_gemms(fn, opt, batches, table, by_kernel=path == "cudagraphs")
    if arm in HARDWARE_ARMS and n_lowp == 0:
        fail(PROG, f"arm {arm} ({shape_name}): no low-precision GEMM ran in a profiled step; the measurement "
                   "would be of BF16 or emulated GEMMs")
    reps, fallback, mor = [], [fallback_blocks(model)], [mor_choices(model)]
    for _ in range(args.repeats):
        reps.append(time_steps(fn, opt, batches, args.steps))
        fallback.append(fallback_blocks(model))
        mor.append(mor_choices(model))
    row = {"shape": shape_name, "arm": arm, "path": path, "reps": reps, "inductor_options": options,
           "fallback_ratio_reps": interval_shares(fallback), "mor_e4m3_share_reps": interval_shares(mor),
           "peak_mem_gib": (torch.cuda.max_memory_allocated() - held) / 2**30, "held_before_gib": held / 2**30,
           "lowp_gemms_per_step": n_lowp,
           "batch": shape["batch"], "seq": shape["seq"], "n_params": sum(p.numel() for p in model.parameters()),
           "warmup_s": warm_s, "int8_tuned": int8_tuned()}
    record_int8_tuning()
    print(f"# {shape_name:10s} {arm:24s} {path:8s} {statistics.median(reps):12,.0f} tok/s  "
          f"lowp GEMMs {n_lowp:4d}  peak {row['peak_mem_gib']:.1f} GiB  warm-up {warm_s:.0f} s", flush=True)
    if unsteady(reps):
        print(f"# {shape_name:10s} {arm:24s} WARNING: its repeats spread from {min(reps):,.0f} to {max(reps):,.0f} "
              f"tok/s; the median of {len(reps)} stands (E4M3 shares {row['mor_e4m3_share_reps'] or '-'}, "
              f"fallback {row['fallback_ratio_reps'] or '-'})", flush=True)
    del fn, model, opt
    return row


UNSTEADY = 1.10  # the fastest repeat over the slowest beyond which an arm's run is reported as unsteady


def unsteady(reps: list[float]) -> bool:
    """Whether an arm's repeats spread beyond ``UNSTEADY`` (once at 749c25e, MoR per block at 98 M
    timed 422k then 174k tokens/s with every operand in E4M3, and 40 steps timed one by one on the
    same machine right after ran within 2 %): its row keeps the median, which with two repeats is
    their mean, so three or more make one stray repeat harmless."""
    return len(reps) > 1 and min(reps) > 0 and max(reps) / min(reps) > UNSTEADY


def held_memory() -> int:
    """Bytes still allocated on the GPU when an arm starts (earlier arms' compiled graphs, caches and
    whatever the collector had not freed yet), with the peak counter reset to them: an arm's
    ``peak_mem_gib`` is its peak above this, not what earlier arms left (measured at 236be2e,
    compiled BF16 peaked at 30.3 GiB measured first and 36.4 measured last in one run)."""
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def fallback_blocks(model) -> tuple[int, int] | None:
    """(blocks quantized, blocks that fell back) so far in the slots that can fall back (the
    recipe's ``FallbackInt8Quantizer.falls_back``), over every layer's counts (a host read,
    outside the timed steps); None for a model without INT8 fallback layers."""
    from ..linear import QLinear
    from ..methods.int8_fallback import FallbackInt8Quantizer
    quantizers = {id(q): q for m in model.modules() if isinstance(m, QLinear)
                  for q in m._quantizers() if isinstance(q, FallbackInt8Quantizer)}
    if not quantizers:
        return None
    rows = {(r["layer"], r["gemm"], r["operand"]): r for q in quantizers.values() for r in q.fallback_counts()
            if q.falls_back(r["gemm"], r["operand"])}
    return sum(r["blocks"] for r in rows.values()), sum(r["fallback_blocks"] for r in rows.values())


def mor_choices(model) -> tuple[int, int] | None:
    """(MoR operand calls, calls whose operand chose E4M3) so far, over every layer's decision counts
    (``lowprec.methods.mor.layer_counts``, a host read outside the timed steps); None for a model
    without MoR layers. A BF16 choice pays the fix-up's BF16 product beside the FP8 one, so a repeat
    slower than the others shows whether its operands left E4M3."""
    from ..linear import QLinear
    from ..methods.mor import layer_counts
    tables = [t for m in model.modules() if isinstance(m, QLinear) for t in [layer_counts(m)] if t is not None]
    if not tables:
        return None
    total = sum(t[:, :2].sum(0).cpu() for t in tables)
    return int(total[0]), int(total[1])


def interval_shares(totals: list) -> list[float]:
    """The share ``part / whole`` in each interval between readings of (whole, part) running totals
    (each repeat's steps and its untimed first step): INT8 fallback's blocks that fell back, whose
    second parts' cost follows it, or MoR's calls that chose E4M3. Empty without such layers."""
    if totals[0] is None:
        return []
    return [round((f1 - f0) / (b1 - b0), 6) if b1 > b0 else 0.0
            for (b0, f0), (b1, f1) in zip(totals, totals[1:])]


def forget_int8_tuning() -> None:
    """Each arm tunes the INT8 GEMM's shape classes it meets afresh, so that ``int8_tuned`` reads
    that arm's choices."""
    from ..kernels import loaded_int8_tuning
    kt = loaded_int8_tuning()
    if kt is not None:
        kt.forget_tuning()


def int8_tuned() -> list[str]:
    """The INT8 GEMM's tuned configuration of each shape class the arm met (its label and median
    ms, which tell descriptor from pointer loads), for the provenance."""
    from ..kernels import loaded_int8_tuning
    kt = loaded_int8_tuning()
    if kt is None:
        return []
    return [f"{r['M_class']}x{r['N_class']}x{r['K_class']} group {r['group']} rows {r['block_rows_a']}/"
            f"{r['block_rows_b']}: {r['config']} {r['ms']:.3f} ms{' (recorded)' if r['recorded'] else ''}"
            for r in kt.tuned_configs()]


def record_int8_tuning() -> None:
    """With ``LOWPREC_INT8_TUNED`` naming a file, add the classes this arm tuned to it (the next job
    on this GPU model takes them without tuning)."""
    import torch

    from ..kernels import record_int8_tuning as record
    n, path = record(torch.device("cuda", torch.cuda.current_device()))
    if n:
        print(f"# recorded {n} tuned INT8 GEMM configuration(s) in {path}", flush=True)


def _rows(measured: list[dict], base: dict, args, commit: str) -> list[dict]:
    rows = []
    for m in measured:
        med = statistics.median(m["reps"])
        tokens = m["batch"] * m["seq"]
        rows.append({
            "shape": m["shape"], "arm": m["arm"], "path": m["path"], "tokens_per_s": f"{med:.0f}",
            "tokens_per_s_reps": ";".join(f"{v:.0f}" for v in m["reps"]),
            "ratio_vs_bf16_compiled": f"{med / base[m['shape']]:.3f}", "peak_mem_gib": f"{m['peak_mem_gib']:.2f}",
            "lowp_gemms_per_step": m["lowp_gemms_per_step"], "step_ms": f"{tokens / med * 1e3:.2f}",
            "batch": m["batch"], "seq": m["seq"], "n_params": m["n_params"], "steps": args.steps,
            "repeats": args.repeats, "baseline_tokens_per_s": f"{base[m['shape']]:.0f}", "commit": commit,
            "inductor_options": inductor_options_text(m["inductor_options"])})
    return rows


def arm_inductor_options(arm: str, args) -> dict:
    """The ``--inductor`` settings one arm compiles with: none for the baseline under
    ``--inductor-arms-only``."""
    return {} if arm == BASELINE and args.inductor_arms_only else args.inductor_options


def _merged(old: list[dict], rows: list[dict]) -> list[dict]:
    """``old`` rows of other (shape, arm) pairs, then ``rows``, in the order of SHAPES and ARMS."""
    new = {(r["shape"], r["arm"]) for r in rows}
    order = {(s, a): i for i, (s, a) in enumerate((s, a) for s in SHAPES for a in ARMS)}
    keep = [r for r in old if (r["shape"], r["arm"]) not in new]
    return sorted(keep + rows, key=lambda r: order.get((r["shape"], r["arm"]), len(order)))


def _previous(out: Path, merge: bool) -> tuple[list[dict], list[dict]]:
    """(rows, provenance runs) already in ``out`` that a ``--merge`` run keeps."""
    import csv
    import json
    prov = provenance_path(out)
    if not merge or not out.exists():
        return [], []
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    return rows, (json.loads(prov.read_text()).get("runs", []) if prov.exists() else [])


def merge_outputs(out: Path, sources: list) -> None:
    """Merge other runs' CSVs (with their provenance) into ``out``: later sources replace the rows of
    the same (shape, arm). Rows written before the ``commit`` and ``baseline_tokens_per_s`` columns
    get them from their file (its runs' commit, its bf16_compiled row); runs without a device get
    their file's."""
    import csv
    import json
    from ..io import write_json

    def load(path: Path):
        rows, runs = _previous(path, True)
        prov_path = provenance_path(path)
        prov = json.loads(prov_path.read_text()) if prov_path.exists() else {}
        for r in runs:
            r.setdefault("device", prov.get("device"))
        return _filled(rows, runs), runs, prov

    rows, runs, prov = load(out)
    for src in map(Path, sources):
        if not src.exists():
            fail(PROG, f"--merge-from: {src} does not exist")
        new_rows, new_runs, prov = load(src)
        if not new_rows:
            fail(PROG, f"--merge-from: {src} holds no rows")
        if out == Path(DEFAULT_OUT) and any(r.get("switches") or r.get("inductor_options") for r in new_runs):
            fail(PROG, f"--merge-from: {src} was measured with LOWPREC_* switches or --inductor settings; "
                       f"its rows are not the suite's defaults and stay out of {DEFAULT_OUT}")
        seen = {(r.get("commit"), r.get("time")) for r in runs}  # a file merged twice adds its runs once
        rows = _merged(rows, new_rows)
        runs = runs + [r for r in new_runs if (r.get("commit"), r.get("time")) not in seen]
    prov["runs"] = runs
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    write_json(provenance_path(out), prov)
    print(f"# merged {len(sources)} file(s) into {out}: {len(rows)} rows, {len(runs)} runs")


def _filled(rows: list[dict], runs: list[dict]) -> list[dict]:
    commits = {r.get("commit") for r in runs}
    base = {r["shape"]: r["tokens_per_s"] for r in rows if r["arm"] == BASELINE}
    for r in rows:
        r.setdefault("commit", next(iter(commits)) if len(commits) == 1 else "")
        if not r.get("baseline_tokens_per_s"):
            r["baseline_tokens_per_s"] = base.get(r["shape"], "")
    return rows


def main(argv=None) -> int:
    args = _parse(argv)
    if args.merge_from:
        merge_outputs(Path(args.out), args.merge_from)
        return 0
    args.inductor_options = inductor_options(PROG, args.inductor)
    if args.inductor_arms_only and not args.inductor_options:
        fail(PROG, "--inductor-arms-only: give the settings with --inductor KEY=VALUE")
    from .. import provenance
    switches = provenance.switches()
    nondefault = [f"--inductor {' '.join(args.inductor)}"] if args.inductor_options else []
    nondefault += [f"{k}={v}" for k, v in switches.items()]
    if nondefault and (args.merge or Path(args.out) == Path(DEFAULT_OUT)):
        fail(PROG, f"{', '.join(nondefault)}: write the run to its own --out (its rows are not the suite's "
                   "defaults), without --merge")
    require_cuda(PROG)
    shapes = parse_names(PROG, "--shapes", args.shapes, tuple(SHAPES))
    arms = [a for a in parse_names(PROG, "--arms", args.arms, ARMS) if a != BASELINE]
    out = Path(args.out)
    old_rows, old_runs = _previous(out, args.merge)
    run = {"commit": provenance.git_commit(), "time": provenance.now(), "arms": [BASELINE, *arms],
           "inductor_options": args.inductor_options, "inductor_arms_only": args.inductor_arms_only,
           "switches": switches, "timer": TIMER,
           "shapes": {}, "failed": {}, "device": provenance.collect().get("device")}
    rows, budget = [], Budget(args.budget_s)
    run["skipped"] = budget.skipped  # (shape/arm) the budget left out
    for shape in shapes:
        # the CSV is rewritten after every arm (ratios against the first baseline until the last is
        # in), so a run cut short keeps what it measured
        t0 = time.monotonic()
        if rows and not budget.allows(shape, need=2 * longest):
            continue
        first = measure(BASELINE, shape, args)
        baseline_s = longest = time.monotonic() - t0
        measured, base = [first], {shape: statistics.median(first["reps"])}
        shape_rows = _rows(measured, base, args, run["commit"])
        info = run["shapes"][shape] = {"model": SHAPES[shape], "warmup_s": {}}
        for arm in arms + [BASELINE]:
            if arm != BASELINE and not budget.allows(f"{shape}/{arm}", need=longest + baseline_s):
                continue
            t0 = time.monotonic()
            try:
                m = measure(arm, shape, args)
            except Exception as exc:  # one arm's failure must not lose the others' measurements
                run["failed"][f"{shape}/{arm}"] = error_text(exc, 300)
                print(f"# {shape:10s} {arm:24s} FAILED {run['failed'][f'{shape}/{arm}']}", flush=True)
                continue  # the next arm starts from a fresh compilation (measure)
            finally:
                longest = max(longest, time.monotonic() - t0)
            if arm == BASELINE:  # the baseline's repeats from both ends of the shape's run
                info["baseline_drift"] = round(statistics.median(m["reps"]) / base[shape] - 1, 4)
                first["reps"] += m["reps"]
                base[shape] = statistics.median(first["reps"])
            else:
                measured.append(m)
            if m["int8_tuned"]:
                info.setdefault("int8_tuned", {})[arm] = m["int8_tuned"]
            for key in ("fallback_ratio_reps", "mor_e4m3_share_reps"):
                if m[key]:
                    info.setdefault(key, {})[arm] = m[key]
            if unsteady(m["reps"]) and arm not in info.get("unsteady", []):
                info.setdefault("unsteady", []).append(arm)
            info["warmup_s"] = {x["arm"]: round(x["warmup_s"], 1) for x in measured}
            info["held_before_gib"] = {x["arm"]: round(x["held_before_gib"], 2) for x in measured}
            shape_rows = _rows(measured, base, args, run["commit"])
            write_bench(out, _merged(old_rows, rows + shape_rows), old_runs + [run])
        rows += shape_rows
    for r in rows:
        print(f"{r['shape']:10s} {r['arm']:24s} {r['path']:8s} {int(r['tokens_per_s']):12,d} tok/s  "
              f"x{r['ratio_vs_bf16_compiled']} vs bf16 compiled", flush=True)
    return 1 if run["failed"] else 0


def write_bench(out: Path, rows: list[dict], runs: list[dict]) -> None:
    """The CSV and its provenance, which lists every run whose rows the CSV holds."""
    from .train_step import write_results
    write_results(str(out), FIELDS, rows, __doc__.strip().split("\n")[0], runs=runs,
                  expected_ceiling="H200 GEMMs alone: FP8 1.67x, blockwise FP8 1.51x, INT8 2x of BF16")


if __name__ == "__main__":
    sys.exit(main())
