"""What a training run logs as it trains (``lowprec.train``): ``metrics.csv`` (one row per logged
step, appended and synced while the run trains, one row per step at the end), the progress lines,
and the telemetry log segments with their merge into the run's ``telemetry.csv.gz``."""

from __future__ import annotations

import csv
import io
import math
import os
import resource
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

from .io import write_text

METRIC_COLUMNS = ("step", "lr", "peak_mem_mb", "tokens", "tokens_per_s", "train_loss", "val_loss")
PROGRESS_EVERY_S = 10.0


class MetricsFile:
    """``metrics.csv`` while a run trains: one line per logged row (a training row and a validation
    row at the same step are two lines), written and synced to disk when the row is logged, so a
    killed run keeps every row it logged. ``run`` replaces it with one row per step at the end."""

    def __init__(self, path: Path):
        self.path = path

    @staticmethod
    def _lines(rows) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerows([[_cell(r.get(c)) for c in METRIC_COLUMNS] for r in rows])
        return buf.getvalue()

    def start(self, rows: list[dict]) -> None:
        """The header and ``rows`` (those a resumed checkpoint carries), replacing any older file."""
        write_text(self.path, ",".join(METRIC_COLUMNS) + "\n" + self._lines(rows))

    def append(self, row: dict) -> None:
        with open(self.path, "a") as f:
            f.write(self._lines([row]))
            f.flush()
            os.fsync(f.fileno())


def _cell(v) -> str:
    return "" if v is None else repr(v) if isinstance(v, float) else str(v)


def metrics_frame(rows: list[dict]) -> "pd.DataFrame":
    """The finished metrics.csv: one row per step (a step's training and validation rows merged)."""
    import pandas as pd

    df = pd.DataFrame(rows, columns=list(METRIC_COLUMNS))
    return df.groupby("step", as_index=False).last().sort_values("step")


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class StepTimes:
    """The seconds of each optimizer step, without the host waiting for the GPU at every step: on
    CUDA two events on the current stream per step, whose times are read when asked (at a logged
    step, which reads the loss anyway); elsewhere the wall clock. A synchronize per step had the
    host wait for each step to finish on the GPU before queuing the next, and the GPU idle while
    it did. A step's events time it from where the GPU reaches its first work (after the last
    step's, or validation's) to its end: the steps alone, validation excluded."""

    def __init__(self):
        self._start, self._t0, self._pending = None, 0.0, []

    def begin(self, device: torch.device) -> None:
        if device.type == "cuda":
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()

    def end(self, device: torch.device) -> None:
        if device.type == "cuda":
            stop = torch.cuda.Event(enable_timing=True)
            stop.record()
            self._pending.append((self._start, stop))
        else:
            self._pending.append(time.perf_counter() - self._t0)

    def take(self) -> list[float]:
        """The seconds of the steps ended since the last call (waits for the GPU to reach the last)."""
        out = []
        for p in self._pending:
            if isinstance(p, tuple):
                p[1].synchronize()
                out.append(p[0].elapsed_time(p[1]) / 1000.0)
            else:
                out.append(p)
        self._pending = []
        return out


