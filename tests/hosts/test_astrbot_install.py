"""``svc-gateway astrbot-install``: the two-file plugin folder placed into an AstrBot data dir
(no AstrBot needed: the 3.11 suite runs these; tests/hosts/astrbot loads the result into
AstrBot)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from svc_gateway.cli import main
from svc_gateway.hosts.astrbot.install import SOURCE, InstallError, install


def test_the_plugin_folder_is_linked_and_empty_settings_are_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert main(["astrbot-install", "--data", str(data)]) == 0
    target = data / "plugins" / "svc"
    assert target.is_symlink() and target.resolve() == SOURCE.resolve()
    assert sorted(p.name for p in target.iterdir() if not p.name.startswith("__")) == [
        "main.py",
        "metadata.yaml",
    ]
    settings = data / "config" / "svc_gateway.json"
    assert json.loads(settings.read_text()) == {}
    assert settings.stat().st_mode & 0o077 == 0  # it may come to hold svcApiKey
    assert "restart AstrBot" in capsys.readouterr().out
    # a second run keeps the link and the operator's settings
    settings.write_text('{"environment": "sandbox"}')
    assert main(["astrbot-install", "--data", str(data)]) == 0
    assert json.loads(settings.read_text()) == {"environment": "sandbox"}


def test_a_copy_replaces_a_folder_only_when_forced(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "plugins" / "svc").mkdir(parents=True)
    with pytest.raises(InstallError, match="--force"):
        install(data, copy=True)
    install(data, copy=True, force=True)
    target = data / "plugins" / "svc"
    assert not target.is_symlink()
    assert (target / "main.py").read_text() == (SOURCE / "main.py").read_text()
    assert "make_star(__name__)" in (target / "main.py").read_text()


def test_a_wrong_directory_is_refused_with_what_to_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["astrbot-install", "--data", str(tmp_path / "missing")]) == 2
    assert "AstrBot's data directory" in capsys.readouterr().err
    (tmp_path / "root" / "data").mkdir(parents=True)
    with pytest.raises(InstallError, match=r"give .*data instead"):
        install(tmp_path / "root")
