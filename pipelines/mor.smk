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
    if REUSE_RUNS and not mor_runs(telemetry_only=True):
        logger.warning("reuse_runs: no run of a MoR arm (with telemetry) is committed at this scale; "
                       "no error or format heat map, error summary or E4M3 share")
    if not REUSE_RUNS or mor_runs(telemetry_only=True):
        PAPER_EXTRA_OUTPUTS["mor"] += [
            f"{MR}/figures/rel_error_heatmap.png", f"{MR}/figures/rel_error_heatmap.pdf", f"{MR}/tables/rel_error.csv",
            f"{MR}/figures/format_heatmap.png", f"{MR}/figures/format_heatmap.pdf",
            f"{MR}/tables/rel_error_summary.csv", f"{MR}/tables/rel_error_summary.md",
            f"{MR}/tables/e4m3_share.csv", f"{MR}/tables/e4m3_share.md",
            f"{MR}/figures/e4m3_share.png", f"{MR}/figures/e4m3_share.pdf",
        ]
    PAPER_EXTRA_OUTPUTS["mor"] += [
        f"{MR}/tables/loss_by_partition.csv", f"{MR}/tables/loss_by_partition.md",
        f"{MR}/tables/ablations.csv", f"{MR}/tables/ablations.md",
        f"{MR}/tables/lr_regimes.csv", f"{MR}/tables/lr_regimes.md",
    ]

    rule mor_telemetry:
        input:
            # provenance.json is written last, after telemetry.csv
            [f"{d}/provenance.json" for d in mor_runs(telemetry_only=True)],
        output:
            epng=report(update(f"{MR}/figures/rel_error_heatmap.png"), category="mor", subcategory="telemetry",
                        caption="report/mor_rel_error_heatmap.rst"),
            epdf=update(f"{MR}/figures/rel_error_heatmap.pdf"),
            ecsv=report(update(f"{MR}/tables/rel_error.csv"), category="mor", subcategory="telemetry",
                        caption="report/mor_rel_error_table.rst"),
            fpng=report(update(f"{MR}/figures/format_heatmap.png"), category="mor", subcategory="telemetry",
                        caption="report/mor_format_heatmap.rst"),
            fpdf=update(f"{MR}/figures/format_heatmap.pdf"),
            scsv=report(update(f"{MR}/tables/rel_error_summary.csv"), category="mor", subcategory="telemetry",
                        caption="report/mor_rel_error_summary.rst"),
            smd=update(f"{MR}/tables/rel_error_summary.md"),
        params:
            runs=" ".join(mor_runs(telemetry_only=True)),
            formats=" ".join(MOR_FORMAT_METHODS),
        shell:
            "python -m lowprec.report.mor telemetry --runs {params.runs} --heatmap-method {MOR_HEATMAP_METHOD} "
            "--format-methods {params.formats} --error-png {output.epng} --error-pdf {output.epdf} "
            "--error-csv {output.ecsv} --format-png {output.fpng} --format-pdf {output.fpdf} "
            "--summary-csv {output.scsv} --summary-md {output.smd}"

    rule mor_share:
        input:
            [f"{d}/provenance.json" for d in mor_runs()],
        output:
            csv=report(update(f"{MR}/tables/e4m3_share.csv"), category="mor", subcategory="telemetry",
                       caption="report/mor_e4m3_share_table.rst"),
            md=update(f"{MR}/tables/e4m3_share.md"),
            png=report(update(f"{MR}/figures/e4m3_share.png"), category="mor", subcategory="telemetry",
                       caption="report/mor_e4m3_share.rst"),
            pdf=update(f"{MR}/figures/e4m3_share.pdf"),
        params:
            runs=" ".join(mor_runs()),
        shell:
            "python -m lowprec.report.mor share --runs {params.runs} --csv {output.csv} --md {output.md} "
            "--png {output.png} --pdf {output.pdf}"

    rule mor_tables:
        input:
            [f"{d}/{f}" for d in mor_runs() for f in ("metrics.csv", "config.yaml", "provenance.json")],
        output:
            main=report(update(f"{MR}/tables/loss_by_partition.csv"), category="mor", subcategory="loss tables",
                        caption="report/mor_loss_by_partition.rst"),
            main_md=update(f"{MR}/tables/loss_by_partition.md"),
            abl=report(update(f"{MR}/tables/ablations.csv"), category="mor", subcategory="loss tables",
                       caption="report/mor_ablations.rst"),
            abl_md=update(f"{MR}/tables/ablations.md"),
            lr=report(update(f"{MR}/tables/lr_regimes.csv"), category="mor", subcategory="loss tables",
                      caption="report/mor_lr_regimes.rst"),
            lr_md=update(f"{MR}/tables/lr_regimes.md"),
        params:
            runs=" ".join(mor_runs()),
        shell:
            "python -m lowprec.report.mor tables --runs {params.runs} --main-csv {output.main} "
            "--main-md {output.main_md} --ablations-csv {output.abl} --ablations-md {output.abl_md} "
            "--lr-csv {output.lr} --lr-md {output.lr_md}"
