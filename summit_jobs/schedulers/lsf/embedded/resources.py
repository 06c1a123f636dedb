"""What a job asks of its hosts beyond slots: GPUs (``-gpu``), memory (``-M``, ``-R rusage[mem=]``), ``-app``.

Parsed and checked the way IBM LSF 10.1 reads them, so that a request LSF
would refuse is refused here too, with the offending word named:

* ``-gpu "num=N:mode=shared|exclusive_process:mps=yes|no:j_exclusive=yes|no:
  gmodel=NAME:gmem=SIZE"`` (``-gpu -``: the defaults, ``num=1:mode=shared:
  mps=no:j_exclusive=no``); ``num`` is GPUs per host;
* ``-M LIMIT``: KB unless a unit says otherwise (LSF_UNIT_FOR_LIMITS=KB);
* ``-R`` sections: ``select[...]`` on a node's memory, cores and GPUs,
  ``span[...]`` and ``rusage[mem=X]`` (MB unless a unit says otherwise) are
  honoured, every other section is refused, so a
  requirement is never silently dropped. ``rusage[ngpus_excl_p=N]`` is
  LSF's legacy GPU form, refused with ``-gpu`` named as its replacement.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

#: LSF 10.1's default GPU requirement.
GPU_DEFAULTS: Dict[str, object] = {"num": 1, "mode": "shared", "mps": "no", "j_exclusive": "no"}
GPU_CHOICES = {"mode": ("shared", "exclusive_process"), "mps": ("yes", "no"), "j_exclusive": ("yes", "no")}
GPU_KEYWORDS = ("num", "mode", "mps", "j_exclusive", "gmodel", "gmem")
#: Units a memory amount may carry, in KB.
UNITS_KB = {"KB": 1, "MB": 1024, "GB": 1024 ** 2, "TB": 1024 ** 3}
AMOUNT_RE = re.compile(r"^([0-9]+)\s*([KMGT]B?)?$", re.IGNORECASE)
RES_SECTION_RE = re.compile(r"\s*([a-z_]+)\[([^\[\]]*)\]\s*")
HONOURED = "select[mem>X && ncpus>=N], span[ptile=N], span[hosts=1] and rusage[mem=X]"
MAX_GPUS = 64


class ResourceError(Exception):
    """A resource request LSF would refuse; the text names the value."""


#: What a number of more than 18 digits is read as: larger than every limit of this LSF.
HUGE = 10 ** 18


def whole_number(text: str) -> Optional[int]:
    """``text`` as a whole number when it is ASCII digits (surrounding blanks allowed), else None.

    Why not ``str.isdecimal`` and ``int``: both take any script's digits (``int('٣')`` is 3), which LSF
    does not read as a number; and ``int`` of thousands of digits is slow and then refused by Python with
    a ValueError. A number longer than 18 digits is read as HUGE, beyond every limit, so it is refused
    by the limit it breaks.
    """
    digits = text.strip()
    if not digits or not all("0" <= c <= "9" for c in digits):
        return None
    return int(digits) if len(digits) <= 18 else HUGE


def parse_gpu(text: str) -> Dict[str, object]:
    """``-gpu`` as a dict of its keywords (defaults filled in); each keyword at most once."""
    spec = text.strip()
    req: Dict[str, object] = dict(GPU_DEFAULTS)
    if spec == "-":
        return req
    seen: List[str] = []
    for item in spec.split(":"):
        key, eq, value = (p.strip() for p in item.partition("="))
        if key not in GPU_KEYWORDS:
            raise ResourceError(f'-gpu "{text}": unknown keyword {key!r} in the GPU requirement '
                                f"(LSF's keywords: {', '.join(GPU_KEYWORDS)})")
        if not eq or not value or key in seen:
            raise ResourceError(f'-gpu "{text}": {key} needs one value ({key}=...)')
        seen.append(key)
        req[key] = _gpu_value(text, key, value)
    return req


def _gpu_value(text: str, key: str, value: str) -> object:
    """One keyword's value, checked against what LSF accepts for it."""
    if key == "num":
        if not 1 <= (whole_number(value) or 0) <= MAX_GPUS:
            raise ResourceError(f'-gpu "{text}": num={value!r} must be a whole number of GPUs per host '
                                f"from 1 to {MAX_GPUS}")
        return int(whole_number(value) or 0)
    if key in GPU_CHOICES:
        if value not in GPU_CHOICES[key]:
            raise ResourceError(f'-gpu "{text}": {key}={value!r} must be one of {"|".join(GPU_CHOICES[key])}')
        return value
    if key == "gmem":
        return memory_kb(value, f'-gpu "{text}": gmem', "MB") // 1024
    if not re.fullmatch(r"[A-Za-z0-9_.+*-]+", value):
        raise ResourceError(f'-gpu "{text}": gmodel={value!r} is not a GPU model name')
    return value


def memory_kb(text: str, what: str, default_unit: str) -> int:
    """A memory amount in KB: a whole number with an optional unit (KB, MB, GB, TB; K, M, G, T)."""
    m = AMOUNT_RE.fullmatch(str(text).strip())
    if not m or (whole_number(m.group(1)) or 0) <= 0:
        raise ResourceError(f"{what} {text!r}: give a positive whole number with an optional unit "
                            f"(KB, MB, GB, TB; {default_unit} without one)")
    unit = (m.group(2) or default_unit).upper()
    return int(whole_number(m.group(1)) or 0) * UNITS_KB[unit if unit.endswith("B") else unit + "B"]


