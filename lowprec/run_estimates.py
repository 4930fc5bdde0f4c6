"""What a run costs on a GPU shared by several, for lowprec.packer: the seconds a run takes while
``jobs`` runs share the GPU, from the committed runs' provenance.json.

An arm's runs of the code it was last trained with (the commit of its last run) count. Each one's
wall_s is put back to one run alone through the number of runs that shared the GPU while it ran (k,
its mean over the run's time: what the packer's job counted, ``SHARING_KEY`` in its provenance, else
from the start and finish times of the scale's runs, which miss processes that left no run folder):
wall grows as k^a, with a fitted over the arms measured at several k (least squares of log
wall on log k within each arm, pooled; clamped to [0, 1]; 0.5 without such arms). An arm takes the
slowest of its runs, and with ``jobs`` runs sharing the GPU takes jobs^a times that alone: an upper
bound while fewer run. A time per step holds for the tokens per step it was measured at: a run
whose step holds more (a batch or sequence changed since) scales it up in proportion, never down
(``Estimator._per_step``). An arm with no run at the scale whose method ran there on another model
takes that model's measured ratio between its method and another (``Estimator._other_model_ratio``),
applied to its own model's arm of the other method. Else it is estimated from the arms of its model
measured both at the scale and at ``tiny`` whose settings differ from its own in the fewest keys:
each one's time times the ratio of the two arms' time per step at ``tiny`` (never below 1 within a
recipe), and the upper median of those. That ratio is a CPU one, and on a GPU the arms' costs differ
(at ``tiny`` per-block MoR takes 2.05x per-tensor MoR's step, on an H200 at 98 M 1.14x). So where the
anchor ran on a GPU and both arms' methods are arms of the committed end-to-end benchmark
(``lowprec.bench.e2e_step.METHODS``, BF16 as ``bf16_compiled``; ``SPEED_BENCHES`` at ``SPEED_SHAPE``,
the benchmark shape nearest the GPU scales' models), the ratio of their benchmarked step times
replaces it: each row's tokens/s relative to compiled BF16 in its own run, so rows of different runs
compare, and of an arm's rows in the H200's and the H100's files the newest run's, the code a job
runs now (INT8 block at 98 M: 0.35x on the H200 at ``f186797``, 0.55x on the H100 at ``d0c7170``).
Where neither fits, an override (``PATTERN: seconds`` on run names) replaces the estimate.

A grid's arm with no run at the scale that a size sweep of the scale has trained at the grid's
shape (the same parameters and tokens per step: a sweep point that is the scale's size, as 12 x 768
is medium's) counts that sweep's runs as its own (``shape_runs``), which also makes them an anchor
for the arms of the same model estimated through ``tiny``.

A size sweep's run (``lowprec.sweep``; its shape is no grid run's) is estimated from its arm's
completed runs in the sweep's folder: those of its own point where there are (their slowest seconds
per step alone), else each other point's seconds per step alone times the parameters' ratio where
that point is smaller and unscaled where it is larger (a larger point keeps the GPU busier, so
scaling by parameters overestimates a larger run and would underestimate a smaller one: at 8 x 512
a 12 x 768 run's time per parameter gave 193 s for a 310 s run), the largest of these; times its
steps and the sharing. Before any run of the arm completed, ``--estimate`` gives it.
"""

from __future__ import annotations

import fnmatch
import json
import math
import statistics
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from . import config as lpc
from .io import provenance_path
from .sweep import SWEEP_RUN, run_parameters, tokens_per_step

# the provenance key in which lowprec.packer records the processes that shared the GPU while a run
# trained (on average, itself included)
SHARING_KEY = "gpu_processes_mean"

if TYPE_CHECKING:
    from .packer import Task

REFERENCE_SCALE = "tiny"   # committed on CPU for every arm: the ratios between arms
GRID_RUNS = "*/*/*/s*/provenance.json"      # under runs/<scale>/: <paper>/<model>/<method>/s<seed>
SWEEP_RUNS = "*/*/*/*/s*/provenance.json"   # under a sweep's folder: <point>/<paper>/<model>/<method>/s<seed>
DEFAULT_EXPONENT = 0.5     # k^a when no arm was measured at several concurrencies
# under the results root: the arms' GPU step times, the newest run's of each arm (module doc)
SPEED_BENCHES = ("bench/e2e_h200.csv", "bench/e2e_h100.csv")
SPEED_SHAPE = "llama_100m"            # 98 M parameters; medium's models are 110-135 M, small's 10-15 M


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


