# Tables and figures per paper from run folders only, then the report, REPORT (results/REPORT.md at the
# default scale, results/REPORT_<scale>.md at the others; lowprec.report).

from lowprec.report.size_sweep import sweep_tables
from lowprec.report.speed import speed_inputs


def paper_run_files(paper):
    return [f"{d}/{f}" for d in run_dirs(paper) for f in lpc.RUN_FILES]


# Cross-method matrix: heat map of the final validation-loss gap to the baseline, method x model
# (the table is part of final_loss.md). Drawn for the experiments that cross every recipe with
# every model family.
MATRIX_PAPERS = [p for p in ("baselines",) if p in PAPERS]
for _paper in MATRIX_PAPERS:
    PAPER_EXTRA_OUTPUTS[_paper] += [f"{RESULTS}/{_paper}/{SCALE}/figures/loss_gap_matrix.png",
                                    f"{RESULTS}/{_paper}/{SCALE}/figures/loss_gap_matrix.pdf"]


def claims_registry(paper):
    """The paper's claims file (by absolute path: the workflow may run from another directory,
    -s .../Snakefile), or None for an experiment without claims (the cross-recipe matrix)."""
    path = os.path.abspath(lpc.CONFIG_DIR / "claims" / f"{paper}.yaml")
    return path if Path(path).exists() else None


def claim_measurements(paper):
    """The committed GPU measurements the paper's claims read (a new one redecides them)."""
    from lowprec.report.claims import committed_measurements
    return [str(p) for p in committed_measurements(paper)]


def paper_outputs(paper):
    base = f"{RESULTS}/{paper}/{SCALE}"
    claims = [f"{base}/tables/claims.csv", f"{base}/tables/claims.md"] if claims_registry(paper) else []
    return [f"{base}/figures/loss_curves.png", f"{base}/figures/loss_curves.pdf",
            f"{base}/tables/final_loss.csv", f"{base}/tables/final_loss.md"] + claims + PAPER_EXTRA_OUTPUTS.get(paper, [])


rule claims:
    input:
        runs=lambda w: paper_run_files(w.paper),
        extra=lambda w: PAPER_EXTRA_OUTPUTS.get(w.paper, []),
        registry=lambda w: [claims_registry(w.paper)] if claims_registry(w.paper) else [],
        measurements=lambda w: claim_measurements(w.paper),
    output:
        csv=report(update(f"{RESULTS}/{{paper}}/{SCALE}/tables/claims.csv"), category="{paper}",
                   subcategory="claims", caption="report/claims.rst"),
        md=update(f"{RESULTS}/{{paper}}/{SCALE}/tables/claims.md"),
    params:
        runs=lambda w: " ".join(run_dirs(w.paper)),
    shell:
        "python -m lowprec.report.claims --paper {wildcards.paper} --scale {SCALE} --results {RESULTS} "
        "--statistic {CLAIMS_STATISTIC} --runs {params.runs} --csv {output.csv} --md {output.md}"


rule loss_curves:
    input:
        lambda w: paper_run_files(w.paper),
    output:
        png=report(update(f"{RESULTS}/{{paper}}/{SCALE}/figures/loss_curves.png"), category="{paper}",
                   subcategory="loss curves", caption="report/loss_curves.rst"),
        pdf=update(f"{RESULTS}/{{paper}}/{SCALE}/figures/loss_curves.pdf"),
    params:
        runs=lambda w: " ".join(run_dirs(w.paper)),
        title=lambda w: shlex.quote(f"{lpc.experiment_config(w.paper)['title']} ({SCALE})"),
    shell:
        "python -m lowprec.report.curves --runs {params.runs} --title {params.title} --out {output.png} {output.pdf}"


rule final_loss_table:
    input:
        lambda w: paper_run_files(w.paper),
    output:
        csv=report(update(f"{RESULTS}/{{paper}}/{SCALE}/tables/final_loss.csv"), category="{paper}",
                   subcategory="loss curves", caption="report/final_loss.rst"),
        md=update(f"{RESULTS}/{{paper}}/{SCALE}/tables/final_loss.md"),
    params:
        runs=lambda w: " ".join(run_dirs(w.paper)),
        baseline=lambda w: lpc.experiment_config(w.paper).get("baseline", "bf16"),
    shell:
        "python -m lowprec.report.tables --runs {params.runs} --baseline {params.baseline} "
        "--csv {output.csv} --md {output.md}"


