# INT8 with block fallback (arXiv 2503.08040): outlier analysis of the trained BF16 models, the
# fallback-ratio heat map and sweep from telemetry, the loss-gap contrast GLU vs GPT2, fine-tuning
# from the BF16-pretrained weights under every arm, and the GEMM throughput figure from the committed
# H200 benchmark (lowprec.report.int8_fallback, int8_throughput), on top of the generic loss curves
# and final losses.

# committed GPU measurements, read wherever the workflow runs (re-measured files keep the columns)
I8_GEMM = os.path.join(workflow.basedir, "results", "int8_fallback", "gemm_h200.csv")
I8_HEATMAP_METHOD = "int8_fallback"  # the method's default rule

if "int8_fallback" in PAPERS:
    I8 = f"{RESULTS}/int8_fallback/{SCALE}"
    I8_EXP = lpc.experiment_config("int8_fallback")
    I8_BASELINE = I8_EXP.get("baseline", "bf16")
    # (model, method, seed) -> fine-tuning run config (common.smk: FT_RUNS, trained by rule train)
    I8_FT = {k[1:]: c for k, c in FT_RUNS.items() if k[0] == "int8_fallback"}

    def i8_runs(method=None):
        return [c["output_dir"] for k, c in RUNS.items() if k[0] == "int8_fallback" and (method is None or k[2] == method)]

    def i8_ft_runs():
        return [c["output_dir"] for c in I8_FT.values()]

    # per-run outlier statistics of the BF16 runs, both files of a run (committed, or made by rule
    # int8_outliers_run: run_files)
    _with_stats = run_files(i8_runs(I8_BASELINE), ("outliers.csv", "outlier_ccdf.csv"), "outlier figure and tables")
    I8_OUTLIERS = [f"{d}/outliers.csv" for d in _with_stats]
    I8_CCDFS = [f"{d}/outlier_ccdf.csv" for d in _with_stats]
    # the fallback heat map, sweep and summary read the telemetry of the fallback arms
    I8_FALLBACK_ARMS = [k for k, c in RUNS.items()
                        if k[0] == "int8_fallback" and c["method"].get("recipe") == "int8_fallback"]
    if REUSE_RUNS and not I8_FALLBACK_ARMS:
        logger.warning("reuse_runs: no run of an int8_fallback arm is committed at this scale; "
                       "no fallback heat map, sweep or summary")

    # Under REUSE_RUNS an output whose inputs are not committed is left out (always built when training);
    # the claims that read it then say "not run at this scale".
    I8_OUTLIERS_OUT = ReportOutputs("int8_fallback", "outliers", {
        "png": (f"{I8}/figures/outliers.png", "int8_outliers"), "pdf": f"{I8}/figures/outliers.pdf",
        "csv": (f"{I8}/tables/outliers.csv", "int8_outliers_table"), "md": f"{I8}/tables/outliers.md",
        "contrast-csv": (f"{I8}/tables/outlier_contrast.csv", "int8_outlier_contrast"),
        "contrast-md": f"{I8}/tables/outlier_contrast.md",
    }, listed=not REUSE_RUNS or bool(I8_OUTLIERS))
    I8_FALLBACK_OUT = ReportOutputs("int8_fallback", "fallback ratio", {
        "png": (f"{I8}/figures/fallback_heatmap.png", "int8_fallback_heatmap"),
        "pdf": f"{I8}/figures/fallback_heatmap.pdf",
        "sweep-png": (f"{I8}/figures/fallback_sweep.png", "int8_fallback_sweep"),
        "sweep-pdf": f"{I8}/figures/fallback_sweep.pdf",
        "csv": (f"{I8}/tables/fallback_ratio.csv", "int8_fallback_ratio_table"),
        "summary-csv": (f"{I8}/tables/fallback_summary.csv", "int8_fallback_summary"),
        "summary-md": f"{I8}/tables/fallback_summary.md",
    }, listed=not REUSE_RUNS or bool(I8_FALLBACK_ARMS))
    I8_GAP_OUT = ReportOutputs("int8_fallback", "loss curves", {
        "csv": (f"{I8}/tables/gap_vs_bf16.csv", "int8_gap_vs_bf16"), "md": f"{I8}/tables/gap_vs_bf16.md",
    })
    I8_FINETUNE_OUT = ReportOutputs("int8_fallback", "fine-tuning", {
        "png": (f"{I8}/figures/finetune_curves.png", "int8_finetune"), "pdf": f"{I8}/figures/finetune_curves.pdf",
        "csv": (f"{I8}/tables/finetune.csv", "int8_finetune_table"), "md": f"{I8}/tables/finetune.md",
    }, listed=bool(I8_FT))
    I8_THROUGHPUT_OUT = ReportOutputs("int8_fallback", "throughput", {
        "png": (f"{I8}/figures/throughput.png", "int8_throughput"), "pdf": f"{I8}/figures/throughput.pdf",
        "csv": (f"{I8}/tables/throughput.csv", "int8_throughput_table"), "md": f"{I8}/tables/throughput.md",
    })

    # The rule whose outputs lie in run folders reads a checkpoint: it matches only the runs whose
    # files it must make (run_files), never a committed file; under REUSE_RUNS it does not exist.
    if not REUSE_RUNS:

        rule int8_outliers_run:
            input:
                f"{RESULTS}/runs/{SCALE}/{{run}}/provenance.json",
            output:
                stats=update(f"{RESULTS}/runs/{SCALE}/{{run}}/outliers.csv"),
                ccdf=update(f"{RESULTS}/runs/{SCALE}/{{run}}/outlier_ccdf.csv"),
            wildcard_constraints:
                run=evaluated_runs("outliers.csv", "outlier_ccdf.csv"),
            params:
                run=lambda w: f"{RESULTS}/runs/{SCALE}/{w.run}",
            shell:
                "python -m lowprec.report.int8_fallback outliers-run --runs {params.run} --csv {output.stats} "
                "--ccdf {output.ccdf}"

    rule int8_outliers:
        input:
            evals=I8_OUTLIERS,
            ccdfs=I8_CCDFS,
        output:
            **I8_OUTLIERS_OUT.rule,
        shell:
            "python -m lowprec.report.int8_fallback outliers --evals {input.evals} --ccdfs {input.ccdfs} "
            + I8_OUTLIERS_OUT.flags

    rule int8_fallback_ratio:
        input:
            [f"{d}/provenance.json" for d in i8_runs()],
        output:
            **I8_FALLBACK_OUT.rule,
        params:
            runs=" ".join(i8_runs()),
            method=I8_HEATMAP_METHOD,
            baseline=I8_BASELINE,
        shell:
            "python -m lowprec.report.int8_fallback fallback --runs {params.runs} --baseline {params.baseline} "
            "--heatmap-method {params.method} " + I8_FALLBACK_OUT.flags

    rule int8_gap_table:
        input:
            [f"{d}/provenance.json" for d in i8_runs()],
        output:
            **I8_GAP_OUT.rule,
        params:
            runs=" ".join(i8_runs()),
            baseline=I8_BASELINE,
        shell:
            "python -m lowprec.report.int8_fallback gaps --runs {params.runs} --baseline {params.baseline} "
            + I8_GAP_OUT.flags

    rule int8_finetune_table:
        input:
            [f"{d}/provenance.json" for d in i8_ft_runs()],
        output:
            **I8_FINETUNE_OUT.rule,
        params:
            runs=" ".join(i8_ft_runs()),
            baseline=I8_BASELINE,
        shell:
            "python -m lowprec.report.int8_fallback finetune --runs {params.runs} --baseline {params.baseline} "
            + I8_FINETUNE_OUT.flags

    rule int8_throughput:
        input:
            # rebuilt when the committed measurement is replaced; absent: a "not measured" figure
            [I8_GEMM] if os.path.exists(I8_GEMM) else [],
        output:
            **I8_THROUGHPUT_OUT.rule,
        params:
            gemm=I8_GEMM,
        shell:
            "python -m lowprec.report.int8_fallback throughput --gemm {params.gemm} " + I8_THROUGHPUT_OUT.flags
