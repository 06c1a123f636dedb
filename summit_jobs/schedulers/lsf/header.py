"""The Jinja filters of LSF's job script header: a ``#BSUB`` option and its value (``bsub_directive``) and the
words inside the double quotes of a ``#BSUB`` value (``bsub_words``).

Why here and not with the renderer: the rules of what a ``#BSUB`` line may hold are LSF's, as the request that
builds the directives is (request.py); the renderer asks the scheduler for its filters
(``LsfScheduler.template_filters``) and marks what they return as finished shell text. Each filter is a
last check: the plan has checked every value already, and this refuses anything that could leave the double
quotes or start another line all the same. Standard library and errors only: a dry run imports this.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, Iterable, Tuple

from summit_jobs.errors import UserError

#: What may stand inside the double quotes of a ``#BSUB`` value: LSF tokens, no quoting or expansion.
BSUB_WORD = re.compile(r"[A-Za-z0-9_.,:=+/@%\[\]-]+")
#: A #BSUB value that needs no quotes, and the characters any checked value may hold.
BSUB_BARE = re.compile(r"[A-Za-z0-9_.,:=+/@%-]+")
BSUB_VALUE = re.compile(r"[A-Za-z0-9_.,:=+/@%\[\]>()<!&|-]+(?: [A-Za-z0-9_.,:=+/@%\[\]>()<!&|-]+)*")
BSUB_FLAG = re.compile(r"-[A-Za-z][A-Za-z_]*")


def bsub_words(values: Iterable[Any]) -> str:
    """Words joined by spaces for a double-quoted ``#BSUB`` value (``-alloc_flags "smt4 nvme"``)."""
    words = [str(v) for v in values]
    for w in words:
        if not BSUB_WORD.fullmatch(w):
            raise UserError(f"{w!r} cannot be part of a #BSUB value: use letters, digits and . , : = + / @ % [ ] "
                            "_ - only (no spaces, quotes or $).")
    return " ".join(words)


def bsub_directive(pair: Tuple[str, str]) -> str:
    """``(flag, value)`` as the rest of a ``#BSUB`` line: ``-n 8``, ``-R "span[ptile=4]"``, ``-B``."""
    flag, value = str(pair[0]), str(pair[1])
    if not BSUB_FLAG.fullmatch(flag) or (value and not BSUB_VALUE.fullmatch(value)):
        raise UserError(f"#BSUB {flag} {value!r} cannot be written: an option and words of letters, digits and "
                        ". , : = + / @ % _ - [ ] > < ( ) ! & | only.")
    if not value:
        return flag
    return f"{flag} {value}" if BSUB_BARE.fullmatch(value) else f'{flag} "{value}"'


#: The filters LSF's templates use, by the name they use them by.
FILTERS: Dict[str, Callable[[Any], str]] = {"bsub_words": bsub_words, "bsub_directive": bsub_directive}
