"""docs/hosts.md "Hermes without a model key", run as written: the scripted model from its
command, the page's ``model:`` and offline ``plugins:`` blocks as ``config.yaml``, then
``hermes chat -q``; the plugin's skill reaches the model through ``skill_view``."""

from __future__ import annotations

import importlib.util
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.docs_recipes import HERMES_OFFLINE, HERMES_SETTINGS, ROOT, blocks

PAGE_PORT = "8766"
WAIT_SECS = 90.0


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def hermes_env(home: Path) -> dict[str, str]:
    """No provider key from this machine, a fresh ``HERMES_HOME``, this checkout's plugin."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_API_KEY")
        and not k.startswith(("OPENAI", "OPENROUTER", "ANTHROPIC", "NOUS", "HERMES_", "SVC_"))
    }
    env.update(
        HERMES_HOME=str(home / "hermes"),
        HOME=str(home / "user"),
        SVC_GATEWAY_CONFIG_DIR=str(home / "svc-config"),
        PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",
        PYTHONPATH=os.pathsep.join([str(ROOT / "plugin"), str(ROOT)]),
        NO_COLOR="1",
    )
    for sub in ("hermes", "user", "svc-config"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    return env


def test_hermes_answers_offline_with_the_scripted_model_and_views_the_plugin_skill(
    tmp_path: Path,
) -> None:
    if importlib.util.find_spec("hermes_cli") is None:
        pytest.skip("Hermes Agent is not installed (pip install -e '.[hermes]')")
    hermes = Path(sys.executable).parent / "hermes"
    assert hermes.is_file(), "the hermes extra installs the hermes command next to python"
    (_, serve), (_, model_yaml), (_, ask) = blocks(HERMES_OFFLINE)
    assert PAGE_PORT in serve and PAGE_PORT in model_yaml
    port = free_port()
    argv = shlex.split(serve.strip().replace(PAGE_PORT, port))
    assert argv[:3] == ["python", "-m", "tests.hosts.hermes.fake_llm"]
    plugins = yaml.safe_load(blocks(HERMES_SETTINGS)[1][1])
    config = {**yaml.safe_load(model_yaml.replace(PAGE_PORT, port)), **plugins}
    env = hermes_env(tmp_path)
    (tmp_path / "hermes" / "config.yaml").write_text(yaml.safe_dump(config))
    with subprocess.Popen(
        [sys.executable, *argv[1:]], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    ) as fake:
        try:
            assert fake.stdout is not None
            assert fake.stdout.readline().startswith("fake model at http://127.0.0.1:")
            (command,) = [line for line in ask.splitlines() if line.strip()]
            words = shlex.split(command)
            assert words[0] == "hermes"
            run = subprocess.run(
                [str(hermes), *words[1:]],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=WAIT_SECS,
                check=False,
            )
        finally:
            fake.terminate()
    assert run.returncode == 0, run.stderr[-3000:]
    answer = run.stdout.split("(fake model) The tool answered:", 1)
    assert len(answer) == 2, run.stdout[-3000:]
    said = " ".join(answer[1].split())  # the answer box wraps lines
    assert '"success": true, "name": "svc:payments"' in said, said[:1000]
