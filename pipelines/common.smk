# Shared state: the validated config and the list of runs. All logic lives in lowprec.config.
import json
import logging
import os
import re
import shlex
import sys
import time
from pathlib import Path

from lowprec import config as lpc
from lowprec.preflight import check_memory
from lowprec import io as lpio
from snakemake.logging import logger


class _OnceMissingMetadata(logging.Filter):
    """Snakemake warns about every output it holds no metadata for (job times, code): every committed
    table and figure of a fresh clone. One line says so instead of one per file."""

    said = False

    def filter(self, record):
        if not str(record.msg).startswith("Missing metadata for file"):
            return True
        if self.said:
            return False
        self.said = True
        record.msg = ("Outputs made outside this checkout's .snakemake/ (the committed tables and figures) carry "
                      "no Snakemake metadata: the report lists them without job times and code "
                      "(said once, not per file)")
        record.args = ()
        return True


if not any(isinstance(f, _OnceMissingMetadata) for f in logger.filters):
    logger.addFilter(_OnceMissingMetadata())


WF = lpc.workflow_config(config)  # raises a ConfigError that names the bad key
SCALE = WF["scale"]
RESULTS = WF["results"]
PAPERS = WF["papers"]
OVERRIDES = {"logging": {"wandb": True}} if WF.get("wandb") else {}
# threads, strategy, devices, num_nodes: --config overrides of every run's train settings
_TRAIN_OVERRIDES = {k: WF[k] for k in ("threads", "strategy", "devices", "num_nodes") if WF.get(k)}
if _TRAIN_OVERRIDES:
    OVERRIDES = lpc.deep_merge(OVERRIDES, {"train": _TRAIN_OVERRIDES})

# REUSE_RUNS (`--config reuse_runs=true`, which target `regenerate` requires): the run folders under
# results/runs/<scale>/ are committed inputs, not outputs. The train rule is not defined, so no job
# can retrain a run whatever the file mtimes are after a git clone. A run of the grid that is not
# committed (GPU time ran out) is left out with a warning that names it, and REPORT.md lists it
# (MISSING_RUNS); a paper with no committed run at all is left out of PAPERS (all of them at a scale
# whose runs are not committed yet: REPORT then lists the grid). Which runs and per-run
# files are committed is decided in lowprec.config (committed_runs, per_run_files) only.
# A paper's .smk must ask `if not REUSE_RUNS:` before defining any rule whose output lies in a run
# folder (an evaluation of a run's checkpoint), and constrain its run wildcard to the runs whose
# files it must make (run_files, evaluated_runs): checkpoints are not committed, so such a file
# (e.g. gaussws's export.csv) is, where committed, itself an input of the rules that read it, and
# under REUSE_RUNS an output built from such files joins PAPER_EXTRA_OUTPUTS (ReportOutputs' listed)
# only when some of them are committed.
# `snakemake --report` collects what is here: the committed run folders and the tables and figures
# built from them, at any scale, as under reuse_runs (the command line is the only sign of it while
# the workflow is read). With --report-after-run the workflow runs first, as it would without.
REPORTING = (any(a == "--report" or a.startswith("--report=") for a in sys.argv[1:])
             and "--report-after-run" not in sys.argv)
REUSE_RUNS = bool(WF.get("reuse_runs")) or REPORTING
CLAIMS_STATISTIC = WF.get("claims_statistic", "paired")
# the report of this scale: results/REPORT.md at the default scale, REPORT_<scale>.md otherwise
REPORT = lpc.report_path(RESULTS, SCALE)


# (paper, model, method, seed) -> resolved config: the runs of the grids, and the fine-tuning runs
# (a ``finetune`` section: runs that start from the final weights of a pre-training run)
RUNS, FT_RUNS = lpc.grid_runs(PAPERS, SCALE, results=RESULTS, overrides=OVERRIDES)
if not REUSE_RUNS:  # a batch that cannot fit its device stops the workflow here, not by an OOM kill later
    check_memory([*RUNS.values(), *FT_RUNS.values()], WF.get("gpu_memory_gib"))
