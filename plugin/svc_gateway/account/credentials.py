"""Where an API key lives between restarts: the OS keyring, else an owner-only file.

``CredentialStore`` keeps one key per environment in the OS keyring, or in an owner-only file
where no secure keyring exists (``save`` says which, so the login reply can tell the user).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..api_keys import ConfigError
from ..environments import ENVIRONMENTS

if TYPE_CHECKING:
    from keyring.backend import KeyringBackend
    from pydantic import SecretStr  # loads with the first key read or saved, not at register

#: one logger for the credential store and the browser login (the name predates the split)
log = logging.getLogger("svc_gateway.chat.login")

KEYRING_SERVICE = "svc-gateway-plugin"
CREDENTIALS_FILE = "credentials.json"
#: The file's list of environments whose key the keyring holds (names only, never a key).
_IN_KEYRING = "inKeyring"
_UNSAFE_MODULES = ("keyring.backends.fail", "keyring.backends.null", "keyrings.alt")


def default_config_dir() -> Path:
    """``$SVC_GATEWAY_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/svc-gateway``, else ~/.config/…"""
    if explicit := os.environ.get("SVC_GATEWAY_CONFIG_DIR"):
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "svc-gateway"


def secure_backend(backend: KeyringBackend) -> KeyringBackend | None:
    """The backend to trust with a key, or ``None``: not fail/null/``keyrings.alt``, priority ≥ 1.

    A chainer is unwrapped to its best secure member, because chaining would otherwise let a
    plaintext backend behind it receive the key."""
    members: list[KeyringBackend] | None = getattr(backend, "backends", None)
    for candidate in [backend] if members is None else members:
        if type(candidate).__module__.startswith(_UNSAFE_MODULES):
            continue
        with contextlib.suppress(Exception):  # ``priority`` raises when a backend is not viable
            if float(candidate.priority) >= 1:
                return candidate
    return None


def _check_env(environment: str) -> str:
    if environment not in ENVIRONMENTS:
        raise ConfigError(f"Unknown environment: expected one of {', '.join(ENVIRONMENTS)}")
    return environment


class CredentialStore:
    """One API key per environment: the OS keyring when secure, else ``credentials.json`` (0600).

    The file also holds the non-secret ``active`` marker (the environment logged into last), so a
    restarted gateway knows which key to use. Methods are synchronous, like ``keyring`` itself:
    callers on an event loop run them with ``asyncio.to_thread``. Thread-safe.
    """

    def __init__(
        self, config_dir: Path | None = None, *, use_keyring: bool = True, namespace: str = ""
    ) -> None:
        self.path = (config_dir or default_config_dir()) / CREDENTIALS_FILE
        #: keeps one chat user's keyring entries apart from another's (and the operator's)
        self.namespace = namespace
        self._lock = threading.Lock()
        self._use_keyring = use_keyring
        self._resolved = False
        self._keyring_backend: KeyringBackend | None = None

    @property
    def _keyring(self) -> KeyringBackend | None:
        """The secure keyring, found on first use: discovering keyring backends costs a few
        hundred milliseconds, which a gateway whose key sits in the file never pays."""
        if not self._resolved:
            with self._lock:
                if not self._resolved and self._use_keyring:
                    try:
                        import keyring

                        self._keyring_backend = secure_backend(keyring.get_keyring())
                    except Exception as error:
                        log.debug(
                            "no keyring (%s); using the credentials file", type(error).__name__
                        )
                self._resolved = True
        return self._keyring_backend

    def for_user(self, identity: str, digest: str) -> CredentialStore:
        """The store of one chat user: their own file (``users/<digest>/``, 0600) and their own
        keyring entries, apart from the operator's."""
        store = CredentialStore(
            self.path.parent / "users" / digest, use_keyring=self._use_keyring, namespace=identity
        )
        return store

    def _entry(self, env: str) -> str:
        return f"{self.namespace}/{env}" if self.namespace else env

    @property
    def backend_name(self) -> Literal["keyring", "file"]:
        """Where ``save`` will try first: the same words ``save`` returns."""
        return "file" if self._keyring is None else "keyring"

    def __repr__(self) -> str:
        where = self.path if self._keyring is None else type(self._keyring).__name__
        return f"CredentialStore(backend={self.backend_name!r}, where={str(where)!r})"

    def save(self, environment: str, key: str | SecretStr) -> Literal["keyring", "file"]:
        """Store the key, mark ``environment`` active, and return where the key went."""
        env = _check_env(environment)
        secret = key if isinstance(key, str) else key.get_secret_value()
        where: Literal["keyring", "file"] = "file"
        backend = self._keyring
        if backend is not None:
            try:
                backend.set_password(KEYRING_SERVICE, self._entry(env), secret)
                where = "keyring"
            except Exception as error:
                log.warning("keyring refused the key (%s); using the file", type(error).__name__)
        with self._lock:
            data = self._read()
            in_keyring = [e for e in data.get(_IN_KEYRING, []) if e in ENVIRONMENTS and e != env]
            if where == "keyring":
                data["keys"].pop(env, None)  # never leave an older copy in the file
                in_keyring.append(env)
            else:
                data["keys"][env] = secret
            data[_IN_KEYRING] = in_keyring
            data["active"] = env
            self._write(data)
        return where

    def load(self, environment: str) -> SecretStr | None:
        """The stored key for ``environment``, or ``None``.

        The file says where each key is (the key itself, or that the keyring holds it), so the
        keyring is only asked for a key that was put there."""
        from pydantic import SecretStr

        env = _check_env(environment)
        with self._lock:
            data = self._read()
        value = data["keys"].get(env)
        if isinstance(value, str) and value:
            return SecretStr(value)
        listed = data.get(_IN_KEYRING)
        # files written before the list existed: the active environment may be in the keyring
        maybe_in_keyring = env in listed if isinstance(listed, list) else data.get("active") == env
        backend = self._keyring if maybe_in_keyring else None
        if backend is not None:
            try:
                if found := backend.get_password(KEYRING_SERVICE, self._entry(env)):
                    return SecretStr(found)
            except Exception as error:
                log.debug("keyring read failed (%s)", type(error).__name__)
        return None

    @property
    def active(self) -> str | None:
        """The environment logged into last, if any."""
        with self._lock:
            value = self._read().get("active")
        return value if value in ENVIRONMENTS else None

    def load_any(self, preferred_env: str | None = None) -> tuple[str, SecretStr] | None:
        """The first stored key among ``preferred_env``, the active environment, the others."""
        if not self.path.exists():  # nothing was ever stored (every save writes the file)
            return None
        first = [env for env in (preferred_env, self.active) if env in ENVIRONMENTS]
        for env in dict.fromkeys([*first, *ENVIRONMENTS]):
            if (key := self.load(env)) is not None:
                return env, key
        return None

    def delete(self, environment: str) -> None:
        """Remove the key from the keyring and the file (``/svc_logout <env>``)."""
        env = _check_env(environment)
        backend = self._keyring
        if backend is not None:
            with contextlib.suppress(Exception):  # PasswordDeleteError when it is not there
                backend.delete_password(KEYRING_SERVICE, self._entry(env))
        with self._lock:
            if not self.path.exists():
                return
            data = self._read()
            data["keys"].pop(env, None)
            if isinstance(data.get(_IN_KEYRING), list):
                data[_IN_KEYRING] = [e for e in data[_IN_KEYRING] if e != env]
            if data.get("active") == env:
                del data["active"]
            self._write(data)

    def delete_all(self) -> None:
        """Remove every key everywhere, then the file itself (``/svc_logout``)."""
        for env in ENVIRONMENTS:
            self.delete(env)
        with self._lock, contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError) as error:
            log.warning("ignoring unreadable %s (%s)", self.path, type(error).__name__)
            data = {}
        data = data if isinstance(data, dict) else {}
        if not isinstance(data.get("keys"), dict):
            data["keys"] = {}
        return data

    def _write(self, data: dict[str, Any]) -> None:
        """Write a 0600 temp file, sync it, rename it over the old one and sync the directory:
        never a partial file, never a moment where a key sits in a file others can read, and a
        key just stored survives a power loss."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{CREDENTIALS_FILE}.{secrets.token_hex(8)}.tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({**data, "version": 1}, handle, indent=2)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        directory = os.open(self.path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(directory)  # the rename itself
        finally:
            os.close(directory)
