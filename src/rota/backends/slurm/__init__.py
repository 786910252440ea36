"""Slurm pools: Rota hands jobs to a Slurm cluster through sbatch and follows them.

``script`` translates a job (sbatch argv, batch script, refusals), ``parse`` reads Slurm's
answers, ``engine`` runs the commands. See docs/pools-slurm.md.
"""

from rota.backends.slurm.engine import SlurmEngine

__all__ = ["SlurmEngine"]
