"""Evaluate a finished run's final weights, optionally after exporting them to a low-precision
format: ``python -m lowprec.evaluate --run DIR --export none mxfp8 mxfp6_e3m2 --out export.csv``.

The validation set is the run's own (same windows as during training); the model is rebuilt from
the run's ``config.yaml`` and loaded from ``checkpoints/last.ckpt``.  Exports are round-to-nearest
weight exports that the method modules offer (``WEIGHT_EXPORTS``, ``lowprec.recipes.registry``),
e.g. GaussWS's round-to-nearest MX quantization of every linear layer's weight.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .cli import evaluate_parser

if __name__ == "__main__":  # --help and usage errors answer before torch loads (seconds)
    evaluate_parser().parse_args()

import torch  # noqa: E402
import yaml  # noqa: E402

from . import checkpoint as ckptlib  # noqa: E402
from .data import DataError, TokenData  # noqa: E402
from .io import write_text  # noqa: E402
from .models import causal_lm_loss  # noqa: E402


# Where a finished run's weights are evaluated (``evaluation_device``); cpu or cuda, unset: CUDA where
# there is one.
EVAL_DEVICE_ENV = "LOWPREC_EVAL_DEVICE"


def evaluation_device(device: str | None = None) -> torch.device:
    """``device``, else LOWPREC_EVAL_DEVICE, else CUDA where present and the CPU elsewhere. The GPU
    because the evaluations run where the run trained, before its checkpoint is gone: at `medium` one
    outlier pass over one validation batch (32 x 1024 tokens, Llama2 12 x 768) took 144 s on two CPU
    cores, and a GPU job's evaluations on its CPU outlasted the job. Either way in fp32, without
    autocast or TF32, as the evaluations of the committed runs were computed."""
    choice = device or os.environ.get(EVAL_DEVICE_ENV) or ("cuda" if torch.cuda.is_available() else "cpu")
    if choice not in ("cpu", "cuda"):
        raise ValueError(f"{EVAL_DEVICE_ENV}={choice!r}: choose cpu or cuda")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{EVAL_DEVICE_ENV}=cuda, but this torch sees no CUDA device")
    return torch.device(choice)


def load_trained(run_dir: str | Path, device: str | None = None):
    """(LitLM with the run's final weights, in eval mode, on ``evaluation_device(device)``; the run
    config; its TokenData)."""
    from .train import LitLM

    run_dir = Path(run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    if not ckpt.is_file():
        raise FileNotFoundError(f"{ckpt}: no final checkpoint (did the run complete?)")
    data = TokenData(cfg["data"]["dir"])
    # the numerics the run trained with decide the module's layout: a GPU BF16 run is the plain
    # model under autocast (no QLinear buffers in its checkpoint), a CPU one the emulated recipe
    prov = run_dir / "provenance.json"
    precision = json.loads(prov.read_text()).get("precision", "32-true") if prov.is_file() else "32-true"
    module = LitLM(cfg, data.vocab_size, precision)
    loaded = ckptlib.load(ckpt)
    state = loaded.get("state_dict") if isinstance(loaded, dict) else None
    if not isinstance(state, dict):
        raise ckptlib.CheckpointError(f"{ckpt}: holds no state_dict (not a lowprec.train checkpoint)")
    module.load_state_dict(state)
    if (where := evaluation_device(device)).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    module.to(where).eval()
    return module, cfg, data


def evaluation_batches(module, cfg: dict, data: TokenData, n_batches: int | None = None) -> list:
    """The run's validation batches (the windows its training validated on), on the module's device."""
    from .train import val_batches

    t = cfg["train"]
    where = next(module.parameters()).device
    return [(x.to(where), y.to(where)) for x, y in
            val_batches(data.splits["val"], t["batch_size"], t["seq_len"], n_batches or t.get("val_batches", 8))]


@torch.no_grad()
def validation_loss(module, cfg: dict, data: TokenData) -> float:
    losses = [causal_lm_loss(module.model, x, y) for x, y in evaluation_batches(module, cfg, data)]
    return float(torch.stack(losses).mean())


def evaluate_exports(run_dir: str | Path, formats: list[str]) -> list[dict]:
    from .recipes import registry

    exports = registry().exports
    rows = []
    for fmt in formats:
        if fmt != "none" and fmt not in exports:
            raise ValueError(f"--export: unknown format {fmt!r}; choose none or one of {sorted(exports)}")
        module, cfg, data = load_trained(run_dir)  # fresh weights for every format
        if fmt != "none":
            exports[fmt](module.model, fmt)
        rows.append({"model": cfg["model"]["name"], "method": cfg["method"]["name"], "seed": cfg["seed"],
                     "export": fmt, "val_loss": validation_loss(module, cfg, data)})
    return rows


def main(argv=None) -> None:
    import pandas as pd

    args = evaluate_parser().parse_args(argv)
    try:
        rows = evaluate_exports(args.run, args.export)
    except (FileNotFoundError, DataError, ckptlib.CheckpointError) as e:
        sys.exit(f"lowprec.evaluate: error: {e}")
    write_text(args.out, pd.DataFrame(rows).to_csv(index=False, float_format="%.6g"))


if __name__ == "__main__":
    main()
