"""Checks of resolved run configs before any job runs: the workflow's start-up check.

``lowprec.config.resolve_run`` calls ``check_run`` on every run it resolves, so that a bad grid
stops ``snakemake -n`` with one line naming the key instead of failing inside each job:

- ``method``: its recipe and keys, checked by the code that training will build the recipe with
  (``lowprec.recipes.recipe_from_config``, which calls each paper's own check of its keys);
- ``train.seq_len`` at most the model's ``max_seq_len`` (``lowprec.models.max_seq_len``);
- ``train.batch_size`` divisible by ``train.devices x train.num_nodes``: it is the global batch of
  one micro-step, split evenly over the ranks. ``train.grad_accum`` multiplies the tokens of an
  optimizer step (batch_size x grad_accum x seq_len) and divides nothing, so it adds no condition.

The workflow calls ``check_memory`` on the runs it will train, with the GPU memory its config
gives (``gpu_memory_gib``; the gpu profile sets it). What is known, and so checked:

- a run on ``accelerator: cpu``, or on ``auto`` where the planning machine has no GPU and the
  config gives no GPU memory (it trains here, on the CPU): against this machine's RAM (the
  smaller of physical memory and a cgroup limit), all of its processes together;
- any other run, when ``gpu_memory_gib`` is given: against that, per GPU (per rank);
- a run for GPUs of unknown memory (the slurm profile: the cluster's GPUs are not named) is not
  checked.

The estimate (``memory_estimate``) is a lower bound: the fp32 weights, gradients and AdamW
moments (16 bytes a parameter, 8 under ``bf16-true``; sharded over the ranks under FSDP), the
activations every transformer layer keeps for the backward pass (at least 8 d_model + 2 ffn values
a token: the norm and linear-layer inputs and the MLP's hidden values) and the logits with their
fp32 log-softmax. Attention scores, quantization copies and allocator slack come on top, so a
batch it rejects cannot fit, and a batch it passes may still be too large.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from .config import ConfigError, check_global_batch

GIB = 2**30


def check_run(run: dict, where: str) -> None:
    """Everything about one resolved run that needs no data and no device (see the module doc);
    ``where`` starts every message (e.g. ``run config mor nemotron/bf16/s0: ``)."""
    problem = method_problem(json.dumps(run["method"], sort_keys=True))
    if problem:
        raise ConfigError(f"{where}experiment {run['paper']}, methods.{run['method']['name']}: {problem}")
    from .models import max_seq_len

    t, model = run["train"], run["model"]
    limit = max_seq_len(model)
    if t["seq_len"] > limit:
        source = (f"its checkpoint {model['checkpoint']}" if model.get("checkpoint")
                  else f"configs/models/{model['name']}.yaml at scale {run['scale']}")
        raise ConfigError(f"{where}train.seq_len={t['seq_len']} is longer than model.max_seq_len={limit} of "
                          f"model {model['name']} ({source}); lower train.seq_len or raise max_seq_len")
    if isinstance(t.get("devices", 1), int):
        check_global_batch(t["batch_size"], t.get("devices", 1) * t.get("num_nodes", 1), where)


@functools.lru_cache(maxsize=None)
def method_problem(method_json: str) -> str | None:
    """What is wrong with a method section (JSON), or None: the recipe builder's own error. Each
    distinct section is built once, however many runs share it."""
    from .recipes import recipe_from_config

    try:
        recipe_from_config(json.loads(method_json))
    except (ValueError, TypeError) as e:
        return str(e)
    return None


def memory_estimate(run: dict, on_gpu: bool) -> dict:
    """Lower bound of the memory one rank of ``run`` holds while it trains (bytes): ``state``
    (weights, gradients, optimizer moments), ``activations`` (kept for the backward pass, logits
    included), ``total``, the ``rows`` (sequences) of the rank's share of a micro-batch, and the
    ``processes`` that share one machine's memory (CPU ranks; 1 on GPUs, each its own)."""
    from .methods import resolve_precision
    from .models import shape_parameter_count

    t, m = run["train"], run["model"]
    cpu_ranks = t.get("accelerator") == "cpu"
    ranks = _ranks(t) if on_gpu or cpu_ranks else 1  # a GPU config on a CPU trains as one process
    precision = resolve_precision(t.get("precision", "auto"), on_gpu)
    params = shape_parameter_count(m, run["data"]["vocab_size"])
    state = params * (8 if precision == "bf16-true" else 16)
    if t.get("strategy") == "fsdp" and on_gpu:
        state /= ranks
    value = 4 if precision == "32-true" else 2  # bytes of an activation
    d, ffn = m["d_model"], m.get("ffn") or 4 * m["d_model"]
    rows = t["batch_size"] // ranks
    per_token = m["layers"] * (8 * d + 2 * ffn) * value + run["data"]["vocab_size"] * (value + 4)
    activations = rows * t["seq_len"] * per_token
    processes = ranks // t.get("num_nodes", 1) if cpu_ranks and not on_gpu else 1
    return {"state": state, "activations": activations, "total": state + activations, "rows": rows,
            "processes": max(processes, 1)}


