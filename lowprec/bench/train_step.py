"""Shared parts of the GPU training-step benchmarks (``gaussws_overhead``, ``e2e_step``): the ~100M
Llama2-style model they time, its random batches, one optimizer step, and timing of several arms in
interleaved repeats, so that clock and thermal drift hit every arm alike. torch is imported where a
function needs it, so that the benchmarks' ``--help`` and usage errors answer before torch loads."""

from __future__ import annotations

import time

MODEL = {"name": "llama2_100m", "family": "llama", "layers": 12, "d_model": 768, "heads": 12, "kv_heads": 12,
         "ffn": 2048, "max_seq_len": 1024, "tie_embeddings": False}
VOCAB = 8192
OPTIMIZER = "torch.optim.AdamW(lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)"
AUTOCAST = "torch.autocast('cuda', dtype=torch.bfloat16) around forward and loss"


def add_step_args(p, steps: int, warmup: int) -> None:
    """The command-line options every training-step benchmark shares: tokens per step and timing."""
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--steps", type=int, default=steps, help="optimizer steps per timed repeat")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=warmup, help="untimed steps per arm before timing")


def build_model(shape: dict = MODEL):
    import torch

    from ..models import build_model as build
    torch.manual_seed(0)
    return build(shape, VOCAB).cuda()


def optimizer(model):
    import torch

    return torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95), fused=True)


def random_batches(batch: int, seq: int, accum: int = 1) -> list:
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    out = []
    for _ in range(accum):
        x = torch.randint(0, VOCAB, (batch, seq), device="cuda", generator=gen)
        out.append((x, torch.roll(x, -1, 1)))
    return out


def step(model, opt, batches) -> None:
    """One optimizer step over the micro-batches: bf16 autocast forward and loss, backward, AdamW."""
    import torch

    from ..models import causal_lm_loss
    for x, y in batches:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = causal_lm_loss(model, x, y) / len(batches)
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def interleaved_tokens_per_s(state: dict, batches, steps: int, repeats: int) -> dict:
    """{arm: [tokens/s of each repeat]} for state = {arm: (model, optimizer)}, already warmed up."""
    import torch

    tokens = sum(x.numel() for x, _ in batches)
    reps = {arm: [] for arm in state}
    for r in range(repeats):
        for arm, (model, opt) in state.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                step(model, opt, batches)
            torch.cuda.synchronize()
            reps[arm].append(tokens * steps / (time.perf_counter() - t0))
        print(f"# repeat {r + 1}/{repeats}: " + "  ".join(f"{a} {reps[a][-1]:,.0f}" for a in state), flush=True)
    return reps


def write_results(out: str, fields: list, rows: list[dict], what: str, **extra) -> None:
    """The benchmark's CSV and, beside it, ``<name>.provenance.json`` (the run's provenance, the model,
    optimizer and autocast it timed, plus ``extra``)."""
    from .. import provenance
    from ..io import write_json
    from .common import provenance_path, write_rows

    write_rows(out, fields, rows)
    write_json(provenance_path(out), {
        **provenance.collect(), "time": provenance.now(), "model": MODEL, "vocab": VOCAB,
        "optimizer": OPTIMIZER, "autocast": AUTOCAST, "what": what, **extra,
    })
    print(f"# wrote {out}")
