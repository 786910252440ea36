"""A job's secrets as the core knows them: a stored secret's name, and how a sealed
``secret_env`` value reads.

A spec names stored secrets (``JobSpec.secrets``: environment variable -> secret name)
and may hold sealed values in ``env`` (``secret_env``); the daemon seals and unseals them
(``rota.server.access.secrets``), the core only checks names and reads a value's tag for
the content hash. Pure: no I/O, no keys.
"""

from __future__ import annotations

import re

from rota.errors import InvalidSpec

_SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


def check_secret_name(name: str) -> str:
    """A stored secret's name: like an environment variable's (it often becomes one)."""
    if not _SECRET_NAME.fullmatch(name):
        raise InvalidSpec(f"secret name {name!r}: 1-100 letters, digits and _, not starting "
                          "with a digit (like an environment variable)", field="name")
    return name


#: how a ``secret_env`` value is stored: SEALED + a keyed tag of the value + ":" + the value
#: encrypted (rota.server.access.secrets seals and unseals; the core only reads the tag)
SEALED = "rota-sealed:v1:"


def sealed_tag(value: str) -> str:
    """What a secret value counts as in a content hash: the tag of a sealed one, a clear
    one (stored before values were sealed, or not sealed yet) as it is."""
    if value.startswith(SEALED):
        return SEALED + value[len(SEALED):].partition(":")[0]
    return value
