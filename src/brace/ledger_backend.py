"""Which ledger backend a location names: a file path is an SQLite ledger
(:class:`brace.ledger.Ledger`, the embedded default), a ``postgresql://`` URL a
PostgreSQL ledger (:class:`brace.ledger_pg.PgLedger`, ``docs/ledger.md`` §9). Both
have the same schema, records, chain and MAC, and the interface that
:class:`brace.PrivateMemory` uses."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from . import ledger as _ledger

__all__ = ["URL_SCHEMES", "LedgerUnavailable", "is_server_url", "ledger_class",
           "redact_url"]

URL_SCHEMES = ("postgresql://", "postgres://")


class LedgerUnavailable(_ledger.LedgerError):
    """The ledger's database server could not be reached or dropped the connection
    (down, restarting, network). Nothing was returned; retry later."""


def is_server_url(location: Any) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) URL given as a string."""
    return isinstance(location, str) and location.lower().startswith(URL_SCHEMES)


def ledger_class(location: Any) -> type[_ledger.Ledger]:
    """The ledger class for ``location``: a path (``str`` or path-like) → SQLite, a
    ``postgresql://`` URL → PostgreSQL (needs ``psycopg``: the ``serve`` extra)."""
    if is_server_url(location):
        try:
            from .ledger_pg import PgLedger
        except ImportError as exc:  # psycopg is an optional dependency
            raise _ledger.LedgerError(
                f"a PostgreSQL ledger needs psycopg 3 ({exc}); install the 'serve' extra: "
                "pip install -e '.[serve]'.") from None
        return PgLedger
    if not isinstance(location, str | os.PathLike):
        raise TypeError(f"ledger must be a path or a postgresql:// URL; got {location!r}.")
    return _ledger.Ledger


def redact_url(url: str) -> str:
    """``url`` with its password (in the authority or a ``password=`` parameter) replaced
    by ``***``: what messages, logs and ``PrivateMemory.ledger`` show."""
    try:
        parts = urlsplit(url)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        if parts.password is None and not any(k.lower() == "password" for k, _ in pairs):
            return url
        netloc = parts.netloc
        if parts.password is not None:
            userinfo, _, hostport = netloc.rpartition("@")
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:***@{hostport}"
        query = parts.query if not any(k.lower() == "password" for k, _ in pairs) else \
            urlencode([(k, "***" if k.lower() == "password" else v) for k, v in pairs])
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "postgresql://(unparsable URL)"
