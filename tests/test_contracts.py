"""The house's contracts as code: every package says which sarlab packages it may import (``MAY_IMPORT`` in its
``__init__.py``, named in its docstring too), and no module imports outside that list, lazily inside a function or
not; no circle between modules or between packages; every import name spells the path of its file.

Read from the source with ``ast`` (nothing is imported), through pyproject.toml's package-dir mapping.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def _import_name(path: Path) -> str:
    """``real/launch/launcher.py`` -> ``sarlab.real.launch.launcher`` (through the package-dir mapping)."""
    rel = path.relative_to(ROOT)
    folder = {v: k for k, v in PACKAGE_DIR.items()}[rel.parts[0]]
    parts = list(rel.with_suffix("").parts[1:])
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([folder, *parts])


MODULES = {_import_name(f): f for top in PACKAGE_DIR.values() for f in sorted((ROOT / top).rglob("*.py"))}


def _package(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]


def _imports(module: str) -> set[str]:
    """The sarlab modules ``module`` imports anywhere in its body (``from P import m`` counts as ``P.m`` when that is a
    module, else as ``P``)."""
    path = MODULES[module]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                parent = ".".join(base + ([node.module] if node.module else []))
            else:
                parent = node.module or ""
            names = [f"{parent}.{a.name}" if f"{parent}.{a.name}" in MODULES else parent for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            while parts and ".".join(parts) not in MODULES:
                parts.pop()
            if parts and ".".join(parts) != module:
                found.add(".".join(parts))
    return found


GRAPH = {m: _imports(m) for m in MODULES}
PACKAGES = sorted({_package(m) for m in MODULES})


def _declared(package: str) -> tuple[tuple[str, ...], str]:
    """The package's ``MAY_IMPORT`` tuple and its docstring."""
    tree = ast.parse(MODULES[package].read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MAY_IMPORT" for t in node.targets):
            return tuple(ast.literal_eval(node.value)), ast.get_docstring(tree) or ""
    raise AssertionError(f"{MODULES[package].relative_to(ROOT)} declares no MAY_IMPORT")


def _allowed(target: str, package: str, may: tuple[str, ...]) -> bool:
    return _package(target) == package or any(target == m or target.startswith(m + ".") for m in may)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_import_is_one_the_package_declares(package):
    may, doc = _declared(package)
    for name in may:
        assert name in doc, f"{package}'s docstring does not name {name}, which its MAY_IMPORT allows"
    wrong = sorted(f"{m} -> {t}" for m in MODULES if _package(m) == package for t in GRAPH[m]
                   if not _allowed(t, package, may))
    assert not wrong, f"imports outside {package}'s MAY_IMPORT {may}: {wrong}"


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_circle_between_modules():
    assert _circles(GRAPH) == []


def test_no_circle_between_packages():
    packages = {p: set() for p in PACKAGES}
    for m, targets in GRAPH.items():
        # a package's __init__ may re-export its own sub-packages: that is the package, not a dependency upward
        packages[_package(m)].update(_package(t) for t in targets
                                     if _package(t) != _package(m) and not _package(t).startswith(_package(m) + "."))
    assert _circles(packages) == []


def test_the_contract_test_sees_a_violation():
    """The checks above can fail: an upward import and a circle are found in a made-up graph."""
    assert _circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert not _allowed("sarlab.training.trainer", "sarlab.core", _declared("sarlab.core")[0])


def test_every_import_name_spells_its_path():
    for name, folder in PACKAGE_DIR.items():
        assert name.split(".")[-1] == Path(folder).name, f"import name {name} is the folder {folder}/"
    for module, path in MODULES.items():
        rel = path.relative_to(ROOT).with_suffix("").parts
        tail = rel[1:-1] if rel[-1] == "__init__" else rel[1:]
        assert module.split(".")[-len(tail):] == list(tail) if tail else True, (module, path)