# paper -> run folders of its grid (and fine-tuning grid) that are left out: not committed under
# REUSE_RUNS; otherwise fine-tuning runs whose starting weights are not here
MISSING_RUNS = {p: [] for p in PAPERS}
if REUSE_RUNS:
    if WF.get("retrain") and not REPORTING:
        raise lpc.ConfigError("config keys 'retrain' and 'reuse_runs' exclude each other: reuse_runs never trains")
    RUNS, _missing, _stale = lpc.committed_runs(RUNS)
    FT_RUNS, _ft_missing, _ft_stale = lpc.committed_runs(FT_RUNS)
    _stale = [*_stale.values(), *_ft_stale.values()]  # (config, changes); a fine-tuning key repeats its source's
    for _cfg in [*_missing.values(), *_ft_missing.values(), *(c for c, _ in _stale)]:
        MISSING_RUNS[_cfg["paper"]].append(_cfg["output_dir"])
    if _stale:
        logger.warning(lpc.stale_message(_stale))
    if not RUNS:  # a scale whose grid grows job by job: the report says what is missing
        logger.warning(f"reuse_runs: no run folder of {', '.join(PAPERS)} at scale {SCALE} is committed "
                       f"under {RESULTS}/runs/{SCALE}/ (each needs {', '.join(lpc.RUN_FILES)}); {REPORT} "
                       "lists the grid's runs and nothing else")
    if _missing:
        logger.warning(lpc.uncommitted_message([c["output_dir"] for c in _missing.values()],
                                               "run folder(s) of this grid are not committed",
                                               "tables, figures and verdicts are built without them"))
    if _ft_missing:
        logger.warning(lpc.uncommitted_message([c["output_dir"] for c in _ft_missing.values()],
                                               "fine-tuning run folder(s) are not committed",
                                               "the fine-tuning tables are built without them"))
    _empty = [p for p in PAPERS if not any(k[0] == p for k in RUNS)]
    if _empty:
        logger.warning(f"reuse_runs: no committed run of {', '.join(_empty)} at scale {SCALE}; "
                      "left out of this regeneration (REPORT lists its runs)")
    # papers with committed runs; MISSING_RUNS keeps every selected paper for the report
    PAPERS = [p for p in PAPERS if p not in _empty]
DATA = {Path(c["data"]["dir"]).name: {k: v for k, v in c["data"].items() if k != "dir"}
        for c in [*RUNS.values(), *FT_RUNS.values()]}


# What trains (lowprec.config.training_plan, decided here once): a run whose folder is missing or
# incomplete, whose config.yaml differs from its resolved config in a key that changes the numbers,
# that `--config retrain=<pattern>` names, or that starts from the weights of a run that trains.
# A complete and current run is no job's output: rule train does not match its folder (its
# wildcard is constrained to the runs below), so no file time, data preparation or rule change
# can plan it, and no rule that reads a checkpoint can rewrite its files (per_run_files).
# TRAIN: run name (<paper>/<model>/<method>/s<seed>, lpc.run_name) -> config; RUN_CONFIGS: every run.
# A cluster job runs in a Snakemake process of its own, which reads the workflow again: there the
# main process's plan holds (a run that trained since then must still match its fine-tuning and
# evaluation jobs), so rules match every run of the grid, and nothing is written while it starts.
MAIN_PROCESS = getattr(workflow, "is_main_process", True)
RUN_CONFIGS = {lpc.run_name(c["output_dir"]): c for c in [*RUNS.values(), *FT_RUNS.values()]}
TRAIN = {}
if not REUSE_RUNS:
    _RETRAIN = lpc.retrain_patterns(WF.get("retrain"), RUN_CONFIGS)
    _PLAN = lpc.training_plan(RUNS, _RETRAIN)
    _TRAINED = [RUNS[k]["output_dir"] for k in _PLAN]
    _FT_PLAN = lpc.training_plan(FT_RUNS, _RETRAIN, training=_TRAINED)
    for _key in list(_FT_PLAN):
        _source = FT_RUNS[_key]["train"]["init_from"]
        _source_run = str(Path(_source).parents[1])
        if _source_run not in _TRAINED and not Path(_source).is_file():
            # its source run is committed without the checkpoint (checkpoints are not committed)
            logger.warning(f"fine-tuning run {FT_RUNS[_key]['output_dir']} must train ({_FT_PLAN.pop(_key)}) but "
                           f"starts from {_source}, which is not here; left out. Train its source run again: "
                           f"--config retrain={lpc.run_name(_source_run)}")
            MISSING_RUNS[_key[0]].append(FT_RUNS.pop(_key)["output_dir"])
    _TRAINING = [(c, plan[k]) for runs, plan in ((RUNS, _PLAN), (FT_RUNS, _FT_PLAN))
                 for k, c in runs.items() if k in plan]
    TRAIN = {lpc.run_name(c["output_dir"]): c for c, _ in _TRAINING}
    if TRAIN and MAIN_PROCESS:
        _lines = [f"{lpc.run_name(c['output_dir'])} ({why})" for c, why in _TRAINING]
        logger.info(f"{len(_lines)} run(s) will train:\n  " + "\n  ".join(_lines[:30])
                    + (f"\n  ... and {len(_lines) - 30} more" if len(_lines) > 30 else ""))
TRAIN_DIRS = {c["output_dir"] for c in TRAIN.values()}


def run_config_path(name):
    """The config file rule train reads for run ``name`` (lpc.run_name)."""
    return f"{RESULTS}/configs/{SCALE}/{name}.yaml"


