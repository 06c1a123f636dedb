"""The compute hosts of an LSF job, read as its ranks and launchers must read them. Torch-free.

Shared by the trainer (rendezvous host, ranks per node) and the embedded
jsrun, so both apply one rule. Why a rule from the profile and not "drop the
first host": on CSM machines (Summit, Lassen) the allocation lists the launch
node first with one slot, but on a generic LSF cluster the first host is the
first execution host and runs rank 0; dropping it there points the
rendezvous at the wrong node and counts one node too few. The job script
exports the profile's rule:

- ``SUMMIT_JOBS_LSF_CSM=1``: the first host is the CSM launch node (dropped);
- ``SUMMIT_JOBS_LAUNCH_NODE_PREFIXES=batch,login``: host-name prefixes that are
  never compute nodes (dropped wherever they appear; empty: none).

Without them (a trainer started by hand) hosts named ``batch*``/``login*``
are dropped and nothing else. Hosts come from LSB_MCPU_HOSTS (``host slots
host slots ...``), else LSB_DJOB_HOSTFILE (one line per slot); never from
LSB_HOSTS, which LSF drops above 4,096 bytes and whose order need not match.
"""
from __future__ import annotations

from typing import List, Mapping, Tuple

CSM_VAR = "SUMMIT_JOBS_LSF_CSM"
PREFIXES_VAR = "SUMMIT_JOBS_LAUNCH_NODE_PREFIXES"
DEFAULT_PREFIXES = ("batch", "login")


def allocation(env: Mapping[str, str]) -> List[Tuple[str, int]]:
    """(host, slots) in LSF's order, from LSB_MCPU_HOSTS or the LSB_DJOB_HOSTFILE."""
    words = env.get("LSB_MCPU_HOSTS", "").split()
    if len(words) >= 2:
        return [(h, int(n)) for h, n in zip(words[0::2], words[1::2]) if n.isdecimal()]
    path = env.get("LSB_DJOB_HOSTFILE")
    if not path:
        return []
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [line.strip() for line in fh if line.strip()]
    except (OSError, UnicodeDecodeError):
        return []
    out: List[Tuple[str, int]] = []
    for host in lines:
        if out and out[-1][0] == host:
            out[-1] = (host, out[-1][1] + 1)
        else:
            out.append((host, 1))
    return out


def launch_prefixes(env: Mapping[str, str]) -> Tuple[str, ...]:
    if PREFIXES_VAR not in env:
        return DEFAULT_PREFIXES
    return tuple(p for p in env[PREFIXES_VAR].split(",") if p)


def compute_hosts(env: Mapping[str, str]) -> List[Tuple[str, int]]:
    """(host, slots) of the hosts that run ranks: the launch or batch node removed by the profile's rule."""
    pairs = allocation(env)
    if env.get(CSM_VAR) == "1" and len(pairs) > 1:
        pairs = pairs[1:]
    prefixes = launch_prefixes(env)
    return [(h, n) for h, n in pairs if not (prefixes and h.startswith(prefixes))]


def main() -> int:
    """``python -m trainer.lsf_hosts``: the job's compute hosts, space-separated, for job scripts
    (``blaunch -z "$HOSTS"``, the first one as torchrun's rendezvous host)."""
    import os
    import sys
    hosts = [h for h, _ in compute_hosts(os.environ)]
    if not hosts:
        print("trainer.lsf_hosts: no compute hosts: LSB_MCPU_HOSTS and LSB_DJOB_HOSTFILE are unset or list only "
              "launch nodes (run this inside an LSF job)", file=sys.stderr)
        return 1
    print(" ".join(hosts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
