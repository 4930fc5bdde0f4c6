# INT8 with block fallback (arXiv 2503.08040): outlier analysis of the trained BF16 models, the
# fallback-ratio heat map and sweep from telemetry, the loss-gap contrast GLU vs GPT2, fine-tuning
# from the BF16-pretrained weights under every arm, and the GEMM throughput figure from the committed
# H200 benchmark (lowprec.report.int8_fallback), on top of the generic loss curves and final losses.

# committed GPU measurements, read wherever the workflow runs (re-measured files keep the columns)
I8_GEMM = os.path.join(workflow.basedir, "results", "int8_fallback", "gemm_h200.csv")
I8_HEATMAP_METHOD = "int8_fallback"  # the method's default rule
I8_FT_DIR = "int8_fallback_finetune"  # beside the paper's own run folders; rule train does not match it

if "int8_fallback" in PAPERS:
    I8 = f"{RESULTS}/int8_fallback/{SCALE}"
    I8_EXP = lpc.experiment_config("int8_fallback")
    I8_BASELINE = I8_EXP.get("baseline", "bf16")
    I8_FT_GRID = lpc.finetune_grid("int8_fallback", SCALE)
    # (model, method, seed) -> fine-tuning run config
    I8_FT = {(model, method, str(seed)): lpc.resolve_finetune_run(SCALE, "int8_fallback", model, method, seed,
                                                                  results=RESULTS, overrides=OVERRIDES)
             for model in I8_FT_GRID["models"] for method in I8_FT_GRID["methods"] for seed in I8_FT_GRID["seeds"]}
    if REUSE_RUNS:  # the fine-tuning run folders are committed inputs like the others (common.smk)
        I8_FT, _missing = lpc.committed_runs(I8_FT)
        MISSING_RUNS["int8_fallback"] += [c["output_dir"] for c in _missing.values()]
        if _missing:
            logger.warning(lpc.uncommitted_message([c["output_dir"] for c in _missing.values()],
                                                   "fine-tuning run folder(s) are not committed",
                                                   "the fine-tuning table is built without them" if I8_FT
                                                   else "no fine-tuning table at this scale"))
    else:  # the fine-tuning corpus is prepared by rule prepare_data like any other (pipelines/data.smk)
        check_memory(I8_FT.values(), WF.get("gpu_memory_gib"))
        for _cfg in I8_FT.values():
            DATA[Path(_cfg["data"]["dir"]).name] = {k: v for k, v in _cfg["data"].items() if k != "dir"}

    def i8_runs(method=None):
        return [c["output_dir"] for k, c in RUNS.items() if k[0] == "int8_fallback" and (method is None or k[2] == method)]

    def i8_ft_runs():
        return [c["output_dir"] for c in I8_FT.values()]

    # per-run outlier statistics of the BF16 runs (rule int8_outliers_run when training; committed
    # under REUSE_RUNS): the figure needs both files of a run
    _with_stats = [str(Path(f).parent)
                   for f in run_files(i8_runs(I8_BASELINE), "outliers.csv", "outlier figure and tables")]
    I8_CCDFS = run_files(_with_stats, "outlier_ccdf.csv", "outlier figure and tables")
    I8_OUTLIERS = [f"{Path(f).parent}/outliers.csv" for f in I8_CCDFS]
    # the fallback heat map, sweep and summary read the telemetry of the fallback arms
    I8_FALLBACK_ARMS = [k for k, c in RUNS.items()
                        if k[0] == "int8_fallback" and c["method"].get("recipe") == "int8_fallback"]
    if REUSE_RUNS and not I8_FALLBACK_ARMS:
        logger.warning("reuse_runs: no run of an int8_fallback arm is committed at this scale; "
                       "no fallback heat map, sweep or summary")

    # Under REUSE_RUNS an output whose inputs are not committed is left out (always built when training);
    # the claims that read it then say "not run at this scale".
    if not REUSE_RUNS or I8_OUTLIERS:
        PAPER_EXTRA_OUTPUTS["int8_fallback"] += [
            f"{I8}/figures/outliers.png", f"{I8}/figures/outliers.pdf",
            f"{I8}/tables/outliers.csv", f"{I8}/tables/outliers.md",
            f"{I8}/tables/outlier_contrast.csv", f"{I8}/tables/outlier_contrast.md",
        ]
    if not REUSE_RUNS or I8_FALLBACK_ARMS:
        PAPER_EXTRA_OUTPUTS["int8_fallback"] += [
            f"{I8}/figures/fallback_heatmap.png", f"{I8}/figures/fallback_heatmap.pdf",
            f"{I8}/figures/fallback_sweep.png", f"{I8}/figures/fallback_sweep.pdf",
            f"{I8}/tables/fallback_ratio.csv", f"{I8}/tables/fallback_summary.csv", f"{I8}/tables/fallback_summary.md",
        ]
    PAPER_EXTRA_OUTPUTS["int8_fallback"] += [f"{I8}/tables/gap_vs_bf16.csv", f"{I8}/tables/gap_vs_bf16.md"]
    if not REUSE_RUNS or I8_FT:
        PAPER_EXTRA_OUTPUTS["int8_fallback"] += [
            f"{I8}/figures/finetune_curves.png", f"{I8}/figures/finetune_curves.pdf",
            f"{I8}/tables/finetune.csv", f"{I8}/tables/finetune.md",
        ]
    PAPER_EXTRA_OUTPUTS["int8_fallback"] += [
        f"{I8}/figures/throughput.png", f"{I8}/figures/throughput.pdf",
        f"{I8}/tables/throughput.csv", f"{I8}/tables/throughput.md",
    ]

    I8_FT_RUN = f"{I8_FT_DIR}/{{model}}/{{method}}/s{{seed}}"
    I8_RUN = f"{RESULTS}/runs/{SCALE}/int8_fallback/{{model}}/{{method}}/s{{seed}}"

    # Rules whose outputs lie in run folders (a fine-tuning run, an evaluation of a checkpoint)
    # exist only when training: under REUSE_RUNS those files are committed inputs (common.smk).
    if not REUSE_RUNS:

        rule int8_finetune_config:
            localrule: True  # a small write: never a cluster job
            output:
                f"{RESULTS}/configs/{SCALE}/{I8_FT_RUN}.yaml",
            params:
                cfg=lambda w: json.dumps(I8_FT[(w.model, w.method, w.seed)]),
            shell:
                "python -m lowprec.io yaml {output:q} {params.cfg:q}"

        rule int8_finetune_train:
            input:
                cfg=f"{RESULTS}/configs/{SCALE}/{I8_FT_RUN}.yaml",
                data=lambda w: f"{I8_FT[(w.model, w.method, w.seed)]['data']['dir']}/manifest.json",
                # the pre-training run whose final weights (train.init_from) start this one
                source=lambda w: str(Path(I8_FT[(w.model, w.method, w.seed)]["train"]["init_from"]).parents[1] / "provenance.json"),
            output:
                metrics=f"{RESULTS}/runs/{SCALE}/{I8_FT_RUN}/metrics.csv",
                config=f"{RESULTS}/runs/{SCALE}/{I8_FT_RUN}/config.yaml",
                provenance=f"{RESULTS}/runs/{SCALE}/{I8_FT_RUN}/provenance.json",
            threads: lambda w: I8_FT[(w.model, w.method, w.seed)]["train"].get("threads") or 1
            resources:
                gpu=lambda w: run_gpus(I8_FT[(w.model, w.method, w.seed)]),
            params:
                launcher=config.get("launcher", ""),
            log:
                f"{RESULTS}/logs/train/{SCALE}/{I8_FT_RUN}.log",
            shell:
                "{params.launcher} python -m lowprec.train --config {input.cfg} > {log} 2>&1"

        rule int8_outliers_run:
            input:
                f"{I8_RUN}/provenance.json",
            output:
                stats=f"{I8_RUN}/outliers.csv",
                ccdf=f"{I8_RUN}/outlier_ccdf.csv",
            params:
                run=lambda w: f"{RESULTS}/runs/{SCALE}/int8_fallback/{w.model}/{w.method}/s{w.seed}",
            shell:
                "python -m lowprec.report.int8_fallback outliers-run --runs {params.run} --csv {output.stats} "
                "--ccdf {output.ccdf}"

    rule int8_outliers:
        input:
            evals=I8_OUTLIERS,
            ccdfs=I8_CCDFS,
        output:
            png=report(f"{I8}/figures/outliers.png", category="int8_fallback", subcategory="outliers",
                       caption="report/int8_outliers.rst"),
            pdf=f"{I8}/figures/outliers.pdf",
            csv=f"{I8}/tables/outliers.csv",
            md=f"{I8}/tables/outliers.md",
            ccsv=f"{I8}/tables/outlier_contrast.csv",
            cmd=f"{I8}/tables/outlier_contrast.md",
        shell:
            "python -m lowprec.report.int8_fallback outliers --evals {input.evals} --ccdfs {input.ccdfs} "
            "--csv {output.csv} --md {output.md} "
            "--contrast-csv {output.ccsv} --contrast-md {output.cmd} --png {output.png} --pdf {output.pdf}"

    rule int8_fallback_ratio:
        input:
            [f"{d}/provenance.json" for d in i8_runs()],
        output:
            png=report(f"{I8}/figures/fallback_heatmap.png", category="int8_fallback", subcategory="fallback ratio",
                       caption="report/int8_fallback_heatmap.rst"),
            pdf=f"{I8}/figures/fallback_heatmap.pdf",
            spng=report(f"{I8}/figures/fallback_sweep.png", category="int8_fallback", subcategory="fallback ratio",
                        caption="report/int8_fallback_sweep.rst"),
            spdf=f"{I8}/figures/fallback_sweep.pdf",
            csv=f"{I8}/tables/fallback_ratio.csv",
            scsv=f"{I8}/tables/fallback_summary.csv",
            smd=f"{I8}/tables/fallback_summary.md",
        params:
            runs=" ".join(i8_runs()),
            method=I8_HEATMAP_METHOD,
            baseline=I8_BASELINE,
        shell:
            "python -m lowprec.report.int8_fallback fallback --runs {params.runs} --baseline {params.baseline} "
            "--heatmap-method {params.method} --csv {output.csv} --summary-csv {output.scsv} --summary-md {output.smd} "
            "--png {output.png} --pdf {output.pdf} --sweep-png {output.spng} --sweep-pdf {output.spdf}"

    rule int8_gap_table:
        input:
            [f"{d}/provenance.json" for d in i8_runs()],
        output:
            csv=f"{I8}/tables/gap_vs_bf16.csv",
            md=f"{I8}/tables/gap_vs_bf16.md",
        params:
            runs=" ".join(i8_runs()),
            baseline=I8_BASELINE,
        shell:
            "python -m lowprec.report.int8_fallback gaps --runs {params.runs} --baseline {params.baseline} "
            "--csv {output.csv} --md {output.md}"

    rule int8_finetune_table:
        input:
            [f"{d}/provenance.json" for d in i8_ft_runs()],
        output:
            png=report(f"{I8}/figures/finetune_curves.png", category="int8_fallback", subcategory="fine-tuning",
                       caption="report/int8_finetune.rst"),
            pdf=f"{I8}/figures/finetune_curves.pdf",
            csv=f"{I8}/tables/finetune.csv",
            md=f"{I8}/tables/finetune.md",
        params:
            runs=" ".join(i8_ft_runs()),
            baseline=I8_BASELINE,
        shell:
            "python -m lowprec.report.int8_fallback finetune --runs {params.runs} --baseline {params.baseline} "
            "--csv {output.csv} --md {output.md} --png {output.png} --pdf {output.pdf}"

    rule int8_throughput:
        input:
            # rebuilt when the committed measurement is replaced; absent: a "not measured" figure
            [I8_GEMM] if os.path.exists(I8_GEMM) else [],
        output:
            png=report(f"{I8}/figures/throughput.png", category="int8_fallback", subcategory="throughput",
                       caption="report/int8_throughput.rst"),
            pdf=f"{I8}/figures/throughput.pdf",
            csv=f"{I8}/tables/throughput.csv",
            md=f"{I8}/tables/throughput.md",
        params:
            gemm=I8_GEMM,
        shell:
            "python -m lowprec.report.int8_fallback throughput --gemm {params.gemm} --csv {output.csv} "
            "--md {output.md} --png {output.png} --pdf {output.pdf}"
