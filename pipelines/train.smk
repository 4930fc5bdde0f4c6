# One Lightning training run per (paper, model, method, seed) of the scale's grid (lowprec.train).

RUN = "{paper}/{model}/{method}/s{seed}"


rule run_config:
    output:
        f"{RESULTS}/configs/{SCALE}/{RUN}.yaml",
    params:
        cfg=lambda w: RUNS[run_key(w)],
    run:
        write_yaml(output[0], params.cfg)


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
        gpu=lambda w: run_gpus(RUNS[run_key(w)]),
    params:
        launcher=config.get("launcher", ""),
    log:
        f"{RESULTS}/logs/train/{SCALE}/{RUN}.log",
    shell:
        "{params.launcher} python -m lowprec.train --config {input.cfg} > {log} 2>&1"
