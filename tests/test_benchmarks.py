"""The benchmark suite's own logic: reading wrk, judging targets, the stub facilitator; and
every case of ``python -m benchmarks`` run once, briefly, as the command runs it.

No timing is asserted here (speed belongs in ``python -m benchmarks``); these check that a
figure is computed and judged the way the table claims, and that each case gives its figures.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.typedefs import Handler

from benchmarks.__main__ import CASES, main
from benchmarks.chain import COUNTS_PATH, chain_app, counted_stub_app
from benchmarks.floor import Calls, Measured, per_round, spread
from benchmarks.load import parse_wrk
from benchmarks.memory import GROWTH_BOUND_MB, payer, single_use_token
from benchmarks.micro import top_imports
from benchmarks.procs import cpu_split
from benchmarks.report import Figure, Report, Target
from benchmarks.serve import fake_key, stub_app
from svc_gateway.api_keys import parse_api_key
from svc_gateway.service.models import SettleResult, VerifyResult

WRK_OUTPUT = """Running 3s test @ http://127.0.0.1:40000/agent
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    80.00ms   10.00ms 200.00ms   90.00%
  Latency Distribution
     50%   79.32ms
     75%   90.00ms
     90%  120.00ms
     99%    1.20s
  1000 requests in 2.00s, 218.56KB read
  Socket errors: connect 0, read 0, write 0, timeout 10
  Non-2xx or 3xx responses: 90
