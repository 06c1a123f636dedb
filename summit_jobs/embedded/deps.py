"""LSF job dependency conditions (``bsub -w``): ``done(ID)``, ``exit(ID)``, ``ended(ID)``,
``started(ID)``, a bare ``ID`` (= done), joined by ``&&`` or ``||`` (no parentheses).

Evaluation is three-valued, because a dependency that can never be satisfied
(``done(5)`` when job 5 ended in EXIT) must be reported as such instead of
leaving the job pending in silence.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Tuple

TERM_RE = re.compile(r"^\s*(?:(done|exit|ended|started)\s*\(\s*(\d+)\s*\)|(\d+))\s*$")

#: Tri-state: True satisfied, False not yet, None never.
Verdict = Optional[bool]


class DependencyError(ValueError):
    pass


def parse_dependency(text: str) -> List[Tuple[str, int]]:
    """The terms of a condition, in order (syntax checked)."""
    terms = []
    for part in re.split(r"&&|\|\|", text):
        m = TERM_RE.fullmatch(part)
        if not m:
            raise DependencyError(f"cannot read {part.strip()!r} in {text!r} (use done(ID), exit(ID), "
                                  "ended(ID), started(ID) joined by && or ||)")
        kind, num, bare = m.groups()
        terms.append((kind or "done", int(num or bare)))
    return terms


def term_verdict(kind: str, job_state: Optional[str]) -> Verdict:
    if job_state is None:
        return None
    if kind == "done":
        return True if job_state == "DONE" else (None if job_state == "EXIT" else False)
    if kind == "exit":
        return True if job_state == "EXIT" else (None if job_state == "DONE" else False)
    if kind == "ended":
        return job_state in ("DONE", "EXIT")
    if kind == "started":
        return job_state in ("RUN", "DONE", "EXIT")
    raise DependencyError(kind)


def evaluate(text: str, state_of: Callable[[int], Optional[str]]) -> Verdict:
    """&& binds tighter than ||, as in LSF."""
    groups = [g for g in text.split("||")]
    verdicts: List[Verdict] = []
    for group in groups:
        parts = [term_verdict(kind, state_of(job)) for kind, job in parse_dependency(group)]
        if any(p is None for p in parts):
            verdicts.append(None)
        elif all(parts):
            verdicts.append(True)
        else:
            verdicts.append(False)
    if any(v is True for v in verdicts):
        return True
    if all(v is None for v in verdicts):
        return None
    return False


def states_by_id(jobs: List[Dict]) -> Callable[[int], Optional[str]]:
    table = {j["id"]: j["state"] for j in jobs}
    return table.get
