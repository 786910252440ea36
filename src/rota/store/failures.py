"""A database's failure as a sentence a person can act on, never SQLAlchemy's text (its
SQL, its parameters and its "Background on this error" link stay in the log's cause)."""

from __future__ import annotations

from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from rota.errors import StoreError

#: (a piece of the driver's message, lower case; what it means), first match wins
_KNOWN = (
    ("database or disk is full", "the disk holding {where} is full: free some space there"),
    ("no space left on device", "the disk holding {where} is full: free some space there"),
    ("disk quota exceeded", "the disk quota of the user running the daemon is used up "
                            "({where})"),
    ("database is locked", "the database {where} is locked by another process (another "
                           "rota daemon, or a tool holding a write lock on it)"),
    ("readonly database", "the database {where} is read-only for the daemon's user"),
    ("unable to open database file", "the database file {where} cannot be opened (its "
                                     "folder is missing or not writable)"),
    ("disk i/o error", "the disk holding {where} failed to read or write (disk I/O error)"),
    ("malformed", "the database file {where} is damaged (malformed)"),
    ("connection refused", "the database server {where} refused the connection (is it "
                           "running?)"),
    ("could not translate host name", "the database server's host in {where} is unknown"),
    ("password authentication failed", "the database server {where} refused the user's "
                                       "password"),
    ("server closed the connection", "the database server {where} closed the connection"),
    ("timeout", "the database server {where} did not answer in time"),
)


def where(url: URL | None) -> str:
    """The database as a person names it: a SQLite file's path, else the URL without its
    password."""
    if url is None:
        return "of the daemon"
    if url.get_backend_name() == "sqlite":
        return url.database or "(in memory)"
    return url.render_as_string(hide_password=True)


def sentence(e: BaseException, url: URL | None) -> str:
    """What went wrong, in words: a known cause as a sentence, else the driver's own
    message without SQLAlchemy's additions."""
    orig = getattr(e, "orig", None)
    said = str(orig if orig is not None else e).strip()
    low = said.lower()
    for piece, text in _KNOWN:
        if piece in low:
            return text.format(where=where(url))
    if isinstance(e, SQLAlchemyError) and orig is None:
        said = said.split("(Background on this error at:")[0].strip()
    first = said.splitlines()[0] if said else type(e).__name__
    return f"the database {where(url)} answered: {first}"


def store_error(doing: str, e: BaseException, url: URL | None) -> StoreError:
    """Rota's error for a failure of the database while ``doing`` something."""
    return StoreError(f"{doing}: {sentence(e, url)}")
