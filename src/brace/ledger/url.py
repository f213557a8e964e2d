"""Ledger URLs: recognising a ``postgresql://`` URL, showing one without its password,
and the error of a database server that cannot be reached (no database driver needed;
:mod:`brace.ledger.backend` dispatches, :mod:`brace.ledger.pg` is the backend)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .record import LedgerError

__all__ = ["URL_SCHEMES", "LedgerUnavailable", "is_server_url", "redact_url",
           "check_location"]

URL_SCHEMES = ("postgresql://", "postgres://")
_OTHER_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class LedgerUnavailable(LedgerError):
    """The ledger's database server could not be reached or dropped the connection
    (down, restarting, network). Nothing was returned; retry later."""


def is_server_url(location: Any) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) URL given as a string."""
    return isinstance(location, str) and location.lower().startswith(URL_SCHEMES)


def check_location(location: Any) -> None:
    """Refuse a URL of another scheme (``mysql://…``, ``sqlite://…``): a ledger is an
    SQLite file path or a ``postgresql://`` URL, and a URL is never taken for a path."""
    if isinstance(location, str) and not is_server_url(location) \
            and _OTHER_URL.match(location):
        scheme = location.split("://", 1)[0]
        raise LedgerError(f"unsupported ledger URL scheme {scheme!r} in "
                          f"{redact_url(location)!r}: a ledger is an SQLite file path or a "
                          "postgresql:// URL.")


def redact_url(url: str) -> str:
    """``url`` with its password (in the authority or a ``password=`` parameter) replaced
    by ``***``: what messages, logs and ``PrivateMemory.ledger`` show."""
    try:
        parts = urlsplit(url)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        in_query = any(k.lower() == "password" for k, _ in pairs)
        if parts.password is None and not in_query:
            return url
        netloc = parts.netloc
        if parts.password is not None:
            userinfo, _, hostport = netloc.rpartition("@")
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:***@{hostport}"
        query = parts.query if not in_query else \
            urlencode([(k, "***" if k.lower() == "password" else v) for k, v in pairs])
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "postgresql://(unparsable URL)"
