# Before the first job and after the last: the check of what this machine must have, and the
# warm-start server (lengthgen.support.warm), from which a local run's jobs fork with torch
# already imported. Cluster jobs and conda environments run in interpreters of their own, so
# they start cold.
from snakemake.settings.types import DeploymentMethod

WARM = []


def start_warm():
    uses_conda = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    if CONFIG["warm_start"] and workflow.local_exec and not uses_conda:
        from lengthgen.support import warm

        handle = warm.start(".snakemake/lengthgen-warm.log", CONFIG["threads"])
        if handle:
            WARM.append(handle)


def stop_warm():
    from lengthgen.support import warm

    while WARM:
        warm.stop(*WARM.pop())


def check_machine():
    """Stop in one line, before any job runs or any output is deleted, when a setting needs what
    this machine lacks (lengthgen.config.check_machine) or its disk is full. Runs in `onstart`:
    a dry run, and a cluster run's submitting node, may plan for other machines."""
    if not workflow.local_exec:
        return
    rules = {job.rule.name for job in workflow.dag.needrun_jobs()}
    try:
        lgconfig.check_machine(CONFIG, rules)
        if rules:
            lgfileio.check_free_space(RESULTS)
    except UserError as err:
        sys.exit(f"lengthgen: error: {err}")


def explain_failure():
    """After a failed local run: one line naming a disk that filled during it."""
    if workflow.local_exec and (line := lgfileio.full_disk(RESULTS)):
        print(f"lengthgen: error: {line}", file=sys.stderr)