class Estimator:
    """Seconds a run takes with ``jobs`` runs sharing the GPU, from the committed runs (module doc)."""

    def __init__(self, results: str, scale: str, overrides: dict[str, float] | None = None, startup: float = 30.0,
                 sweep_runs: str | None = None, shape_runs: list[str] | None = None):
        self.overrides, self.startup = dict(overrides or {}), startup
        measured = self._measured(Path(results) / "runs" / scale)
        self.exponent = self._fit(measured)
        self.per_step: dict[tuple, float] = {}     # arm -> seconds per step alone, its slowest run
        self.method: dict[tuple, dict] = {}        # arm -> its method settings
        self.steps: dict[tuple, int] = {}          # arm -> its runs' steps
        self.tokens: dict[tuple, int] = {}         # arm -> its runs' tokens per step
        self.origin: dict[tuple, str] = {}         # arm -> where its runs are
        for arm, wall, steps, k, cfg in measured:
            self._add(arm, wall / k ** self.exponent / steps, cfg, "this arm's committed runs")
        # a size sweep's runs at the grid's own shape stand in for an arm the grid has not trained
        grid_trained, shapes = set(self.per_step), {}
        for root in shape_runs or []:
            for arm, wall, steps, k, cfg in self._measured(Path(root), pattern=SWEEP_RUNS):
                if arm not in shapes:
                    shapes[arm] = _grid_shape(scale, arm)
                if arm in grid_trained or shapes[arm] != _shape(cfg):
                    continue
                self._add(arm, wall / k ** self.exponent / steps, cfg,
                          f"this arm's runs in the size sweep {Path(root).name} at this scale's shape")
        # arm -> the most GPU memory (GiB, provenance peak_mem_mb) one of its runs here held, else one
        # of a size sweep's at this scale's shape
        self.peak_gib = _peaks(Path(results) / "runs" / scale, GRID_RUNS)
        for root in shape_runs or []:
            at_shape = _peaks(Path(root), SWEEP_RUNS, lambda arm, cfg: shapes.setdefault(arm, _grid_shape(scale, arm))
                              == _shape(cfg))
            self.peak_gib = {**at_shape, **self.peak_gib}
        self.reference = {}                          # arm -> mean seconds per step at REFERENCE_SCALE
        for arm, wall, steps, _, _ in self._measured(Path(results) / "runs" / REFERENCE_SCALE, concurrency=False):
            self.reference.setdefault(arm, []).append(wall / steps)
        self.reference = {a: sum(v) / len(v) for a, v in self.reference.items()}
        self.speed = bench_speeds([Path(results) / b for b in SPEED_BENCHES])  # arm -> tokens/s over BF16's
        # a size sweep's arms (folder ``sweep_runs``): (parameters, seconds per step alone) of each
        # completed run; ``_sweep_per_step`` bounds a run's from them (module doc)
        self.sweep_steps: dict[tuple, list[tuple[int, float]]] = {}
        self.sweep_peak_gib = _peaks(Path(sweep_runs), SWEEP_RUNS, point=True) if sweep_runs else {}
        for arm, wall, steps, k, cfg in (self._measured(Path(sweep_runs), pattern=SWEEP_RUNS) if sweep_runs else []):
            self.sweep_steps.setdefault(arm, []).append((run_parameters(cfg), wall / k ** self.exponent / steps))

    def _add(self, arm: tuple, solo_per_step: float, cfg: dict, origin: str) -> None:
        self.per_step[arm] = max(self.per_step.get(arm, 0.0), solo_per_step)
        self.method[arm] = cfg.get("method") or {}
        self.steps[arm] = (cfg.get("train") or {}).get("max_steps")
        self.tokens[arm] = tokens_per_step(cfg)
        self.origin[arm] = origin

    @staticmethod
    def _measured(root: Path, concurrency: bool = True, pattern: str = GRID_RUNS) -> list[tuple]:
        """(arm (group, model, method), wall_s, steps, k, run config) of the complete runs under
        ``root`` (their folders: ``pattern``): of each arm the runs of the code it was last trained
        with (its last run's commit)."""
        rows = []
        for d, p in _completed(root, pattern):
            if not p.get("wall_s") or not p.get("steps"):
                continue
            cfg = lpc.load_yaml(d / "config.yaml")
            span = (_seconds(p["started"]), _seconds(p["finished"])) if p.get("started") and p.get("finished") else None
            rows.append((tuple(d.parts[-4:-1]), float(p["wall_s"]), int(p["steps"]), span, cfg, p.get("git_commit"),
                         p.get(SHARING_KEY)))
        spans = [r[3] for r in rows if r[3] and r[3][1] > r[3][0]]

        def shared(span, recorded) -> float:  # mean number of runs on the GPU while this one ran (itself included)
            if not concurrency:
                return 1.0
            if recorded:  # counted by the packer's job, the processes that left no run folder included
                return max(1.0, float(recorded))
            if not span or span[1] <= span[0]:
                return 1.0
            return max(1.0, sum(max(0.0, min(span[1], o[1]) - max(span[0], o[0])) for o in spans) / (span[1] - span[0]))

        last = {}  # arm -> the commit of its last finished run
        for arm, _, _, span, _, commit, _ in sorted(rows, key=lambda r: r[3][1] if r[3] else 0.0):
            last[arm] = commit
        return [(arm, wall, steps, shared(span, recorded), cfg)
                for arm, wall, steps, span, cfg, commit, recorded in rows if commit == last[arm]]

    @staticmethod
    def _fit(measured) -> float:
        """a of wall ~ k^a: least squares of log wall on log k within each arm, pooled."""
        by_arm: dict[tuple, list] = {}
        for arm, wall, _, k, _ in measured:
            by_arm.setdefault(arm, []).append((math.log(k), math.log(wall)))
        sxx = sxy = 0.0
        for pts in by_arm.values():
            mx, my = (sum(v) / len(pts) for v in zip(*pts))
            sxx += sum((x - mx) ** 2 for x, _ in pts)
            sxy += sum((x - mx) * (y - my) for x, y in pts)
        return DEFAULT_EXPONENT if sxx < 0.05 else min(1.0, max(0.0, sxy / sxx))

    def memory_gib(self, task: Task) -> float | None:
        """The GPU memory its arm's runs held at this scale (or a size sweep's at this scale's shape; a
        sweep's run: its arm's runs at its point), else the most that an arm of another experiment
        with the same model and method settings held (GaussWS's and INT8 fallback's GPT2 BF16 arms
        are one run config); None where none was measured."""
        if task.kind == SWEEP_RUN:  # the runs of its own sweep point alone: the points' sizes differ
            return self.sweep_peak_gib.get(tuple(task.name.split("/")[:4]))
        arm = tuple(task.name.split("/")[:3])
        if arm in self.peak_gib:
            return self.peak_gib[arm]
        mine = _settings(task.cfg["method"])
        same = [gib for a, gib in self.peak_gib.items()
                if a[1] == arm[1] and a in self.method and _distance(mine, _settings(self.method[a])) == 0]
        return max(same, default=None)

    def __call__(self, task: Task, jobs: int) -> tuple[float | None, str]:
        for pattern, seconds in self.overrides.items():
            if fnmatch.fnmatchcase(task.name, pattern):
                return float(seconds), f"--estimate {pattern}"
        steps, share = task.cfg["train"]["max_steps"], jobs ** self.exponent
        if task.kind == SWEEP_RUN:  # <point>/<paper>/<model>/<method>/s<seed>
            arm = tuple(task.name.split("/")[1:4])
            if arm not in self.sweep_steps:
                return None, "no completed run of this arm in the sweep to estimate from: give --estimate"
            per_step, why = _sweep_per_step(self.sweep_steps[arm], run_parameters(task.cfg))
            return self.startup + per_step * steps * share, why
        arm = tuple(task.name.split("/")[:3])
        if arm in self.per_step:
            return self.startup + self._per_step(arm, task) * steps * share, self.origin[arm]
        here = self._other_model_ratio(task)
        if here:
            a, ratio, other, twin = here
            return (self.startup + self._per_step(a, task) * ratio * steps * share,
                    f"{'/'.join(a)} x {ratio:.2f} ({'/'.join(other)} over {'/'.join(twin)} here)")
        on_gpu = self._gpu_ratio(task)
        if on_gpu:
            a, ratio = on_gpu
            return (self.startup + self._per_step(a, task) * ratio * steps * share,
                    f"{'/'.join(a)} x {ratio:.2f} (GPU benchmark, {SPEED_SHAPE})")
        # the arms of the model measured here and at the reference scale, closest settings first
        mine = _settings(task.cfg["method"])
        near = sorted((_distance(mine, _settings(self.method[a])), a) for a in self.per_step
                      if a[1] == arm[1] and a in self.reference and arm in self.reference)
        if not near:
            return None, "no committed run to estimate from: give --estimate"
        guesses = []
        for distance, a in near:
            if distance > near[0][0]:
                break
            ratio = self.reference[arm] / self.reference[a]
            if self.method[a].get("recipe") == task.cfg["method"].get("recipe"):
                ratio = max(1.0, ratio)
            guesses.append((self.startup + self._per_step(a, task) * ratio * steps * share,
                            f"{'/'.join(a)} x {ratio:.2f} ({REFERENCE_SCALE} time per step)"))
        return statistics.median_high(guesses)

    def _per_step(self, arm: tuple, task: Task) -> float:
        """Seconds per step alone of ``arm``'s committed runs, for a step of ``task``'s tokens: scaled
        up where the task's step holds more tokens than theirs did (a batch or sequence changed since
        they ran), never down (a smaller step keeps its fixed costs: the committed time bounds it)."""
        return self.per_step[arm] * max(1.0, tokens_per_step(task.cfg) / self.tokens[arm])

    def _other_model_ratio(self, task: Task) -> tuple[tuple, float, tuple, tuple] | None:
        """(anchor arm, ratio, the arm measured, its twin) where the task's method ran here on another
        model: the anchor, an arm of the task's model with another method, times the measured arm's
        step time over its twin's (the arm of the other model with the anchor's method). Measured at
        this scale, the ratio holds what a benchmarked step leaves out (compilation, the INT8 GEMM's
        tuning, evaluations: block INT8's first medium runs took 501 s where the benchmark's ratio
        gave 376). All four runs' kind: GPU runs (known peak memory) of the task's steps (a short
        fine-tuning run's start-up weighs more per step). Of several pairs, those whose tokens per
        step match (the anchor's the task's, the twin's the measured arm's), then the longest
        estimate: a run the budget stops is lost."""
        model, steps = task.name.split("/")[1], task.cfg["train"]["max_steps"]
        mine, tokens = _kernels(task.cfg["method"]), tokens_per_step(task.cfg)
        like = [a for a in self.per_step if a in self.peak_gib and self.steps.get(a) == steps]
        kernels = {a: _kernels(self.method[a]) for a in like}
        pairs = []
        for other in like:
            if other[1] == model or _distance(mine, kernels[other]):
                continue
            for a in like:
                if a[1] != model or not _distance(mine, kernels[a]):
                    continue
                for twin in like:
                    if twin[1] == other[1] and not _distance(kernels[a], kernels[twin]):
                        ratio = self.per_step[other] / self.per_step[twin]
                        mismatch = ((self.tokens[a] != tokens)
                                    + (self.tokens[twin] != self.tokens[other]))
                        pairs.append((mismatch, -self.per_step[a] * ratio, a, ratio, other, twin))
        return min(pairs)[2:] if pairs else None

    def _gpu_ratio(self, task: Task) -> tuple[tuple, float] | None:
        """(anchor arm, benchmarked step time of the task's arm over the anchor's) for the arm of the
        task's model that ran on a GPU here (its peak memory is known only from GPU runs) whose
        method is closest to the task's among those the benchmark has (its own experiment's first);
        None where none fits."""
        target = bench_arm(task.cfg["method"])
        if target not in self.speed:
            return None
        paper, model = task.name.split("/")[:2]
        mine = _settings(task.cfg["method"])
        benched = {a: bench_arm(self.method[a]) for a in self.per_step if a[1] == model and a in self.peak_gib}
        anchors = sorted((_distance(mine, _settings(self.method[a])), a[0] != paper, a)
                         for a, arm in benched.items() if arm in self.speed)
        if not anchors:
            return None
        a = anchors[0][-1]
        return a, self.speed[benched[a]] / self.speed[target]


