"""Per-layer, per-GEMM, per-operand numerics telemetry, recorded every ``every`` optimizer steps.

Quantized layers call ``Telemetry.wants(layer, gemm, operand)`` before doing any measuring work, so
telemetry that is off (``every=0``) or between recording steps costs one boolean read.
A run's rows end in its ``telemetry.csv.gz`` (``write_telemetry`` / ``read_telemetry``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from .io import write_gzip_text

if TYPE_CHECKING:  # the readers of a run's file (the report jobs) start without torch
    import torch

# A run's telemetry file, gzip-compressed: telemetry is most of a committed run's bytes (0.4-0.9 MB
# of CSV per MoR or INT8-fallback run at `small`, about a fifth of that compressed)
TELEMETRY_FILE = "telemetry.csv.gz"
# the name of the uncompressed file that runs wrote before: a rerun removes it with the other results
LEGACY_TELEMETRY_FILE = "telemetry.csv"


def write_telemetry(run_dir: str | os.PathLike, frame) -> None:
    write_gzip_text(Path(run_dir) / TELEMETRY_FILE, frame.to_csv(index=False))


def read_telemetry(run_dir: str | os.PathLike):
    """The run's telemetry rows (a DataFrame), or None if it recorded none."""
    import pandas as pd

    path = Path(run_dir) / TELEMETRY_FILE
    if not path.is_file():
        legacy = Path(run_dir) / LEGACY_TELEMETRY_FILE
        if legacy.is_file():  # a run folder of an older version: its telemetry must not be skipped unseen
            raise FileNotFoundError(f"{legacy}: telemetry of an older version, uncompressed; compress it to "
                                    f"{TELEMETRY_FILE} (gzip -n {legacy})")
        return None
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None


class Telemetry:
    def __init__(self, every: int = 0):
        if every < 0:
            raise ValueError(f"telemetry every must be >= 0, got {every}")
        self.every = every
        self.step = 0  # through the setter below
        self.rows: list[dict] = []
        self._seen: set = set()

    @property
    def step(self) -> int:
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        # Compiled graphs read only the boolean: reading the step itself there would guard the graph
        # on its value and recompile it at every optimizer step (until Dynamo's recompile limit sends
        # the layers back to eager).
        self._step = value
        self._recording = bool(self.every) and value % self.every == 0

    def recording(self) -> bool:
        """Whether this step is a recording step (a layer may then skip fused hardware paths)."""
        return self._recording

    def wants(self, layer: str, gemm: str, operand: str) -> bool:
        if not self.recording():
            return False
        key = (self.step, layer, gemm, operand)
        if key in self._seen:  # gradient accumulation: measure the first micro-batch only
            return False
        self._seen.add(key)
        return True

    def record(self, layer: str, gemm: str, operand: str, x: torch.Tensor, q: torch.Tensor,
               scale: torch.Tensor | None, fmt: str | None, **extra) -> None:
        """A row of operand ``x`` quantized to ``q``: the error metrics (``tensor_stats``) and
        ``extra`` (numbers, strings, 0-d tensors, ``recipes.Choice``). Tensors stay on the device
        until ``frame`` reads every row's in one conversion: a telemetry step records every operand
        of every GEMM, and each wait for the device (one per number, before) idled a GPU that other
        runs shared."""
        import torch

        from .numerics import get_format, tensor_sums
        from .numerics.metrics import STATS
        with torch.no_grad():
            sums = tensor_sums(x, q, scale, get_format(fmt) if fmt else None)
        # the metrics' places in the row now, their values once read; a number of extra's wins
        self.rows.append({"step": self.step, "layer": layer, "gemm": gemm, "operand": operand,
                          "format": fmt or "hp", **dict.fromkeys(STATS), **extra,
                          _SUMS: (sums, [k for k in STATS if k not in extra])})

    def frame(self):
        import pandas as pd
        self._read_pending()
        return pd.DataFrame(self.rows)

    def _read_pending(self) -> None:
        """Every tensor of the rows recorded since the last call (values, the metrics' sums, the
        flags of ``Choice`` values) read as numbers: one conversion per device and dtype, each value
        as ``Tensor.item`` gives it."""
        from .numerics import stats_from_sums
        from .recipes import Choice

        pending = [r for r in self.rows if _SUMS in r]
        choices = [(r, k, v, {"flag": v.flag}) for r in pending for k, v in r.items() if isinstance(v, Choice)]
        cells = [(r[_SUMS][0], k) for r in pending for k in r[_SUMS][0]]
        cells += [(r, k) for r in pending for k, v in r.items() if k != _SUMS and _is_tensor(v)]
        cells += [(flag, "flag") for *_, flag in choices]
        for (holder, key), value in zip(cells, _read_tensors([holder[key] for holder, key in cells])):
            holder[key] = value
        for r, k, choice, flag in choices:
            r[k] = choice.if_true if flag["flag"] else choice.if_false
        for r in pending:
            sums, fill = r.pop(_SUMS)
            stats = stats_from_sums(sums)
            r.update((k, stats[k]) for k in fill)

    def clear(self) -> None:
        self.rows.clear()
        self._seen.clear()


_SUMS = "__sums__"  # a row's tensor_sums until frame() reads them


def _is_tensor(v) -> bool:
    import torch
    return isinstance(v, torch.Tensor)


def _read_tensors(values: list) -> list:
    """``[v.item() for v in values]`` (one-element tensors) with one wait for the device per device
    and dtype instead of one per value."""
    import torch

    out, groups = list(values), {}
    for i, v in enumerate(values):
        groups.setdefault((v.device, v.dtype), []).append(i)
    for idx in groups.values():
        for i, v in zip(idx, torch.stack([values[i].reshape(()) for i in idx]).tolist()):
            out[i] = v
    return out
