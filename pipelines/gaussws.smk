# GaussWS (arXiv 2505.11170): the 9-bit exactness figure, overhead, memory and post-training export
# tables (lowprec.report.gaussws), on top of the generic loss curves and final-loss table.

GW_EXPORTS = ["none", "mxfp8", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"]
# committed H200 measurement (overhead and memory), read wherever the workflow runs
GW_GPU = os.path.join(workflow.basedir, "results", "gaussws", "overhead_h200.csv")

if "gaussws" in PAPERS:
    GW = f"{RESULTS}/gaussws/{SCALE}"

    def gw_runs(method=None):
        return [c["output_dir"] for k, c in RUNS.items() if k[0] == "gaussws" and (method is None or k[2] == method)]

    # per-run evaluations of the checkpoints: committed, or made by the rules below (run_files)
    GW_EXACTNESS = [f"{d}/exactness.csv"
                    for d in run_files(gw_runs("bf16"), "exactness.csv", "exactness figure and table")]
    GW_EXPORT = [f"{d}/export.csv" for d in run_files(gw_runs(), "export.csv", "export table")]

    # the exactness figure always has its analytic reference (the 9-bit claim reads it); trained
    # weights join it from whichever runs' exactness.csv exist
    PAPER_EXTRA_OUTPUTS["gaussws"] += [f"{GW}/figures/exactness.png", f"{GW}/figures/exactness.pdf",
                                       f"{GW}/tables/exactness.csv", f"{GW}/tables/exactness.md"]
    # a table from per-run files only where some are committed (always when training)
    PAPER_EXTRA_OUTPUTS["gaussws"] += [f"{GW}/tables/overhead.csv", f"{GW}/tables/overhead.md",
                                       f"{GW}/tables/memory.csv", f"{GW}/tables/memory.md"]
    if not REUSE_RUNS or GW_EXPORT:
        PAPER_EXTRA_OUTPUTS["gaussws"] += [f"{GW}/tables/export.csv", f"{GW}/tables/export.md"]

    # These two read the run's final checkpoint, which is not committed: they match only the runs
    # whose file they must make (run_files), never a committed file.
    if not REUSE_RUNS:

        rule gaussws_export_eval:
            input:
                f"{RESULTS}/runs/{SCALE}/{{run}}/provenance.json",
            output:
                update(f"{RESULTS}/runs/{SCALE}/{{run}}/export.csv"),
            wildcard_constraints:
                run=evaluated_runs("export.csv"),
            params:
                run=lambda w: f"{RESULTS}/runs/{SCALE}/{w.run}",
                formats=" ".join(GW_EXPORTS),
            shell:
                "python -m lowprec.evaluate --run {params.run} --export {params.formats} --out {output}"

        rule gaussws_exactness_run:
            input:
                f"{RESULTS}/runs/{SCALE}/{{run}}/provenance.json",
            output:
                update(f"{RESULTS}/runs/{SCALE}/{{run}}/exactness.csv"),
            wildcard_constraints:
                run=evaluated_runs("exactness.csv"),
            params:
                run=lambda w: f"{RESULTS}/runs/{SCALE}/{w.run}",
            shell:
                "python -m lowprec.report.gaussws exactness-run --runs {params.run} --csv {output}"

    rule gaussws_exactness:
        input:
            GW_EXACTNESS,
        output:
            png=report(update(f"{GW}/figures/exactness.png"), category="gaussws", subcategory="noise bits",
                       caption="report/gaussws_exactness.rst"),
            pdf=update(f"{GW}/figures/exactness.pdf"),
            csv=report(update(f"{GW}/tables/exactness.csv"), category="gaussws", subcategory="noise bits",
                       caption="report/gaussws_exactness_table.rst"),
            md=update(f"{GW}/tables/exactness.md"),
        shell:
            "python -m lowprec.report.gaussws exactness --evals {input} --csv {output.csv} --md {output.md} "
            "--png {output.png} --pdf {output.pdf}"

    rule gaussws_overhead_memory:
        input:
            [f"{d}/provenance.json" for d in gw_runs()],
        output:
            ocsv=report(update(f"{GW}/tables/overhead.csv"), category="gaussws", subcategory="overhead and memory",
                        caption="report/gaussws_overhead.rst"),
            omd=update(f"{GW}/tables/overhead.md"),
            mcsv=report(update(f"{GW}/tables/memory.csv"), category="gaussws", subcategory="overhead and memory",
                        caption="report/gaussws_memory.rst"),
            mmd=update(f"{GW}/tables/memory.md"),
        params:
            runs=" ".join(gw_runs()),
            gpu=GW_GPU,
        shell:
            "python -m lowprec.report.gaussws overhead --runs {params.runs} --gpu {params.gpu} "
            "--csv {output.ocsv} --md {output.omd} && "
            "python -m lowprec.report.gaussws memory --runs {params.runs} --gpu {params.gpu} "
            "--csv {output.mcsv} --md {output.mmd}"

    rule gaussws_export_table:
        input:
            GW_EXPORT,
        output:
            csv=report(update(f"{GW}/tables/export.csv"), category="gaussws", subcategory="MX export",
                       caption="report/gaussws_export.rst"),
            md=update(f"{GW}/tables/export.md"),
        shell:
            "python -m lowprec.report.gaussws export --evals {input} --csv {output.csv} --md {output.md}"
