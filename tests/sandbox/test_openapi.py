"""The sandbox documents itself: an OpenAPI 3.1 document and a docs page from its live router,
and a login page whose links all lead somewhere (issue 7, "the sandbox as a product")."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import httpx
from aiohttp import web

from svc_gateway.sandbox import SandboxServer
from svc_gateway.sandbox.app import create_app
from svc_gateway.sandbox.openapi import GENERIC, ROUTE_DOCS, build_document


def served_routes(app: web.Application) -> set[tuple[str, str]]:
    """Read independently of openapi.py: what a client can actually call."""
    found = set()
    for route in app.router.routes():
        if route.method == "HEAD" or route.resource is None:
            continue
        found.add((route.method, route.resource.canonical))
    return found


def documented(document: dict[str, object]) -> set[tuple[str, str]]:
    paths = document["paths"]
    assert isinstance(paths, dict)
    return {(method.upper(), path) for path, ops in paths.items() for method in ops}


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.forms: list[tuple[str, str]] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a" and values.get("href"):
            self.hrefs.append(str(values["href"]))
        if tag == "form":
            self.forms.append((str(values.get("method")), str(values.get("action"))))
        if tag in ("script", "link", "img") or values.get("src"):
            self.external.append(tag)


def links_of(text: str) -> Links:
    parser = Links()
    parser.feed(text)
    return parser


async def test_document_lists_exactly_the_routes_the_sandbox_serves(
    server: SandboxServer, http: httpx.AsyncClient
) -> None:
    answer = await http.get("/openapi.json")
    assert answer.status_code == 200
    document = answer.json()
    assert document["openapi"] == "3.1.0"
    served = served_routes(server.app)
    assert len(served) > 25
    assert documented(document) == served
    # the document describes itself and the page
    assert ("GET", "/api/v1/openapi.json") in served and ("GET", "/docs") in served


def test_route_metadata_names_only_routes_that_exist() -> None:
    """A renamed or removed route must take its metadata with it (no stale documentation)."""
    stale = set(ROUTE_DOCS) - served_routes(create_app())
    assert not stale, f"ROUTE_DOCS entries for routes the sandbox does not serve: {stale}"


def test_a_route_added_later_appears_with_a_generic_entry() -> None:
    app = create_app()

    async def later(request: web.Request) -> web.Response:
        return web.json_response({})

    async def described(request: web.Request) -> web.Response:
        """Count the ``things``. Second sentence is left out."""
        return web.json_response({})

    app.router.add_post("/api/v1/brand-new/{thingId}", later)
    app.router.add_get("/api/v1/things", described)
    paths = build_document(app)["paths"]
    operation = paths["/api/v1/brand-new/{thingId}"]["post"]
    assert operation["summary"] == GENERIC.summary
    assert "security" not in operation  # nothing claimed about auth
    assert operation["parameters"] == [
        {"name": "thingId", "in": "path", "required": True, "schema": {"type": "string"}}
    ]
    assert paths["/api/v1/things"]["get"]["summary"] == "Count the `things`"


async def test_documented_auth_matches_what_the_sandbox_enforces(
    http: httpx.AsyncClient,
) -> None:
    """Every operation documented as needing a key answers 401 without one; public and
    key-optional ones never do (only parameter-free paths, so no ids are needed)."""
    document = (await http.get("/openapi.json")).json()
    checked = {"key": 0, "open": 0}
    for path, operations in document["paths"].items():
        if "{" in path:
            continue
        for method, op in operations.items():
            url = http.base_url.join(path)
            answer = await http.request(method.upper(), url, json={}, follow_redirects=False)
            if "security" not in op:  # not described yet: nothing is promised
                continue
            if op["security"] == [{"apiKey": []}]:
                assert answer.status_code == 401, (method, path)
                checked["key"] += 1
            else:
                assert answer.status_code != 401, (method, path)
                checked["open"] += 1
    assert checked["key"] >= 8 and checked["open"] >= 4


async def test_documented_plan_example_registers_a_plan(http: httpx.AsyncClient) -> None:
    """The example body on the docs is a working request once the placeholders are filled."""
    document = (await http.get("/openapi.json")).json()
    op = document["paths"]["/api/v1/protocol/plans"]["post"]
    example = op["requestBody"]["content"]["application/json"]["example"]
    account = (await http.post("/sandbox/accounts", json={})).json()
    example["priceConfig"]["receivers"] = [account["address"]]
    answer = await http.post(
        "/protocol/plans", json=example, headers={"Authorization": f"Bearer {account['apiKey']}"}
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["planId"]


async def test_docs_page_shows_every_route_without_external_assets(
    server: SandboxServer, http: httpx.AsyncClient
) -> None:
    page = await http.get(http.base_url.join("/docs"))
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    text = page.text
    for method, path in served_routes(server.app):
        assert re.search(rf"<b>{method}</b> {re.escape(path)}</code>", text), (method, path)
    parsed = links_of(text)
    assert parsed.external == []
    assert "/api/v1/openapi.json" in parsed.hrefs
    assert "http://" not in text and "https://" not in text


async def test_every_link_on_the_login_page_leads_somewhere(http: httpx.AsyncClient) -> None:
    login = await http.get(http.base_url.join("/login"))
    assert login.status_code == 200
    hrefs = links_of(login.text).hrefs
    assert "/permissions/global-permissions" in hrefs and "/docs" in hrefs
    for href in hrefs:
        answer = await http.get(http.base_url.join(href))
        assert answer.status_code == 200, href


async def test_key_page_creates_a_working_key_shown_once(http: httpx.AsyncClient) -> None:
    page = await http.get(http.base_url.join("/permissions/global-permissions"))
    assert links_of(page.text).forms == [("post", "/permissions/global-permissions")]
    created = await http.post(http.base_url.join("/permissions/global-permissions"))
    assert created.status_code == 201
    assert created.headers["Cache-Control"] == "no-store"
    match = re.search(r"<code>(local:[A-Za-z0-9_.\-]+)</code>", created.text)
    assert match, created.text
    mine = await http.get("/protocol/plans", headers={"Authorization": f"Bearer {match[1]}"})
    assert mine.status_code == 200
    again = await http.post(http.base_url.join("/permissions/global-permissions"))
    assert match[1] not in again.text  # each press opens a new account
