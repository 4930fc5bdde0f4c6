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
if WF.get("threads"):
    OVERRIDES = lpc.deep_merge(OVERRIDES, {"train": {"threads": WF["threads"]}})


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
DATA = {Path(c["data"]["dir"]).name: {k: v for k, v in c["data"].items() if k != "dir"} for c in RUNS.values()}


# Paper-specific tables and figures, added by pipelines/<paper>.smk; the paper target, the claims
# and the report depend on them.
PAPER_EXTRA_OUTPUTS = {p: [] for p in PAPERS}


def run_key(w):
    return (w.paper, w.model, w.method, w.seed)


def run_dirs(paper):
    return [c["output_dir"] for k, c in RUNS.items() if k[0] == paper]


def run_gpus(cfg):
    t = cfg["train"]
    if t.get("accelerator", "auto") == "cpu" or SCALE in ("smoke", "tiny"):
        return 0
    return int(t.get("devices", 1)) * int(t.get("num_nodes", 1))


wildcard_constraints:
    paper="|".join(PAPERS),
    seed=r"\d+",
    scale="|".join(lpc.SCALES),
