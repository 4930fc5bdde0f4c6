"""Train a scale's runs that are not committed on one GPU, several at a time, within a time budget.

For a GPU machine without Snakemake, lent for minutes at a time:

    python -m lowprec.packer data --scale small          # the datasets they read, prepared (needs network)
    python -m lowprec.packer plan --scale small --jobs 12 --budget 560     # order, estimates, what fits
    python -m lowprec.packer run  --scale small --jobs 12 --budget 560 --out OUT      # on the GPU
    python -m lowprec.packer unpack OUT/runs.tar.gz      # back in the checkout: the new run folders
    python -m lowprec.packer run --sweep configs/sweeps/medium.yaml --only 'd8w512/*' --jobs 4 \
        --estimate 'd8w512/*=150' --out OUT          # a size sweep's runs (lowprec.sweep) instead

``--sweep``: the runs of a size sweep whose folders are missing, in the sweep's order (smallest point
first), trained and archived as a scale's runs are (under ``sweeps/<sweep>/``), with no evaluations and
no claims to order them by; a run is estimated from its arm's completed runs in the sweep (seconds per
step and parameter, ``run_estimates``), else by ``--estimate`` (no grid run has its shape).

Which runs: those of the grid (``configs/experiments``, fine-tuning runs included) whose folder is
missing or incomplete (``lowprec.config.run_status``); a folder whose config changed is listed and
not retrained, so no committed run folder is written, unless ``--retrain PATTERN...`` names the run
(fnmatch on run names, as ``snakemake --config retrain=...``): a named run trains again, stale or
current, and so do the fine-tuning runs that start from its weights. Such a run trains in its own
folder, whose committed files are set aside meanwhile (under ``ASIDE``) and put back unless it
completes (a retrained run is never kept for a next job to resume; a job killed outright leaves them
set aside, and the next job on that machine puts them back first). ``unpack --retrain PATTERN...``
lets the archive's folders of the named runs replace the committed ones; without it ``unpack``
refuses them. A named run always trains: a chained job given the same ``--retrain`` trains it again.

Order: the runs that decide the most claims first. A claim reads the runs of its arms
(``report.claims.claim_arms``); the claims whose verdict committed at this scale is undecided
(inconclusive, not run) come before the decided ones, and among them first the one whose missing
runs cost the fewest estimated seconds; its runs follow seed by seed (a paired test's arms together).
Runs that no claim reads (the cross-recipe matrix) come last. ``--claims PATTERN...`` keeps the runs
that the matching claims read (``serving``), with the runs they start from.

A fine-tuning run starts from its source run's final checkpoint, which is not committed: where the
source run is missing it trains in the same job first; where it is committed (without the
checkpoint) it trains again as a ``SOURCE`` task, in a folder of its own under ``SOURCES`` with the
same config, which is never archived: its final checkpoint moves to where the fine-tuning runs read
it (the committed folder's ``checkpoints/``, which git ignores; the committed files stay as they
are). BF16 training on the GPU is not bit-reproducible, so such a checkpoint differs from the
committed run's; each fine-tuning run's provenance records the hash of the one it started from.

Estimates (``lowprec.run_estimates``): the seconds a run takes while ``--jobs`` runs share the
GPU, from the committed runs' provenance.json, in which a job records the processes that shared the
GPU while each of its runs trained (``SHARING_KEY``); ``--estimate PATTERN=SECONDS`` sets them for runs whose
name matches (an arm never run at the scale, once a step of it is profiled on the GPU). Every
process adds ``--startup`` seconds and every evaluation ``--eval-s``.

The job prepares missing datasets, then keeps ``--jobs`` processes busy. A run starts only if its
estimate, its evaluations and the fine-tuning runs that start from it, one after another, end within
the budget: those take the free slots before any other run once it completes (its final checkpoint,
which they start from, does not outlive the machine), so its own slot alone bounds them, and the
GPU is never shared by more than ``--jobs`` processes (a ``medium`` job that started fine-tuning
runs beside its four others ran eight processes at once on an H100: one failed for want of memory
at its start, and every INT8 fine-tuning run was stopped halfway). The evaluations that read a run's final
checkpoint (``run_evaluations``) run in its slot right after it, since checkpoints are not committed
and do not outlive the machine. A run whose arm's GPU peak was measured (``Estimator.memory_gib``)
starts only while its ``footprint`` fits beside the running ones' (``--gpu-memory-gib``, on ``run``
what the device has free at the job's start); otherwise GPU memory is not known before a run
starts: a run that fails out of it while others share the GPU is retried first, and from then on at
most one process fewer than were running shares it (a run out of memory alone fails). At the budget less ``--reserve`` seconds a process
still running is stopped (SIGTERM to its process group, SIGKILL after ``GRACE_S``; the note gives the
step it reached) and its run folder removed, as is the folder of a run that fails: every run folder
the job touches ends complete, with its evaluations, or absent. ``--out`` receives four files, written when the job ends (stopped from
outside too, through SIGTERM): ``runs.tar.gz``, the complete run folders it trained without
checkpoints and logs (``runs/<scale>/<run>/``, as under the results root), ``logs.tar.gz`` and
``packer_summary.json``; and ``int8_gemm_tuned.json``, the committed INT8 GEMM tuning records with
what the job's runs tuned added (``job_int8_records``; commit it back where it grew, so that the
next job skips that tuning; ``LOWPREC_INT8_TUNED=FILE`` names another file instead). ``unpack``
places the run folders under the results root, refusing a member outside ``runs/`` or a run folder
that is already complete there with other files.

A job also copies each run it completes, without checkpoints, to ``<results>/logs/packer/done/``
(ignored by git). A later job on the same machine, started before the first one's archive was
unpacked in the checkout (calls chained while the machine is held), puts those copies back where
the runs belong, so it does not train them again, and archives them with its own runs; ``unpack``
skips a run folder that is already here with the same files (the first archive's), so both
archives unpack in either order. A copy whose run is complete in place, or whose config no longer
matches the grid's, is dropped.

``--resumable``: runs longer than one job (a 10-minute GPU call) train over several jobs on the same
machine, while it is held between them. A run longer than the time left starts anyway (with at least
``RESUMABLE_MIN_S`` left); ``RESUMABLE_STOP_S`` before the budget's end the running processes get
SIGTERM, end the step they are in and save it (``lowprec.train``), and their folders, checkpoints
included, move to ``<results>/logs/packer/kept/`` (ignored by git, so a fresh copy of the checkout on
that machine keeps them). The next job moves each back when it starts and trains it on from its last
step, with its whole curve; its estimate counts the steps left. A kept folder is progress, never a
result: it is in no archive until its run completes, and on another machine the run starts over.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import heapq
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import config as lpc
from .config import FINETUNE, PRETRAIN
from .io import write_json, write_yaml
from .run_estimates import SHARING_KEY, Estimator
from . import sweep as sweeps

SWEEP = sweeps.SWEEP_RUN  # a size sweep's run: trained and archived alike, no evaluations, no claims
SOURCE = "source"         # a committed run trained again for its final checkpoint alone (module doc)
# the folders of the results root that hold run folders, and the depth of a run folder in each:
# runs/<scale>/<paper>/<model>/<method>/s<seed>, sweeps/<sweep>/<point>/<paper>/<model>/<method>/s<seed>
RUN_ROOTS = {"runs": 6, "sweeps": 7}

GRACE_S = 5.0                             # between SIGTERM and SIGKILL
# --resumable (module doc): SIGTERM this long before the budget's end, and SIGKILL as long after it: a
# medium run ends its step (a telemetry step takes ~3 s), its validation and a checkpoint of ~1.6 GB
RESUMABLE_STOP_S = 60.0
RESUMABLE_MIN_S = 180.0                   # the least time left in which a run longer than it starts
KEPT = ("logs", "packer", "kept")         # under the results root: folders of runs a job stopped
SOURCES = ("logs", "packer", "sources")   # under the results root: the folders of SOURCE runs
DONE = ("logs", "packer", "done")         # under the results root: copies of the runs a job completed
ASIDE = ("logs", "packer", "aside")       # under the results root: committed folders of runs retrained now
# what a run's log ends with when the GPU had no memory left for it (torch's exception and message)
# and CUDA's own, when a process cannot even make its context (torch.AcceleratorError at set_device)
OUT_OF_MEMORY = ("torch.OutOfMemoryError", "CUDA out of memory", "CUDA error: out of memory")
# MX formats of the GaussWS export evaluation (pipelines/gaussws.smk: GW_EXPORTS)
GW_EXPORTS = ("none", "mxfp8", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4")


class PackerError(RuntimeError):
    """A problem with the job's input (grid, data, options); the message names it."""


