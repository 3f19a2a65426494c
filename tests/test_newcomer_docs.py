"""Issue 44's smaller items, as a newcomer meets them: the site's menu and home page, pages that
cite only what a reader can open, the README's demo claim against its install, quiet install
lines, where ``$HERMES_HOME`` is, a styled consent page and "1 credit" in the demo."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import yaml

from svc_gateway.safe_text import credits_text
from svc_gateway.sandbox import SandboxServer
from tests.docs_recipes import DOCS, ROOT

PAGES = sorted(DOCS.glob("*.md"))
README = ROOT / "README.md"


def nav() -> list[tuple[str, str]]:
    # mkdocs.yml is plain YAML apart from the hooks' paths
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return [next(iter(entry.items())) for entry in config["nav"]]


def test_the_menu_lists_each_page_once_and_the_home_page_links_every_one() -> None:
    titles, pages = zip(*nav(), strict=True)
    assert len(set(titles)) == len(titles) and len(set(pages)) == len(pages)
    assert set(pages) == {page.name for page in PAGES}
    home = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w-]+\.md)\)", home))
    assert linked >= set(pages) - {"index.md"}
    for needed in ("x402.md", "a2a.md", "cli.md", "errors.md"):
        assert needed in linked


def test_pages_cite_only_files_a_reader_can_open() -> None:
    for page in [README, *PAGES]:
        text = page.read_text(encoding="utf-8")
        for name in set(re.findall(r"([\w./-]*\b[A-Z][A-Z_]*\.md)\b", text)):
            places = [ROOT, DOCS, ROOT / "plugin" / "svc_gateway"]
            assert any((place / name).is_file() for place in places), (page.name, name)


def test_the_readme_claims_mcp_in_the_demo_only_with_its_install() -> None:
    tour = README.read_text(encoding="utf-8").split("## A 30-second tour", 1)[1]
    demo = tour.split("Then open the reference chat", 1)[0]
    assert "over MCP" in demo and "pip install -q -e '.[mcp]'" in demo
    assert "skipped MCP" in demo  # what the demo says without the extra


def test_install_lines_are_quiet_and_hermes_home_is_explained() -> None:
    hosts = (DOCS / "hosts.md").read_text(encoding="utf-8")
    pips = [line for line in re.findall(r"^.*pip install.*$", hosts, re.M) if "```" not in line]
    blocks = [line for line in pips if not line.startswith(("`", "(", "it "))]
    assert blocks and all(" -q " in line for line in blocks), blocks
    assert "`$HERMES_HOME` is `~/.hermes` unless set" in hosts
    hermes_constants = pytest.importorskip("hermes_constants")
    default = hermes_constants._get_platform_default_hermes_home()
    assert default == Path.home() / ".hermes"  # what the page says, on this platform


async def test_the_sandbox_pages_are_styled(sandbox: SandboxServer) -> None:
    origin = sandbox.base_url.removesuffix("/api/v1")
    async with httpx.AsyncClient(base_url=origin) as http:
        for path in ("/login", "/sandbox/checkout/no-such-session"):
            page = (await http.get(path)).text
            assert "<style>" in page and "name='viewport'" in page, path


def test_the_demo_counts_credits_with_their_noun() -> None:
    # the demo's lines count a receipt's credits with safe_text.credits_text
    assert (credits_text("1"), credits_text("2"), credits_text("?")) == (
        "1 credit",
        "2 credits",
        "? credits",
    )