def bench_arm(method: dict) -> str | None:
    """The end-to-end benchmark's arm whose method has a run method's settings (what is logged
    and the learning rate aside: neither changes a step's kernels), BF16 as compiled BF16; None
    for a method the benchmark does not run."""
    from .bench.e2e_step import BASELINE, METHODS

    mine = _kernels(method)
    if mine == {"recipe": "bf16"}:
        return BASELINE
    return next((arm for arm, m in METHODS.items() if m == mine), None)


def bench_speeds(paths: list[Path]) -> dict[str, float]:
    """Benchmark arm -> its tokens/s over compiled BF16's of the same run (``ratio_vs_bf16_compiled``)
    at ``SPEED_SHAPE``, from the committed benchmarks ``paths``: of an arm's rows, the one whose run
    (its ``commit``, dated by the file's provenance) is the newest, the first file's where none is
    dated; empty where none is there."""
    import csv

    newest: dict[str, tuple[str, float]] = {}
    for path in paths:
        if not path.exists():
            continue
        prov = provenance_path(path)
        runs = json.loads(prov.read_text()).get("runs", []) if prov.exists() else []
        dated: dict[str, str] = {}
        for run in runs:
            dated[run.get("commit", "")] = max(dated.get(run.get("commit", ""), ""), run.get("time") or "")
        with path.open() as f:
            for r in csv.DictReader(f):
                ratio = float(r["ratio_vs_bf16_compiled"] or 0)
                when = dated.get(r.get("commit") or "", "")
                if r["shape"] == SPEED_SHAPE and ratio > 0 and (r["arm"] not in newest or when > newest[r["arm"]][0]):
                    newest[r["arm"]] = (when, ratio)
    return {arm: ratio for arm, (_, ratio) in newest.items()}


