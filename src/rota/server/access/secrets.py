"""Users' stored secrets (API keys, tokens): encrypted at rest, put into a job's
environment at launch, never in an API answer, an event or a log.

The values are encrypted with Fernet (AES-128-CBC and HMAC-SHA256) under a key kept in
ROTA_HOME (mode 0600, made on first use), so a copy of the database alone, a PostgreSQL
server's included, does not give them away. A secret belongs to one user; a job gets only
its own user's secrets.

The values of a job's ``--secret-env`` variables are sealed the same way before its spec is
stored (``SEALED`` + a keyed tag + the Fernet token, rota.core.job_secrets) and unsealed only into
the launch environment. The tag, an HMAC of the value under a key derived from secrets.key,
lets equal secrets de-duplicate (content_hash) without a stored hash to test guesses on.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from rota.core.job_secrets import SEALED, check_secret_name
from rota.core.spec import JobSpec
from rota.errors import InvalidSpec, NotFound, RotaError
from rota.store.repo import Store

MAX_VALUE_BYTES = 64 * 1024


def _load_key(path: Path) -> bytes:
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    key = Fernet.generate_key()
    try:  # O_EXCL: two daemons starting at once must not each write a different key
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


class Secrets:
    def __init__(self, store: Store, key_path: Path, clock: Callable[[], float]) -> None:
        self.store, self.clock = store, clock
        key = _load_key(key_path)
        self._fernet = Fernet(key)
        self._tag_key = hmac.new(key, b"rota secret_env tag", hashlib.sha256).digest()

    def put(self, user: str, name: str, value: str) -> bool:
        """Store or replace; True when it is new."""
        check_secret_name(name)
        if not value:
            raise InvalidSpec(f"secret {name}: the value is empty", field="value")
        if len(value.encode()) > MAX_VALUE_BYTES:
            raise InvalidSpec(f"secret {name}: more than {MAX_VALUE_BYTES} bytes",
                              field="value")
        return self.store.put_secret(user, name, self._fernet.encrypt(value.encode()),
                                     now=self.clock())

    def names(self, user: str) -> set[str]:
        return {n for n, _, _ in self.store.secret_list(user)}

    def require(self, user: str, names: Iterable[str], where: str = "secrets") -> None:
        """Refuse a job that names a secret its user has not stored."""
        missing = sorted(set(names) - self.names(user))
        if missing:
            raise InvalidSpec(f"{where}: {user} has no stored secret "
                              f"{', '.join(missing)}; store it with `rota secret set "
                              f"{missing[0]}`", field="secrets")

    def values(self, user: str, names: Iterable[str]) -> dict[str, str]:
        """Decrypted values of those of ``names`` the user has (a missing one is absent)."""
        out: dict[str, str] = {}
        for name, blob in self.store.secret_ciphertexts(user, names).items():
            try:
                out[name] = self._fernet.decrypt(blob).decode()
            except InvalidToken:
                raise RotaError(f"secret {name} of {user} cannot be decrypted with this "
                                "daemon's key (was secrets.key replaced?)") from None
        return out

    def delete(self, user: str, name: str) -> None:
        check_secret_name(name)
        try:
            self.store.delete_secret(user, name)
        except NotFound:
            raise NotFound(f"{user} has no secret {name!r}") from None

    # --- a job's --secret-env values -----------------------------------------------------
    def seal(self, spec: JobSpec) -> JobSpec:
        """``spec`` with the values of its ``secret_env`` variables sealed (encrypted), as
        it is stored. Every value is sealed, one that looks sealed too: a sealed value
        copied from a database into a submit is never decrypted into its job."""
        if not spec.secret_env:
            return spec
        env = dict(spec.env)
        for var in spec.secret_env:
            value = env[var].encode()
            tag = hmac.new(self._tag_key, value, hashlib.sha256).hexdigest()[:32]
            env[var] = f"{SEALED}{tag}:{self._fernet.encrypt(value).decode('ascii')}"
        return spec.model_copy(update={"env": env})

    def launch_env(self, spec: JobSpec, job_id: int) -> dict[str, str]:
        """The spec's environment with its ``secret_env`` values unsealed, for the launch
        only; a clear one (stored before values were sealed) is taken as it is."""
        env = dict(spec.env)
        for var in spec.secret_env:
            value = env.get(var, "")
            if value.startswith(SEALED):
                token = value[len(SEALED):].partition(":")[2]
                try:
                    env[var] = self._fernet.decrypt(token.encode("ascii")).decode()
                except (InvalidToken, UnicodeError):
                    raise RotaError(f"job {job_id}: the secret value of {var} cannot be "
                                    "decrypted with this daemon's key (was secrets.key "
                                    "replaced?)") from None
        return env