@dataclass
class Task:
    name: str                  # lowprec.config.run_name: <paper>[_finetune]/<model>/<method>/s<seed>
    #                            (a sweep's run: lowprec.sweep's name, <point>/<paper>/<model>/<method>/s<seed>)
    cfg: dict
    kind: str                  # PRETRAIN, FINETUNE, SWEEP or SOURCE
    source: str | None = None  # the run a fine-tuning run starts from, while that run is missing too
    #                            or trained again (a SOURCE task of that name)
    checkpoint: Path | None = None  # a SOURCE task: where the fine-tuning runs read its final checkpoint
    estimate: float | None = None
    estimated_from: str = ""
    claims: list[str] = field(default_factory=list)
    config_dir: str | None = None
    status: str = "pending"
    wall: float | None = None
    note: str = ""
    attempts: int = 0          # processes started for it: a run out of GPU memory beside others is retried
    memory_gib: float | None = None  # the GPU memory its arm's runs held (Estimator.memory_gib), None: unknown
    left: float = 1.0          # the share of its steps still to train (a kept run resumes)
    replaces: bool = False     # a committed run trained again (--retrain): its folder is set aside meanwhile

    @property
    def paper(self) -> str:
        return self.cfg["paper"]

    @property
    def method(self) -> str:
        return self.cfg["method"]["name"]

    @property
    def model(self) -> str:
        return self.cfg["model"]["name"]

    @property
    def seed(self) -> int:
        return int(self.cfg["seed"])

    @property
    def out(self) -> Path:
        return Path(self.cfg["output_dir"])

    @functools.cached_property
    def evaluations(self) -> list[tuple[tuple[str, ...], list[str]]]:
        return run_evaluations(self)

    def config_path(self, results: str) -> Path:
        """Where the job writes the config it trains from (a sweep's run: where ``lowprec.sweep run``
        writes it, ``config_dir``)."""
        return Path(self.config_dir or Path(results) / "configs" / self.cfg["scale"]) / f"{self.name}.yaml"

    def archived_as(self, results: str) -> str:
        """The run folder's path under the results root, as runs.tar.gz holds it (runs/<scale>/...,
        sweeps/<sweep>/...; a SOURCE run's, which is never archived: under ``SOURCES``)."""
        rel = Path(os.path.relpath(self.out, results))
        if self.kind != SOURCE and rel.parts[0] not in RUN_ROOTS:
            raise PackerError(f"run {self.name}: its folder {self.out} is not under {results}/runs or {results}/sweeps")
        return rel.as_posix()


# --------------------------------------------------------------------------- what a run needs

@functools.lru_cache(maxsize=None)
def _baseline(paper: str) -> str:
    return lpc.experiment_config(paper).get("baseline", "bf16")


def run_evaluations(task: Task) -> list[tuple[tuple[str, ...], list[str]]]:
    """The per-run files computed from a run's final checkpoint, as the papers' pipelines make them
    (pipelines/gaussws.smk, int8_fallback.smk): (the files, the module's arguments), in order."""
    if task.kind != PRETRAIN:
        return []
    d = str(task.out)
    if task.paper == "gaussws":
        out = [(("export.csv",), ["-m", "lowprec.evaluate", "--run", d, "--export", *GW_EXPORTS,
                                  "--out", f"{d}/export.csv"])]
        if task.method == "bf16":
            out.append((("exactness.csv",), ["-m", "lowprec.report.gaussws", "exactness-run", "--runs", d,
                                             "--csv", f"{d}/exactness.csv"]))
        return out
    if task.paper == "int8_fallback" and task.method == _baseline("int8_fallback"):
        return [(("outliers.csv", "outlier_ccdf.csv"),
                 ["-m", "lowprec.report.int8_fallback", "outliers-run", "--runs", d, "--csv", f"{d}/outliers.csv",
                  "--ccdf", f"{d}/outlier_ccdf.csv"])]
    return []


def phase_commands(task: Task, config_path: Path) -> list[list[str]]:
    """The commands of a run's slot, one after another: training, then its evaluations."""
    return [[sys.executable, "-m", "lowprec.train", "--config", str(config_path)],
            *[[sys.executable, *argv] for _, argv in task.evaluations]]


def missing_tasks(scale: str, papers, results: str = "results", only=None,
                  retrain=()) -> tuple[list[Task], list[str], list[str]]:
    """(the runs to train, the stale runs left alone, the runs that cannot train here and why), in
    grid order. ``only``: fnmatch patterns on run names. ``retrain``: patterns of committed runs to
    train again (module doc), whose fine-tuning runs train again too."""
    runs, finetune = lpc.grid_runs(papers, scale, results=results)
    retrain = lpc.retrain_patterns(list(retrain) or None,
                                   [lpc.run_name(c["output_dir"]) for c in [*runs.values(), *finetune.values()]],
                                   what="--retrain")
    tasks, stale, blocked = {}, [], []
    retrained = set()  # the folders of the runs that train again: their fine-tuning runs follow them
    for kind, group in ((PRETRAIN, runs), (FINETUNE, finetune)):
        for cfg in group.values():
            name = lpc.run_name(cfg["output_dir"])
            status, why = lpc.run_status(cfg)
            init = cfg["train"].get("init_from") if kind == FINETUNE else None
            again = status != "missing" and (
                any(fnmatch.fnmatchcase(name, p) for p in retrain)
                or (init is not None and str(Path(init).parents[1]) in retrained))
            if status == "stale" and not again:
                stale.append(f"{name} (config changed: {why})")
            elif ((status == "missing" or again)
                  and (not only or any(fnmatch.fnmatchcase(name, p) for p in only))):
                tasks[name] = Task(name, cfg, kind, replaces=again)
                if again:
                    retrained.add(str(Path(cfg["output_dir"])))
    for t in [t for t in tasks.values() if t.kind == FINETUNE]:
        init = t.cfg["train"]["init_from"]
        source = lpc.run_name(Path(init).parents[1])
        if source in tasks:
            t.source = source
        elif not Path(init).is_file():
            if lpc.missing_run_files(Path(init).parents[1]):
                blocked.append(f"{t.name}: its source run {source} is not selected")
                del tasks[t.name]
                continue
            # committed without its checkpoint (checkpoints are not committed): trained again
            # beside the committed folder, which it leaves as it is, for the checkpoint alone
            t.source = source
            tasks.setdefault(source, source_task(source, runs, Path(init), results))

    if only and not tasks and not blocked:
        raise PackerError(f"--only {list(only)}: no run that is not committed matches"
                          + (" or is retrained" if retrain else ""))
    return list(tasks.values()), stale, blocked