def _peaks(root: Path, pattern: str, keep=None, point: bool = False) -> dict[tuple, float]:
    """arm (group, model, method; ``point``: a size sweep's point first) -> the most GPU memory (GiB,
    torch's peak allocation) that one of its completed GPU runs under ``root`` held; ``keep(arm, run
    config)`` picks the runs."""
    peaks: dict[tuple, float] = {}
    for d, p in _completed(root, pattern):
        device = p.get("device") if isinstance(p.get("device"), dict) else {}
        arm = tuple(d.parts[-5 if point else -4:-1])
        if not device.get("gpu") or not p.get("peak_mem_mb"):
            continue
        if keep is None or keep(arm, lpc.load_yaml(d / "config.yaml")):
            peaks[arm] = max(peaks.get(arm, 0.0), float(p["peak_mem_mb"]) / 1024)
    return peaks


def _completed(root: Path, pattern: str):
    """(run folder, its provenance record) of each completed run under ``root`` (``pattern``) whose
    folder holds every file of a run."""
    for prov in sorted(root.glob(pattern)):
        if lpc.missing_run_files(prov.parent):
            continue
        p = json.loads(prov.read_text())
        if p.get("status") == "completed":
            yield prov.parent, p


def _sweep_per_step(measured: list[tuple[int, float]], params: int) -> tuple[float, str]:
    """Seconds per step alone of a sweep run of ``params`` parameters from its arm's completed runs,
    (parameters, seconds per step alone): the slowest at its own size where there is one, else the
    largest bound of the other sizes (scaled up by parameters from a smaller one, never down)."""
    same = [t for p, t in measured if p == params]
    if same:
        return max(same), "this arm's completed sweep runs at this point"
    return (max(t * max(1.0, params / p) for p, t in measured),
            "this arm's completed sweep runs at other points (x parameters where smaller)")


def _shape(cfg: dict) -> tuple[int, int]:
    """What makes two runs' steps cost the same: parameters and tokens per step."""
    return run_parameters(cfg), tokens_per_step(cfg)


def _grid_shape(scale: str, arm: tuple) -> tuple[int, int] | None:
    """``_shape`` of the grid runs of ``arm`` (paper, model, method) at ``scale``; None for an arm
    the scale's grid does not have."""
    try:
        return _shape(lpc.resolve_run(scale, *arm, 0))
    except lpc.ConfigError:
        return None


def _settings(method: dict) -> dict:
    """A method's settings that shape its numerics (not its name or how often it logs)."""
    return {k: v for k, v in method.items() if k not in ("name", "telemetry_every")}


def _kernels(method: dict) -> dict:
    """A method's settings that shape a step's kernels (``_settings`` without the training overrides,
    such as the learning rate)."""
    return {k: v for k, v in _settings(method).items() if k != "train"}


def _distance(a: dict, b: dict) -> int:
    """How many settings two methods differ in."""
    return sum(a.get(k) != b.get(k) for k in set(a) | set(b))


