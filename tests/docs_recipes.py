"""The recipes the docs show, found by page and heading, so tests run them exactly as written.

Each :class:`Recipe` names the page (under ``docs/``, or ``README.md``), the heading of its
section and the fenced blocks a test takes from it. :func:`blocks` fails loudly when the page,
the heading or the expected blocks are gone, and ``tests/test_docs.py`` checks every recipe in
:data:`RECIPES` on each run (no recipe test may skip that check), so renaming a heading or
moving a block breaks a test instead of silently testing nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(`{3,}|~{3,})")
_HEADING = re.compile(r"^(#{1,6}) ")
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Recipe:
    """Fenced blocks a test runs: ``count`` blocks of ``lang`` (any language when empty) in the
    section under ``heading`` (the whole heading line, e.g. ``"## Sandbox with curl"``) of
    ``page`` (relative to the repository root), run by the test module ``test``."""

    page: str
    heading: str
    lang: str
    count: int
    test: str

    @property
    def path(self) -> Path:
        return ROOT / self.page


def section_of(page: Path, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level.
    Lines inside fenced blocks (a shell comment ``# ...``) are never headings."""
    name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    assert page.is_file(), f"{name} is gone: a recipe test reads it"
    level = len(heading) - len(heading.lstrip("#"))
    lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
    found: list[str] | None = None
    fence = ""
    for line in lines:
        marker = _FENCE.match(line)
        if marker and not fence:
            fence = marker.group(1)
        elif fence and line.strip() == fence:
            fence = ""
        elif not fence and (head := _HEADING.match(line)):
            if found is not None and len(head.group(1)) <= level:
                break
            if line.rstrip("\n") == heading:
                found = []
                continue
        if found is not None:
            found.append(line)
    assert found is not None, f"{name} has no heading {heading!r}"
    return "".join(found)


def blocks(recipe: Recipe) -> list[tuple[str, str]]:
    """``(language, text)`` of the recipe's fenced blocks, in page order; exactly ``count``."""
    found = [
        (lang, text)
        for lang, text in _BLOCK.findall(section_of(recipe.path, recipe.heading))
        if not recipe.lang or lang == recipe.lang
    ]
    what = f"```{recipe.lang}" if recipe.lang else "fenced"
    assert len(found) == recipe.count, (
        f"{recipe.page} {recipe.heading!r}: {len(found)} {what} blocks, "
        f"{recipe.test} expects {recipe.count}"
    )
    return found


CURL_WALKTHROUGH = Recipe(
    "docs/sandbox.md", "## Sandbox with curl", "bash", 2, "tests/sandbox/test_readme_curl.py"
)
TWO_GATEWAYS = Recipe(
    "docs/selling.md",
    "## Sell in one gateway, buy from another",
    "",
    4,
    "tests/chat/test_readme_two_gateways.py",
)
MIDDLEWARE_APP = Recipe(
    "docs/selling.md",
    "## Sell routes of your own aiohttp app",
    "python",
    1,
    "tests/selling/ways_in/test_readme_middleware.py",
)
HERMES_SETTINGS = Recipe(
    "docs/hosts.md", "## In Hermes Agent", "yaml", 2, "tests/hosts/hermes/test_readme_hermes.py"
)
HERMES_OFFLINE = Recipe(
    "docs/hosts.md",
    "## Hermes without a model key",
    "",
    3,
    "tests/hosts/hermes/test_hermes_offline.py",
)
HOSTED_OFFLINE = Recipe(
    "docs/hosted.md", "## Try it offline", "", 2, "tests/chat/test_docs_hosted.py"
)
README_TOUR = Recipe(
    "README.md", "## A 30-second tour", "text", 1, "tests/chat/test_readme_tour.py"
)
README_SET_UP = Recipe("README.md", "## Set up", "sh", 3, "tests/test_venv_recipes.py")
DOCS_SET_UP = Recipe("docs/getting-started.md", "## Set up", "sh", 3, "tests/test_venv_recipes.py")
PAY_WITH_OAUTH = Recipe(
    "docs/selling.md",
    "### Pay with OAuth (any MCP client)",
    "",
    2,
    "tests/e2e/mcp_oauth/test_docs_oauth.py",
)
MCP_SELLER = Recipe(
    "docs/selling.md",
    "### A complete MCP seller",
    "",
    2,
    "tests/e2e/mcp_oauth/test_docs_mcp_seller.py",
)

RETRY_BUYER = Recipe(
    "docs/retries.md",
    "## What a buyer should do",
    "python",
    1,
    "tests/selling/flow/test_docs_retries.py",
)
CLI_OFFLINE = Recipe(
    "docs/cli.md", "## Try it offline", "bash", 2, "tests/svc_cli/test_docs_cli.py"
)

LANGGRAPH_DEPLOYMENT = Recipe(
    "docs/langgraph.md",
    "## Walk-through",
    "",
    4,
    "tests/selling/ways_in/langgraph/test_docs_langgraph.py",
)

#: every recipe a test runs (``tests/test_docs.py`` checks each is found, and claimed)
RECIPES: dict[str, Recipe] = {
    "CURL_WALKTHROUGH": CURL_WALKTHROUGH,
    "TWO_GATEWAYS": TWO_GATEWAYS,
    "MIDDLEWARE_APP": MIDDLEWARE_APP,
    "HERMES_SETTINGS": HERMES_SETTINGS,
    "HERMES_OFFLINE": HERMES_OFFLINE,
    "README_TOUR": README_TOUR,
    "HOSTED_OFFLINE": HOSTED_OFFLINE,
    "README_SET_UP": README_SET_UP,
    "DOCS_SET_UP": DOCS_SET_UP,
    "PAY_WITH_OAUTH": PAY_WITH_OAUTH,
    "RETRY_BUYER": RETRY_BUYER,
    "CLI_OFFLINE": CLI_OFFLINE,
    "LANGGRAPH_DEPLOYMENT": LANGGRAPH_DEPLOYMENT,
    "MCP_SELLER": MCP_SELLER,
}
