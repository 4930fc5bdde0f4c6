import os

# lowprec: replication workflow for three low-precision training papers.
#   snakemake --cores all                         default: every paper at the tiny scale (CPU) -> results/REPORT.md
#   snakemake --cores all gaussws                 one paper (any configs/experiments/<id>)
#   snakemake --cores all --config scale=small    another scale (smoke | tiny | small | paper) -> results/REPORT_small.md
#   snakemake --profile configs/profiles/gpu      one GPU;  configs/profiles/slurm: a SLURM cluster
#   snakemake --report report.html                the figures and tables as one HTML report
#   snakemake regenerate --forceall --config reuse_runs=true   rebuild from committed runs, no training
#   snakemake --cores all --config retrain='[gaussws/gpt2/bf16/s0]'   train committed runs again (fnmatch)
# A run trains only when its folder is missing or incomplete, its resolved config changed, or
# `retrain` names it; committed runs are never rewritten otherwise (pipelines/common.smk).

configfile: os.path.join(workflow.basedir, "configs", "config.yaml")


include: "pipelines/keep_outputs.smk"
include: "pipelines/common.smk"
include: "pipelines/data.smk"
include: "pipelines/train.smk"
# a paper's own tables and figures, beside the generic ones: pipelines/<paper>.smk where it has one
for _smk in [f"pipelines/{p}.smk" for p in lpc.papers()]:
    if os.path.isfile(os.path.join(workflow.basedir, _smk)):

        include: _smk


include: "pipelines/report.smk"


report: "pipelines/report/workflow.rst"


rule all:
    default_target: True
    input:
        REPORT,  # results/REPORT.md at the default scale, results/REPORT_<scale>.md at the others
