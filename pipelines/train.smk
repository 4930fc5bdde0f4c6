# One Lightning training run per run of TRAIN (lowprec.train): the runs of the scale's grid and the
# fine-tuning runs that must train (common.smk decides which, once). Not defined when REUSE_RUNS
# (see common.smk): the run folders are then committed inputs.

LAUNCHER = WF.get("launcher", "")  # the slurm profile sets srun: one task per GPU, Lightning reads SLURM's env


def train_launch(cfg):
    """The command put before `python -m lowprec.train`: the launcher for a multi-process run.
    A 1-process run needs none, and locally Lightning starts the DDP processes itself."""
    return LAUNCHER if run_gpus(cfg) > 1 else ""


def init_from_run(cfg):
    """The provenance.json of the run whose final weights (train.init_from) start this one."""
    source = cfg["train"].get("init_from")
    return [str(Path(source).parents[1] / "provenance.json")] if source else []


if not REUSE_RUNS:

    rule train:
        input:
            # written by common.smk while the workflow starts (never outdated)
            cfg=lambda w: run_config_path(w.run),
            data=lambda w: f"{RUN_CONFIGS[w.run]['data']['dir']}/manifest.json",
            source=lambda w: init_from_run(RUN_CONFIGS[w.run]),
        output:
            metrics=update(f"{RESULTS}/runs/{SCALE}/{{run}}/metrics.csv"),
            config=update(f"{RESULTS}/runs/{SCALE}/{{run}}/config.yaml"),
            provenance=update(f"{RESULTS}/runs/{SCALE}/{{run}}/provenance.json"),
        wildcard_constraints:
            run=one_of(TRAIN if MAIN_PROCESS else RUN_CONFIGS),  # complete, current runs are no job's output
        threads: lambda w: RUN_CONFIGS[w.run]["train"].get("threads") or 1
        resources:
            # total GPUs of the run: what `--resources gpu=N` counts locally (the slurm profile
            # zeroes it and asks per node through gres instead)
            gpu=lambda w: run_gpus(RUN_CONFIGS[w.run]),
            # SLURM geometry (executor plugin): nodes x tasks_per_node processes, gres GPUs per node;
            # `mpi` tells the plugin that the command launches its own tasks (srun)
            nodes=lambda w: int(RUN_CONFIGS[w.run]["train"].get("num_nodes", 1)),
            tasks_per_node=lambda w: gpus_per_node(RUN_CONFIGS[w.run]) if run_gpus(RUN_CONFIGS[w.run]) else 1,
            gres=lambda w: f"gpu:{gpus_per_node(RUN_CONFIGS[w.run])}" if run_gpus(RUN_CONFIGS[w.run]) else "",
            mpi=lambda w: train_launch(RUN_CONFIGS[w.run]),
        params:
            launcher=lambda w: train_launch(RUN_CONFIGS[w.run]),
        log:
            f"{RESULTS}/logs/train/{SCALE}/{{run}}.log",
        shell:
            "{params.launcher} python -m lowprec.train --config {input.cfg} > {log} 2>&1"
