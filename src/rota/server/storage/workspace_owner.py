"""Whose rights the daemon acts with in a workspace: the account it was given to.

A workspace ``ROOT/USER/PROJECT`` is made by the daemon and handed to its job's account
(rota.server.storage.workspaces ``ensure``); only root can give it to anyone else, so the folder's
owner is who may change what is in it. Its size scans, cleanups and syncs read, list and
remove there with that account's rights (rota.storage.owner_files): a link or a folder
the account swapped in leads them nowhere the account could not go itself.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from rota.storage.owner_files import Owner, OwnerFiles


def rights_in(folder: Path | str) -> OwnerFiles:
    """The rights of the account that owns ``folder`` (the daemon's own when it does, or
    when the folder is not there yet)."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return OwnerFiles(None)
    if st.st_uid == os.geteuid():
        return OwnerFiles(None)
    try:
        pw = pwd.getpwuid(st.st_uid)
    except KeyError:  # an account removed since: its uid and the folder's group only
        return OwnerFiles(Owner(str(st.st_uid), st.st_uid, st.st_gid, (st.st_gid,)))
    return OwnerFiles(Owner(pw.pw_name, st.st_uid, pw.pw_gid,
                            tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))))
