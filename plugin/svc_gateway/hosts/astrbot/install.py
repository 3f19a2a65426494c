"""``svc-gateway astrbot-install``: place the svc plugin folder into an AstrBot data directory.

AstrBot loads plugins only from folders under ``<data>/plugins/`` (never from installed
packages). The package ships the two-file folder ``svc/`` (``main.py`` + ``metadata.yaml``); this
links it as ``<data>/plugins/svc`` (or copies it, ``--copy``), and writes an empty settings file
``<data>/config/svc_gateway.json`` when there is none. Needs no AstrBot to run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .names import PLUGIN_DIR, SETTINGS_FILE

#: the plugin folder inside this package
SOURCE = Path(__file__).with_name(PLUGIN_DIR)
FILES = ("main.py", "metadata.yaml")


class InstallError(Exception):
    """The data directory cannot take the plugin (the message says why and what to do)."""


def install(data: Path, *, copy: bool = False, force: bool = False) -> list[str]:
    """Place the plugin under ``data/plugins/svc``; returns what was done, one line each."""
    data = data.expanduser().resolve()
    if not data.is_dir():
        raise InstallError(
            f"{data} is not a directory: give AstrBot's data directory (the 'data' folder "
            "beside AstrBot's root, created by 'astrbot init')"
        )
    if data.name != "data" and (data / "data").is_dir():
        raise InstallError(f"{data} holds a 'data' folder: give {data / 'data'} instead")
    target = data / "plugins" / PLUGIN_DIR
    done: list[str] = []
    if target.is_symlink() or target.exists():
        current = target.resolve() == SOURCE.resolve()
        if current and not copy:
            done.append(f"{target} already links to {SOURCE}")
        elif not force:
            raise InstallError(f"{target} already exists; pass --force to replace it")
        else:
            if target.is_symlink() or target.is_file():
                target.unlink()
            else:
                shutil.rmtree(target)
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        if copy:
            target.mkdir()
            for name in FILES:
                shutil.copyfile(SOURCE / name, target / name)
            done.append(f"copied the svc plugin into {target}")
        else:
            target.symlink_to(SOURCE, target_is_directory=True)
            done.append(f"linked {target} -> {SOURCE}")
    settings = data / "config" / SETTINGS_FILE
    if not settings.exists():
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps({}, indent=2) + "\n", encoding="utf-8")
        settings.chmod(0o600)  # it may come to hold svcApiKey
        done.append(f"wrote empty settings to {settings} (see the configuration reference)")
    else:
        done.append(f"kept the settings in {settings}")
    done.append("restart AstrBot (or reload plugins in its dashboard) to load svc")
    return done
