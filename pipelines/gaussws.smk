# GaussWS (arXiv 2505.11170): the 9-bit exactness figure, overhead, memory and post-training export
# tables (lowprec.report.gaussws), on top of the generic loss curves and final-loss table.

GW_EXPORTS = ["none", "mxfp8", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4"]
# committed H200 measurement (overhead and memory), read wherever the workflow runs
GW_GPU = os.path.join(workflow.basedir, "results", "gaussws", "overhead_h200.csv")

if "gaussws" in PAPERS:
    GW = f"{RESULTS}/gaussws/{SCALE}"

    def gw_runs(method=None):
        return [c["output_dir"] for k, c in RUNS.items() if k[0] == "gaussws" and (method is None or k[2] == method)]

    # per-run evaluations of the checkpoints (rules below when training; committed under REUSE_RUNS)
    GW_EXACTNESS = run_files(gw_runs("bf16"), "exactness.csv", "exactness figure and table")
    GW_EXPORT = run_files(gw_runs(), "export.csv", "export table")

    # the exactness figure always has its analytic reference (the 9-bit claim reads it); trained
    # weights join it from whichever runs' exactness.csv exist
    PAPER_EXTRA_OUTPUTS["gaussws"] += [f"{GW}/figures/exactness.png", f"{GW}/figures/exactness.pdf",
                                       f"{GW}/tables/exactness.csv"]
    # a table from per-run files only where some are committed (always when training)
    PAPER_EXTRA_OUTPUTS["gaussws"] += [f"{GW}/tables/overhead.csv", f"{GW}/tables/overhead.md",
                                       f"{GW}/tables/memory.csv", f"{GW}/tables/memory.md"]
    if not REUSE_RUNS or GW_EXPORT:
        PAPER_EXTRA_OUTPUTS["gaussws"] += [f"{GW}/tables/export.csv", f"{GW}/tables/export.md"]

    # These two read the run's checkpoint, which is not committed: under REUSE_RUNS the run
    # folder's export.csv and exactness.csv are committed inputs instead.
    if not REUSE_RUNS:

        rule gaussws_export_eval:
            input:
                f"{RESULTS}/runs/{SCALE}/gaussws/{{model}}/{{method}}/s{{seed}}/provenance.json",
            output:
                f"{RESULTS}/runs/{SCALE}/gaussws/{{model}}/{{method}}/s{{seed}}/export.csv",
            params:
                run=lambda w: f"{RESULTS}/runs/{SCALE}/gaussws/{w.model}/{w.method}/s{w.seed}",
                formats=" ".join(GW_EXPORTS),
            shell:
                "python -m lowprec.evaluate --run {params.run} --export {params.formats} --out {output}"

        rule gaussws_exactness_run:
            input:
                f"{RESULTS}/runs/{SCALE}/gaussws/{{model}}/{{method}}/s{{seed}}/provenance.json",
            output:
                f"{RESULTS}/runs/{SCALE}/gaussws/{{model}}/{{method}}/s{{seed}}/exactness.csv",
            params:
                run=lambda w: f"{RESULTS}/runs/{SCALE}/gaussws/{w.model}/{w.method}/s{w.seed}",
            shell:
                "python -m lowprec.report.gaussws exactness-run --runs {params.run} --csv {output}"

    rule gaussws_exactness:
        input:
            GW_EXACTNESS,
        output:
            png=report(f"{GW}/figures/exactness.png", category="gaussws", subcategory="noise bits",
                       caption="report/gaussws_exactness.rst"),
            pdf=f"{GW}/figures/exactness.pdf",
            csv=f"{GW}/tables/exactness.csv",
        shell:
            "python -m lowprec.report.gaussws exactness --evals {input} --csv {output.csv} "
            "--png {output.png} --pdf {output.pdf}"

    rule gaussws_overhead_memory:
        input:
            [f"{d}/provenance.json" for d in gw_runs()],
        output:
            ocsv=f"{GW}/tables/overhead.csv",
            omd=f"{GW}/tables/overhead.md",
            mcsv=f"{GW}/tables/memory.csv",
            mmd=f"{GW}/tables/memory.md",
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
            csv=f"{GW}/tables/export.csv",
            md=f"{GW}/tables/export.md",
        shell:
            "python -m lowprec.report.gaussws export --evals {input} --csv {output.csv} --md {output.md}"
