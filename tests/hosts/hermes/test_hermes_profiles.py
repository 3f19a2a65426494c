"""Two profiles of one Hermes gateway process each keep their own live svc plugin (issue 43,
item 9): upstream multiplexes profiles in one gateway and calls ``register()`` once per profile,
with a plugin context of its own; the second must not shut the first down."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("hermes_cli")

from .hermes_support import Sandbox, plan_balance, run_child, section

pytestmark = pytest.mark.hermes


def test_a_second_profile_leaves_the_first_profiles_plugin_running(
    hermes_sandbox: Sandbox, hermes_plan_id: str, tmp_path: Path
) -> None:
    settings = {
        "environment": "local",
        "baseUrl": hermes_sandbox.base_url,
        "planId": hermes_plan_id,
        "svcApiKey": hermes_sandbox.subscriber.api_key,
    }
    run = run_child("profiles", tmp_path, settings, {"planId": hermes_plan_id})
    assert section(run, "discovery")["plugin"]["error"] is None
    profiles = section(run, "two_profiles")
    assert profiles["distinct_handles"] is True
    assert profiles["first_closed"] is False and profiles["second_closed"] is False
    balance = plan_balance(hermes_sandbox, hermes_plan_id)
    for answer in (profiles["first_answer"], profiles["second_answer"]):
        assert "error" not in answer, answer  # never "the svc plugin has been shut down"
        assert str(balance) in str(answer)
