"""Write torch-2.0.1-api.txt: the torch names the trainer can rely on, as torch 2.0.1 has them.

Run it under torch 2.0.1 (see torch-2.0.1-api.txt.source), from the repository root:

    /tmp/torch20/bin/python tests/data/torch/make_api_list.py

For every torch name the trainer's source refers to (``torch_refs.references``),
the name itself when it resolves, and every public name of each module and
class on its path. So a new use of a function that 2.0.1 has in a module the
trainer already uses passes tests/model/test_torch_compat.py at once; anything else
needs this list made again, which is the point: it is then checked against
2.0.1 and not against the torch of the day.
"""
from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Optional, Set, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
sys.path.insert(0, str(HERE))

from torch_refs import references, trainer_sources  # noqa: E402

OUT = HERE / "torch-2.0.1-api.txt"


def _import_prefix(parts) -> Tuple[Optional[object], int]:
    """The longest importable module prefix of ``parts`` and its length."""
    for n in range(len(parts), 0, -1):
        try:
            return importlib.import_module(".".join(parts[:n])), n
        except ImportError:
            continue
    return None, 0


def _public(obj) -> Set[str]:
    return {n for n in dir(obj) if not n.startswith("__") or n == "__init__"}


def expand(name: str, known: Set[str]) -> None:
    """Add ``name`` (when it resolves) and the public names of the modules and classes on its path."""
    parts = name.split(".")
    obj, n = _import_prefix(parts)
    if obj is None:
        return
    path = ".".join(parts[:n])
    while True:
        # torch.ops namespaces list only the operators loaded so far: only the full name counts there.
        if (inspect.ismodule(obj) or inspect.isclass(obj)) and not path.startswith("torch.ops"):
            known.update(f"{path}.{m}" for m in _public(obj))
        if n == len(parts):
            known.add(path)
            return
        try:
            obj = getattr(obj, parts[n])
        except AttributeError:
            return
        path, n = f"{path}.{parts[n]}", n + 1


def main() -> int:
    import torch
    known: Set[str] = set()
    for path in trainer_sources(REPO):
        for name, _ in references(path.read_text()):
            expand(name, known)
    OUT.write_text("".join(f"{n}\n" for n in sorted(known)))
    print(f"{len(known)} names of torch {torch.__version__} -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
