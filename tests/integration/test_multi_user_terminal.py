"""What one user wrote never rewrites another's terminal (DESIGN.md invariant 12; issue 36).

Run as root with real Unix accounts (test_multi_user's helpers: CI runs as root, and
ROTA_REQUIRE_ROOT=1 makes these fail rather than skip elsewhere): bob's job, named after a
command that sets the window title, clears the screen and reverses the text, and failing
with such a reason, is listed to alice as text.
"""

from __future__ import annotations

import json

from test_multi_user import (  # (fixtures used by name)
    ALICE,
    BOB,
    accounts,
    root_daemon,
    rota_as,
    shared_home,
)

from rota_testing import DaemonProcess, wait_until

__all__ = ["accounts", "root_daemon", "shared_home"]  # pytest finds the fixtures here

EVIL = "\x1b]0;PWN\x07\x1b[2J\u202e\x9b[red]x"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


def test_bobs_hostile_job_reaches_alices_terminal_as_text(root_daemon: DaemonProcess) -> None:
    home = root_daemon.home
    script = f"echo 'rota: FAILED: why{EVIL}' >&2; exit 3"
    r = rota_as(BOB, home, "submit", "--json", "--", "/bin/sh", "-c", script, EVIL)
    assert r.returncode == 0, r.stdout + r.stderr  # a command may hold any character
    job = json.loads(r.stdout)["jobs"][0]["id"]
    with root_daemon.client() as c:
        wait_until(lambda: c.job(job)["state"] == "failed", what="bob's job fails")
    for args in (["queue", "--all"], ["queue", "--all", "--wide"], ["show", str(job)],
                 ["why", str(job)]):
        seen = rota_as(ALICE, home, *args)
        assert seen.returncode == 0, seen.stderr
        out = seen.stdout + seen.stderr
        assert not [c for c in RAW if c in out], (args, out)
        assert "\\x1b]0;PWN\\x07" in out and "[red]x" in out, (args, out)  # shown, escaped