def source_task(name: str, runs: dict, checkpoint: Path, results: str) -> Task:
    """The SOURCE task that trains committed run ``name`` again (its grid config, ``runs``) in a
    folder under ``SOURCES``, for the final checkpoint that fine-tuning runs read at ``checkpoint``
    (module doc)."""
    cfg = next(c for c in runs.values() if lpc.run_name(c["output_dir"]) == name)
    scratch = Path(results).joinpath(*SOURCES)
    # its config beside it, not where the workflow keeps the committed run's
    return Task(name, {**cfg, "output_dir": str(scratch / name)}, SOURCE, checkpoint=checkpoint,
                config_dir=str(scratch / "configs"))


def place_checkpoint(task: Task) -> None:
    """A SOURCE run's final checkpoint moved to where its fine-tuning runs read it (the committed run
    folder's ``checkpoints/``, which git ignores), and its folder removed."""
    task.checkpoint.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(task.out / "checkpoints" / task.checkpoint.name), task.checkpoint)
    _remove(task)


def sweep_tasks(sweep_path: str, results: str = "results", only=None) -> tuple[list[Task], list[str]]:
    """(the runs of a size sweep, ``lowprec.sweep``, whose folder is missing or incomplete, in the
    sweep's order: smallest point first; the stale ones, left alone as a grid's are);
    ``only``: fnmatch patterns on their names."""
    tasks, stale = [], []
    for name, cfg in sweeps.sweep_runs(sweeps.load_sweep(sweep_path), results).items():
        status, why = lpc.run_status(cfg)
        if status == "stale":
            stale.append(f"{name} (config changed: {why})")
        elif status == "missing" and (not only or any(fnmatch.fnmatchcase(name, p) for p in only)):
            tasks.append(Task(name, cfg, SWEEP, config_dir=str(sweeps.config_dir(sweep_path, results))))
    if only and not tasks:
        raise PackerError(f"--only {list(only)}: no run of {sweep_path} whose folder is missing matches")
    return tasks, stale


# --------------------------------------------------------------------------- order

def _committed_verdicts(results: str, paper: str, scale: str) -> dict[str, str]:
    import csv

    path = Path(results) / paper / scale / "tables" / "claims.csv"
    if not path.is_file():
        return {}
    with path.open(newline="") as f:
        return {r["claim"]: r["verdict"] for r in csv.DictReader(f)}


def order(tasks: list[Task], scale: str, results: str = "results") -> list[Task]:
    """The tasks in the order that decides the most claims first (module doc); sets ``claims``."""
    from .report.claims import INCONCLUSIVE, NOT_RUN, claim_arms, load_claims

    by_name = {t.name: t for t in tasks}
    claims = []  # (undecided first, registry position, id, its tasks)
    for paper in dict.fromkeys(t.paper for t in tasks):
        verdicts = _committed_verdicts(results, paper, scale)
        for i, claim in enumerate(load_claims(paper)):
            arms, models = claim_arms(claim), claim["metric"].get("models")
            mine = [t for t in tasks if t.paper == paper and (t.kind, t.method) in arms
                    and (not models or t.model in models)]
            for t in mine:
                t.claims.append(f"{paper}/{claim['id']}")
            needs = {t.name for t in mine} | {t.source for t in mine if t.source}
            if needs:
                undecided = verdicts.get(claim["id"], NOT_RUN) in (INCONCLUSIVE, NOT_RUN)
                claims.append((0 if undecided else 1, i, claim["id"], needs))
    ordered: list[Task] = []
    placed: set[str] = set()

    def cost(needs):
        return sum(by_name[n].estimate or 0.0 for n in needs - placed)

    while True:
        open_ = [c for c in claims if c[3] - placed]
        if not open_:
            break
        *_, needs = min(open_, key=lambda c: (c[0], cost(c[3]), c[1]))
        # a claim's runs by seed, the runs that others start from (a source trained again too) before
        # the fine-tuning runs, then by name: the same order whatever the order of the set
        for t in sorted((by_name[n] for n in needs - placed),
                        key=lambda t: (t.seed, t.kind == FINETUNE, t.kind != PRETRAIN, t.model, t.method, t.name)):
            ordered.append(t)
            placed.add(t.name)
    return ordered + [t for t in tasks if t.name not in placed]


# --------------------------------------------------------------------------- the job

@dataclass
class Budget:
    jobs: int
    seconds: float
    reserve: float = 15.0      # for stopping, cleaning up and the summary
    eval_s: float = 30.0       # each evaluation of a run's final checkpoint
    resumable: bool = False    # --resumable (module doc)
    startup: float = 0.0       # a process's start-up, which a resumed run pays again (plans only)
    gpu_memory_gib: float | None = None  # the GPU's memory: runs start only while their footprints fit

    @property
    def stop_at(self) -> float:
        """Seconds into the job at which running processes are stopped."""
        return self.seconds - self.reserve - (RESUMABLE_STOP_S if self.resumable else 0.0)

    def own(self, task: Task) -> float:
        """The seconds a run's slot needs: training and its evaluations."""
        return (task.estimate or math.inf) + self.eval_s * len(task.evaluations)


# A process holds more than torch's peak allocation: its CUDA context, the caching allocator's slack and
# what compiling and autotuning allocate at its start: six medium BF16 runs (three GPT2 of 15.2 GiB
# peak, three Llama2) ran out of an H100's 80 GB started together, and so did four (the Llama2 three
# beside one GPT2).
MEMORY_SLACK = (1.10, 1.5)  # footprint = 1.10 x measured peak + 1.5 GiB


def footprint(task: Task) -> float:
    """The GPU memory (GiB) a run's process is counted as holding; 0 when its arm was never measured
    (then only --jobs, and the retry of a run out of memory, limit it)."""
    return task.memory_gib * MEMORY_SLACK[0] + MEMORY_SLACK[1] if task.memory_gib else 0.0


def fits(task: Task, in_use: float, budget: Budget) -> bool:
    """Whether the run's footprint fits beside ``in_use`` GiB of the others' (always, alone)."""
    return not budget.gpu_memory_gib or in_use == 0 or in_use + footprint(task) <= budget.gpu_memory_gib


def need(task: Task, pending: list[Task], budget: Budget) -> float:
    """A run's slot time, plus its fine-tuning runs one after another: they take free slots before
    any other run, so the slot the run frees bounds them (module doc)."""
    return budget.own(task) + sum(budget.own(t) for t in pending if t.source == task.name)