def _write_run_configs():
    """Write each training run's config now, where it changed, so that no job can read an outdated
    one. A run whose folder holds all its files trains only because its config changed or it was
    asked to: its config file is then made newer than those files, which is what makes Snakemake
    run it (a missing output does that for the others)."""
    for name, cfg in TRAIN.items():
        path = run_config_path(name)
        lpio.write_yaml(path, cfg, if_changed=True)
        outputs = [Path(cfg["output_dir"]) / f for f in lpc.RUN_FILES]
        if all(f.is_file() for f in outputs):
            newest = max(f.stat().st_mtime_ns for f in outputs)
            t = max(time.time_ns(), newest + 1_000_000_000)
            os.utime(path, ns=(t, t))


if MAIN_PROCESS:
    _write_run_configs()


def one_of(names):
    """A wildcard constraint that matches exactly ``names`` (nothing when empty)."""
    names = sorted(set(names))
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


# Paper-specific tables and figures, added by pipelines/<paper>.smk (through ReportOutputs); the
# paper target, the claims and the report depend on them.
PAPER_EXTRA_OUTPUTS = {p: [] for p in PAPERS}
# and those that this workflow does not build (listed=False: the runs they read are not here, not
# committed under reuse_runs or left out); report.smk's onstart removes a copy an earlier build left,
# which the claims and the report would otherwise read as if it came from the runs of this one
UNBUILT_OUTPUTS = []


class ReportOutputs:
    """The files one report command writes, named once: ``files`` maps the command's option (its
    --flag) to the path, or to (path, caption) for a file that goes into ``snakemake --report``
    (caption: the stem of its pipelines/report/*.rst, under the paper's category and
    ``subcategory``). ``rule`` is the rule's named output (``output: **x.rule``; each name is the
    flag with "-" as "_", after ``prefix``, every file update()), ``flags`` the command's
    "--flag {output.name}" arguments. The paths join the paper's target (PAPER_EXTRA_OUTPUTS)
    unless ``listed`` is false (under reuse_runs an output whose inputs are not committed: then
    UNBUILT_OUTPUTS)."""

    def __init__(self, paper, subcategory, files, listed=True, prefix=""):
        self.rule, flags = {}, []
        for flag, spec in files.items():
            path, caption = spec if isinstance(spec, tuple) else (spec, None)
            name = prefix + flag.replace("-", "_")
            out = update(path)
            if caption:
                out = report(out, category=paper, subcategory=subcategory, caption=f"report/{caption}.rst")
            self.rule[name] = out
            flags.append(f"--{flag} {{output.{name}}}")
            (PAPER_EXTRA_OUTPUTS[paper] if listed else UNBUILT_OUTPUTS).append(path)
        self.flags = " ".join(flags)


def run_dirs(paper):
    return [c["output_dir"] for k, c in RUNS.items() if k[0] == paper]


# the per-run evaluation files that a rule makes, by the files' names -> the runs (lpc.run_name)
EVALUATED = {}


def run_files(dirs, names, output):
    """The run folders of ``dirs`` from which ``output`` (its description) reads the per-run files
    ``names`` that one rule computes from a run's final checkpoint (lpc.per_run_files): committed
    ones as they are, and those a rule makes (for runs that train, or whose checkpoint is here; never
    under REUSE_RUNS); the rule that makes them matches exactly those runs (evaluated_runs). The
    others are left out with a warning that names them."""
    names = (names,) if isinstance(names, str) else tuple(names)
    read, made, absent = lpc.per_run_files(dirs, names, TRAIN_DIRS, evaluate=not REUSE_RUNS)
    EVALUATED.setdefault(names, set()).update(lpc.run_name(d) for d in (made if MAIN_PROCESS else dirs))
    if absent and MAIN_PROCESS:
        what = (f"run folder(s) without a committed {' and '.join(names)}" if REUSE_RUNS else
                f"run folder(s) without {' and '.join(names)} and without the final checkpoint they are "
                f"computed from (checkpoints are not committed; --config retrain=<run> trains a run again)")
        logger.warning(lpc.uncommitted_message(absent, what, f"{output} built without them" if read
                                               else f"no {output} at this scale",
                                               context="reuse_runs" if REUSE_RUNS else "evaluation"))
    return read


def evaluated_runs(*names):
    """The wildcard constraint of the rule that makes the per-run files ``names`` (run_files)."""
    return one_of(EVALUATED.get(tuple(names), ()))


def run_gpus(cfg):
    """GPUs a training job holds: train.devices per node x train.num_nodes (0 on CPU)."""
    t = cfg["train"]
    if t.get("accelerator", "auto") == "cpu" or SCALE in ("smoke", "tiny"):
        return 0
    return gpus_per_node(cfg) * int(t.get("num_nodes", 1))


def gpus_per_node(cfg):
    devices = cfg["train"].get("devices", 1)
    if devices == "auto":
        raise lpc.ConfigError(f"run {cfg['run_id']}: train.devices is 'auto', but the workflow must know how many "
                              "GPUs to reserve for it; give a number")
    return int(devices)


wildcard_constraints:
    paper="|".join(PAPERS),
    seed=r"\d+",
    scale="|".join(lpc.SCALES),
