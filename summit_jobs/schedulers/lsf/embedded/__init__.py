"""The embedded single-machine LSF: bsub, bjobs, bkill, jsrun and blaunch for the ``local`` profile.

This machine pretends to be a small LSF cluster: ``SUMMIT_JOBS_LSF_NODES``
virtual nodes, each with ``SUMMIT_JOBS_LSF_CORES`` cores, an NVMe folder of
its own and a loopback address of its own (``127.1.0.1``...,
state.node_address). Its host name is ``vnode1``, ``vnode2``...: its tasks
run in namespaces where gethostname() is that name and the name resolves to
the node's address (vnode_ns); where namespaces are unavailable, the address
is the name. A ``-nnodes`` job gets whole nodes
behind a launch node ``batch1`` listed first, as on Summit; a ``-n`` job gets
slots placed by ``-R span[...]`` with no launch node, as on other LSF
clusters. Jobs run for real: each job gets a detached supervisor process
(supervisor.py) that keeps it PEND until its ``-w`` dependency holds and
nodes are free, runs the script with LSF's variables (jobenv.py), delivers
the ``-wa`` warning signal and enforces ``-W`` (SIGUSR2 at the limit,
terminated after a grace of 10 LSF minutes), and carries out bkill (SIGINT,
SIGTERM, SIGKILL). jsrun and blaunch start real task processes (tasks.py).

The commands are small shims in ``bin/`` that run these modules with
``$SUMMIT_JOBS_PYTHON``. They are put on PATH only for the embedded LSF's own
jobs and for the host layer's subprocesses (summit_jobs.hosts.host), never installed
on a user's PATH; ``summit-jobs lsf env`` and ``summit-jobs lsf shell`` put them
there for one shell, when the user asks (cli_lsf.py). To reach the embedded LSF over SSH (as the tests do), the remote
session needs ``bin/`` on PATH and SUMMIT_JOBS_PYTHON set, e.g. through
``environment="..."`` options of the authorized key with
``PermitUserEnvironment yes``, just as a real login node has LSF on PATH.

State lives in ``SUMMIT_JOBS_LSF_HOME`` under a file lock; all settings
(time scale SUMMIT_JOBS_LSF_MINUTE for fast tests, terminate interval,
run-limit grace, clean period) are described in state.py. Every known
difference from IBM LSF is listed in docs/embedded-lsf.md.
"""
