"""The in-process idempotency store: a lease finishes or frees only its own hold, so a request
whose hold ran out (and was taken over by a retry) cannot overwrite the retry's answer."""

from __future__ import annotations

from svc_gateway.selling.handlers import Answer
from svc_gateway.selling.state.idempotency import Kept, MemoryIdempotency, State


async def test_a_lease_finishes_and_frees_only_its_own_hold() -> None:
    now = [0.0]
    store = MemoryIdempotency(ttl=100.0, lease=5.0, clock=lambda: now[0])
    first = await store.begin("scope", "fp")
    kept = Kept(Answer(200, b'{"answer":1}'), {"creditsRedeemed": "1"}, "token-digest")
    await store.finish("scope", "not-its-lease", kept)  # another hold's lease: nothing kept
    assert (await store.begin("scope", "fp")).state is State.RUNNING
    await store.abandon("scope", "not-its-lease")  # nor freed
    assert (await store.begin("scope", "fp")).state is State.RUNNING
    now[0] = 6.0  # the first hold ran out: a retry takes the scope over
    retry = await store.begin("scope", "fp")
    assert retry.state is State.NEW and retry.lease != first.lease
    await store.finish("scope", first.lease, kept)  # the stale hold finishing: ignored
    assert (await store.begin("scope", "fp")).state is State.RUNNING
    await store.finish("scope", retry.lease, kept)
    done = await store.begin("scope", "fp")
    assert done.state is State.DONE and done.kept == kept
    await store.finish("gone", retry.lease, kept)  # a scope nobody holds: nothing kept
    assert (await store.begin("gone", "fp")).state is State.NEW