def check_memory(runs, gpu_memory_gib: float | None = None) -> None:
    """Reject the runs whose batch cannot fit the device they will train on, where its memory is
    known (module doc); one line naming the first such run, ``train.batch_size`` and the device."""
    too_big, host, cuda = [], None, None
    for run in runs:
        accelerator = run["train"].get("accelerator", "auto")
        if accelerator != "cpu" and gpu_memory_gib:
            est = memory_estimate(run, on_gpu=True)
            if est["total"] > gpu_memory_gib * GIB:
                too_big.append((run, est, True, f"the {gpu_memory_gib:g} GiB of a GPU (gpu_memory_gib)"))
            continue
        if accelerator == "auto" and cuda is None:
            cuda = _cuda_here()
        if accelerator == "cpu" or (accelerator == "auto" and not cuda):
            host = host_memory_bytes() if host is None else host
            est = memory_estimate(run, on_gpu=False)
            if host is not None and est["total"] * est["processes"] > host:
                why = "accelerator: cpu" if accelerator == "cpu" else "no GPU here and no gpu_memory_gib given"
                too_big.append((run, est, False, f"this machine's {host / GIB:.1f} GiB of RAM ({why})"))
        # else: a GPU of unknown memory
    if too_big:
        run, est, on_gpu, device = too_big[0]
        t = run["train"]
        more = f" (and {len(too_big) - 1} more run(s))" if len(too_big) > 1 else ""
        fix = "lower train.batch_size and raise train.grad_accum to keep the tokens per step"
        if on_gpu and est["state"] > est["activations"] and t.get("strategy") != "fsdp":
            fix = "shard the weights, gradients and optimizer state over the GPUs (train.strategy: fsdp), or " + fix
        parts = (f"{est['state'] / GIB:.1f} GiB of weights, gradients and AdamW state, "
                 f"{est['activations'] / GIB:.1f} GiB of activations for {est['rows']} sequences a rank")
        if est["processes"] > 1:  # CPU processes share this machine's RAM
            parts = f"{est['processes']} processes x ({parts})"
        raise ConfigError(
            f"run config {run['paper']} {run['run_id']}{more}: train.batch_size={t['batch_size']} x "
            f"train.seq_len={t['seq_len']} needs at least {est['total'] * est['processes'] / GIB:.1f} GiB "
            f"({parts}), more than {device}; {fix}")


def _ranks(t: dict) -> int:
    devices = t.get("devices", 1)
    return (devices if isinstance(devices, int) else 1) * t.get("num_nodes", 1)


def _cuda_here() -> bool:
    import torch

    return torch.cuda.is_available()


def host_memory_bytes() -> int | None:
    """This machine's memory: physical RAM, or a smaller cgroup limit (a container, a batch job);
    None where neither can be read."""
    known = []
    try:
        known.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            known.append(int(Path(limit).read_text().strip()))
        except (OSError, ValueError):  # absent, or "max" (no limit)
            pass
    return min(known) if known else None