def pick(pending: list[Task], done: set[str], remaining: float, budget: Budget, running: list[Task]) -> Task | None:
    """The next run to start beside the ``running`` ones (their footprints on the GPU), while fewer
    than ``budget.jobs`` run: a fine-tuning run whose source has completed, if its footprint fits (its
    checkpoint does not outlive the machine: while one waits for memory, no other run starts), else
    the first in order with no source waiting that ends (with what waits for it) within
    ``remaining`` seconds and whose footprint fits the GPU beside the others'."""
    if len(running) >= budget.jobs:
        return None
    in_use = sum(footprint(t) for t in running)
    ready = [t for t in pending if t.source in done and budget.own(t) <= remaining]
    if ready:
        return next((t for t in ready if fits(t, in_use, budget)), None)
    for t in pending:
        if t.source is None and need(t, pending, budget) <= remaining and fits(t, in_use, budget):
            return t
    if budget.resumable and remaining >= RESUMABLE_MIN_S:
        # longer than the time left, continued by the next job; not one a fine-tuning run waits for,
        # which starts from its final checkpoint in the same job
        for t in pending:
            if (t.source is None and t.estimate is not None and not any(p.source == t.name for p in pending)
                    and fits(t, in_use, budget)):
                return t
    return None


def simulate(tasks: list[Task], budget: Budget) -> list[tuple[Task, float, float]]:
    """The runs one job starts, by the estimates: (task, start, end) in start order; with
    ``--resumable`` a run longer than the time left ends at the stop (``continues``)."""
    pending, done, started = list(tasks), set(), []
    running: list[tuple[float, int, Task]] = []
    now, limit = 0.0, budget.stop_at
    while True:
        while t := pick(pending, done, limit - now, budget, [r[2] for r in running]):
            pending.remove(t)
            end = min(now + budget.own(t), limit) if budget.resumable else now + budget.own(t)
            started.append((t, now, end))
            heapq.heappush(running, (end, len(started), t))
        if not running:
            return started
        now, _, t = heapq.heappop(running)
        done.add(t.name)


class Slot:
    """One process at a time for one run: its training, then its evaluations."""

    def __init__(self, task: Task, commands: list[list[str]], log: Path, env: dict | None = None):
        self.task, self.commands, self.log, self.env = task, list(commands), log, env
        self.started, self.proc, self.trained = time.monotonic(), None, False
        # processes on the GPU, integrated over this run's training, and the seconds integrated
        self.shared_s = self.training_s = 0.0
        log.parent.mkdir(parents=True, exist_ok=True)
        task.attempts += 1
        if task.attempts == 1:
            self.log.write_text("")
        else:  # a retry's log follows the attempt that failed, which says why it was retried
            with self.log.open("a") as f:
                f.write(f"\n# attempt {task.attempts}\n")
        self._next()

    def _next(self):
        argv = self.current = self.commands.pop(0)
        with self.log.open("a") as f:
            f.write(f"$ {' '.join(argv)}\n")
            f.flush()
            self.proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, env=self.env)

    def count_sharing(self, seconds: float, processes: int) -> None:
        """Adds ``seconds`` of training beside ``processes - 1`` others (nothing once it trained)."""
        if not self.trained:
            self.shared_s += seconds * processes
            self.training_s += seconds

    @property
    def processes_mean(self) -> float | None:
        """The processes on the GPU while this run trained, on average (itself included)."""
        return round(self.shared_s / self.training_s, 2) if self.training_s > 0 else None

    def poll(self) -> str | None:
        """None while running; 'done' or 'failed' when the slot is over."""
        rc = self.proc.poll()
        if rc is None:
            return None
        if rc != 0:
            return "failed"
        if not self.trained:
            self.trained = True
            if recorded_status(self.task) != "completed":  # a diverged run has no final weights to evaluate
                self.commands = []
        if self.commands:
            self._next()
            return None
        return "done"

    def reached(self) -> str:
        """Where the stop found the slot, for its note: the step its training reported, or the
        evaluation it was in (a run stopped there lost a complete training to evaluations that its
        estimate did not allow for)."""
        if not self.trained:
            steps = progress(self.log)
            return f" at {steps}" if steps else ""
        i = self.current.index("-m") + 1 if "-m" in self.current else len(self.current) - 1
        words = [w for w in self.current[i:i + 2] if not w.startswith("-")]
        return f", its training complete, in its evaluation ({' '.join(words)})"

    def signal(self, sig) -> None:
        """``sig`` to the process group (compile workers that outlive their parent included)."""
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass


def stop(slots: list[Slot], why: str, results: str = "results", keep: bool = False) -> None:
    """Stop every slot's process at once: SIGTERM, and after GRACE_S (``keep``: RESUMABLE_STOP_S)
    SIGKILL to what is left of each process group (Lightning ends the step it is in, then exits);
    then remove its run folder, or with ``keep`` move it, checkpoints and all, to the kept folders
    (``kept_path``) for the next job to resume."""
    for slot in slots:
        slot.signal(signal.SIGTERM)
    deadline = time.monotonic() + (RESUMABLE_STOP_S if keep else GRACE_S)
    for slot in slots:
        try:
            slot.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        slot.signal(signal.SIGKILL)
        slot.proc.wait()
        slot.task.status, slot.task.note = "stopped", why.format(at=slot.reached())
        slot.task.wall = round(time.monotonic() - slot.started, 1)
        if keep and (slot.task.out / "checkpoints").is_dir() and not slot.task.replaces:
            kept = kept_path(slot.task, results)
            shutil.rmtree(kept, ignore_errors=True)
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(slot.task.out), kept)
            slot.task.note += f"; kept for the next job on this machine ({kept})"
        else:
            slot.task.note += ("; a retrained run is not kept: folder removed" if keep and slot.task.replaces
                               else "; no checkpoint yet: folder removed" if keep else f"; folder removed ({slot.log})")
            _remove(slot.task)
        if put_back(slot.task, results):
            slot.task.note += "; the committed folder put back"


def log_tail(log: Path, size: int = 16384) -> str:
    """The end of a run's log (where a traceback and the last progress line are)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def out_of_memory(log: Path) -> bool:
    """Whether the run's last attempt stopped for want of GPU memory."""
    last = log_tail(log).rpartition("# attempt ")[2]
    return any(marker in last for marker in OUT_OF_MEMORY)


def progress(log: Path) -> str:
    """The last step its training reported ('step 950/1000'), or ''."""
    steps = re.findall(r"^step (\d+/\d+) ", log_tail(log), flags=re.M)
    return f"step {steps[-1]}" if steps else ""


def recorded_status(task: Task) -> str | None:
    """The status its provenance.json records (completed, diverged), None before it is written."""
    prov = task.out / "provenance.json"
    return json.loads(prov.read_text()).get("status") if prov.is_file() else None


def incomplete(task: Task) -> list[str]:
    """The files a complete run folder holds that this one lacks: the run's, and its evaluations'
    unless the run diverged."""
    missing = lpc.missing_run_files(task.out)
    if task.kind == SOURCE and not (task.out / "checkpoints" / task.checkpoint.name).is_file():
        missing.append(f"checkpoints/{task.checkpoint.name}")
    if recorded_status(task) != "completed":
        return missing
    return missing + [f for fs, _ in task.evaluations for f in fs if not (task.out / f).is_file()]


ARCHIVE_SKIP = ("checkpoints", "logs", "wandb")  # what a run folder's archive leaves out


def archive(path: Path, members: dict[str, Path], skip=ARCHIVE_SKIP) -> None:
    """A .tar.gz of ``members`` (name in the archive -> file or folder), folders without ``skip``,
    placed whole (an archive cut short is never there)."""
    import tarfile

    def keep(info):
        return None if set(Path(info.name).parts) & set(skip) else info

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    with tarfile.open(tmp, "w:gz") as tar:
        for name, src in members.items():
            tar.add(src, arcname=name, filter=keep)
    os.replace(tmp, path)


