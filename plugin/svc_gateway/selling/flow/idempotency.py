"""Retries never pay twice: the flow's part that keeps, under the buyer's idempotency key, the
answer a paid request bought, and replays it to the key's retries (issue 46).

Before anything is asked of the service, a request that carries a key and a token claims its
scope (the payer the token names, and the key) in the :class:`IdempotencyStore`:

* nobody holds it → this request is sold as usual; once settled (or its settle owed in the
  queue) its answer and receipt are kept ``idempotencyTtlSecs``; refused or failed, the scope is
  freed, so a retry is judged afresh;
* kept, for the same request (method, route, body digest) → the kept answer and receipt,
  replayed: no verify, no settle, no run. A retry with another token of the same payer is
  verified first (nothing claimed, nothing settled): a kept answer goes only to its payer;
* kept or running, for another request → 422 ``idempotency_key_reused`` (ACP's semantics);
* running → 409 with ``Retry-After``: never a second run.

A kept answer larger than ``idempotencyMaxAnswerBytes`` is replaced by its receipt and a note.

Beside it, :mod:`.replay` still replays, in this process only, the answer a single-use (v3)
token paid for to a key-less retry with that token. It is not folded in here on purpose: every
v3 request would then write its answer to the store, two more Redis round trips per paid
request with ``stateUrl``, where a key costs them only to a buyer that asked for it (every
buyer of this plugin does, so a retry of theirs is answered on any replica).
The payer a token names is read without verifying it; a forged token naming another payer gets
no answer (the kept token's digest must match, or the new token must verify as that payer).
"""

from __future__ import annotations

import string
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from ...encoding import decode_access_token
from ...redact import get_logger
from ..handlers import Answer
from ..state.idempotency import MAX_KEY_CHARS, PAYMENT_IDENTIFIER, Begun, Kept, State
from ..state.protocols import IdempotencyStore
from ..state.stats import PaidStats
from ..types import Outcome, PaidOutcome, PaidRequest
from .admission import token_payer
from .refusals import error_answer
from .replay import digest

log = get_logger("svc_gateway.paid")

#: what a buyer is told to wait before retrying a key still running
RUNNING_RETRY_AFTER_SECS = 2
#: tokens whose payment-identifier is remembered (cleared when full)
IDENTIFIERS_KEPT = 2048
#: the header marking a replayed answer (Stripe's name)
REPLAYED_HEADER = "Idempotent-Replayed"
_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "-_.:~+/=")

#: the payer a token verifies as, for a plan/agent/url (``None``: it does not)
VerifyPayer = Callable[[str, PaidRequest], Awaitable[str | None]]


def key_problem(key: str) -> str | None:
    """Why ``key`` is no idempotency key (``None``: it is one)."""
    if not key or len(key) > MAX_KEY_CHARS:
        return f"an idempotency key is 1 to {MAX_KEY_CHARS} characters"
    if not set(key) <= _KEY_CHARS:
        return "an idempotency key is letters, digits and - _ . : ~ + / = (a UUID is one)"
    return None


def payment_identifier(token: str | None) -> str | None:
    """The ``id`` of x402's ``payment-identifier`` extension a payment carries (its
    ``extensions["payment-identifier"]["info"]["id"]``), when it carries one."""
    decoded = decode_access_token(token) if token else None
    extensions = decoded.get("extensions") if isinstance(decoded, dict) else None
    extension = extensions.get(PAYMENT_IDENTIFIER) if isinstance(extensions, dict) else None
    info = extension.get("info") if isinstance(extension, dict) else None
    found = info.get("id") if isinstance(info, dict) else None
    return found if isinstance(found, str) and found else None