class StepLogger(Callback):
    """Writes one row per logged optimizer step, keyed by the number of steps completed:
    train loss (mean over the step's micro-batches and the ranks), lr, tokens (global), tokens/s
    over the window (training batches only, validation excluded) and peak memory (rank zero);
    validation rows likewise. Rank zero appends each row to ``metrics`` (``MetricsFile``) and
    prints a progress line at most every ``PROGRESS_EVERY_S`` seconds. The rows logged so far are
    the callback's checkpoint state, so a resumed run starts from exactly the rows up to its step."""

    def __init__(self, tokens_per_step: int, every: int, metrics: MetricsFile | None = None):
        self.tokens_per_step, self.every, self.metrics = tokens_per_step, every, metrics
        self.window_time, self.window_steps, self.total_time, self.total_steps = 0.0, 0, 0.0, 0
        self.times = StepTimes()
        self._last_step = None
        self.rows: list[dict] = []
        self._file_started = False
        self._last_print, self._shown_train = -math.inf, False
        self._t_start, self._step_start = time.perf_counter(), None

    def state_dict(self) -> dict:
        return {"rows": [dict(r) for r in self.rows]}

    def load_state_dict(self, state: dict) -> None:
        self.rows = [dict(r) for r in state.get("rows", [])]

    def _log(self, trainer, metrics: dict):
        step = trainer.global_step
        row = {"step": step, **metrics, "tokens": float(step * self.tokens_per_step)}
        self.rows.append(row)
        if self._file_started:
            self.metrics.append(row)
        else:
            self._start_file(trainer)
        for lg in trainer.loggers:
            lg.log_metrics({k: v for k, v in row.items() if k != "step"}, step=step)

    def _start_file(self, trainer) -> None:
        """metrics.csv from the rows so far: none, or those restored from the checkpoint."""
        if trainer.is_global_zero and self.metrics is not None and not self._file_started:
            self.metrics.start(self.rows)
            self._file_started = True

    def on_train_start(self, trainer, pl_module):  # after Lightning has restored a checkpoint
        self._t_start, self._step_start = time.perf_counter(), trainer.global_step
        self._start_file(trainer)

    def _progress(self, trainer, text: str, force: bool = False) -> None:
        now = time.perf_counter()
        if not trainer.is_global_zero or (not force and now - self._last_print < PROGRESS_EVERY_S):
            return
        self._last_print = now
        step, total = trainer.global_step, trainer.max_steps
        done = step - (step if self._step_start is None else self._step_start)
        eta = (now - self._t_start) / done * (total - step) if done > 0 else math.nan
        print(f"step {step}/{total} ({100 * step / total:.0f}%) | {text} | elapsed {_hms(now - self._t_start)}"
              + (f" | ETA {_hms(eta)}" if math.isfinite(eta) else ""), flush=True)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._last_step != trainer.global_step:  # first micro-batch of an optimizer step
            self._last_step = trainer.global_step
            self.times.begin(pl_module.device)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self._last_step:  # still accumulating
            return
        self.times.end(pl_module.device)
        self.window_steps += 1
        self.total_steps += 1
        losses, pl_module.step_losses = pl_module.step_losses, []
        if trainer.global_step % self.every == 0 and losses:  # same decision on every rank
            self._add_times()
            loss = trainer.strategy.reduce(torch.stack(losses).mean(), reduce_op="mean")  # equal shards
            tokens_per_s = self.window_steps * self.tokens_per_step / self.window_time
            self._log(trainer, {
                "train_loss": loss.item(),
                "lr": trainer.optimizers[0].param_groups[0]["lr"],
                "tokens_per_s": tokens_per_s,
                "peak_mem_mb": peak_memory_mb(),
            })
            self.window_time, self.window_steps = 0.0, 0
            self._progress(trainer, f"train_loss {loss.item():.4f} | {tokens_per_s:,.0f} tokens/s",
                           force=not self._shown_train or trainer.global_step >= trainer.max_steps)
            self._shown_train = True

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking or "val_loss" not in trainer.callback_metrics:
            return
        val = trainer.callback_metrics["val_loss"].item()
        self._log(trainer, {"val_loss": val})
        self._progress(trainer, f"val_loss {val:.4f}", force=True)

    def _add_times(self) -> None:
        dt = sum(self.times.take())
        self.window_time += dt
        self.total_time += dt

    def mean_tokens_per_s(self) -> float | None:
        self._add_times()
        if not self.total_time:
            return None
        return self.total_steps * self.tokens_per_step / self.total_time


class TelemetryWriter(Callback):
    """Tells the collector the current step and appends its rows to the log segment as they come;
    under DDP/FSDP only rank zero's rows (see the module docstring)."""

    def __init__(self, telemetry, path: Path):
        self.telemetry, self.path = telemetry, path

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.telemetry.step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.telemetry.rows and not trainer.is_global_zero:
            self.telemetry.rows.clear()
        if self.telemetry.rows:
            frame = self.telemetry.frame()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            frame.to_csv(self.path, mode="a", header=not self.path.exists(), index=False)
            self.telemetry.rows.clear()


def _segments(log_dir: Path, name: str) -> "pd.DataFrame | None":
    import pandas as pd

    parts = sorted(log_dir.glob(f"segment-*/{name}"), key=lambda p: int(p.parent.name.split("-")[1]))
    frames = [pd.read_csv(p) for p in parts if p.stat().st_size > 0]
    return pd.concat(frames, ignore_index=True) if frames else None


def merge_telemetry(log_dir: Path) -> "pd.DataFrame | None":
    df = _segments(log_dir, "telemetry.csv")
    if df is None:
        return None
    key = ["step", "layer", "gemm", "operand"]
    return df.drop_duplicates(subset=key, keep="last").sort_values(key, kind="stable")


def peak_memory_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    # ru_maxrss is KiB on Linux: the process's peak resident memory
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
