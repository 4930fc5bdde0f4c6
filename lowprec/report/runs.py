"""Reading run folders (``results/runs/<scale>/<paper>/<model>/<method>/s<seed>/``) into tables."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml


# how an emulated run's numerics end (``Run.numerics``)
EMULATED = "(emulated, fp32 accumulate)"
# how the provenance of runs before the path was told apart ended a method's numerics, on the fast
# path too (``lowprec.methods.apply_method``)
_PATH_SUFFIXES = (" " + EMULATED, " (emulated), fp32 accumulate")


@dataclass
class Run:
    dir: Path
    paper: str
    scale: str
    model: str
    method: str
    recipe: str
    seed: int
    metrics: pd.DataFrame
    provenance: dict
    config: dict  # the run's resolved config.yaml, as the training read it

    @property
    def status(self) -> str:
        return self.provenance.get("status", "unknown")

    @property
    def fast_path(self) -> bool:
        """Whether the run's linear layers trained on the fast path (``lowprec.linear``): the recipe
        had a plan (``method.fast_path`` in the provenance; runs from before it had none recorded)
        and the run's device was one that ``LOWPREC_FAST_PATH`` (its ``switches``) names."""
        plan = (self.provenance.get("method") or {}).get("fast_path")
        if not isinstance(plan, str) or plan.startswith("none"):
            return False
        setting = (self.provenance.get("switches") or {}).get("LOWPREC_FAST_PATH", "cuda")
        return setting == "all" or (setting == "cuda" and bool((self.provenance.get("device") or {}).get("gpu")))

    @property
    def emulated(self) -> bool:
        """Whether the run's linear layers trained through the emulation (quantized operands
        dequantized into fp32 GEMMs): layers converted (native BF16 autocast converts none) and not
        on the fast path."""
        method = self.provenance.get("method") or {}
        return bool(method.get("numerics") and method.get("layers")) and not self.fast_path

    @property
    def numerics(self) -> str | None:
        """The method's numerics and how they ran: on the fast path, or emulated; native BF16
        autocast as it is."""
        method = self.provenance.get("method") or {}
        text = method.get("numerics")
        if not text or not method.get("layers"):
            return text
        for suffix in _PATH_SUFFIXES:  # what runs before 2026-12-07 appended whatever the device
            text = text.removesuffix(suffix)
        return f"{text} {EMULATED}" if self.emulated else f"{text} (fast path; telemetry steps emulated)"

    @property
    def final_val_loss(self) -> float | None:
        v = self.provenance.get("final_val_loss")
        return None if v is None else float(v)


def load_run(run_dir: str | Path) -> Run:
    run_dir = Path(run_dir)
    for f in ("metrics.csv", "provenance.json", "config.yaml"):
        if not (run_dir / f).is_file():
            raise FileNotFoundError(f"{run_dir}: missing {f}; the run did not finish")
    prov = json.loads((run_dir / "provenance.json").read_text())
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    return Run(dir=run_dir, paper=cfg["paper"], scale=cfg["scale"], model=cfg["model"]["name"],
               method=cfg["method"]["name"], recipe=cfg["method"].get("recipe", "bf16"), seed=int(cfg["seed"]),
               metrics=pd.read_csv(run_dir / "metrics.csv"), provenance=prov, config=cfg)


def load_runs(run_dirs) -> list[Run]:
    return [load_run(d) for d in run_dirs]


TRAIN_WINDOW = 0.2  # train loss of a run: mean of the logged values over its last 20 % of steps


def train_loss(metrics: pd.DataFrame, window: float = TRAIN_WINDOW) -> float:
    """Mean logged training loss over the last ``window`` of the steps a run logged (one logged
    value is one micro-batch's loss: the mean over a window is what a run's training loss is)."""
    if not 0 < window <= 1:
        raise ValueError(f"train window: must be in (0, 1], got {window}")
    m = metrics.dropna(subset=["train_loss"]) if "train_loss" in metrics else metrics.iloc[0:0]
    if m.empty:
        return math.nan
    last = m["step"].max()
    return float(m[m["step"] > last * (1 - window)]["train_loss"].mean())


def final_losses(runs: list[Run]) -> pd.DataFrame:
    """One row per run: model, method, seed, status, final val loss, final train loss (train_loss),
    mean tokens/s, precision."""
    return pd.DataFrame([{
        "model": r.model, "method": r.method, "seed": r.seed, "status": r.status,
        "final_val_loss": r.final_val_loss,
        "final_train_loss": train_loss(r.metrics) if r.status == "completed" else math.nan,
        "tokens": r.provenance.get("tokens_seen"),
        "tokens_per_s": r.provenance.get("mean_tokens_per_s"),
        "numerics": r.numerics,
    } for r in runs])