class Retries:
    """Claims, keeps and replays; counts ``stats.replayed`` and ``stats.refused``."""

    def __init__(
        self,
        store: IdempotencyStore,
        stats: PaidStats,
        *,
        max_answer_bytes: Callable[[], int],
        verify_payer: VerifyPayer,
    ) -> None:
        self.store = store
        self.stats = stats
        self.max_answer_bytes = max_answer_bytes
        self.verify_payer = verify_payer
        #: each token's ``payment-identifier`` (decoded once per token: a reusable token pays
        #: for many requests), bounded
        self._identifiers: dict[str, str | None] = {}

    def key_of(self, request: PaidRequest) -> str | None:
        """The request's idempotency key: the way in's, else the payment's
        ``payment-identifier``."""
        token = request.token
        if request.idempotency_key or not token:
            return request.idempotency_key
        if token not in self._identifiers:
            if len(self._identifiers) >= IDENTIFIERS_KEPT:
                self._identifiers.clear()
            self._identifiers[token] = payment_identifier(token)
        return self._identifiers[token]

    def scope(self, request: PaidRequest) -> tuple[str, str, str] | None:
        """(scope, fingerprint, token digest) of a request that carries a key and a token."""
        key, token = self.key_of(request), request.token
        if not key or not token:
            return None
        payer = token_payer(token)
        who = payer.lower() if payer else "token:" + digest(token)
        path = urlsplit(request.url).path
        fingerprint = digest(request.verb, request.route, path, request.body_digest or "")
        return digest(who, key), fingerprint, digest(token)

    async def begin(self, request: PaidRequest) -> PaidOutcome | tuple[str, str, str] | None:
        """An answer for the request now (a replay, 409, 422, 400), or the (scope, lease,
        token digest) it holds (finish or abandon it), or ``None``: no key."""
        key = self.key_of(request)
        if key is not None and request.token:
            problem = key_problem(key)
            if problem is not None:
                answer = error_answer(400, "idempotency_key_invalid", f"{problem}.")
                return PaidOutcome(Outcome.CONFLICT, answer, problem)
        named = self.scope(request)
        if named is None:
            return None
        scope, fingerprint, token = named
        begun = await self.store.begin(scope, fingerprint)
        if begun.state is State.NEW:
            return scope, begun.lease, token
        return await self._found(begun, request, token)

    async def _found(self, begun: Begun, request: PaidRequest, token: str) -> PaidOutcome:
        if begun.state is State.REUSED:
            answer = error_answer(
                422,
                "idempotency_key_reused",
                "This idempotency key was used for another request (method, route or body); "
                "nothing was charged. Send a new key for a new request.",
            )
            return PaidOutcome(Outcome.CONFLICT, answer, "idempotency_key_reused")
        kept = begun.kept
        if begun.state is State.RUNNING or kept is None:
            seconds = str(RUNNING_RETRY_AFTER_SECS)
            answer = error_answer(
                409,
                "idempotency_key_in_use",
                "The first request with this idempotency key is still running; nothing more "
                f"was charged. Retry with the same key and token in {seconds} s for its answer.",
                **{"Retry-After": seconds},
            )
            return PaidOutcome(Outcome.CONFLICT, answer, "idempotency_key_in_use")
        if kept.token != token:  # another token: its payer must be the one that paid
            assert request.token is not None
            payer = await self.verify_payer(request.token, request)
            named = token_payer(request.token)
            if payer is None or named is None or payer.lower() != named.lower():
                answer = error_answer(
                    422,
                    "idempotency_key_reused",
                    "This idempotency key belongs to another payment; nothing was charged. "
                    "Retry with the token that paid, or send a new key.",
                )
                return PaidOutcome(Outcome.CONFLICT, answer, "idempotency_key_reused")
        self.stats.replayed += 1
        log.info("replayed the answer an idempotency key paid for (a retry)")
        answer = kept.answer
        replayed = Answer(
            answer.status,
            answer.body,
            answer.content_type,
            (*answer.headers, (REPLAYED_HEADER, "true")),
        )
        return PaidOutcome(
            Outcome.PAID,
            replayed,
            "replayed",
            receipt=kept.receipt,
            result=replayed,
            replayed=True,
            settle="paid" if kept.receipt is not None else "deferred",
        )

    async def end(self, held: tuple[str, str, str], outcome: PaidOutcome | None) -> None:
        """Keep what ``outcome`` bought (settled, or owed in the queue), else free the scope."""
        scope, lease, token = held
        if outcome is None or outcome.settle not in ("paid", "deferred") or outcome.replayed:
            await self.store.abandon(scope, lease)
            return
        answer = outcome.answer
        limit = self.max_answer_bytes()
        # a stream went to its client as it came (the ASGI way in): only its receipt is kept
        streamed = answer.content_type.startswith("text/event-stream") and not answer.body
        if len(answer.body) > limit or streamed:
            receipt = dict(answer.headers).get("payment-response")
            why = (
                "was streamed as it came, so it was not kept"
                if streamed
                else f"({len(answer.body)} bytes) was larger than the {limit} bytes kept for "
                "retries"
            )
            note = {
                "error": "idempotency_answer_not_kept",
                "message": f"The answer {why}, so it cannot be replayed. The request was "
                "paid once: its receipt is in payment-response. Nothing more was charged.",
                "receipt": outcome.receipt,
            }
            headers = {"payment-response": receipt} if receipt else {}
            answer = Answer.json(410, note, headers)
        await self.store.finish(scope, lease, Kept(answer, outcome.receipt, token))
