"""The torch names that a module's source refers to, read from its syntax tree.

Why from the source and not at run time: a name used only on a GPU, or only
under Horovod, is never reached by a CPU test, yet it must exist in the oldest
torch the trainer supports all the same. Shared by tests/model/test_torch_compat.py
and make_api_list.py (which resolves the names under that torch).
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Tuple


def aliases(tree: ast.AST) -> Dict[str, str]:
    """Local name -> dotted torch name, from every import of torch in the module (at any depth)."""
    out: Dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch" or a.name.startswith("torch."):
                    out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and (node.module == "torch" or node.module.startswith("torch.")):
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _dotted(node: ast.AST) -> List[str]:
    """``a.b.c`` as ["a", "b", "c"]; [] for anything that is not a plain attribute chain."""
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id] + parts[::-1]
    return []


def references(source: str) -> Iterator[Tuple[str, int]]:
    """(dotted torch name, line) of every maximal attribute chain rooted at a torch import, and of
    every name imported from torch."""
    tree = ast.parse(source)
    names = aliases(tree)
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("torch"):
            for a in node.names:
                yield f"{node.module}.{a.name}", node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("torch"):
                    yield a.name, node.lineno
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            parts = _dotted(node)
            if parts and parts[0] in names:
                yield ".".join([names[parts[0]]] + parts[1:]), node.lineno


def keywords(source: str) -> Iterator[Tuple[str, int]]:
    """(keyword, line) of every keyword argument in a call."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg:
                    yield kw.arg, node.lineno


def method_calls(source: str) -> Iterator[Tuple[str, int]]:
    """(method name, line) of every call ``<expr>.name(...)``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            yield node.func.attr, node.lineno


def trainer_sources(repo: Path) -> List[Path]:
    return sorted((repo / "trainer").rglob("*.py"))
