# What a failed job leaves behind. Every output that may be committed (a run's files, a per-run
# evaluation, a table, figure or report) is flagged update(). Snakemake (9.x) deletes a job's
# outputs before the job runs and again when it fails (snakemake/jobs.py: Job.prepare,
# Job.postprocess, Job.cleanup); an update() output it does not delete: it copies the file aside
# before the job and back when the job fails, so a failed job leaves the file byte for byte as it
# was (our writers replace a file only when it is complete: lowprec.io). Two corrections make the
# failed job run again next time, as it would had the file been deleted:
#   - Snakemake's copies take the time of copying, so the restored file would look newer than its
#     inputs: the backup and the restore keep the file's times;
#   - Snakemake records a failed job's metadata like a finished one's (persistence.finished, with
#     the checksums of its inputs, which then count as unchanged): a restored file's record is
#     deleted after it is written.
import os
import shutil
from pathlib import Path

from snakemake.logging import logger


def _keep_failed_outputs_outdated():
    try:
        from snakemake.persistence import PersistenceBase as persistence

        backup, restore, finished = persistence.backup_output, persistence.restore_output, persistence.finished
        backup_path, forget = persistence._get_backup_path, persistence.cleanup_metadata
    except (ImportError, AttributeError):
        logger.warning("this Snakemake restores the outputs of failed jobs differently from 9.x: an output "
                       "restored after a failed job may look up to date; delete it to rebuild it")
        return
    if getattr(finished, "forgets_restored", False):  # the Snakefile was read before in this process
        return
    restored = set()

    def backup_output(self, path):
        backup(self, path)
        if Path(path).is_file():
            shutil.copystat(path, backup_path(self, Path(path)))

    def restore_output(self, path):
        saved = backup_path(self, Path(path))
        times = (saved.stat().st_atime_ns, saved.stat().st_mtime_ns) if saved.is_file() else None
        done = restore(self, path)
        if done:
            restored.add(os.path.normpath(path))
            if times:
                os.utime(path, ns=times)
        return done

    async def finished_job(self, job):
        await finished(self, job)
        for f in job.output:
            if os.path.normpath(f) in restored:
                restored.discard(os.path.normpath(f))
                forget(self, f)

    finished_job.forgets_restored = True
    persistence.backup_output, persistence.restore_output, persistence.finished = (
        backup_output, restore_output, finished_job)


_keep_failed_outputs_outdated()
