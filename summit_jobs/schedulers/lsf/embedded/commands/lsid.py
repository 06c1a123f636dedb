"""Embedded ``lsid``: IBM's lsid layout (product line, two notice lines, cluster and master) for the embedded LSF.

Why: clients read the LSF version from ``lsid``'s first line in the form IBM
prints it, ``IBM Spectrum LSF Standard 10.1.0.13, Jan 04 2023`` (toil matches
``IBM Spectrum LSF Standard (.*),`` and uses ``bjobs -json`` only from
10.1.0.2 on; ``summit-jobs doctor`` reads the version on every site). So the
first line has that form, with the IBM LSF level whose commands the embedded
LSF offers (``bjobs -o ... -json`` came with 10.1 Fix Pack 2) and, as its
build date, the date of this installation of the embedded LSF. Where IBM
prints its copyright lines, the embedded LSF says what it is instead (it is
not IBM software, and claims no IBM copyright). Then a blank line, ``My
cluster name is ...`` and ``My master name is ...``, as on IBM's page
("lsid", IBM Spectrum LSF 10.1 Command Reference,
https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/lsid.1.html).
"""
from __future__ import annotations

import os
import sys
import time
from typing import List, Optional

from summit_jobs import __version__

#: The product, as the first word group of IBM's first line names it.
PRODUCT = "IBM Spectrum LSF Standard"
#: The IBM LSF level the embedded commands stand in for.
VERSION = "10.1.0.2"
#: LSB_EXEC_CLUSTER of its jobs (summit_jobs/schedulers/lsf/embedded/jobenv.py).
CLUSTER = "embedded"


def build_date() -> str:
    """The date of this installation of the embedded LSF (its module file's), in IBM's ``Jan 04 2023`` form."""
    try:
        stamp = os.stat(__file__).st_mtime
    except OSError:
        stamp = time.time()
    return time.strftime("%b %d %Y", time.localtime(stamp))


def lines() -> List[str]:
    master = os.uname().nodename.split(".")[0]
    return [f"{PRODUCT} {VERSION}, {build_date()}",
            f"Not IBM software: the embedded LSF of summit-jobs {__version__}, a single-machine stand-in",
            "for IBM Spectrum LSF 10.1's commands. No IBM copyright is claimed.",
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
