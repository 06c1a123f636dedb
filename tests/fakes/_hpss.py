"""Shared parts of the fake ``hsi`` and ``htar``: a local folder plays the HPSS namespace.

FAKE_HPSS_ROOT        folder that holds the archive; HPSS path /a/b is FAKE_HPSS_ROOT/a/b
FAKE_HPSS_STATE       folder for call counters (fault injection across invocations)
FAKE_HPSS_FAIL_FIRST  the first N calls fail with a transient error (exit 72)
FAKE_HPSS_RATE        bytes per second a transfer may move (slow transfers for kill tests)
FAKE_HPSS_CORRUPT     a file name whose first transfer arrives with one byte flipped
FAKE_HPSS_LOG         append each command line here (tests check which members were asked for)
"""
import fcntl
import os
import shlex
import sys
import time
from pathlib import Path


def root() -> Path:
    r = os.environ.get("FAKE_HPSS_ROOT")
    if not r:
        sys.stderr.write("*** fake HPSS: FAKE_HPSS_ROOT is not set\n")
        sys.exit(64)
    return Path(r)


def hpss_path(p: str) -> Path:
    return root() / p.lstrip("/")


def log(argv) -> None:
    f = os.environ.get("FAKE_HPSS_LOG")
    if f:
        with open(f, "a") as fh:
            fh.write(shlex.join(argv) + "\n")


def _count(name: str) -> int:
    state = os.environ.get("FAKE_HPSS_STATE")
    if not state:
        return 0
    p = Path(state) / name
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)     # parallel transfers run several fakes at once
        n = int(os.read(fd, 64) or b"0")
        os.lseek(fd, 0, 0)
        os.ftruncate(fd, 0)
        os.write(fd, str(n + 1).encode())
        return n
    finally:
        os.close(fd)


def maybe_fail(prog: str) -> None:
    first = int(os.environ.get("FAKE_HPSS_FAIL_FIRST", "0") or 0)
    if first and _count("calls") < first:
        sys.stderr.write(f"*** {prog}: hpss_Open: Connection timed out [-5: HPSS_EIO]\n")
        sys.exit(72)


def corrupt_now(name: str) -> bool:
    target = os.environ.get("FAKE_HPSS_CORRUPT")
    return bool(target) and Path(name).name == target and _count("corrupt-" + target) == 0


def copy_stream(fin, fout, size: int, corrupt: bool = False) -> None:
    """Copy ``size`` bytes, throttled to FAKE_HPSS_RATE, optionally flipping the first byte."""
    rate = float(os.environ.get("FAKE_HPSS_RATE", "0") or 0)
    chunk = 1 << 20 if not rate else max(4096, int(rate / 20))
    left = size
    first = True
    while left > 0:
        data = fin.read(min(chunk, left))
        if not data:
            raise IOError("short read from the archive")
        if corrupt and first:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        first = False
        fout.write(data)
        fout.flush()
        left -= len(data)
        if rate:
            time.sleep(len(data) / rate)