rule loss_gap_matrix:
    input:
        lambda w: paper_run_files(w.paper),
    output:
        png=report(update(f"{RESULTS}/{{paper}}/{SCALE}/figures/loss_gap_matrix.png"), category="{paper}",
                   subcategory="loss curves", caption="report/loss_gap_matrix.rst"),
        pdf=update(f"{RESULTS}/{{paper}}/{SCALE}/figures/loss_gap_matrix.pdf"),
    params:
        runs=lambda w: " ".join(run_dirs(w.paper)),
        baseline=lambda w: lpc.experiment_config(w.paper).get("baseline", "bf16"),
        title=lambda w: shlex.quote(f"{lpc.experiment_config(w.paper)['title']} ({SCALE})"),
    shell:
        "python -m lowprec.report.matrix --runs {params.runs} --baseline {params.baseline} --title {params.title} "
        "--out {output.png} {output.pdf}"


# The committed GPU training-speed benchmarks the report's last section shows (a new measurement
# rebuilds the report); none in a results folder without the reference file.
SPEED_TABLE = [str(p) for p in speed_inputs(Path(RESULTS))]
# and the committed size-sweep tables of the scale (lowprec.sweep table)
SWEEP_TABLES = [str(t) for _, t in sweep_tables(Path(RESULTS), SCALE)]


rule report_md:
    input:
        [f for p in PAPERS for f in paper_outputs(p)] + SPEED_TABLE + SWEEP_TABLES,
    output:
        update(REPORT),
    params:
        papers=" ".join(f"--paper {p} {','.join(run_dirs(p))}" for p in PAPERS),
        # under REUSE_RUNS: the runs of the grid that are not committed, listed in the report
        missing=" ".join(f"--missing {p} {','.join(dirs)}" for p, dirs in MISSING_RUNS.items() if dirs),
    shell:
        "python -m lowprec.report.build --results {RESULTS} --scale {SCALE} {params.papers} {params.missing} "
        "--out {output}"


def _regenerate_input(w):
    if not REUSE_RUNS:
        raise lpc.ConfigError("target regenerate rebuilds from committed run folders and never trains; "
                              "add --config reuse_runs=true (e.g. snakemake regenerate --forceall "
                              "--config scale=small reuse_runs=true)")
    return REPORT


# Every table, figure, claim verdict and the report (REPORT) of the selected papers from the run folders
# under results/runs/<scale>/ that are committed, without training (REUSE_RUNS). --forceall rebuilds
# outputs that exist.
rule regenerate:
    input:
        _regenerate_input,


# one target per experiment of configs/experiments/ (`snakemake <paper>`), empty unless selected
for _paper in lpc.papers():

    rule:
        name:
            _paper
        input:
            paper_outputs(_paper) if _paper in PAPERS else [],


# `snakemake --report` collects existing files: every table and figure of the selected papers at
# this scale must be here (committed, or built by `snakemake regenerate`), or the report names them.
if REPORTING:
    _absent = [f for p in PAPERS for f in paper_outputs(p) + [REPORT] if not Path(f).exists()]
    if _absent:
        raise lpc.ConfigError(
            f"--report collects the tables and figures of scale {SCALE}, but {len(_absent)} are not here: "
            + ", ".join(_absent[:8]) + (" ..." if len(_absent) > 8 else "")
            + f"; build them first: snakemake regenerate --forceall --cores all --config scale={SCALE} reuse_runs=true")


# Before any job runs (never in a dry run): a table or figure that this workflow does not build
# because its runs are not committed (UNBUILT_OUTPUTS: a fine-tuning table after its runs went stale)
# is removed where an earlier build left it, so that no claim or report reads numbers of runs that
# are no longer this grid's. Only these derived files: never a run folder.
onstart:
    _leftovers = [p for p in UNBUILT_OUTPUTS if os.path.isfile(p)]
    for _p in _leftovers:
        os.remove(_p)
    if _leftovers:
        logger.warning(f"removed {len(_leftovers)} output(s) of an earlier build whose runs are not committed "
                       "under this grid's config (git restores them):\n  " + "\n  ".join(_leftovers))
