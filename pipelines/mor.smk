# MoR (arXiv 2512.22804): heat maps of the relative E4M3 error and of the chosen representation per
# tensor and step, the share of tensors in E4M3 per layer type and operand, the main loss table per
# partition strategy, the ablation and learning-rate tables (lowprec.report.mor), on top of the
# generic loss curves and final losses. The speed claim reads the committed H200 benchmark
# results/mor/linear_h200.csv (lowprec.bench.mor_linear) directly from configs/claims/mor.yaml.

# the arm whose telemetry the error heat map shows: MoR's default partition (the report falls back
# to the first arm with telemetry when it is not in this scale's grid)
MOR_HEATMAP_METHOD = "mor_block"
# the arms of the format heat map, where present: the three partitions and sub-tensor MoR, both LRs
MOR_FORMAT_METHODS = ["mor_tensor", "mor_block", "mor_channel", "mor_sub_two_way", "mor_sub_three_way",
                      "mor_tensor_cfg2", "mor_block_cfg2", "mor_channel_cfg2"]

if "mor" in PAPERS:
    MR = f"{RESULTS}/mor/{SCALE}"

    def mor_runs(telemetry_only=False):
        """Run folders of the paper; with telemetry_only, those of arms that log telemetry."""
        return [c["output_dir"] for k, c in RUNS.items()
                if k[0] == "mor" and (not telemetry_only or c["method"].get("telemetry_every"))]

    # The heat maps and E4M3 shares read the MoR arms' telemetry: under REUSE_RUNS they are left out
    # when no such arm is committed (the claims that read them then say "not run at this scale");
    # the loss tables are built from the arms present.
    MR_TELEMETRY = not REUSE_RUNS or bool(mor_runs(telemetry_only=True))
    if not MR_TELEMETRY:
        logger.warning("reuse_runs: no run of a MoR arm (with telemetry) is committed at this scale; "
                       "no error or format heat map, error summary or E4M3 share")
    MR_TELEMETRY_OUT = ReportOutputs("mor", "telemetry", {
        "error-png": (f"{MR}/figures/rel_error_heatmap.png", "mor_rel_error_heatmap"),
        "error-pdf": f"{MR}/figures/rel_error_heatmap.pdf",
        "error-csv": (f"{MR}/tables/rel_error.csv", "mor_rel_error_table"),
        "format-png": (f"{MR}/figures/format_heatmap.png", "mor_format_heatmap"),
        "format-pdf": f"{MR}/figures/format_heatmap.pdf",
        "summary-csv": (f"{MR}/tables/rel_error_summary.csv", "mor_rel_error_summary"),
        "summary-md": f"{MR}/tables/rel_error_summary.md",
    }, listed=MR_TELEMETRY)
    MR_SHARE_OUT = ReportOutputs("mor", "telemetry", {
        "csv": (f"{MR}/tables/e4m3_share.csv", "mor_e4m3_share_table"), "md": f"{MR}/tables/e4m3_share.md",
        "png": (f"{MR}/figures/e4m3_share.png", "mor_e4m3_share"), "pdf": f"{MR}/figures/e4m3_share.pdf",
    }, listed=MR_TELEMETRY)
    MR_TABLES_OUT = ReportOutputs("mor", "loss tables", {
        "main-csv": (f"{MR}/tables/loss_by_partition.csv", "mor_loss_by_partition"),
        "main-md": f"{MR}/tables/loss_by_partition.md",
        "ablations-csv": (f"{MR}/tables/ablations.csv", "mor_ablations"), "ablations-md": f"{MR}/tables/ablations.md",
        "lr-csv": (f"{MR}/tables/lr_regimes.csv", "mor_lr_regimes"), "lr-md": f"{MR}/tables/lr_regimes.md",
    })

    rule mor_telemetry:
        input:
            # provenance.json is written last, after telemetry.csv.gz
            [f"{d}/provenance.json" for d in mor_runs(telemetry_only=True)],
        output:
            **MR_TELEMETRY_OUT.rule,
        params:
            runs=" ".join(mor_runs(telemetry_only=True)),
            formats=" ".join(MOR_FORMAT_METHODS),
        shell:
            "python -m lowprec.report.mor telemetry --runs {params.runs} --heatmap-method {MOR_HEATMAP_METHOD} "
            "--format-methods {params.formats} " + MR_TELEMETRY_OUT.flags

    rule mor_share:
        input:
            [f"{d}/provenance.json" for d in mor_runs()],
        output:
            **MR_SHARE_OUT.rule,
        params:
            runs=" ".join(mor_runs()),
        shell:
            "python -m lowprec.report.mor share --runs {params.runs} " + MR_SHARE_OUT.flags

    rule mor_tables:
        input:
            [f"{d}/{f}" for d in mor_runs() for f in ("metrics.csv", "config.yaml", "provenance.json")],
        output:
            **MR_TABLES_OUT.rule,
        params:
            runs=" ".join(mor_runs()),
        shell:
            "python -m lowprec.report.mor tables --runs {params.runs} " + MR_TABLES_OUT.flags
