"""Choice lists the command line offers and the profiles and planner check: written once, imported cheaply.

Why a module of its own: the click options of ``submit`` and ``simulate`` are
built when summit_jobs.cli.submit is imported, and that import is on the path of
`summit-jobs --help`; reading these from summit_jobs.profiles.machines or
summit_jobs.planning.plan would load the profile and planner machinery for a help
text. Those modules import them from here under the same names. The launcher names
are the scheduler's (summit_jobs.schedulers.Scheduler.launchers): a profile's
``launcher.kind`` is checked against its own scheduler's list.
"""
from __future__ import annotations

#: How a job asks for its nodes: Summit's CSM ``-nnodes N``, or IBM's slot form ``-n S -R "span[ptile=P]"``.
REQUESTS = ("nnodes", "slots")
#: Resource-set layouts: one set per GPU, or one per node with all its GPUs (the profile's launcher.layout).
LAYOUTS = ("gpu", "node")
#: How staged shards are placed on the nodes' NVMe; the first is the default.
STAGE_POLICIES = ("partition", "replicate")
