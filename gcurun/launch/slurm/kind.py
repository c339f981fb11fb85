"""The Slurm launcher kind: every rank started by one srun step inside the allocation
gcurun runs in; the allocation is checked and the ranks bound by one srun probe."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gcurun.launch.api import LaunchPlan, RankGroup
from gcurun.launch.kinds import Bound, LauncherKind, Preview

if TYPE_CHECKING:
    from gcurun.launch.kinds import PreparedJob

# What --dry-run shows for the step name a run chooses at start.
PREVIEW_STEP_NAME = "gcurun-XXXXXXXXXXXX"


class SlurmKind(LauncherKind):
    """Ranks started by srun."""

    name = "slurm"
    own_launcher = False
    login_forwarding = True

    def bind(self, job: PreparedJob, environ: Mapping[str, str]) -> Bound:
        """Check the job against its allocation and bind every rank by one srun probe
        (skipped offline)."""
        from gcurun.launch.slurm.prepare import prepare_slurm

        return prepare_slurm(job.plan, job.settings, environ, connect=job.connected)

    def binds_remote_ranks_on_preflight(self, plan: LaunchPlan) -> bool:
        return True

    def unbound_text(self, job: PreparedJob) -> str:
        return "after the srun probe" if job.remote_unbound else "not bound"

    def preview(self, job: PreparedJob) -> Preview:
        """The srun argv a run would use (its step name is chosen at start)."""
        from gcurun.launch.slurm.rank_group import srun_command

        argv = srun_command(job, secrets={}, step_name=PREVIEW_STEP_NAME).argv
        return Preview(srun=tuple(argv))

    def rank_groups(self, job: PreparedJob, secrets: Mapping[str, str]) -> list[RankGroup]:
        from gcurun.launch.slurm.rank_group import slurm_groups

        return slurm_groups(job, secrets)
