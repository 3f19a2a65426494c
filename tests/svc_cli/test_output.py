"""Tables show nested JSON readably: an indented outline, endpoints as ``POST <url>``; never
dotted column names (``data.agentId``) nor ``0.POST=...`` cells."""

from __future__ import annotations

from svc_gateway.svc_cli.output import Output, key_value_table, list_table

REGISTERED = {
    "success": True,
    "data": {
        "agentId": "did:svc:42",
        "planIds": ["7", "8"],
        "agentApi": {"endpoints": [{"POST": "https://a.example/ask"}, {"GET": "https://a/b"}]},
    },
    "txHash": None,
}


def test_a_nested_answer_is_an_indented_outline() -> None:
    text = key_value_table(REGISTERED)
    assert text.splitlines() == [
        "success  true",
        "data",
        "  agentId  did:svc:42",
        "  planIds  7, 8",
        "  agentApi",
        "    endpoints",
        "      - POST https://a.example/ask",
        "      - GET https://a/b",
        "txHash",
    ]
    assert "data.agentId" not in text and "0.POST" not in text and "=" not in text


def test_a_list_of_objects_is_items_and_cells_stay_on_one_line() -> None:
    plans = key_value_table({"plans": [{"id": "1", "name": "A"}, {"id": "2", "name": "Bee"}]})
    assert plans.splitlines() == [
        "plans",
        "  - id    1",
        "    name  A",
        "  - id    2",
        "    name  Bee",
    ]
    agents = [{"id": "a1", "endpoints": [{"POST": "http://x/ask"}], "metadata": {"name": "Echo"}}]
    table = list_table(agents, [("ID", "id"), ("ENDPOINTS", "endpoints"), ("META", "metadata")])
    assert table.splitlines()[2].split("  ") == ["a1", "POST http://x/ask", "name: Echo"]


def test_json_output_is_the_service_json_unchanged(capsys: object) -> None:
    Output("json").result(REGISTERED)
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert '"agentId": "did:svc:42"' in out and '"POST": "https://a.example/ask"' in out


def test_an_agents_answer_reaches_the_terminal_without_escape_sequences() -> None:
    from svc_gateway.svc_cli.pay import for_terminal

    shown = for_terminal("line one\n\x1b[2J\x1b]0;owned\x07two\u202e\u200b\tend")
    assert shown == "line one\n[2J]0;ownedtwo\tend"


def test_max_price_reads_dollars_and_token_amounts() -> None:
    import click
    import pytest

    from svc_gateway.svc_cli.pay_price import Cap, read_cap

    ctx = click.Context(click.Command("pay"))
    option = click.Option(["--max-price"])
    assert read_cap(ctx, option, "$1.50") == Cap(1_500_000, "USD")
    assert read_cap(ctx, option, "0.5 USDC") == Cap(500_000, "USD")  # USDC counts as USD
    assert read_cap(ctx, option, "2") == Cap(2_000_000, None)
    with pytest.raises(click.BadParameter):
        read_cap(ctx, option, "lots")
