# Corpus -> tokenizer -> uint16 token files + manifest (lowprec.data).


rule prepare_data:
    input:
        # a corpus encoded with an earlier preparation's tokenizer (data.tokenizer) waits for it
        tokenizer=lambda w: [DATA[w.data_id]["tokenizer"]] if DATA[w.data_id].get("tokenizer") else [],
    output:
        train=f"{RESULTS}/data/{{data_id}}/train.bin",
        val=f"{RESULTS}/data/{{data_id}}/val.bin",
        tokenizer=f"{RESULTS}/data/{{data_id}}/tokenizer.json",
        manifest=f"{RESULTS}/data/{{data_id}}/manifest.json",
    params:
        spec=lambda w: shlex.quote(json.dumps(DATA[w.data_id], sort_keys=True)),
        out=lambda w: f"{RESULTS}/data/{w.data_id}",
    log:
        f"{RESULTS}/logs/data/{{data_id}}.log",
    shell:
        "python -m lowprec.data --spec {params.spec} --out {params.out} > {log} 2>&1"


# Every dataset the selected runs read, prepared, and nothing else (`snakemake --config scale=medium
# data`): the data step alone, for a training machine without network (lowprec.databundle). Not
# `--until prepare_data`: a corpus encoded with another preparation's tokenizer is a prepare_data job
# downstream of a prepare_data job, which --until leaves unstarted.
rule data:
    input:
        [f"{RESULTS}/data/{d}/manifest.json" for d in DATA],
