"""LSF job dependency expressions (``bsub -w``), parsed and evaluated as IBM LSF does.

Conditions on job ids: ``done(ID)``, ``ended(ID)``, ``started(ID)``, a bare
``ID`` (= done), ``exit(ID)`` or ``exit(ID, [op] CODE)`` (the job is EXIT and
its exit code passes the test; no operator means ``==``), and the job-array
counters ``numdone``, ``numended``, ``numexit``, ``numhold``, ``numpend``,
``numrun``, ``numstart`` as ``numdone(ID, op N|*)``. This LSF has no job
arrays, so a counter sees a plain job as an array of one element (its count
is 0 or 1, and ``*`` means 1). Operators: ``>``, ``>=``, ``<``, ``<=``,
``==``, ``!=``. Logic: ``!`` (not), ``&&`` (and), ``||`` (or), parentheses;
``!`` binds tightest, then ``&&``, then ``||``, as in C and in LSF.

Not supported (refused at bsub with a line saying so): job names instead of
ids, array elements ``ID[n]``, ``post_done``, ``post_err``, ``external``.

Evaluation is three-valued: True (holds now), False (does not hold yet) and
None (can never hold, e.g. ``done(5)`` once job 5 ended in EXIT), because a
dependency that can never be satisfied must be reported as such (and with
``bsub -ti`` ends the job) instead of leaving it pending in silence. "Never"
is decided by trying every state each referenced job can still reach (a job
goes PEND -> RUN -> DONE or EXIT and never comes back), with exit codes
sampled around every code the expression compares against.
"""
from __future__ import annotations

import itertools
import operator
import re
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

#: Tri-state: True satisfied, False not yet, None never.
Verdict = Optional[bool]
#: What the evaluation knows of a job: (state, exit code or None); None when there is no such job.
Snapshot = Tuple[str, Optional[int]]
Lookup = Callable[[int], Optional[Snapshot]]

STATE_CONDITIONS = ("done", "ended", "started", "exit")
#: Job-array counters and the states each one counts (a plain job is an array of one).
COUNTERS = {"numdone": ("DONE",), "numended": ("DONE", "EXIT"), "numexit": ("EXIT",), "numhold": ("PSUSP",),
            "numpend": ("PEND",), "numrun": ("RUN",), "numstart": ("RUN", "SSUSP", "USUSP")}
