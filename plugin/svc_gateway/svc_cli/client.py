"""The service client as ``svc`` uses it: the plugin's client, keeping each raw answer.

``--format json`` prints the service's own JSON, so every answer is kept as it came (after
the typed client has checked it). The few operations only the command line offers (minting
expirable credits, listing delegations, the organizations routes, deployment info) are here
rather than in the plugin's client, which holds what the plugin itself calls.
"""

from __future__ import annotations

import re
from typing import Any

from ..service import errors
from ..service.client import ServiceClient
from ..service.models import WireModel
from ..service.transport import parse_model, seg

_API_ROOT = re.compile(r"/api/v\d+$")


class CliClient(ServiceClient):
    """A :class:`ServiceClient` whose answers are kept in :attr:`answers`, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answers: list[Any] = []

    async def _request(
        self, *args: Any, model: type[WireModel] | None = None, **kwargs: Any
    ) -> Any:
        """The answer's JSON, kept; as ``model`` when asked for one (checked the general way,
        :func:`parse_model`, so the JSON kept is the service's own)."""
        answer = await super()._request(*args, **kwargs)
        self.answers.append(answer)
        return answer if model is None else parse_model(model, answer)

    @property
    def last_answer(self) -> Any:
        return self.answers[-1] if self.answers else {}

    async def mint_expirable(
        self, plan_id: str, amount: int, receiver: str, duration_secs: int = 0
    ) -> dict[str, Any]:
        """``POST /protocol/plans/mintExpirable`` (owner only); duration 0: no expiry."""
        body = {
            "planId": plan_id,
            "creditsAmount": str(amount),
            "creditsReceiver": receiver,
            "creditsDuration": str(duration_secs),
        }
        return _object(await self._request("POST", "protocol/plans/mintExpirable", body=body))

    async def list_delegations(self) -> list[dict[str, Any]]:
        """``GET /delegation``: a bare array, or ``{delegations: [...]}`` (WIRE.md §6)."""
        data = await self._request("GET", "delegation", retry=True)
        items = data.get("delegations") if isinstance(data, dict) else data
        return [item for item in items or [] if isinstance(item, dict)]

    async def my_memberships(self) -> Any:
        return await self._request("GET", "organizations/my-memberships", retry=True)

    async def organization_members(
        self,
        *,
        org_id: str | None,
        role: str | None,
        is_active: bool | None,
        page: int,
        page_size: int,
    ) -> dict[str, Any]:
        """``POST /organizations/members`` (admins): a read, sent as a POST by the SDKs."""
        body: dict[str, Any] = {"page": page, "offset": page_size}
        if role is not None:
            body["role"] = role
        if is_active is not None:
            body["isActive"] = is_active
        data = await self._request(
            "POST", "organizations/members", body=body, headers=_org(org_id), retry=True
        )
        return _object(data)

    async def organization_activity(
        self, org_id: str, *, event_type: str | None, page: int, limit: int
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"page": page, "limit": limit}
        if event_type:
            params["eventType"] = event_type
        path = f"organizations/{seg(org_id)}/activity"
        return _object(await self._request("GET", path, params=params, retry=True))

    async def create_member(
        self, user_id: str, *, email: str | None, role: str | None, org_id: str | None
    ) -> dict[str, Any]:
        """``POST /organizations/account`` for a member (admins); never retried."""
        body: dict[str, Any] = {"uniqueExternalId": user_id}
        if email:
            body["email"] = email
        if role:
            body["role"] = role
        data = await self._request("POST", "organizations/account", body=body, headers=_org(org_id))
        return _object(data)

    async def create_sandbox_account(self, label: str) -> dict[str, Any]:
        """``POST /sandbox/accounts`` (the local sandbox only, no key): a new account and key."""
        body = {"label": label}
        return _object(await self._request("POST", "sandbox/accounts", body=body, auth=False))

    async def deployment_info(self) -> dict[str, Any]:
        """``GET /`` at the service's origin (public): contract addresses of the deployment."""
        origin = _API_ROOT.sub("", self.base_url)
        info = CliClient(origin, environment=self.environment, api_version=self.api_version)
        try:
            answer = await info._request("GET", "", auth=False, retry=True)
        finally:
            await info.aclose()
        self.answers.append(answer)
        return _object(answer)


def _org(org_id: str | None) -> dict[str, str] | None:
    return {"X-Current-Org-Id": org_id} if org_id else None


def _object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise errors.ProtocolError("The service's answer is not a JSON object", code="bad_response")
    return data
