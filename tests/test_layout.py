"""The package's shape: no import circle (between modules or between rooms), no module importing
another module's ``_private`` name, no module past the length a reader takes in, and the old
public import paths (removed in 0.x) gone.

Every import counts, those inside functions and under ``TYPE_CHECKING`` included: a lazy import
that closes a circle is still a circle a reader has to untangle. A room is a top-level folder of
the package (``selling/``, ``buying/``…) or a top-level module.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import svc_gateway

PACKAGE = Path(svc_gateway.__file__).parent
NAME = "svc_gateway"
#: the sandbox's OpenAPI document is data written as code (generated from the routes' models)
#: tables of data, read row by row (the OpenAPI document, the error-code registry)
LONG_ALLOWED = {"svc_gateway.sandbox.openapi", "svc_gateway.error_codes"}
MAX_LINES = 450


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module
    names: tuple[str, ...]  # names taken from it ("from target import a, b")
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(module: str, path: Path) -> Iterator[Import]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == NAME:
                    yield Import(module, alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] != NAME:
                continue
            plain = []
            for alias in node.names:
                if f"{target}.{alias.name}" in MODULES:  # "from package import submodule"
                    yield Import(module, f"{target}.{alias.name}", (), node.lineno)
                else:
                    plain.append(alias.name)
            if plain:
                yield Import(module, target, tuple(plain), node.lineno)


IMPORTS = [imp for module, path in MODULES.items() for imp in imports_of(module, path)]


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def room(module: str) -> str:
    """``svc_gateway.selling.flow.flow`` → ``selling``; a top-level module is its own room."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_circle_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_between_modules() -> None:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        if imp.target in MODULES and imp.target != imp.source:
            edges[imp.source].add(imp.target)
    assert circles(edges) == []


def test_no_import_circle_between_rooms() -> None:
    """Rooms import downwards only. A package's ``__init__`` re-exporting its own rooms' names
    (the public façade: ``svc_gateway``, ``svc_gateway.selling``) is above what it re-exports,
    so its arrows are left out."""
    edges: dict[str, set[str]] = {}
    for imp in IMPORTS:
        if MODULES[imp.source].name == "__init__.py" or imp.target not in MODULES:
            continue
        source, target = room(imp.source), room(imp.target)
        if source != target:
            edges.setdefault(source, set()).add(target)
    assert circles(edges) == []


def test_no_module_imports_another_modules_private_name() -> None:
    private = [
        f"{imp.source}:{imp.line} takes {name} from {imp.target}"
        for imp in IMPORTS
        for name in imp.names
        if name.startswith("_") and not name.startswith("__") and imp.target != imp.source
    ]
    assert private == []


def test_no_module_is_longer_than_a_reader_takes_in() -> None:
    long = {
        module: count
        for module, path in MODULES.items()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
        and module not in LONG_ALLOWED
    }
    assert long == {}


def test_every_module_says_what_it_is_for() -> None:
    silent = [m for m, p in MODULES.items() if not ast.get_docstring(ast.parse(p.read_text()))]
    assert silent == []


@pytest.mark.parametrize("old", ["svc_gateway.paid", "svc_gateway.paid_mcp"])
def test_the_removed_import_paths_are_gone(old: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``svc_gateway.paid`` and ``svc_gateway.paid_mcp`` were removed (CHANGELOG.md): the names
    live in ``svc_gateway.selling`` and ``svc_gateway.selling.ways_in.mcp``."""
    monkeypatch.delitem(sys.modules, old, raising=False)
    assert not (PACKAGE / old.rpartition(".")[2]).exists()
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


#: the calls that make money leave a wallet: a token, the delegation behind it, an order
SPENDING_CALLS = {
    "get_access_token",
    "create_access_token",
    "create_delegation",
    "order_plan",
    "order_fiat_plan",
}
#: where they may be called: the gate's way out; the client that implements them (and its
#: delegation pool); the sandbox that answers them; ``svc``, where the person types them
SPENDING_ALLOWED = ("svc_gateway.approvals.spend", "svc_gateway.service.", "svc_gateway.sandbox.")
SPENDING_ALLOWED_ROOMS = ("svc_gateway.svc_cli.",)


def spending_calls(path: Path) -> Iterator[tuple[int, str]]:
    """Each call of one of :data:`SPENDING_CALLS` as a method (``x.order_plan(...)``)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if call and node.func.attr in SPENDING_CALLS:  # type: ignore[attr-defined]
            yield node.lineno, node.func.attr  # type: ignore[attr-defined]


def test_the_spending_call_finder_finds_a_call(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("async def f(c):\n    return await c.client().order_plan('p')\n")
    assert list(spending_calls(sample)) == [(2, "order_plan")]


def test_no_module_mints_a_token_or_orders_except_through_the_spending_gate() -> None:
    """Issue 41: every token, delegation and order goes out through ``approvals/spend.py``
    with a ticket of the gate; a module that calls the service for one itself fails here."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        if module.startswith(SPENDING_ALLOWED + SPENDING_ALLOWED_ROOMS):
            continue
        found += [f"{module}:{line} calls {name}" for line, name in spending_calls(path)]
    assert found == []


def test_selling_stands_on_its_own_seam_not_on_the_chat_plugin() -> None:
    """Issue 42: selling reads a ``Seller`` (``service/seller.py``), never the chat plugin."""
    chat = f"{NAME}.chat"
    found = [
        f"{imp.source}:{imp.line} imports {imp.target}"
        for imp in IMPORTS
        if imp.source.startswith(f"{NAME}.selling")
        and (imp.target == chat or imp.target.startswith(chat + "."))
    ]
    assert found == []