#: Resources a ``select[]`` may name here, what each is on a virtual node (IBM's built-in indices).
SELECT_RESOURCES = ("mem", "maxmem", "ncpus", "maxslots", "ngpus")
SELECT_TERM_RE = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|==|!=|=|>|<)\s*([0-9]+\s*[KMGT]?B?)\s*$", re.IGNORECASE)


def parse_select(res_req: str, body: str) -> List[Tuple[str, str, int]]:
    """The terms of ``select[...]``: (resource, operator, value; memory in MB), joined by ``&&`` or ``and``.

    IBM's select strings (https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_admin/select_string.html) may
    do far more (``||``, ``!``, host types, defined functions); what cannot be checked against a
    virtual node is refused rather than ignored.
    """
    terms = []
    for part in re.split(r"&&|\band\b", body):
        m = SELECT_TERM_RE.fullmatch(part)
        if not m:
            raise ResourceError(f"-R {res_req!r}: select[{body}]: this embedded LSF reads terms like mem>4000 "
                                f"joined by && (resources {', '.join(SELECT_RESOURCES)})")
        name, op, value = m.group(1).lower(), m.group(2), m.group(3)
        if name not in SELECT_RESOURCES:
            raise ResourceError(f"{name}: Unknown resource name in -R {res_req!r} (a virtual node has "
                                f"{', '.join(SELECT_RESOURCES)})")
        amount = memory_kb(value, f"-R select[{name}]", "MB") // 1024 if name in ("mem", "maxmem") else \
            _count(res_req, value)
        terms.append((name, "==" if op == "=" else op, amount))
    return terms


def _count(res_req: str, value: str) -> int:
    number = whole_number(value)
    if number is None:
        raise ResourceError(f"-R {res_req!r}: {value!r} is not a whole number")
    return number


def select_holds(terms: List[Tuple[str, str, int]], node: Dict[str, int]) -> bool:
    """Whether a virtual node with these resources meets every term."""
    ops = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b,
           "<=": lambda a, b: a <= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
    return all(ops[op](node[name], value) for name, op, value in terms)


def parse_resreq(res_req: str) -> Tuple[Dict[str, int], Optional[int], List[Tuple[str, str, int]]]:
    """(the span keys, the rusage memory in MB or None, the select terms) of a ``-R`` string; other
    sections refused.

    Why refuse and not ignore: a requirement this LSF cannot honour would let a
    job run here in a shape it would never get on the cluster.
    """
    span: Dict[str, int] = {}
    mem_mb: Optional[int] = None
    select: List[Tuple[str, str, int]] = []
    pos = 0
    for m in RES_SECTION_RE.finditer(res_req):
        if m.start() != pos:
            break
        pos = m.end()
        if m.group(1) == "span":
            span = _span_items(res_req, m.group(2), span)
        elif m.group(1) == "rusage":
            mem_mb = _rusage(res_req, m.group(2))
        elif m.group(1) == "select":
            select += parse_select(res_req, m.group(2))
        else:
            raise ResourceError(f"-R {res_req!r}: this embedded LSF honours only {HONOURED} "
                                f"(not {m.group(1)}[...])")
    if pos != len(res_req) or not res_req.strip():
        raise ResourceError(f"{res_req}: Bad resource requirement syntax")
    return span, mem_mb, select


def _span_items(res_req: str, body: str, span: Dict[str, int]) -> Dict[str, int]:
    for item in filter(None, body.split(":")):
        key, _, value = item.partition("=")
        if key not in ("ptile", "hosts") or key in span:
            raise ResourceError(f"-R {res_req!r}: span takes ptile=N or hosts=1")
        number = whole_number(value)
        if number is None or number < 1:
            raise ResourceError(f"-R span[{key}=] {value!r} is not a positive whole number")
        span[key] = number
    if span.get("hosts", 1) != 1:
        raise ResourceError(f"-R {res_req!r}: this embedded LSF honours span[hosts=1] (all slots on one host), "
                            "not other host counts; use span[ptile=N]")
    if len(span) > 1:
        raise ResourceError(f"-R {res_req!r}: span takes ptile=N or hosts=1, not both")
    return span


def _rusage(res_req: str, body: str) -> int:
    """The memory of a ``rusage[...]`` section in MB; the legacy GPU form and other resources refused."""
    mem_mb: Optional[int] = None
    for item in filter(None, (p.strip() for p in re.split(r"[:,]", body))):
        key, _, value = (p.strip() for p in item.partition("="))
        if key.startswith("ngpus"):
            raise ResourceError(f"-R {res_req!r}: rusage[{key}=...] is LSF's legacy GPU request, not a job "
                                'requirement where the -gpu syntax is on; use -gpu "num=N"')
        if key != "mem" or mem_mb is not None:
            raise ResourceError(f"-R {res_req!r}: rusage[{item}] is not honoured; this embedded LSF honours "
                                f"only {HONOURED}")
        mem_mb = memory_kb(value, f"-R rusage[mem=] in {res_req!r}:", "MB") // 1024
    if mem_mb is None:
        raise ResourceError(f"-R {res_req!r}: rusage[] names no resource; give rusage[mem=X]")
    return mem_mb


def check_app(name: str, known: List[str]) -> str:
    """The ``-app`` profile, which must be one of the configured ones (SUMMIT_JOBS_LSF_APPS)."""
    if name not in known:
        listed = ", ".join(known) if known else "none are configured"
        raise ResourceError(f"-app {name}: Application profile does not exist (profiles of this embedded LSF, "
                            f"SUMMIT_JOBS_LSF_APPS: {listed})")
    return name
