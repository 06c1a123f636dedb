"""Which hosts run ranks: the profile's rule, not "drop the first host".

Host lists are written as LSF prints them (platform facts: Summit's
``batch2 1 h22n07 42 h22n08 42 `` with its trailing space; a generic cluster's
``grid03 1 grid05 1 grid01 2``; a hostfile with one line per slot).
"""
from __future__ import annotations

import pytest

from trainer.dist import engines
from trainer import lsf_hosts

SUMMIT = {"LSB_MCPU_HOSTS": "batch2 1 h22n07 42 h22n08 42 ", "SUMMIT_JOBS_LSF_CSM": "1",
          "SUMMIT_JOBS_LAUNCH_NODE_PREFIXES": "batch,login"}
GENERIC = {"LSB_MCPU_HOSTS": "grid03 1 grid05 1 grid01 2", "SUMMIT_JOBS_LSF_CSM": "0",
           "SUMMIT_JOBS_LAUNCH_NODE_PREFIXES": ""}


def test_csm_drops_the_launch_node():
    assert lsf_hosts.compute_hosts(SUMMIT) == [("h22n07", 42), ("h22n08", 42)]
    assert engines.rendezvous_addr(SUMMIT) == "h22n07"


def test_generic_lsf_keeps_the_first_host_which_runs_rank_0():
    assert lsf_hosts.compute_hosts(GENERIC) == [("grid03", 1), ("grid05", 1), ("grid01", 2)]
    assert engines.rendezvous_addr(GENERIC) == "grid03"


def test_csm_launch_node_named_like_a_compute_node_is_still_dropped():
    env = {"LSB_MCPU_HOSTS": "lassen709 1 lassen12 44 lassen13 44", "SUMMIT_JOBS_LSF_CSM": "1",
           "SUMMIT_JOBS_LAUNCH_NODE_PREFIXES": "batch,login"}
    assert [h for h, _ in lsf_hosts.compute_hosts(env)] == ["lassen12", "lassen13"]


def test_without_the_rule_only_batch_and_login_names_are_dropped():
    assert [h for h, _ in lsf_hosts.compute_hosts({"LSB_MCPU_HOSTS": "batch2 1 h1 42"})] == ["h1"]
    assert [h for h, _ in lsf_hosts.compute_hosts({"LSB_MCPU_HOSTS": "n1 4 n2 4"})] == ["n1", "n2"]


def test_hostfile_one_line_per_slot(tmp_path):
    hostfile = tmp_path / "1700000000.123.hostfile"
    hostfile.write_text("gpu01\ngpu01\ngpu02\ngpu02\n")
    env = {"LSB_DJOB_HOSTFILE": str(hostfile), "SUMMIT_JOBS_LAUNCH_NODE_PREFIXES": ""}
    assert lsf_hosts.compute_hosts(env) == [("gpu01", 2), ("gpu02", 2)]


def test_lsb_hosts_alone_is_not_read():
    """LSF drops LSB_HOSTS above 4,096 bytes, and its order need not match: never the source."""
    assert lsf_hosts.compute_hosts({"LSB_HOSTS": "a a b b"}) == []


def test_local_size_counts_the_compute_hosts():
    env = dict(GENERIC, LSB_MCPU_HOSTS="n1 2 n2 2", JSM_NAMESPACE_RANK="3", JSM_NAMESPACE_SIZE="4")
    assert engines.launch_from_env(env).local_size == 2


@pytest.mark.parametrize("machine,csm,prefixes", [("summit", "1", "batch,login"), ("lassen", "1", "batch,login"),
                                                  ("local", "1", "batch")])
def test_scripts_export_the_profiles_rule(machine, csm, prefixes):
    from summit_jobs.profiles import machines
    from summit_jobs.planning import render
    from summit_jobs.planning.plan import JobOptions, make_plan
    plan = make_plan(machines.load(machine), JobOptions(nodes=2, run_dir="/gpfs/r", project="ABC123"))
    script = render.render(plan)
    assert f"export SUMMIT_JOBS_LSF_CSM={csm}\n" in script
    assert f"export SUMMIT_JOBS_LAUNCH_NODE_PREFIXES={prefixes}\n" in script
