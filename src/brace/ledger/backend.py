"""Which ledger backend a location names: a file path is an SQLite ledger
(:class:`brace.ledger.Ledger`, the embedded default), a ``postgresql://`` URL a
PostgreSQL ledger (:class:`brace.ledger.pg.PgLedger`, ``docs/ledger.md`` §9). Both
have the same schema, records, chain and MAC, and the interface that
:class:`brace.PrivateMemory` uses."""

from __future__ import annotations

import os
from typing import Any

from .record import LedgerError
from .sqlite import Ledger
from .url import (
    URL_SCHEMES,
    LedgerUnavailable,
    check_location,
    is_server_url,
    redact_url,
)

__all__ = ["URL_SCHEMES", "LedgerUnavailable", "is_server_url", "ledger_class",
           "redact_url"]


def ledger_class(location: Any) -> type[Ledger]:
    """The ledger class for ``location``: a path (``str`` or path-like) → SQLite, a
    ``postgresql://`` URL → PostgreSQL (needs ``psycopg``: the ``serve`` extra); a URL
    of any other scheme is refused."""
    check_location(location)
    if is_server_url(location):
        try:
            from .pg import PgLedger
        except ImportError as exc:  # psycopg is an optional dependency
            raise LedgerError(
                f"a PostgreSQL ledger needs psycopg 3 ({exc}); install the 'serve' extra: "
                "pip install -e '.[serve]'.") from None
        return PgLedger
    if not isinstance(location, str | os.PathLike):
        raise TypeError(f"ledger must be a path or a postgresql:// URL; got {location!r}.")
    return Ledger
