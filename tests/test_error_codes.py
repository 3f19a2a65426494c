"""The error-code page cannot drift: every code the package answers with has an entry in
``svc_gateway.error_codes.CODES`` (read from the source, as a reviewer would grep it), no entry
names a code nothing answers with, and the page generated from the registry lists each one."""

from __future__ import annotations

import ast
import importlib.util
import re
from types import ModuleType

from svc_gateway.error_codes import CODES, SOURCES
from svc_gateway.sandbox import errors as sandbox_errors
from tests.docs_recipes import DOCS, ROOT

PACKAGE = ROOT / "plugin" / "svc_gateway"
_CODE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$|^[a-z]+$")
#: callables whose first argument is an error code (a tool's refusal, a metered block, an
#: error result, OAuth's error), and keyword arguments that carry one
_CODE_FIRST = {"ToolFailure", "CardRejected", "block", "error", "_error_json", "OAuthError"}
_CODE_KEYWORDS = {"code", "error"}
#: codes set where no call names them: the literal must still be in the source
#: a line the reference chat prints itself: ``error [<code>]: ...``
_SHOWN = re.compile(r"^error \[([a-z_]+)\]")
_ELSEWHERE = {"network_error", "http_<status>", "refused", "access_denied"}


def _strings(node: ast.expr) -> list[str]:
    """The string constants an expression can evaluate to (``"a" if x else "b"``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    return []


def _name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def codes_in_source() -> dict[str, set[str]]:
    """Each code the package raises or answers with → the files that do."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            values: list[str] = []
            if isinstance(node, ast.Call):
                if node.args and _name(node) in _CODE_FIRST:
                    values += _strings(node.args[0])
                if len(node.args) > 1 and _name(node) == "error_answer":  # (status, code, ...)
                    values += _strings(node.args[1])
                values += [
                    s for k in node.keywords if k.arg in _CODE_KEYWORDS for s in _strings(k.value)
                ]
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value in _CODE_KEYWORDS and value:
                        values += _strings(value)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                values += _SHOWN.findall(node.value)  # "error [unknown_input]: ..." lines
            for value in values:
                if _CODE.match(value):
                    found.setdefault(value, set()).add(where)
    for name, value in vars(sandbox_errors).items():
        if name.isupper() and isinstance(value, str) and value.startswith("BCK."):
            found.setdefault(value, set()).add("sandbox/errors.py")
    return found


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("error_codes", DOCS / "hooks" / "error_codes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_code_the_package_answers_with_has_an_entry() -> None:
    found = codes_in_source()
    assert {"insufficient_credits", "approval_required", "BCK.COMMON.0004"} <= set(found)
    missing = {code: sorted(files) for code, files in found.items() if code not in CODES}
    assert missing == {}, "add these codes to plugin/svc_gateway/error_codes.py"


def test_no_entry_names_a_code_nothing_answers_with() -> None:
    found = codes_in_source()
    source = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))
    stale = [code for code in CODES if code not in found and code not in _ELSEWHERE]
    assert stale == []
    assert "network_error" in source and 'f"http_{status}"' in source
    assert 'or "refused"' in source and "access_denied" in source


def test_every_entry_says_what_it_means_and_what_to_do() -> None:
    for name, code in CODES.items():
        assert code.source in SOURCES, name
        assert len(code.meaning) > 15 and len(code.todo) > 10, name


def test_the_error_page_is_generated_with_every_code() -> None:
    hook = _hook()
    page = (DOCS / "errors.md").read_text(encoding="utf-8")
    assert page.count(hook.MARKER) == 1
    rendered = hook.on_page_markdown(page, page=None, config=None, files=None)
    assert hook.MARKER not in rendered
    for name in CODES:
        row = next(line for line in rendered.splitlines() if f"`{name}`" in line)
        anchor = name.replace("<", "").replace(">", "")
        assert f'<a id="{anchor}"></a>' in row, name
    assert rendered.count("\n## ") == len({c.source for c in CODES.values()})
