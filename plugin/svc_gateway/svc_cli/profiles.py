"""Profiles: named settings (environment, base URL, API version) plus one stored key each.

Settings live in ``config.json`` under ``$SVC_CONFIG_DIR`` (else ``$XDG_CONFIG_HOME/svc``,
else ``~/.config/svc``); it never holds a key. Keys go where the plugin keeps its own: the OS
keyring when a secure one exists, else an owner-only (0600) file, one store per profile. This
module is the only one that imports the plugin's credential store.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from ..account.credentials import CredentialStore
from ..api_keys import ApiKey, ConfigError, normalize_version, parse_api_key
from ..config import ENVIRONMENTS
from .errors import BadUsage

CONFIG_FILE = "config.json"
DEFAULT_PROFILE = "default"
DEFAULT_ENVIRONMENT = "sandbox"
KEY_VARIABLE = "SVC_API_KEY"
ENVIRONMENT_VARIABLE = "SVC_ENVIRONMENT"
PROFILE_VARIABLE = "SVC_PROFILE"
#: The settings ``config set`` edits besides the key, by their spelling on the command line.
SETTINGS = {"environment": "environment", "base-url": "baseUrl", "api-version": "apiVersion"}
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_URL = re.compile(r"https?://[^/\s]+\S*")


def config_dir() -> Path:
    """``$SVC_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/svc``, else ``~/.config/svc``."""
    if explicit := os.environ.get("SVC_CONFIG_DIR"):
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "svc"


def check_profile_name(name: str) -> str:
    if not _PROFILE_NAME.fullmatch(name):
        raise BadUsage(
            "--profile must be 1-64 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit"
        )
    return name


def check_environment(value: str, where: str) -> str:
    env = value.strip().lower()
    if env not in ENVIRONMENTS:
        raise BadUsage(f"{where} must be one of {', '.join(ENVIRONMENTS)}")
    return env


def check_base_url(value: str, where: str) -> str:
    url = value.strip().rstrip("/")
    if not _URL.fullmatch(url):
        raise BadUsage(f"{where} must be an http(s) URL such as https://host/api/v1")
    return url


def check_api_version(value: str, where: str) -> str:
    version = normalize_version(value)
    if version is None:
        raise BadUsage(f"{where} must look like 1.1 (MAJOR.MINOR)")
    return version


def parse_key(raw: str | SecretStr, where: str) -> ApiKey:
    """The key, parsed; the refusal names ``where`` and never echoes the key."""
    try:
        key = parse_api_key(raw)
    except ConfigError as error:
        raise BadUsage(f"{where}: {error}") from None
    if key.expired:
        raise BadUsage(f"{where}: the API key has expired; create a new one in the dashboard")
    return key


def mask(key: ApiKey) -> str:
    """``local:eyJhbG…x9Qk``: enough to recognise a key, never enough to use it."""
    text = key.secret.get_secret_value()
    prefix, _, token = text.partition(":")
    return f"{prefix}:{token[:6]}…{token[-4:]}" if len(token) > 12 else f"{prefix}:…"


@dataclass(frozen=True)
class Resolved:
    """What one run uses: the profile, its environment and URL, and the key (if any)."""

    profile: str
    environment: str
    base_url: str | None
    api_version: str | None
    key: ApiKey | None
    key_source: str | None
    """``SVC_API_KEY``, ``keyring`` or ``file``; ``None`` without a key."""
    exists: bool = True
    """Whether the profile has been created (``config init`` or ``login``)."""

    def require_base_url(self) -> str:
        if self.base_url is None and not self.exists:
            raise BadUsage(
                f"No profile '{self.profile}' yet: create it with 'svc --profile {self.profile} "
                "config init --api-key - --environment <env> --base-url <URL>' (the key on "
                "stdin), or set SVC_API_KEY and SVC_<ENV>_BASE_URL"
            )
        if self.base_url is None:
            env = self.environment
            raise BadUsage(
                f"No service URL is known for environment '{env}' (profile '{self.profile}'): "
                f"run 'svc --profile {self.profile} config set base-url <URL>' or set "
                f"SVC_{env.upper()}_BASE_URL"
            )
        return self.base_url


class ProfileBook:
    """``config.json``: the profiles' settings and which profile is active."""

    def __init__(self, directory: Path | None = None, *, use_keyring: bool = True) -> None:
        self.directory = directory or config_dir()
        self.path = self.directory / CONFIG_FILE
        self.use_keyring = use_keyring

    def read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError):
            raise BadUsage(
                f"{self.path} is not readable JSON: fix or delete it, then run "
                "'svc config init' again"
            ) from None
        data = data if isinstance(data, dict) else {}
        if not isinstance(data.get("profiles"), dict):
            data["profiles"] = {}
        return data

    def _make_directory(self) -> None:
        """The config directory and its ``profiles`` folder, owner-only (made on first write:
        reading a profile never creates anything)."""
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        self.directory.mkdir(mode=0o700, exist_ok=True)
        (self.directory / "profiles").mkdir(mode=0o700, exist_ok=True)

    def write(self, data: dict[str, Any]) -> None:
        """Owner-only, written whole and renamed into place (never half a file)."""
        self._make_directory()
        tmp = self.path.with_name(f".{CONFIG_FILE}.{secrets.token_hex(6)}.tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=2, sort_keys=True)
                handle.write("\n")
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def active(self) -> str | None:
        value = self.read().get("activeProfile")
        return value if isinstance(value, str) and _PROFILE_NAME.fullmatch(value) else None

    def settings(self, name: str) -> dict[str, Any]:
        found = self.read()["profiles"].get(name)
        return dict(found) if isinstance(found, dict) else {}

    def names(self) -> list[str]:
        return sorted(self.read()["profiles"])

    def update(self, name: str, *, activate: bool = False, **values: str | None) -> None:
        """Set (or, with ``None``, remove) settings of profile ``name``."""
        data = self.read()
        current = data["profiles"].get(name)
        profile = dict(current) if isinstance(current, dict) else {}
        for field, value in values.items():
            if value is None:
                profile.pop(field, None)
            else:
                profile[field] = value
        data["profiles"][name] = profile
        if activate or not data.get("activeProfile"):
            data["activeProfile"] = name
        self.write(data)

    def store(self, name: str, *, for_writing: bool = False) -> CredentialStore:
        """The profile's own key store: its own file, its own keyring entries."""
        if for_writing:
            self._make_directory()
        return CredentialStore(
            self.directory / "profiles" / name,
            use_keyring=self.use_keyring,
            namespace=f"svc-cli/{name}",
        )


def stored_where(store: CredentialStore, backend: str) -> str:
    """Where ``save`` put a key, in words: ``the keyring`` or ``the owner-only file <path>``."""
    return "the keyring" if backend == "keyring" else f"the owner-only file {store.path}"


def profile_name(book: ProfileBook, flag: str | None) -> str:
    """``--profile``, else ``$SVC_PROFILE``, else the active profile, else ``default``."""
    if flag:
        return check_profile_name(flag)
    if from_env := os.environ.get(PROFILE_VARIABLE, "").strip():
        return check_profile_name(from_env)
    return book.active() or DEFAULT_PROFILE


def resolve(book: ProfileBook, flag_profile: str | None, flag_version: str | None) -> Resolved:
    """The environment, URL and key of this run; refuses (exit 2) a key meant elsewhere.

    ``SVC_API_KEY`` and ``SVC_ENVIRONMENT`` override the profile. The profile's base URL
    belongs to the profile's environment: under another environment it is not used, so a key
    of one environment is never sent to another environment's URL.
    """
    name = profile_name(book, flag_profile)
    settings = book.settings(name)
    env_value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    key_text = os.environ.get(KEY_VARIABLE, "").strip()
    key = parse_key(key_text, KEY_VARIABLE) if key_text else None
    if env_value:
        environment = check_environment(env_value, ENVIRONMENT_VARIABLE)
    elif isinstance(settings.get("environment"), str):
        environment = check_environment(settings["environment"], f"profile '{name}' environment")
    else:
        environment = (key.environment if key else None) or DEFAULT_ENVIRONMENT
    source: str | None = KEY_VARIABLE if key else None
    if key is None:
        store = book.store(name)
        stored = store.load(environment)
        if stored is not None:
            key = parse_key(stored, f"the key stored in profile '{name}'")
            source = store.backend_name
    if key is not None and key.environment not in (None, environment):
        where = KEY_VARIABLE if source == KEY_VARIABLE else f"the key of profile '{name}'"
        raise BadUsage(
            f"{where} is a key for the {key.environment} environment, but this run is for "
            f"{environment}: a key is never sent to another environment's service. Use a "
            f"{environment} key, or set SVC_ENVIRONMENT={key.environment}."
        )
    base_url = None
    own = settings.get("baseUrl")
    if isinstance(own, str) and settings.get("environment", environment) == environment:
        base_url = own
    elif from_env := os.environ.get(f"SVC_{environment.upper()}_BASE_URL", "").strip():
        base_url = check_base_url(from_env, f"SVC_{environment.upper()}_BASE_URL")
    version = flag_version or settings.get("apiVersion")
    exists = name in book.names()
    return Resolved(name, environment, base_url, version, key, source, exists)


def environment_only(book: ProfileBook, flag_profile: str | None) -> str:
    """The run's environment without reading any key (for the offline helpers)."""
    if env_value := os.environ.get(ENVIRONMENT_VARIABLE, "").strip():
        return check_environment(env_value, ENVIRONMENT_VARIABLE)
    name = profile_name(book, flag_profile)
    value = book.settings(name).get("environment")
    if isinstance(value, str):
        return check_environment(value, f"profile '{name}' environment")
    return DEFAULT_ENVIRONMENT