def unpack(path: str | Path, results: str = "results", retrain=()) -> list[str]:
    """Place the run folders of a job's runs.tar.gz under ``results``; the run folders placed, as
    paths under it. Refuses (before placing any) a member that is not a file or folder under
    runs/<scale>/<paper>/<model>/<method>/s<seed>/ or a sweep's sweeps/<sweep>/<point>/<paper>/<model>/
    <method>/s<seed>/ (``RUN_ROOTS``), or a run folder that is already complete here with other files
    (a committed run), unless ``retrain`` patterns name the run (fnmatch on its name, as the job's
    ``--retrain``): its folder is then replaced; one complete here with the same files (an earlier
    job's archive) is skipped."""
    import tarfile

    with tarfile.open(path, "r:gz") as tar:
        members = tar.getmembers()
        runs = set()
        for m in members:
            parts = Path(m.name).parts
            depth = RUN_ROOTS.get(parts[0] if parts else "")
            in_run = depth is not None and len(parts) >= depth and re.fullmatch(r"s\d+", parts[depth - 1])
            if (Path(m.name).is_absolute() or ".." in parts or depth is None
                    or not ((m.isfile() and len(parts) > depth and in_run)
                            or (m.isdir() and (len(parts) < depth or in_run)))):
                raise PackerError(f"{path}: member {m.name!r} is not a file of a run folder under runs/ or sweeps/")
            if in_run:
                runs.add(Path(*parts[:depth]))
        here = {r for r in runs if not lpc.missing_run_files(Path(results) / r)}
        differ = [r for r in sorted(here) if not _same_files(tar, members, r, Path(results))]
        replaced = [r for r in differ if any(fnmatch.fnmatchcase(lpc.run_name(r), p) for p in retrain)]
        refused = [str(r) for r in differ if r not in replaced]
        if refused:
            raise PackerError(f"{path}: {len(refused)} run folder(s) are complete under {results} already, with "
                              f"other files, e.g. {refused[0]}; nothing placed (a job's --retrain runs replace "
                              "theirs with unpack --retrain PATTERN...)")
        for r in replaced:
            shutil.rmtree(Path(results) / r)
        here -= set(replaced)
        # a folder here with the archive's very files came in an earlier job's archive: left as it is
        members = [m for m in members if not any(Path(m.name).is_relative_to(r) for r in here)]
        # the members are checked above; where tarfile has its data filter it checks them too
        tar.extractall(results, members=members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return [r.as_posix() for r in sorted(runs - here)]


def _same_files(tar, members, run: Path, results: Path) -> bool:
    """Whether the archive's files of run folder ``run`` are, byte for byte, those of the folder
    here (the files an archive leaves out aside)."""
    theirs = {Path(m.name).relative_to(run): m for m in members if m.isfile() and Path(m.name).is_relative_to(run)}
    ours = {p.relative_to(results / run) for p in (results / run).rglob("*") if p.is_file()
            and not set(p.relative_to(results / run).parts) & set(ARCHIVE_SKIP)}
    return set(theirs) == ours and all(tar.extractfile(m).read() == (results / run / rel).read_bytes()
                                       for rel, m in theirs.items())


def prepare_data(tasks: list[Task], log_dir: Path) -> None:
    """Prepare each dataset the tasks read that is not here (a corpus encoded with another
    preparation's tokenizer after that one), as the workflow's data step does."""
    specs = {}
    for t in tasks:
        d = t.cfg["data"]["dir"]
        if not (Path(d) / "manifest.json").is_file():
            specs[d] = {k: v for k, v in t.cfg["data"].items() if k != "dir"}
    for d, spec in sorted(specs.items(), key=lambda kv: "tokenizer" in kv[1]):
        log = log_dir / f"data-{Path(d).name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as f:
            rc = subprocess.call([sys.executable, "-m", "lowprec.data", "--spec", json.dumps(spec, sort_keys=True),
                                  "--out", d], stdout=f, stderr=subprocess.STDOUT)
        if rc:
            tail = log.read_text().strip().splitlines()[-1:] or [""]
            raise PackerError(f"could not prepare {d} ({tail[0]}; log {log}). A machine without network needs the "
                              "data brought: python -m lowprec.databundle pack --scale <scale> --out data.tar.xz "
                              "where the data step ran, then unpack it here")


def _remove(task: Task) -> None:
    shutil.rmtree(task.out, ignore_errors=True)


def aside_path(task: Task, results: str) -> Path:
    """Where a retrained run's committed folder waits while the run trains (module doc)."""
    return Path(results).joinpath(*ASIDE, task.archived_as(results))


def set_aside(task: Task, results: str) -> None:
    """Move a retrained run's committed folder out of its way before it starts."""
    if task.replaces and task.out.exists():
        dest = aside_path(task, results)
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(task.out), dest)


def put_back(task: Task, results: str) -> bool:
    """A retrained run that did not complete: its folder removed, the committed one put back
    (True where there was one)."""
    dest = aside_path(task, results) if task.replaces else None
    if dest is None or not dest.is_dir():
        return False
    _remove(task)
    shutil.move(str(dest), task.out)
    return True


def restore_aside(results: str) -> list[str]:
    """Put back the committed folders a job killed outright left set aside (over whatever partial
    folder its run left in place); their paths under the results root."""
    root = Path(results).joinpath(*ASIDE)
    placed = []
    for prov in sorted(root.rglob("provenance.json")) if root.is_dir() else []:
        rel = prov.parent.relative_to(root)
        if rel.parts[0] in RUN_ROOTS and len(rel.parts) == RUN_ROOTS[rel.parts[0]]:
            shutil.rmtree(Path(results) / rel, ignore_errors=True)
            (Path(results) / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(prov.parent), Path(results) / rel)
            placed.append(rel.as_posix())
    return placed


def kept_path(task: Task, results: str) -> Path:
    """Where a --resumable job keeps the folder of a run it stopped (module doc)."""
    return Path(results).joinpath(*KEPT, task.archived_as(results))


def steps_done(task: Task, results: str) -> int:
    """The steps the unfinished folder of a run (in place, or kept by an earlier job) holds a
    checkpoint of, as its metrics.csv last logged them (an estimate's measure: a step killed after
    its row has no checkpoint); 0 without a checkpoint."""
    import csv

    for folder in (task.out, kept_path(task, results)):
        if (folder / "checkpoints" / "last.ckpt").is_file():
            try:
                with (folder / "metrics.csv").open(newline="") as f:
                    return max((int(float(r["step"])) for r in csv.DictReader(f) if r.get("step")), default=0)
            except (OSError, ValueError, KeyError):
                return 0
    return 0


def restore_kept(tasks: list[Task], results: str) -> None:
    """Move the kept folders of these runs back in place, where no folder of theirs is: the
    training resumes from their checkpoints (the plan's estimate already says where)."""
    for t in tasks:
        kept = kept_path(t, results)
        if kept.is_dir() and not t.out.exists():
            t.out.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(kept), t.out)


def done_path(name: str, results: str) -> Path:
    """Where a job keeps its copy of a run it completed (``DONE``; ``name`` as archived)."""
    return Path(results).joinpath(*DONE, name)


def keep_done(task: Task, results: str) -> None:
    """Copy a completed run's folder, without what an archive leaves out, for a later job on this
    machine (module doc)."""
    dest = done_path(task.archived_as(results), results)
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(task.out, dest, ignore=shutil.ignore_patterns(*ARCHIVE_SKIP))