Requests/sec:    500.00
"""


def test_wrk_rate_counts_only_successful_answers() -> None:
    result = parse_wrk(WRK_OUTPUT)
    assert result.requests == 1000
    assert result.errors == 100
    assert result.rps == 450.0  # (1000 - 100) / 2 s, not wrk's own 500
    assert result.p50_ms == 79.32
    assert result.p99_ms == 1200.0
    assert result.read_bytes == round(218.56 * 1024)  # the answers' bytes wrk read


def test_wrk_with_no_answer_reports_zero_not_a_crash() -> None:
    silent = WRK_OUTPUT.replace("1000 requests", "0 requests").replace("Non-2xx", "x")
    silent = silent.replace("timeout 10", "timeout 0")
    assert parse_wrk(silent).rps == 0.0


def test_targets_judge_ratios_and_absolute_values() -> None:
    assert Target(">=", 3.0).check(Figure("x", 300, 100))
    assert not Target(">=", 3.0).check(Figure("x", 299, 100))
    assert Target("<=", 1.25).check(Figure("x", 125, 100))
    assert not Target("<=", 1.25).check(Figure("x", 126, 100))
    assert Target("within", 0.10).check(Figure("x", 91, 100))
    assert not Target("within", 0.10).check(Figure("x", 111, 100))
    assert Target("abs<=", 20).check(Figure("x", 19, 900, absolute=19))
    assert not Target("abs<=", 20).check(Figure("x", 21, 1, absolute=21))
    assert Figure("x", 5, 0).ratio == math.inf


def test_table_says_pass_or_by_how_much_a_target_is_missed() -> None:
    report = Report(
        meta={"date": "d", "cores": 2, "python": "3", "load generator": "wrk", "duration_s": 3}
    )
    report.figure(Figure("fast", 600, 100), Target(">=", 3.0))
    report.figure(Figure("slow", 100, 100), Target(">=", 3.0))
    report.figure(Figure("hook", 60, 1000, absolute=60, unit="µs"), Target("abs<=", 20))
    report.figure(Figure("close", 83.2, 100), Target(">=", 0.85))
    table = report.table()
    assert "| fast | 600.0 vs 100.0 | 6× | ≥ 3× | pass |" in table
    assert "| slow | 100.0 vs 100.0 | 1× | ≥ 3× | MISS (3.0× short) |" in table
    assert "| hook | 60.0 µs |" in table and "MISS (3.0× over)" in table
    assert "| close | 83.2 vs 100.0 | 0.832× | ≥ 0.85× | MISS (2.1% short) |" in table
    figures = report.as_json()["figures"]
    assert [f["pass"] for f in figures] == [True, False, False, False]


def test_fake_key_is_accepted_by_the_plugin() -> None:
    key = parse_api_key(fake_key())
    assert key.environment == "local"


async def test_stub_facilitator_answers_shapes_the_plugin_accepts() -> None:
    async with TestClient(TestServer(stub_app(), host="127.0.0.1")) as client:
        verify = await client.post("/api/v1/x402/verify", json={})
        first = VerifyResult.model_validate(await verify.json())
        second = VerifyResult.model_validate(
            await (await client.post("/api/v1/x402/verify")).json()
        )
        assert first.is_valid and first.request_id != second.request_id
        settle = await client.post("/api/v1/x402/settle", json={})
        assert SettleResult.model_validate(await settle.json()).success
        plan = await client.get("/api/v1/protocol/plans/77")
        assert (await plan.json())["id"] == "77"


def path_counting_stub() -> tuple[web.Application, list[str]]:
    """The stub facilitator, and the path of every request it is sent, in order."""
    seen: list[str] = []

    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        seen.append(request.path)
        return await handler(request)

    stub = stub_app()
    stub.middlewares.append(count)
    return stub, seen


@pytest.mark.parametrize("middleware", [False, True], ids=["handler", "middleware"])
async def test_the_chain_makes_exactly_one_verify_and_one_settle_per_request(
    middleware: bool,
) -> None:
    stub, seen = path_counting_stub()
    async with TestServer(stub, host="127.0.0.1") as facilitator:
        chain = chain_app(str(facilitator.make_url("/api/v1")), "1001", middleware=middleware)
        assert len(chain.middlewares) == middleware  # the floor of a gate is a middleware
        async with TestClient(TestServer(chain, host="127.0.0.1")) as client:
            for _ in range(3):
                answer = await client.post(
                    "/agent", json={"prompt": "hi"}, headers={"payment-signature": "t"}
                )
                assert answer.status == 200
                assert (await answer.json())["echo"] == "hi"  # the default agent answered
    assert seen == ["/api/v1/x402/verify", "/api/v1/x402/settle"] * 3


async def test_counting_stub_tallies_each_sides_facilitator_calls_and_bytes() -> None:
    facilitator = TestServer(counted_stub_app(), host="127.0.0.1")
    async with TestClient(facilitator) as stub:
        before = await (await stub.get(COUNTS_PATH)).json()
        chain = chain_app(str(facilitator.make_url("/api/v1")), "1001")
        async with TestClient(TestServer(chain, host="127.0.0.1")) as client:
            for _ in range(4):
                answer = await client.post(
                    "/agent", json={"prompt": "hi"}, headers={"payment-signature": "t"}
                )
                assert answer.status == 200
        after = await (await stub.get(COUNTS_PATH)).json()
    assert before == {}
    verify, settle = after["/api/v1/x402/verify"], after["/api/v1/x402/settle"]
    assert verify[0] == settle[0] == 4
    assert verify[1] > 4 * 200 and verify[2] > 4 * 300 and verify[3] > 4 * 100
    assert settle[2] > verify[2]  # the settle body adds the agentRequestId
    tally = Calls(answered=4, rounds=1)
    tally.add(before, after)
    assert tally.summary().startswith("2.000 facilitator calls per answered request (+0 a round")
    assert "verify 1.000 (4 calls; head" in tally.summary()
    assert Calls(answered=9, rounds=1).summary() == "no facilitator calls"


async def test_stub_burns_a_credit_per_settle_like_the_service() -> None:
    async with TestClient(TestServer(stub_app(), host="127.0.0.1")) as client:
        first = await (await client.post("/api/v1/x402/settle", json={})).json()
        second = await (await client.post("/api/v1/x402/settle", json={})).json()
        balance = await (await client.get("/api/v1/protocol/plans/1/balance/0xab")).json()
    assert int(first["remainingBalance"]) - 1 == int(second["remainingBalance"])
    assert balance["balance"] == second["remainingBalance"]


async def test_stub_verify_names_the_payer_of_a_v3_token() -> None:
    token = single_use_token(7)
    async with TestClient(TestServer(stub_app(), host="127.0.0.1")) as client:
        verdict = await client.post("/api/v1/x402/verify", json={"x402AccessToken": token})
        assert (await verdict.json())["payer"] == payer(7)


def test_import_costs_are_read_after_aiohttp_largest_first() -> None:
    importtime = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       900 |        900 |   multidict",
            "import time:      5000 |       9000 | aiohttp",
            "import time:       300 |        300 |   svc_gateway.redact",
            "import time:      2500 |       2800 | svc_gateway.config",
        ]
    )
    assert top_imports(importtime, 5) == [("svc_gateway.config", 2.5), ("svc_gateway.redact", 0.3)]


def test_chain_ratios_are_taken_round_by_round_with_their_range() -> None:
    def side(*rates: float) -> Measured:
        return Measured(parse_wrk(WRK_OUTPUT), 0.0, rates, tuple(r * 2 for r in rates))

    chain, paid = side(100, 200, 0, 400), side(90, 100, 50, 400)
    assert per_round(paid, chain) == [0.9, 0.5, 1.0]  # a round with no answers is left out
    assert per_round(paid, chain, cpu=True) == [0.9, 0.5, 1.0]
    assert spread([0.9, 0.5, 1.0]) == "median 0.900× (0.500–1.000×)"


def test_pinning_splits_the_allowed_cpus_or_is_off() -> None:
    assert cpu_split(False) is None
    split = cpu_split(True)
    if split is not None:  # 2+ CPUs: the server alone on one, the rest for the load
        server, rest = split
        assert len(server) == 1 and rest and not server & rest


def test_redis_case_runs_pinned_and_gives_redis_servers_own_cpu() -> None:
    """The redis case as ``--only redis`` runs it, one short round: both books answer, the
    ratio is judged, and redis-server's own CPU per request is found and measured (no time is
    judged here)."""
    from benchmarks.redis_case import case_redis

    report = Report(meta={})
    case_redis(report, rounds=1, duration=0.3, replica_secs=0.3, replica_rounds=1)
    names = [f.name for f, _ in report.figures]
    assert "stateUrl cost / in-process (time per request)" in names
    assert "two replicas / one (stateUrl)" in names
    (per_round_row,) = [
        r for r in report.rows if r.get("case") == "stateUrl / in-process, per round"
    ]
    assert len(per_round_row["time_ratios"]) == 1
    assert math.isfinite(per_round_row["redis_server_cpu_us_per_request"])
    assert per_round_row["redis_server_cpu_us_per_request"] > 0


def test_instructions_read_callgrinds_totals_and_its_newest_dump(tmp_path: Path) -> None:
    from benchmarks.instructions import newest_dump, read_total

    out = tmp_path / "callgrind-paid.out"
    for part, total in ((1, 500), (2, 700), (10, 900)):  # part 10 is newer than part 2
        (tmp_path / f"callgrind-paid.out.{part}").write_text(
            f"version: 1\nevents: Ir\nfn=x\n0 5\nsummary: {total + 1}\ntotals: {total}\n"
        )
    (tmp_path / "callgrind-paid.out.tmp").write_text("totals: 1\n")  # not a dump part
    newest = newest_dump(out)
    assert newest.name == "callgrind-paid.out.10"
    assert read_total(newest) == 900  # totals over summary
    (tmp_path / "old.out.1").write_text("events: Ir\nsummary: 42\n")
    assert read_total(tmp_path / "old.out.1") == 42
    (tmp_path / "empty.out.1").write_text("events: Ir\n")
    with pytest.raises(ValueError, match="not a callgrind dump"):
        read_total(tmp_path / "empty.out.1")


def test_instructions_ratios_pair_the_rounds_and_skip_sides_not_counted() -> None:
    from benchmarks.instructions import Counted, ratios

    def counted(kind: str, *rounds: float) -> Counted:
        return Counted(kind, "", 0, Path(kind), list(rounds))

    found = {
        label: (median, low, high)
        for label, median, low, high in ratios(
            {"chain": counted("chain", 100, 200, 100), "paid": counted("paid", 110, 240, 150)}
        )
    }
    assert found == {"paid endpoint / the chain": (1.2, 1.1, 1.5)}


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_instructions_case_counts_a_server_under_callgrind_per_request() -> None:
    """The instructions case, one short round of the chain: counted per request, not per run
    (its ratios are paired round by round: the test above)."""
    from benchmarks.instructions import case

    report = Report(meta={})
    # 4 clients: 32 queued on a server slowed ~50x by callgrind, on a busy machine, waited past
    # the load's 10 s timeout and a round answered nothing (seen on two xdist workers)
    case(report, rounds=1, secs=5.0, kinds=["chain"], clients=4)
    ((row,),) = [[r for r in report.rows if r["case"] == "instructions: chain"]]
    assert 1e5 < row["ir_per_request"] < 1e8  # about 1.5 million a request here
    assert report.figures == []  # a ratio needs both of its sides counted


#: each case's headline figure (the instructions case has its own test: it needs valgrind,
#: the redis case too: it needs redis-server and checks its rows)
HEADLINES = {
    "chain": "paid endpoint / the chain",
    "stub": "paid endpoint / SDK middleware, c=32",
    "middleware": "middleware route / x402 middleware",
    "sandbox": "paid endpoint (sandbox) / bare handler",
    "ledger": "sandbox rate after 200 settles / fresh",
    "micro": "tool call / bare client call",
    "queue": "journal add at 10k / at 10",
    "memory": "RSS growth over 400 paid requests (MB) [end / warm]",
    "mcp": "paid MCP tools/call / unpaid (rate)",
}


def test_every_case_is_run_by_a_test() -> None:
    assert set(CASES) == {*HEADLINES, "redis", "instructions"}


@pytest.mark.parametrize("name", sorted(HEADLINES))
def test_each_case_runs_as_the_command_runs_it_and_gives_its_ratios(
    name: str, tmp_path: Path
) -> None:
    """``python -m benchmarks --quick --only NAME`` with the shortest settings: the case
    succeeds and writes its figures, each a positive ratio, its headline a finite one (no time
    is judged, except the memory case's bound, which is in megabytes)."""
    # the slow sides (the sandbox case's paid endpoint settling on the sandbox's database,
    # payments-py's synchronous middleware in the stub case, ~30 answers/s): at c=32 on a busy
    # machine their first requests outlast a 1-s wrk run (0 answered, seen in CI runs on two
    # workers), so those cases load for 3 s
    duration = "3" if name in ("sandbox", "stub") else "0.5"
    short = ["--duration", duration, "--chain-duration", "0.3", "--seed", "200"]
    argv = ["--quick", "--only", name, "--out", str(tmp_path), "--memory-requests", "400"]
    assert main([*argv, *short]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    figures = {f["name"]: f for f in results["figures"]}
    assert HEADLINES[name] in figures
    assert 0 < figures[HEADLINES[name]]["ratio"] < math.inf
    # a side that answered nothing in so short a run gives an infinite ratio, never none
    assert all(f["ratio"] > 0 for f in figures.values()), figures
    assert results["meta"]["quick"] is True and results["rows"]
    if name == "memory":
        assert figures[HEADLINES[name]]["absolute"] <= GROWTH_BOUND_MB


def test_a_child_can_start_without_named_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.procs import child_env

    monkeypatch.setenv("COVERAGE_PROCESS_CONFIG", "tracer on")
    monkeypatch.setenv("KEPT_FOR_THE_CHILD", "1")
    env = child_env({"EXTRA": "2"}, drop=("COVERAGE_PROCESS_CONFIG",))
    assert "COVERAGE_PROCESS_CONFIG" not in env
    assert env["KEPT_FOR_THE_CHILD"] == "1" and env["EXTRA"] == "2"
    assert child_env()["COVERAGE_PROCESS_CONFIG"] == "tracer on"  # dropped only when asked