UNSUPPORTED = ("post_done", "post_err", "external")
OPERATORS: Dict[str, Callable[[int, int], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt}
#: Tokens, longest first; whitespace is spaces and tabs only (a newline is a mistake, not a separator).
TOKEN_RE = re.compile(r"[ \t]*(?:(?P<num>[0-9]+)|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|"
                      r"(?P<op>&&|\|\||>=|<=|==|!=|[()!,<>*])|(?P<quote>\"[^\"]*\"?)|(?P<bad>.))", re.S)
#: Exit codes a job can end with.
CODES = range(0, 256)
#: Above this many combinations of future job states the search gives up and answers "not yet"
#: (it runs under the state lock, every 0.1 s, for each pending job).
MAX_COMBINATIONS = 5_000
#: Deepest nesting of parentheses and ``!`` read (the parser and the evaluation recurse that deep).
MAX_DEPTH = 100


class DependencyError(ValueError):
    """A dependency expression this LSF cannot read; the message says what is wrong and where."""


@dataclass(frozen=True)
class Condition:
    """One condition on one job: ``kind`` is done/ended/started/exit or a counter name."""
    kind: str
    job: int
    op: Optional[str] = None
    value: Optional[int] = None          # None with a counter means "*" (every element)


@dataclass(frozen=True)
class Not:
    """``!term``: holds while the term does not (so ``!done(5)`` holds at once for a job still running)."""
    term: "Node"


@dataclass(frozen=True)
class Logic:
    """Terms joined by one operator; a tree of these keeps the precedence the parser found."""
    op: str                              # "&&" or "||"
    terms: Tuple["Node", ...]


Node = Union[Condition, Not, Logic]


def _tokens(text: str) -> List[Tuple[str, str]]:
    """(kind, text) pairs; kind is num, word, op, or an error for anything else."""
    out: List[Tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        if m is None:                     # only blanks were left
            break
        kind = m.lastgroup or "bad"
        tok = m.group(kind)
        if kind == "quote":
            raise DependencyError(f"job names such as {tok} are not supported by the embedded LSF: use job ids")
        if kind == "bad" and tok == "[":
            raise DependencyError("job array elements are not supported by the embedded LSF (it has no arrays)")
        if kind == "bad":
            raise DependencyError(f"unexpected {tok!r} at position {m.start(kind) + 1}")
        out.append((kind, tok))
        pos = m.end()
    return out


class _Parser:
    """Recursive descent over the tokens: or -> and -> unary -> primary."""

    def __init__(self, text: str):
        self.text = text
        self.toks = _tokens(text)
        self.pos = 0
        self.depth = 0

    def peek(self) -> Tuple[str, str]:
        return self.toks[self.pos] if self.pos < len(self.toks) else ("end", "")

    def take(self, expected: Optional[str] = None) -> Tuple[str, str]:
        tok = self.peek()
        if expected is not None and tok[1] != expected:
            got = repr(tok[1]) if tok[0] != "end" else "the end"
            raise DependencyError(f"expected {expected!r} but found {got}")
        self.pos += 1
        return tok

    def parse(self) -> Node:
        if not self.toks:
            raise DependencyError("the expression is empty")
        node = self.logic("||")
        if self.peek()[0] != "end":
            raise DependencyError(f"unexpected {self.peek()[1]!r} after a complete condition "
                                  "(join conditions with && or ||)")
        return node

    def logic(self, op: str) -> Node:
        sub = (lambda: self.logic("&&")) if op == "||" else self.unary
        terms = [sub()]
        while self.peek() == ("op", op):
            self.take()
            terms.append(sub())
        return terms[0] if len(terms) == 1 else Logic(op, tuple(terms))

    def unary(self) -> Node:
        if self.peek() not in (("op", "!"), ("op", "(")):
            return self.condition()
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise DependencyError(f"parentheses and ! are nested deeper than {MAX_DEPTH} levels")
        if self.take() == ("op", "!"):
            node: Node = Not(self.unary())
        else:
            node = self.logic("||")
            self.take(")")
        self.depth -= 1
        return node

    def condition(self) -> Node:
        kind, tok = self.take()
        if kind == "num":
            return Condition("done", int(tok))
        if kind != "word":
            raise DependencyError(f"expected a condition such as done(ID) but found "
                                  f"{repr(tok) if kind != 'end' else 'the end'}")
        name = tok.lower()
        if name in UNSUPPORTED:
            raise DependencyError(f"{tok}() is not supported by the embedded LSF")
        if name not in STATE_CONDITIONS and name not in COUNTERS:
            if self.peek() != ("op", "("):
                raise DependencyError(f"job names such as {tok!r} are not supported by the embedded LSF: "
                                      "use job ids")
            raise DependencyError(f"unknown condition {tok!r} (known: {', '.join(STATE_CONDITIONS)}, "
                                  f"{', '.join(COUNTERS)})")
        self.take("(")
        job = self.job_id()
        node = self.arguments(name, job)
        self.take(")")
        return node

    def job_id(self) -> int:
        kind, tok = self.take()
        if kind == "word":
            raise DependencyError(f"job names such as {tok!r} are not supported by the embedded LSF: use job ids")
        if kind != "num":
            raise DependencyError(f"expected a job id but found {repr(tok) if kind != 'end' else 'the end'}")
        return int(tok)

    def arguments(self, name: str, job: int) -> Condition:
        """What follows the job id: nothing, ``, [op] CODE`` for exit, ``, op N|*`` for a counter."""
        if name in ("done", "ended", "started") or (name == "exit" and self.peek() != ("op", ",")):
            return Condition(name, job)
        self.take(",")
        op = "=="
        if self.peek()[1] in OPERATORS:
            op = self.take()[1]
        elif name in COUNTERS:
            raise DependencyError(f"{name}() needs an operator before the count, e.g. {name}({job}, >= 1)")
        kind, tok = self.take()
        if tok == "*" and name in COUNTERS:
            return Condition(name, job, op, None)
        if kind != "num":
            what = "a count or *" if name in COUNTERS else "an exit code"
            raise DependencyError(f"expected {what} but found {repr(tok) if kind != 'end' else 'the end'}")
        return Condition(name, job, op, int(tok))


def parse(text: str) -> Node:
    """The expression's tree; DependencyError with the reason when it cannot be read."""
    return _Parser(text).parse()


def conditions(node: Node) -> Iterator[Condition]:
    """Every condition of the tree, left to right (bsub checks that each job exists)."""
    if isinstance(node, Condition):
        yield node
    elif isinstance(node, Not):
        yield from conditions(node.term)
    else:
        for term in node.terms:
            yield from conditions(term)


def parse_dependency(text: str) -> List[Tuple[str, int]]:
    """The (condition, job id) pairs of an expression, in order; the syntax is checked."""
    return [(c.kind, c.job) for c in conditions(parse(text))]


def holds(cond: Condition, snap: Snapshot) -> bool:
    """Whether one condition holds for a job in state ``snap``."""
    job_state, code = snap
    if cond.kind == "done":
        return job_state == "DONE"
    if cond.kind == "ended":
        return job_state in ("DONE", "EXIT")
    if cond.kind == "started":
        return job_state in ("RUN", "DONE", "EXIT")
    if cond.kind == "exit":
        if job_state != "EXIT":
            return False
        return cond.op is None or (code is not None and OPERATORS[cond.op](code, int(cond.value or 0)))
    count = 1 if job_state in COUNTERS[cond.kind] else 0
    return OPERATORS[cond.op or "=="](count, 1 if cond.value is None else cond.value)


def value(node: Node, snaps: Dict[int, Snapshot]) -> bool:
    """The expression's truth for one assignment of states to its jobs."""
    if isinstance(node, Condition):
        return holds(node, snaps[node.job])
    if isinstance(node, Not):
        return not value(node.term, snaps)
    results = (value(t, snaps) for t in node.terms)
    return all(results) if node.op == "&&" else any(results)


def _exit_codes(node: Node, job: int) -> List[Optional[int]]:
    """Exit codes worth trying for a job that may still end in EXIT: one on each side of every compared code."""
    picks: Set[int] = {CODES[0], CODES[-1]}
    for c in conditions(node):
        if c.job == job and c.kind == "exit" and c.value is not None:
            picks.update(v for v in (c.value - 1, c.value, c.value + 1) if v in CODES)
    return sorted(picks)


def futures(node: Node, job: int, snap: Snapshot) -> List[Snapshot]:
    """Every state (with exit code) a job can be in from now on; a finished job stays as it is."""
    job_state = snap[0]
    if job_state in ("DONE", "EXIT"):
        return [snap]
    exits: List[Snapshot] = [("EXIT", c) for c in _exit_codes(node, job)]
    later: List[Snapshot] = [("RUN", None), ("DONE", 0)] + exits
    if job_state == "PEND":
        return [("PEND", None), ("EXIT", None)] + later      # a pending job killed ends without a code
    return later


def evaluate_tree(node: Node, lookup: Lookup) -> Verdict:
    """True if the expression holds now, False if it may hold later, None if it never can."""
    jobs = sorted({c.job for c in conditions(node)})
    now: Dict[int, Snapshot] = {}
    for job in jobs:
        snap = lookup(job)
        if snap is None:                # the job is gone: LSF calls such a condition invalid
            return None
        now[job] = snap
    if value(node, now):
        return True
    options: Sequence[List[Snapshot]] = [futures(node, j, now[j]) for j in jobs]
    total = 1
    for opts in options:
        total *= len(opts)
    if total > MAX_COMBINATIONS:
        return False                    # too many to try: assume it may still hold
    for combo in itertools.product(*options):
        if value(node, dict(zip(jobs, combo))):
            return False
    return None


def evaluate(text: str, lookup: Lookup) -> Verdict:
    """evaluate_tree of the text (parsed again each time: the record keeps the text, as bjobs shows it)."""
    return evaluate_tree(parse(text), lookup)


def jobs_by_id(jobs: List[Dict]) -> Lookup:
    """The lookup for evaluate: job id -> (state, exit code)."""
    table: Dict[int, Snapshot] = {j["id"]: (j["state"], j.get("exit_code")) for j in jobs}
    return table.get
