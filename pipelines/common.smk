# Shared state: the validated config and the list of runs. All logic lives in lowprec.config.
import json
import shlex
from pathlib import Path

from lowprec import config as lpc
from lowprec.io import write_yaml

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
# can retrain a run whatever the file mtimes are after a git clone; a missing run folder stops the
# workflow at parse time, naming it. A paper's .smk must ask `if not REUSE_RUNS:` before defining
# any rule whose output lies in a run folder (an evaluation of a run's checkpoint, a fine-tuning
# run that starts from another run): checkpoints are not committed, so under REUSE_RUNS such a
# file (e.g. gaussws's export.csv) is itself a committed input of the rules that read it.
REUSE_RUNS = bool(WF.get("reuse_runs"))


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
if REUSE_RUNS:
    lpc.check_run_folders([c["output_dir"] for c in RUNS.values()])
DATA = {Path(c["data"]["dir"]).name: {k: v for k, v in c["data"].items() if k != "dir"} for c in RUNS.values()}


# Paper-specific tables and figures, added by pipelines/<paper>.smk; the paper target, the claims
# and the report depend on them.
PAPER_EXTRA_OUTPUTS = {p: [] for p in PAPERS}


def run_key(w):
    return (w.paper, w.model, w.method, w.seed)


def run_dirs(paper):
    return [c["output_dir"] for k, c in RUNS.items() if k[0] == paper]


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
