"""Every environment variable a site profile sets is one that its library reads.

Why: a variable no release reads changes nothing and looks like tuning. The
public OLCF script the Summit profile came from also set
HOROVOD_GROUPED_ALLREDUCES=1, which no Horovod release has ever read; a
copied profile would carry it on as if it did something. So the profiles
(envs/*.yaml, ``environment.variables``) may set only the variables below,
each with the place in its library's source where it is read (checked in the
releases the profiles name: Horovod 0.28.1, NCCL 2.14.3 (torch 2.0.1's) and
the current NCCL). A variable missing here is checked in its library's
source, then added with that place.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROFILES = sorted((REPO / "envs").glob("*.yaml"))

HOROVOD_OPS = "horovod/horovod horovod/common/operations.cc (std::getenv; the name in horovod/common/common.h)"
NCCL = "NVIDIA/nccl"

#: The variables a profile may set -> where its library reads it (repository, path).
READ_BY: Dict[str, str] = {
    "HOROVOD_FUSION_THRESHOLD": HOROVOD_OPS,
    "HOROVOD_CYCLE_TIME": HOROVOD_OPS,
    "HOROVOD_HIERARCHICAL_ALLREDUCE": HOROVOD_OPS,
    "HOROVOD_HIERARCHICAL_ALLGATHER": HOROVOD_OPS,
    "HOROVOD_CACHE_CAPACITY": HOROVOD_OPS,
    "HOROVOD_NUM_NCCL_STREAMS": HOROVOD_OPS,
    "HOROVOD_TIMELINE": HOROVOD_OPS,
    "NCCL_DEBUG": f"{NCCL} src/debug.cc (getenv in 2.14; NCCL_DEBUG param in current releases)",
    "NCCL_IB_HCA": f"{NCCL} src/transport/net_ib.cc (2.14), src/transport/net_ib/init.cc (current)",
    "NCCL_IB_DISABLE": f"{NCCL} src/transport/net_ib.cc (NCCL_PARAM IbDisable, \"IB_DISABLE\")",
    # Slurm and ROCm sites (envs/perlmutter.yaml, envs/frontier.yaml): each is a documented variable of its
    # library; the pages are the profiles' references (OLCF's Frontier user guide, NERSC's running-jobs pages).
    "SLURM_CPU_BIND": "SchedMD/slurm src/srun/ (srun's input variable for --cpu-bind, srun(1) INPUT ENVIRONMENT VARIABLES)",
    "NCCL_CROSS_NIC": f"{NCCL} src/graph/search.cc (NCCL_PARAM CrossNic); RCCL keeps the name",
    "MIOPEN_USER_DB_PATH": "ROCm/MIOpen src/ (the user performance-database folder; docs: 'Using the performance database')",
    "MIOPEN_CUSTOM_CACHE_DIR": "ROCm/MIOpen src/ (the kernel cache folder; docs: 'Kernel cache')",
    "HSA_FORCE_FINE_GRAIN_PCIE": "ROCm/ROCR-Runtime src/ (the runtime's flags; HSA_FORCE_FINE_GRAIN_PCIE)",
    "FI_MR_CACHE_MONITOR": "ofiwg/libfabric prov/util/ (the memory-registration cache monitor, fi_mr(3))",
    "FI_CXI_DISABLE_HOST_REGISTER": "ofiwg/libfabric prov/cxi/ (the CXI provider's variables, fi_cxi(7))",
    "FI_CXI_DEFAULT_CQ_SIZE": "ofiwg/libfabric prov/cxi/ (the CXI provider's variables, fi_cxi(7))",
    "NCCL_SOCKET_IFNAME": f"{NCCL} src/misc/socket.cc",
    "NCCL_NET_GDR_LEVEL": f"{NCCL} src/graph/paths.cc (ncclGetLevel)",
    "OMP_NUM_THREADS": "gcc-mirror/gcc libgomp/env.c (parse_unsigned_long_list); pytorch/pytorch "
                       "torch/distributed/run.py sets it for torchrun's ranks when unset",
}
#: Variables that look like tuning but that no release of their library reads.
READ_BY_NONE: Dict[str, str] = {
    "HOROVOD_GROUPED_ALLREDUCES": "no Horovod release reads it (grouped allreduce is an API: "
                                  "hvd.grouped_allreduce, or HOROVOD_DISABLE_GROUP_FUSION)",
}


def profile_variables(path: Path) -> Dict[str, str]:
    data = yaml.safe_load(path.read_text()) or {}
    return dict(((data.get("environment") or {}).get("variables") or {}))


def unread(variables: Dict[str, str]) -> List[str]:
    """The variables of one profile that are not known to be read, each with why."""
    out = []
    for name in variables:
        if name in READ_BY_NONE:
            out.append(f"{name}: {READ_BY_NONE[name]}")
        elif name not in READ_BY:
            out.append(f"{name}: not in tests/planning/test_profile_env_vars.py READ_BY; find where its library reads it")
    return out


def test_the_profiles_are_found():
    assert {p.stem for p in PROFILES} >= {"summit", "lassen", "lsf-gpu", "janelia-h100", "minerva-h100", "local"}


@pytest.mark.parametrize("profile", PROFILES, ids=[p.stem for p in PROFILES])
def test_every_variable_a_profile_sets_is_read_by_its_library(profile):
    bad = unread(profile_variables(profile))
    assert not bad, f"{profile.relative_to(REPO)} sets variables no library reads:\n" + "\n".join(bad)


def test_the_check_names_a_variable_no_release_reads():
    assert unread({"HOROVOD_GROUPED_ALLREDUCES": "1", "NCCL_DEBUG": "WARN"}) == \
        [f"HOROVOD_GROUPED_ALLREDUCES: {READ_BY_NONE['HOROVOD_GROUPED_ALLREDUCES']}"]
    assert unread({"HOROVOD_FUSION_THRESHOLD_MB": "64"})[0].startswith("HOROVOD_FUSION_THRESHOLD_MB: not in")


def test_every_source_names_a_repository_and_a_path():
    for name, where in READ_BY.items():
        repo, path = where.split()[:2]
        assert repo.count("/") == 1 and "/" in path, (name, where)
