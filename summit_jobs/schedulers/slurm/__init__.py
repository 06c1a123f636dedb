"""Slurm: the second implementation of the scheduler interface (summit_jobs.schedulers): ``scheduler``'s
SlurmScheduler over ``client``'s command lines and parsers (sbatch, squeue, sacct, scancel), and a real Slurm
test cluster on one machine (``localcluster``: MUNGE, slurmctld and several slurmd nodes, each node in its
own UTS and mount namespaces) that its tests and users start and stop.

May import errors, the profiles and the trainer's torch-free contract, like the LSF package; never planning,
runs or cli. ``localcluster`` uses the standard library and errors only: the test fixtures import it.
"""
