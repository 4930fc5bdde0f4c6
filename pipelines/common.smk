# Shared state: the validated config and the list of runs. All logic lives in lowprec.config.
import json
import shlex
from pathlib import Path

from lowprec import config as lpc
from lowprec.preflight import check_memory
from snakemake.logging import logger

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
# (MISSING_RUNS); a paper with no committed run at all is left out of PAPERS. Which runs and per-run
# files are committed is decided in lowprec.config (committed_runs, committed_run_files) only.
# A paper's .smk must ask `if not REUSE_RUNS:` before defining any rule whose output lies in a run
# folder (an evaluation of a run's checkpoint, a fine-tuning run that starts from another run):
# checkpoints are not committed, so under REUSE_RUNS such a file (e.g. gaussws's export.csv) is
# itself a committed input of the rules that read it, and an output built from such files is added
# to PAPER_EXTRA_OUTPUTS only when some of them are committed.
REUSE_RUNS = bool(WF.get("reuse_runs"))
CLAIMS_STATISTIC = WF.get("claims_statistic", "welch")
# the report of this scale: results/REPORT.md at the default scale, REPORT_<scale>.md otherwise
REPORT = lpc.report_path(RESULTS, SCALE)


def _runs():
    runs = {}
    for paper in PAPERS:
        grid = lpc.experiment_grid(paper, SCALE)
        for model in grid["models"]:
            for method in grid["methods"]:
                for seed in grid["seeds"]:
                    runs[(paper, model, method, str(seed))] = lpc.resolve_run(
                        SCALE, paper, model, method, seed, results=RESULTS, overrides=OVERRIDES)
    return runs


RUNS = _runs()
if not REUSE_RUNS:  # a batch that cannot fit its device stops the workflow here, not by an OOM kill later
    check_memory(RUNS.values(), WF.get("gpu_memory_gib"))
# paper -> run folders of its grid (and fine-tuning grid) that are not committed; empty unless REUSE_RUNS
MISSING_RUNS = {p: [] for p in PAPERS}
if REUSE_RUNS:
    RUNS, _missing = lpc.committed_runs(RUNS)
    for _key, _cfg in _missing.items():
        MISSING_RUNS[_key[0]].append(_cfg["output_dir"])
    if not RUNS:
        raise lpc.ConfigError(f"reuse_runs: no run folder of {', '.join(PAPERS)} at scale {SCALE} is committed "
                              f"under {RESULTS}/runs/{SCALE}/ (each needs {', '.join(lpc.RUN_FILES)}); "
                              "train them (drop reuse_runs) or restore them from git")
    if _missing:
        logger.warning(lpc.uncommitted_message([c["output_dir"] for c in _missing.values()],
                                               "run folder(s) of this grid are not committed",
                                               "tables, figures and verdicts are built without them"))
    _empty = [p for p in PAPERS if not any(k[0] == p for k in RUNS)]
    if _empty:
        logger.warning(f"reuse_runs: no committed run of {', '.join(_empty)} at scale {SCALE}; "
                      "left out of this regeneration (REPORT lists its runs)")
    # papers with committed runs; MISSING_RUNS keeps every selected paper for the report
    PAPERS = [p for p in PAPERS if p not in _empty]
DATA = {Path(c["data"]["dir"]).name: {k: v for k, v in c["data"].items() if k != "dir"} for c in RUNS.values()}


# Paper-specific tables and figures, added by pipelines/<paper>.smk; the paper target, the claims
# and the report depend on them.
PAPER_EXTRA_OUTPUTS = {p: [] for p in PAPERS}


def run_key(w):
    return (w.paper, w.model, w.method, w.seed)


def run_dirs(paper):
    return [c["output_dir"] for k, c in RUNS.items() if k[0] == paper]


def run_files(dirs, name, output):
    """``<run>/<name>`` of each run folder in ``dirs``, a per-run evaluation that ``output`` (its
    description) is built from: all of them when training (a rule produces each), and under
    REUSE_RUNS the committed ones only, with a warning naming the runs without it."""
    if not REUSE_RUNS:
        return [f"{d}/{name}" for d in dirs]
    present, absent = lpc.committed_run_files(dirs, name)
    if absent:
        logger.warning(lpc.uncommitted_message(absent, f"run folder(s) without a committed {name}",
                                               f"{output} built without them" if present
                                               else f"no {output} at this scale"))
    return present


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