def restore_done(results: str, configs) -> dict[str, Path]:
    """Put back the runs an earlier job on this machine completed (``keep_done``) whose folders are
    missing here and whose config is the one resolved now (``configs``: the grid's or sweep's
    resolved run configs); returns {archived name: folder} of those placed. A copy that is not
    needed (the run complete in place, or no longer in the grid) or no longer current is removed."""
    root = Path(results).joinpath(*DONE)
    grid = {Path(os.path.relpath(c["output_dir"], results)).as_posix(): c for c in configs}
    placed = {}
    for prov in sorted(root.rglob("provenance.json")) if root.is_dir() else []:
        copy = prov.parent
        name = copy.relative_to(root).as_posix()
        cfg = grid.get(name)
        if cfg is not None and lpc.run_status(cfg)[0] == "missing" and not lpc.missing_run_files(copy):
            out = Path(cfg["output_dir"])
            shutil.rmtree(out, ignore_errors=True)  # an incomplete folder: never a result
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(copy, out)
            if lpc.run_status(cfg)[0] == "current":
                placed[name] = out
                continue
            shutil.rmtree(out)
        shutil.rmtree(copy)
    return placed


def run_job(tasks: list[Task], budget: Budget, scale: str, results: str = "results",
            out: Path | None = None, poll_s: float = 0.5, info: dict | None = None,
            earlier: dict[str, Path] | None = None) -> list[Task]:
    """Train ``tasks`` (in order, estimates set) within the budget (module doc); each task's status
    ends as done, failed, stopped (at the budget), or not started (with why, ``note``). The summary
    (``info`` added) goes to packer_summary.json in the log folder and, with the archives, ``out``.
    ``earlier``: {archived name: folder} of runs an earlier job on this machine completed
    (``restore_done``), archived with this job's."""
    t0 = time.monotonic()
    limit, stop_at = t0 + budget.seconds - budget.reserve, t0 + budget.stop_at
    log_dir = Path(results) / "logs" / "packer" / scale
    restore_kept(tasks, results)
    prepare_data(tasks, log_dir)
    # the CPU cores shared among the processes (a run's torch threads), unless the caller says
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")
           or str(max(1, (os.cpu_count() or 1) // budget.jobs))}
    records = job_int8_records(out)
    if records:
        env[records[0]] = str(records[1])
    pending, done, slots = list(tasks), set(), []
    # GPU memory is not measured before a run starts: a run that runs out of it beside others goes
    # back to the front of the queue, and from then on at most one process fewer shares the GPU
    share = budget
    try:
        last = time.monotonic()
        while True:
            sharing = len(slots)  # the runs on the GPU until this poll, one that ended in it included
            now = time.monotonic()
            for slot in slots:
                slot.count_sharing(now - last, sharing)
            last = now
            for slot in list(slots):
                state = slot.poll()
                if state is None:
                    continue
                slots.remove(slot)
                task = slot.task
                task.wall = round(time.monotonic() - slot.started, 1)
                missing = incomplete(task)
                if state == "done" and not missing:
                    if task.kind == SOURCE:
                        place_checkpoint(task)
                        task.note = f"trained again for its final checkpoint, now at {task.checkpoint}; not archived"
                    else:
                        record_sharing(task, slot.processes_mean)
                        keep_done(task, results)
                        shutil.rmtree(aside_path(task, results), ignore_errors=True)  # retrained: replaced
                    task.status = "done"
                    done.add(task.name)
                    continue
                _remove(task)
                back = put_back(task, results)
                # at most one retry per process that could share the GPU: the limit cannot drop below
                # one, so a run that keeps failing must not retry forever
                if state == "failed" and sharing > 1 and task.attempts < budget.jobs and out_of_memory(slot.log):
                    share = replace(share, jobs=min(share.jobs, sharing - 1))
                    task.status = "pending"
                    task.note = f"out of GPU memory with {sharing} runs sharing it: retried, at most {share.jobs} at a time"
                    pending.insert(0, task)
                    continue
                task.status = "failed"
                task.note = (f"see {slot.log}" + (f" (no {', '.join(missing)})" if missing else "")
                             + (f", attempt {task.attempts}" if task.attempts > 1 else "")
                             + ("; the committed folder put back" if back else ""))
            now = time.monotonic()
            while task := pick(pending, done, stop_at - now, share, [x.task for x in slots]):
                pending.remove(task)
                path = task.config_path(results)
                write_yaml(path, task.cfg, if_changed=True)
                set_aside(task, results)
                task.status = "running"
                slots.append(Slot(task, phase_commands(task, path), log_dir / f"{task.name}.log", env))
            if not slots:
                break
            if now >= stop_at:
                stop(slots, "at the budget{at}", results, keep=budget.resumable)
                slots = []
                break
            time.sleep(poll_s)
    finally:  # also when stopped from outside: no process and no partial folder left, the summary written
        stop(slots, "the job was interrupted{at}", results, keep=budget.resumable)
        left = limit - time.monotonic()
        for t in pending:
            t.status = "not started"
            t.note = (f"{t.note}; " if t.note else "") + (f"waits for {t.source}" if t.source and t.source not in done
                      else f"needs {need(t, pending, budget):.0f} s, {max(0.0, left):.0f} s were left"
                      if t.estimate is not None else t.estimated_from)
        record = {"scale": scale, "jobs": budget.jobs, "budget_s": budget.seconds, "gpu_memory_gib": budget.gpu_memory_gib,
                  "wall_s": round(time.monotonic() - t0, 1), **(info or {}),
                  "max_jobs": share.jobs, "int8_records": str(records[1]) if records else None,
                  "done_earlier": sorted(earlier or {}),
                  "runs": [{"run": t.name, "status": t.status, "estimate_s": t.estimate, "wall_s": t.wall,
                            "attempts": t.attempts, "claims": t.claims, "note": t.note, "replaces": t.replaces}
                           for t in tasks]}
        for root in filter(None, (log_dir, out)):
            write_json(Path(root) / "packer_summary.json", record)
        if records and records[1].is_file():
            print(f"INT8 GEMM tuning records of this job: {records[1]} (commit it as "
                  "results/bench/int8_gemm_tuned.json where the job's runs added to it)", flush=True)
        if out:
            archive(Path(out) / "runs.tar.gz", {**(earlier or {}), **{t.archived_as(results): t.out for t in tasks
                                                                     if t.status == "done" and t.kind != SOURCE}})
            archive(Path(out) / "logs.tar.gz", {f"{t.name}.log": log_dir / f"{t.name}.log" for t in tasks
                                                if (log_dir / f"{t.name}.log").is_file()})
    return tasks


def record_sharing(task: Task, processes: float | None) -> None:
    """Writes ``SHARING_KEY`` into the completed run's provenance.json: the processes that shared the
    GPU while it trained, which the estimates read for its k, where the committed runs' start and
    finish times miss the processes that failed, were stopped or trained a source again."""
    path = task.out / "provenance.json"
    if processes is None or not path.is_file():
        return
    record = json.loads(path.read_text())
    record[SHARING_KEY] = processes
    write_json(path, record)


def job_int8_records(out: Path | None) -> tuple[str, Path] | None:
    """(variable, file) naming where a job's runs read and add the INT8 GEMM configurations they
    tune (``lowprec.kernels.int8_fallback_tuning``): with ``out`` and no file named by the caller, a
    copy of the checkout's committed records in ``out``, which comes back with the job and tells
    the next job what this one tuned; None where the caller named a file (kept) or there is no
    ``out`` (the runs read the committed file and add to none)."""
    from lowprec.kernels import INT8_COMMITTED_RECORDS, INT8_TUNED_ENV

    if out is not None and os.environ.get(INT8_TUNED_ENV):
        print(f"{INT8_TUNED_ENV}={os.environ[INT8_TUNED_ENV]}: the runs read and add their INT8 GEMM tuning there, "
              f"not in {out}, where a copy of the committed records would come back with the job", flush=True)
    if out is None or os.environ.get(INT8_TUNED_ENV):
        return None
    path = Path(out) / INT8_COMMITTED_RECORDS.name
    if not path.exists() and INT8_COMMITTED_RECORDS.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(INT8_COMMITTED_RECORDS, path)
    return INT8_TUNED_ENV, path


# --------------------------------------------------------------------------- summary and CLI

def jobs_needed(tasks: list[Task], budget: Budget) -> tuple[int, list[Task]]:
    """How many jobs of this budget the tasks take by the estimates, and those no job can hold."""
    left, n = [t for t in tasks if t.estimate is not None], 0
    while left:
        job = simulate(left, budget)
        if not job:
            break
        n += 1
        started = {t.name for t, _, _ in job}
        # a run stopped at the end of the job goes on in the next, with its start-up again
        rest = [replace(t, estimate=budget.startup + t.estimate - (e - s)) for t, s, e in job if continues(t, s, e, budget)]
        left = [t for t in left if t.name not in started] + rest
    return n, left


def continues(task: Task, start: float, end: float, budget: Budget) -> bool:
    """Whether a run that a job starts at ``start`` and stops at ``end`` goes on in a later job."""
    return budget.resumable and start + budget.own(task) > end


def plan_lines(tasks: list[Task], budget: Budget, est: Estimator, stale, blocked) -> list[str]:
    from .cli import format_table

    job = simulate(tasks, budget)
    first = {t.name: (s, e) for t, s, e in job}
    rows = [[i + 1, t.name + (" (again, for its checkpoint)" if t.kind == SOURCE
                              else " (again, replacing its folder)" if t.replaces else ""),
             f"{t.estimate:.0f}" if t.estimate is not None else "–",
             f"{t.memory_gib:.1f}" if t.memory_gib else "–", len(t.claims),
             f"{first[t.name][0]:.0f}-{first[t.name][1]:.0f}"
             + (" (goes on)" if continues(t, *first[t.name], budget) else "") if t.name in first else "–",
             t.estimated_from]
            for i, t in enumerate(tasks)]
    n, never = jobs_needed(tasks, budget)
    lines = [f"{len(tasks)} run(s) to train; estimates with {budget.jobs} sharing the GPU (time ~ k^"
             f"{est.exponent:.2f}, fitted on the committed runs)", *format_table(
                 ["#", "run", "est s", "GiB", "claims", "job 1 (s)", "estimated from"], rows), "",
             f"one job of {budget.seconds:.0f} s ({budget.jobs} processes"
             + (f" within {budget.gpu_memory_gib:g} GiB of GPU memory" if budget.gpu_memory_gib else "")
             + f") starts {len(first)} of them "
             f"({sum(e - s for _, s, e in job):.0f} run-seconds); the others take {max(0, n - 1)} more"
             + (f", besides {len(never)} that no such job holds" if never else "")]
    at: dict[int, list[Task]] = {}

    def tasks_at(j: int) -> list[Task]:  # the tasks as estimated with j processes at once (k^a), once per j
        if j not in at:
            at[j] = [replace(t, estimate=resumed_estimate(t, est, j, budget.startup)[0]) for t in tasks]
        return at[j]

    # what the first job gets done at each concurrency: its runs, and their estimates alone
    alone = {t.name: t.estimate or 0.0 for t in tasks_at(1)}
    by_jobs = []
    for j in sorted({1, 2, 3, 4, budget.jobs}):
        started = simulate(tasks_at(j), replace(budget, jobs=j))
        by_jobs.append(f"--jobs {j}: {len(started)} ({sum(alone[t.name] for t, _, _ in started):.0f} s alone)")
    lines.append("the first job's runs (their estimates alone) by --jobs: " + ", ".join(by_jobs))
    limit, unheld = budget.stop_at, {t.name for t in never}

    def need_at(t: Task, j: int) -> float:
        at_j = tasks_at(j)
        return need(next(x for x in at_j if x.name == t.name), at_j, budget)

    for t in never:
        if t.source in unheld:
            lines.append(f"no job of this budget holds: {t.name} (waits for {t.source})")
            continue
        jobs = next((j for j in range(budget.jobs - 1, 0, -1) if need_at(t, j) <= limit), None)
        lines.append(f"no job of this budget holds: {t.name} ({need(t, tasks, budget):.0f} s"
                     + (" with its fine-tuning runs" if any(f.source == t.name for f in tasks) else "") + ")"
                     + (f"; with --jobs {jobs}: {need_at(t, jobs):.0f} s" if jobs else ""))
    lines += [f"no estimate: {t.name}" for t in tasks if t.estimate is None]
    lines += [f"stale, not retrained unless --retrain names it: {s}" for s in stale]
    lines += [f"cannot train here: {b}" for b in blocked]
    return lines


def summary_lines(tasks: list[Task], wall: float) -> list[str]:
    from .cli import format_table

    rows = [[t.name, t.status, f"{t.estimate:.0f}" if t.estimate is not None else "–",
             f"{t.wall:.0f}" if t.wall is not None else "–", t.note] for t in tasks]
    counts = {s: sum(t.status == s for t in tasks) for s in ("done", "failed", "stopped", "not started")}
    return [*format_table(["run", "status", "est s", "wall s", "note"], rows), "",
            f"{wall:.0f} s: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)]


def _estimates(values) -> dict[str, float]:
    out = {}
    for v in values or []:
        pattern, sep, seconds = v.rpartition("=")
        try:
            out[pattern] = float(seconds)
        except ValueError:
            sep = ""
        if not sep or not pattern:
            raise PackerError(f"--estimate {v!r}: give PATTERN=SECONDS (a run-name pattern, e.g. 'mor/*/mor_sub_*/*=420')")
    return out


def _run_configs(args) -> list[dict]:
    """The resolved configs of every run the command's grid (or size sweep) holds."""
    if args.sweep:
        return list(sweeps.sweep_runs(sweeps.load_sweep(args.sweep), args.results).values())
    runs, finetune = lpc.grid_runs(args.papers or lpc.papers(), args.scale, results=args.results)
    return [*runs.values(), *finetune.values()]


def _prepare(args) -> tuple[list[Task], Budget, Estimator, list, list]:
    if args.jobs < 1 or args.budget <= args.reserve:
        raise PackerError(f"--jobs {args.jobs} must be at least 1 and --budget {args.budget} above --reserve {args.reserve}")
    if args.sweep and args.claims:
        raise PackerError("--claims selects a scale's grid runs; a size sweep's runs serve no claim")
    if args.sweep and args.retrain:
        raise PackerError("--retrain names a scale's grid runs; a size sweep's train only where missing")
    if args.sweep:
        (tasks, stale), blocked = sweep_tasks(args.sweep, args.results, args.only), []
        args.scale = sweeps.load_sweep(args.sweep)["scale"]
    else:
        papers = args.papers or lpc.papers()
        for p in papers:
            lpc.experiment_config(p)
        tasks, stale, blocked = missing_tasks(args.scale, papers, args.results, args.only, args.retrain or ())
    est = Estimator(args.results, args.scale, _estimates(args.estimate), args.startup,
                    sweep_runs=sweeps.load_sweep(args.sweep)["runs"] if args.sweep else None,
                    shape_runs=None if args.sweep else [s["runs"] for _, s in sweeps.scale_sweeps(args.scale)])
    for t in tasks:
        done = 0 if t.replaces else steps_done(t, args.results)  # a retrained run starts over
        t.left = max(0.0, 1.0 - done / t.cfg["train"]["max_steps"]) if done else 1.0
        t.estimate, t.estimated_from = resumed_estimate(t, est, args.jobs, args.startup)
        t.memory_gib = est.memory_gib(t)
        if done and t.estimate is not None:
            t.estimated_from += f"; resumes at step {done}"
    budget = Budget(args.jobs, args.budget, args.reserve, args.eval_s, args.resumable, args.startup,
                    gpu_memory(args.gpu_memory_gib) if args.command == "run" else args.gpu_memory_gib)
    if args.sweep:  # a sweep's runs serve no claim
        return tasks, budget, est, stale, blocked
    tasks = order(tasks, args.scale, args.results)
    return (serving(tasks, args.claims) if args.claims else tasks), budget, est, stale, blocked


def resumed_estimate(t: Task, est: Estimator, jobs: int, startup: float) -> tuple[float | None, str]:
    """``est(t, jobs)`` for the steps the run has left (``t.left``: an unfinished run resumes, paying
    a start-up again)."""
    seconds, why = est(t, jobs)
    if seconds is None or t.left >= 1.0:
        return seconds, why
    return startup + max(0.0, seconds - startup) * t.left, why


def gpu_memory(given: float | None) -> float | None:
    """GiB of the GPU a job's runs share: ``--gpu-memory-gib``, else what the CUDA device has free
    when the job starts. Free, not total: memory that other processes hold is not the runs' (a job
    beside a test run on an H100 at 236be2e: three runs out of memory with five, three and two
    sharing the GPU)."""
    if given is not None:
        return given
    import torch

    return torch.cuda.mem_get_info(0)[0] / 2**30 if torch.cuda.is_available() else None


def serving(tasks: list[Task], patterns: list[str]) -> list[Task]:
    """The tasks (in their order) that a claim matching ``patterns`` reads (fnmatch on
    ``<paper>/<claim>``, as ``order`` sets ``claims``), with the runs they start from."""
    keep = {t.name for t in tasks if any(fnmatch.fnmatchcase(c, p) for c in t.claims for p in patterns)}
    if not keep:
        known = sorted({c for t in tasks for c in t.claims})
        raise PackerError(f"--claims {' '.join(patterns)}: no run to train reads such a claim; "
                          f"the runs to train read {', '.join(known) or 'none'}")
    keep |= {t.source for t in tasks if t.name in keep and t.source}
    return [t for t in tasks if t.name in keep]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m lowprec.packer", description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["data", "plan", "run", "unpack"])
    ap.add_argument("archive", nargs="?", help="unpack: a job's runs.tar.gz")
    ap.add_argument("--scale", default="small")
    ap.add_argument("--papers", nargs="*", help="default: every experiment")
    ap.add_argument("--sweep", help="configs/sweeps/<name>.yaml: the runs of this size sweep instead of a scale's "
                                    "grid (its scale; no evaluations; estimated from the sweep's completed runs "
                                    "or by --estimate)")
    ap.add_argument("--results", default="results")
    ap.add_argument("--jobs", type=int, default=8, help="runs sharing the GPU at a time")
    ap.add_argument("--budget", type=float, default=560.0, help="seconds the whole job may take")
    ap.add_argument("--reserve", type=float, default=15.0, help="seconds kept for stopping, cleaning up, archiving")
    ap.add_argument("--startup", type=float, default=30.0,
                    help="seconds a process adds to its run's estimate (imports, compiling the model)")
    ap.add_argument("--eval-s", type=float, default=30.0, help="seconds allowed for each checkpoint evaluation")
    ap.add_argument("--gpu-memory-gib", type=float, default=None,
                    help="the GPU memory the runs share (run: what the device has free at the start by default; "
                         "plan: none, only --jobs limits): a run starts only while its arm's measured peak fits "
                         "beside the others' (footprint)")
    ap.add_argument("--only", nargs="*", help="only runs whose names match these patterns (fnmatch)")
    ap.add_argument("--estimate", nargs="*", help="PATTERN=SECONDS: a run's estimate, instead of the committed runs'")
    ap.add_argument("--claims", nargs="*", help="only the runs that claims matching these patterns read "
                                                "(fnmatch on <paper>/<claim>, e.g. 'mor/loss_per_*'), with their sources")
    ap.add_argument("--out", help="run: where runs.tar.gz, logs.tar.gz and packer_summary.json go")
    ap.add_argument("--retrain", nargs="*", help="committed runs to train again (fnmatch on run names), with the "
                                                 "fine-tuning runs that start from them; unpack: the archive's "
                                                 "folders of these runs replace the committed ones (module doc)")
    ap.add_argument("--resumable", action="store_true",
                    help="runs longer than the job start anyway; at the budget they save their step and are "
                         "kept for the next job on this machine to resume (module doc)")
    args = ap.parse_args(argv)
    # a job stopped from outside (a timeout's SIGTERM) unwinds through run_job's cleanup
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("lowprec.packer: stopped (SIGTERM)"))
    try:
        if args.command == "unpack":
            if not args.archive:
                raise PackerError("unpack needs the archive: python -m lowprec.packer unpack OUT/runs.tar.gz")
            placed = unpack(args.archive, args.results, args.retrain or ())
            print(f"placed {len(placed)} run folder(s) under {args.results}/" + "".join(f"\n  {n}" for n in placed))
            return
        # before the plan: runs an earlier job on this machine completed are not trained again
        if args.command == "run":
            for rel in restore_aside(args.results):
                print(f"put back {rel}: a killed job had set it aside", flush=True)
        earlier = restore_done(args.results, _run_configs(args)) if args.command == "run" else {}
        tasks, budget, est, stale, blocked = _prepare(args)
        if args.command == "data":
            prepare_data(tasks, Path(args.results) / "logs" / "packer" / args.scale)
            print("\n".join(sorted({t.cfg["data"]["dir"] for t in tasks})))
            return
        if args.command == "plan":
            print("\n".join(plan_lines(tasks, budget, est, stale, blocked)))
            return
        t0 = time.monotonic()
        print(f"{len(tasks)} run(s) not committed; {args.jobs} at a time within {args.budget:.0f} s"
              + (f"; {len(earlier)} completed by an earlier job here, archived again" if earlier else ""), flush=True)
        run_job(tasks, budget, args.scale, args.results, Path(args.out) if args.out else None,
                info={"exponent": est.exponent, "stale": stale, "blocked": blocked}, earlier=earlier)
        print("\n".join(summary_lines(tasks, time.monotonic() - t0)))
    except (PackerError, sweeps.SweepError, lpc.ConfigError) as e:
        sys.exit(f"lowprec.packer: error: {e}")


if __name__ == "__main__":
    main()
