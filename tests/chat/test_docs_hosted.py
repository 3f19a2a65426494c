"""docs/hosted.md's "Try it offline" runs as written (issue 26 #2): the hosted config, the
reference chat with its demo host tools, alice's account, her mandate and two metered calls, her
``/svc_spend`` and the operator's ``/svc_earnings``; plus the ``/help`` a newcomer reads and the
start-up warning for a ``meteredTools`` entry no host tool matches."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from svc_gateway.hosts.demo_tools import image_gen, small_png
from svc_gateway.hosts.reference import HELP
from tests.chat.test_cli import WAIT_SECS, chat_env
from tests.docs_recipes import HOSTED_OFFLINE, blocks


def _run(tmp_path: Path, script: str, stdin: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "svc-gateway"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m svc_gateway.cli "$@"\n')
    shim.chmod(0o755)
    env = chat_env(tmp_path)
    env["PATH"] = os.pathsep.join([str(bin_dir), env["PATH"]])
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        input=stdin,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_SECS * 3,
    )


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_the_hosted_gateway_is_tried_offline_as_written(tmp_path: Path) -> None:
    (_, script), (_, chat) = blocks(HOSTED_OFFLINE)
    done = _run(tmp_path, script, chat)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "Demo host tools: image_gen, web_search" in out
    assert "Your payments account is open" in out
    assert '"image": "data:image/png;base64,' in out and '"tool": "web_search"' in out
    # the plan her first call bought is a purchase apart from the calls, in money and credits
    # (100 credits bought, not the 99 left after the call), and each call in money too
    assert (
        "You bought 100 credits for 1.00 USD (1 purchase of a plan) and paid 2 credits "
        "(0.02 USD) for 2 calls" in out
    )
    assert "plan bought by automatic top-up (for tool image_gen), 100 credits (1.00 USD)" in out
    assert "Earned 2 credits settled, 0 queued" in out and "over 2 sales" in out
    assert "neither a /command nor a tool" not in out
    assert "WARNING" not in done.stderr, done.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_a_metered_tool_no_host_offers_is_warned_about_at_start(tmp_path: Path) -> None:
    script = (
        """echo '{"meteredTools": {"image_gen": 1, "run_code": 2}}' > c.json\n"""
        "svc-gateway chat --config c.json --demo-tools"
    )
    done = _run(tmp_path, script, "")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "meteredTools names 'run_code'" in done.stderr
    assert "image_gen'" not in done.stderr  # offered: no warning


def test_help_names_the_receipts_commands_and_how_to_speak_as_a_user() -> None:
    for needed in ("/svc_spend", "/svc_earnings", "--user", "@alice", "perUserAccounts"):
        assert needed in HELP, needed
    assert "/svc_login new" in HELP and "needs perUserAccounts" in HELP


async def test_the_demo_picture_is_a_png() -> None:
    assert small_png("cat").startswith(b"\x89PNG\r\n\x1a\n")
    assert (await image_gen({"prompt": "a cat"}))["image"].startswith("data:image/png;base64,")
