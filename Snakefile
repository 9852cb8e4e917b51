# lengthgen: The Role of Sparsity for Length Generalization in Transformers, as a workflow.
# This file is a table of contents; the package in src/lengthgen does the work.
from snakemake.utils import min_version

min_version("9.0")


# The configuration is config.yaml beside this file, under --configfile and --config: read and
# checked by workflow/rules/common.smk, so that errors name the file and line.


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/lifecycle.smk"
include: "workflow/rules/cells.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/aggregate.smk"


if CONFIG["language"]:

    include: "workflow/rules/language.smk"


if CONFIG["attention"]:

    include: "workflow/rules/attention.smk"


onstart:
    check_machine()
    start_warm()


onsuccess:
    stop_warm()


onerror:
    stop_warm()
    explain_failure()


rule all:
    default_target: True
    input:
        finished_outputs(),
        results("checksums.json"),
        missing_intermediates(),
