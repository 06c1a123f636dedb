"""Exact caches in the user's cache folder (``$XDG_CACHE_HOME/summit-jobs``): parsed YAML files as JSON.

Why: importing PyYAML costs more than everything else a dry run does to load
a machine profile, and a profile rarely changes; JSON is parsed by the
standard library's C decoder. Why it is never stale: an entry holds the whole
text it was parsed from, the identity of the parser (the files of the
installed PyYAML, found without importing it) and this module's format
number, and is used only when all three equal the current ones, so any edit
of the file (whatever its time stamp says) or of PyYAML parses anew. Only data
that JSON gives back exactly (mappings with text keys, lists, text, whole and
finite numbers, booleans, null) is cached; anything else is parsed every time.
Why it is safe: entries are written to a temporary name in the same folder and
renamed; an entry that cannot be read or does not fit is ignored and
rewritten; leftovers of a killed writer, and entries not rewritten for
MAX_AGE_S (files that moved or went away), are removed by the next write; no
cache folder (an unwritable home) just means no cache.
"""
from __future__ import annotations

import json
import math
import os
import time
import zlib
from typing import Any, Callable, Optional

#: Changes whenever an entry's layout or meaning changes: older entries are then ignored and rewritten.
FORMAT = 1
#: A temporary entry older than this is a killed writer's leftover.
STALE_TEMP_S = 600.0
#: An entry not rewritten for this long is removed at the next write (one parse again if its file is still used).
MAX_AGE_S = 30 * 24 * 3600.0
_TEMP_MARK = ".tmp-"


def user_cache_dir() -> str:
    """``$XDG_CACHE_HOME/summit-jobs``, else ``~/.cache/summit-jobs`` (nothing is created here)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "summit-jobs")


def yaml_identity() -> Optional[str]:
    """The installed PyYAML's files (name, size, time), without importing it; None when it cannot be found."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("yaml")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    folder = os.path.dirname(spec.origin)
    try:
        files = sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(folder) if e.is_file())
    except OSError:
        return None
    return json.dumps([folder, files])


def entry_path(kind: str, source: str) -> str:
    """Where the entry for file ``source`` lives: a name to find it by, never trusted for a match."""
    tag = zlib.crc32(source.encode("utf-8", "surrogateescape"))
    return os.path.join(user_cache_dir(), kind, f"{os.path.basename(source)}.{tag:08x}.json")


def exact_in_json(value: Any) -> bool:
    """Whether JSON gives ``value`` back unchanged, type for type."""
    if value is None or isinstance(value, (bool, str)):
        return True
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(exact_in_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and exact_in_json(v) for k, v in value.items())
    return False


def parsed(kind: str, source: str, text: str, identity: Optional[str], parse: Callable[[str], Any]) -> Any:
    """``parse(text)``, or what an earlier run parsed from this very text of ``source`` with the same parser.

    ``identity`` names the parser (None: no caching). Errors of ``parse``
    propagate and cache nothing.
    """
    if identity is None:
        return parse(text)
    source = os.path.abspath(source)
    path = entry_path(kind, source)
    key = {"format": FORMAT, "source": source, "parser": identity, "text": text}
    entry = _read(path)
    if entry is not None and all(entry.get(k) == v for k, v in key.items()) and "data" in entry:
        return entry["data"]
    data = parse(text)
    if exact_in_json(data):
        _write(path, dict(key, data=data))
    return data


def _read(path: str) -> Optional[dict]:
    """The entry at ``path``, or None when there is none or it is not a readable JSON object."""
    try:
        with open(path, "r", encoding="utf-8") as fh:
            entry = json.load(fh)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def _write(path: str, entry: dict) -> None:
    """Write ``entry`` atomically (temporary name, then rename); any failure just leaves no entry."""
    folder = os.path.dirname(path)
    tmp = os.path.join(folder, f".{os.path.basename(path)}{_TEMP_MARK}{os.getpid()}")
    try:
        os.makedirs(folder, exist_ok=True)
        _prune(folder)
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(entry, fh)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _prune(folder: str) -> None:
    """Remove a killed writer's temporary entries and entries too old to be worth keeping.

    Why at a write: writes are rare (a file parsed for the first time), and a
    folder of entries for paths that no longer exist (test runs, moved
    profiles) must not grow without end.
    """
    now = time.time()
    for e in os.scandir(folder):
        temp = e.name.startswith(".") and _TEMP_MARK in e.name
        try:
            if now - e.stat().st_mtime > (STALE_TEMP_S if temp else MAX_AGE_S):
                os.unlink(e.path)
        except OSError:
            pass
