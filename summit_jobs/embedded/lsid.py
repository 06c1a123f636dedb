"""Embedded ``lsid``: the product, cluster and master lines of IBM's lsid, for the embedded LSF.

Why: ``summit-jobs doctor`` reads the LSF version from ``lsid`` on every site,
so the embedded LSF answers in IBM's layout (a product line ``<product>
<version>, <build>``, copyright lines, a blank line, ``My cluster name is
...``, ``My master name is ...``). The product line says what it is: an
emulation, not IBM software. Its version is the IBM LSF level whose commands
it offers to this tool (``bjobs -o ... -json`` came with 10.1 Fix Pack 2).
"""
from __future__ import annotations

import os
import sys
from typing import List, Optional

from summit_jobs import __version__

#: The IBM LSF level the embedded commands stand in for.
VERSION = "10.1.0.2"
#: LSB_EXEC_CLUSTER of its jobs (summit_jobs/embedded/jobenv.py).
CLUSTER = "embedded"


def lines() -> List[str]:
    master = os.uname().nodename.split(".")[0]
    return [f"summit-jobs embedded LSF {VERSION}, summit-jobs {__version__}",
            "Not IBM software: a single-machine stand-in for IBM Spectrum LSF 10.1's commands.",
            "", f"My cluster name is {CLUSTER}", f"My master name is {master}"]


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["-V"]:
        print(lines()[0], file=sys.stderr)          # IBM: -V prints the release to stderr
        return 0
    if args:
        print("Usage: lsid [-h] [-V]", file=sys.stderr)
        return 0 if args == ["-h"] else 255
    print("\n".join(lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
