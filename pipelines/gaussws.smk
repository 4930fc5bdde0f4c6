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
    GW_EXACTNESS_OUT = ReportOutputs("gaussws", "noise bits", {
        "png": (f"{GW}/figures/exactness.png", "gaussws_exactness"), "pdf": f"{GW}/figures/exactness.pdf",
        "csv": (f"{GW}/tables/exactness.csv", "gaussws_exactness_table"), "md": f"{GW}/tables/exactness.md",
    })
    GW_OVERHEAD_OUT = ReportOutputs("gaussws", "overhead and memory", {
        "csv": (f"{GW}/tables/overhead.csv", "gaussws_overhead"), "md": f"{GW}/tables/overhead.md",
    }, prefix="overhead_")
    GW_MEMORY_OUT = ReportOutputs("gaussws", "overhead and memory", {
        "csv": (f"{GW}/tables/memory.csv", "gaussws_memory"), "md": f"{GW}/tables/memory.md",
    }, prefix="memory_")
    # a table from per-run files only where some are committed (always when training)
    GW_EXPORT_OUT = ReportOutputs("gaussws", "MX export", {
        "csv": (f"{GW}/tables/export.csv", "gaussws_export"), "md": f"{GW}/tables/export.md",
    }, listed=not REUSE_RUNS or bool(GW_EXPORT))

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
            **GW_EXACTNESS_OUT.rule,
        shell:
            "python -m lowprec.report.gaussws exactness --evals {input} " + GW_EXACTNESS_OUT.flags

    rule gaussws_overhead_memory:
        input:
            [f"{d}/provenance.json" for d in gw_runs()],
        output:
            **GW_OVERHEAD_OUT.rule,
            **GW_MEMORY_OUT.rule,
        params:
            runs=" ".join(gw_runs()),
            gpu=GW_GPU,
        shell:
            "python -m lowprec.report.gaussws overhead --runs {params.runs} --gpu {params.gpu} "
            + GW_OVERHEAD_OUT.flags + " && "
            "python -m lowprec.report.gaussws memory --runs {params.runs} --gpu {params.gpu} " + GW_MEMORY_OUT.flags

    rule gaussws_export_table:
        input:
            GW_EXPORT,
        output:
            **GW_EXPORT_OUT.rule,
        shell:
            "python -m lowprec.report.gaussws export --evals {input} " + GW_EXPORT_OUT.flags
