# One Lightning training run per (paper, model, method, seed) of the scale's grid (lowprec.train).
# Not defined when REUSE_RUNS (see common.smk): the run folders are then committed inputs.

RUN = "{paper}/{model}/{method}/s{seed}"
LAUNCHER = WF.get("launcher", "")  # the slurm profile sets srun: one task per GPU, Lightning reads SLURM's env


def train_launch(cfg):
    """The command put before `python -m lowprec.train`: the launcher for a multi-process run.
    A 1-process run needs none, and locally Lightning starts the DDP processes itself."""
    return LAUNCHER if run_gpus(cfg) > 1 else ""


if not REUSE_RUNS:

    rule run_config:
        localrule: True  # a small write: never a cluster job
        output:
            f"{RESULTS}/configs/{SCALE}/{RUN}.yaml",
        params:
            cfg=lambda w: json.dumps(RUNS[run_key(w)]),
        shell:
            "python -m lowprec.io yaml {output:q} {params.cfg:q}"

    rule train:
        input:
            cfg=f"{RESULTS}/configs/{SCALE}/{RUN}.yaml",
            data=lambda w: f"{RUNS[run_key(w)]['data']['dir']}/manifest.json",
        output:
            metrics=f"{RESULTS}/runs/{SCALE}/{RUN}/metrics.csv",
            config=f"{RESULTS}/runs/{SCALE}/{RUN}/config.yaml",
            provenance=f"{RESULTS}/runs/{SCALE}/{RUN}/provenance.json",
        threads: lambda w: RUNS[run_key(w)]["train"].get("threads") or 1
        resources:
            # total GPUs of the run: what `--resources gpu=N` counts locally (the slurm profile
            # zeroes it and asks per node through gres instead)
            gpu=lambda w: run_gpus(RUNS[run_key(w)]),
            # SLURM geometry (executor plugin): nodes x tasks_per_node processes, gres GPUs per node;
            # `mpi` tells the plugin that the command launches its own tasks (srun)
            nodes=lambda w: int(RUNS[run_key(w)]["train"].get("num_nodes", 1)),
            tasks_per_node=lambda w: gpus_per_node(RUNS[run_key(w)]) if run_gpus(RUNS[run_key(w)]) else 1,
            gres=lambda w: f"gpu:{gpus_per_node(RUNS[run_key(w)])}" if run_gpus(RUNS[run_key(w)]) else "",
            mpi=lambda w: train_launch(RUNS[run_key(w)]),
        params:
            launcher=lambda w: train_launch(RUNS[run_key(w)]),
        log:
            f"{RESULTS}/logs/train/{SCALE}/{RUN}.log",
        shell:
            "{params.launcher} python -m lowprec.train --config {input.cfg} > {log} 2>&1"
