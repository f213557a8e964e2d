"""API keys of ``brace serve``: a file of lines ``name:token:role`` (role ``analyst`` or
``admin``; ``#`` comments and blank lines ignored).

A token may be written in the clear (at least 20 printable ASCII characters, no spaces:
HTTP headers are read as latin-1, so nothing else could match) or as its SHA-256,
``name:sha256=<64 hex digits>:role`` (``brace serve --hash-token`` prints it; either
case), so that the file need not hold a usable token; a ``sha256=`` that is not followed
by 64 hex digits is refused, never taken for a token in the clear. Only the SHA-256 of
each token is kept in memory, and a presented token is compared, by its SHA-256, with
every key in constant time (:func:`hmac.compare_digest`, no early exit): the time taken
does not say which key, or how much of one, matched. Tokens must be random
(``secrets.token_urlsafe(32)``): a SHA-256 protects a high-entropy token, not a password.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROLES", "MIN_TOKEN", "ApiKey", "KeyRing", "load_keys", "hash_token"]

ROLES = ("analyst", "admin")
MIN_TOKEN = 20
_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_HASHED = re.compile(r"sha256=([0-9a-f]{64})", re.IGNORECASE)
#: what a token may hold: printable ASCII without spaces (HTTP headers are read as
#: latin-1, so a token with anything else could never match)
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")


def _digest(token: str) -> bytes:
    """The SHA-256 of ``token`` (UTF-8; a lone surrogate encoded, never an error)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def hash_token(token: str) -> str:
    """The form of ``token`` to write in a keys file: ``sha256=<hex>``. A token that
    is not printable ASCII without spaces is refused (:class:`ValueError`): a bearer
    header holding it could never match."""
    if not _TOKEN_CHARS.fullmatch(token):
        raise ValueError("a token must be printable ASCII without spaces.")
    return "sha256=" + _digest(token).hex()


@dataclass(frozen=True)
class ApiKey:
    """One key: its name (for logs), role and the SHA-256 of its token."""

    name: str
    role: str
    digest: bytes

    def __repr__(self) -> str:  # never the digest
        return f"ApiKey(name={self.name!r}, role={self.role!r})"

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


class KeyRing:
    """The keys of a server; :meth:`identify` finds the key of a bearer token."""

    def __init__(self, keys: list[ApiKey]) -> None:
        if not keys:
            raise ValueError("the keys file defines no key.")
        self._keys = tuple(keys)

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self._keys)

    def identify(self, token: str | None) -> ApiKey | None:
        """The key whose token is ``token``, or None. Every key is compared, each in
        constant time."""
        if not token:
            return None
        digest = _digest(token)
        found = None
        for key in self._keys:
            if hmac.compare_digest(digest, key.digest) and found is None:
                found = key
        return found


def load_keys(path: str | os.PathLike) -> tuple[KeyRing, list[str]]:
    """Read a keys file: the :class:`KeyRing` and a list of warnings (a file that
    others may read). A file that others may write is refused; anything else wrong is a
    :class:`ValueError` naming the line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        mode = p.stat().st_mode
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the keys file {p}: {exc}") from None
    if mode & (stat.S_IWGRP | stat.S_IWOTH):  # anyone who can write it can add a key
        raise ValueError(f"the keys file {p} can be written by other users (mode "
                         f"{stat.S_IMODE(mode):o}): whoever can write it can make an admin "
                         "key. chmod 600 it.")
    warnings = []
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warnings.append(f"the keys file {p} can be read by other users (mode "
                        f"{stat.S_IMODE(mode):o}); chmod 600 it.")
    keys: list[ApiKey] = []
    names: set[str] = set()
    digests: set[bytes] = set()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"keys file {p}, line {lineno}"
        name, sep, rest = line.partition(":")
        token, sep2, role = rest.rpartition(":")
        if not (sep and sep2):
            raise ValueError(f"{where}: expected name:token:role.")
        if not _NAME.match(name):
            raise ValueError(f"{where}: the name must be 1-64 letters, digits or _.@-; got "
                             f"{name!r}.")
        if role not in ROLES:
            raise ValueError(f"{where}: the role must be one of {ROLES}; got {role!r}.")
        hashed = _HASHED.fullmatch(token)
        if hashed:
            digest = bytes.fromhex(hashed.group(1).lower())
        elif token[:7].lower() == "sha256=":  # never taken for a token in the clear
            rest = token[7:]
            raise ValueError(
                f"{where}: sha256= must be followed by 64 hexadecimal digits (brace serve "
                f"--hash-token prints the whole form); got {len(rest)} character(s)"
                + ("" if re.fullmatch(r"[0-9a-fA-F]*", rest) else ", not all hexadecimal")
                + ".")
        else:
            if len(token) < MIN_TOKEN or not _TOKEN_CHARS.fullmatch(token):
                raise ValueError(
                    f"{where}: the token must be at least {MIN_TOKEN} printable ASCII "
                    "characters without spaces (make one with: python -c 'import secrets; "
                    "print(secrets.token_urlsafe(32))'), or sha256=<hex>.")
            digest = _digest(token)
        if name in names:
            raise ValueError(f"{where}: the name {name!r} is used twice.")
        if digest in digests:
            raise ValueError(f"{where}: this token is already another key's.")
        names.add(name)
        digests.add(digest)
        keys.append(ApiKey(name, role, digest))
    return KeyRing(keys), warnings
