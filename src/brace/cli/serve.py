"""``brace serve``: a private memory as an HTTP service (uvicorn; docs/deploying.md)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys

from ..ledger.url import is_server_url
from ._args import finite_float, int_at_least

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    """Register ``brace serve``."""
    p = sub.add_parser(
        "serve",
        help="serve private retrievals over HTTP from one bank and its ledger",
        description="Serve a private memory over HTTP (JSON; OpenAPI at /openapi.json). "
        "Analysts send cues and receive private completions; every release uses exact "
        "noise from the OS (no seed), is admitted by the ledger's budget and recorded "
        "before it is returned. Create the ledger first: brace ledger init LEDGER --bank "
        "B --radius R --budget E. The ledger key, if any, comes from $BRACE_LEDGER_KEY. "
        "See docs/deploying.md.",
    )
    p.add_argument("--bank", help="the (n, d) bank, .npy or .npz/.csv (no default: "
                   "required)")
    p.add_argument("--bank-mode", choices=("copy", "mmap"), default="copy",
                   help="copy: hold an immutable copy of the bank in memory (each call "
                   "skips re-hashing the bank; the default); mmap: keep a .npy bank "
                   "memory-mapped, for banks larger than memory (re-hashed at every call)")
    p.add_argument("--radius", type=finite_float, help="support radius r; must be the "
                   "ledger's (no default: required)")
    p.add_argument("--ledger", help="the ledger: an SQLite file or a postgresql:// URL, "
                   "created by 'brace ledger init' (no default: required)")
    p.add_argument("--keys", help="keys file of lines name:token:role, role analyst or "
                   "admin (no default: required)")
    p.add_argument("--port", type=int, help="TCP port (no default: required)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on; put a TLS proxy in front of anything but "
                   "the loopback")
    p.add_argument("--workers", type=int_at_least(1), default=1,
                   help="server processes (one ledger, one budget)")
    p.add_argument("--max-body", type=int_at_least(1), default=1 << 20,
                   help="largest request body, bytes (413 beyond)")
    p.add_argument("--max-queries", type=int_at_least(1), default=256,
                   help="most queries in one request")
    p.add_argument("--max-steps", type=int_at_least(1), default=64,
                   help="most retrieval steps in one request")
    p.add_argument("--lock-timeout", type=finite_float, default=60.0,
                   help="seconds a call waits for the ledger's lock before a 503")
    p.add_argument("--header-timeout", type=finite_float, default=10.0,
                   help="seconds for a request's line and headers to arrive (the "
                   "connection is closed beyond; they are limited to 16 KiB)")
    p.add_argument("--body-timeout", type=finite_float, default=10.0,
                   help="seconds for a request's body to arrive (408 beyond)")
    p.add_argument("--accounting", choices=("local", "global"), default="local",
                   help="how releases are charged (docs/ledger.md)")
    p.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"),
                   help="server log level")
    p.add_argument("--hash-token", action="store_true",
                   help="read a token on standard input, print the 'sha256=...' form to "
                   "write in the keys file instead of the token, and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Carry out ``brace serve``."""
    if args.hash_token:
        from ..serve.keys import MIN_TOKEN, hash_token

        token = sys.stdin.readline().strip()
        if len(token) < MIN_TOKEN:
            raise ValueError(f"a token must be at least {MIN_TOKEN} characters.")
        print(hash_token(token))
        return 0
    missing = [f"--{k}" for k in ("bank", "radius", "ledger", "keys", "port")
               if getattr(args, k) is None]
    if missing:
        raise ValueError(f"brace serve needs {', '.join(missing)}.")
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in [1, 65535]; got {args.port}.")
    if not (args.lock_timeout >= 0):
        raise ValueError("--lock-timeout must be >= 0.")
    for name in ("header_timeout", "body_timeout"):
        if not 0 < getattr(args, name) <= 3600:
            raise ValueError(f"--{name.replace('_', '-')} must be in (0, 3600] seconds; got "
                             f"{getattr(args, name)}.")
    try:
        import uvicorn

        from ..serve import Limits, ServeConfig, Service, create_app, protocol
        from ..serve.app import configure_logging
        from ..serve.service import CONFIG_ENV
    except ImportError as exc:
        raise ValueError(f"brace serve needs the 'serve' extra ({exc}): pip install -e "
                         "'.[serve]'.") from None
    config = ServeConfig(
        bank=os.path.abspath(args.bank), radius=float(args.radius),
        ledger=args.ledger if is_server_url(args.ledger) else os.path.abspath(args.ledger),
        keys=os.path.abspath(args.keys),
        limits=Limits(args.max_body, args.max_queries, args.max_steps,
                      header_timeout=float(args.header_timeout),
                      body_timeout=float(args.body_timeout)),
        lock_timeout=float(args.lock_timeout), accounting=args.accounting,
        log_level=args.log_level, bank_mode=args.bank_mode)
    # check everything once before listening: keys, bank, and that the ledger is this
    # bank's (a foreign ledger is refused here, with one line)
    service = Service(config)
    try:
        _check_listen(args.host, args.port)
    except ValueError:
        service.close()
        raise
    for w in service.key_warnings:
        print(f"brace serve: warning: {w}", file=sys.stderr)
    if not _is_loopback(args.host):
        print(f"brace serve: warning: listening on {args.host} without TLS; put a TLS "
              "proxy in front (bearer tokens travel in the clear otherwise).",
              file=sys.stderr)
    print(f"brace serve: {service.describe()}; http://{args.host}:{args.port} with "
          f"{args.workers} worker(s)", file=sys.stderr, flush=True)
    # the request head is bounded in size and time whichever parser runs (protocol.py)
    common = dict(host=args.host, port=args.port, log_level=args.log_level,
                  server_header=False, proxy_headers=False, timeout_keep_alive=5,
                  h11_max_incomplete_event_size=config.limits.max_header,
                  http=protocol.guarded_protocol())
    try:
        if args.workers == 1:
            for cls in (protocol.GuardedH11, protocol.GuardedHttpTools):
                if cls is not None:
                    cls.limits = config.limits
            configure_logging(args.log_level)
            uvicorn.run(create_app(config, service=service), **common)
            return 0
        service.close()
        service = None  # the workers open their own
        os.environ[CONFIG_ENV] = config.to_json()
        uvicorn.run("brace.serve.app:app_from_env", factory=True, workers=args.workers,
                    **common)
    except SystemExit as exc:  # uvicorn exits when it cannot start (its log says why)
        if exc.code not in (None, 0):
            raise ValueError(f"the server on {args.host}:{args.port} stopped: it could not "
                             "start or run (see the log above).") from None
    finally:
        if service is not None:
            service.close()
    return 0


def _check_listen(host: str, port: int) -> None:
    """Refuse, with one line, an address that cannot be listened on (an unknown host, a
    busy port) before uvicorn tries."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ValueError(f"--host {host!r} is not an address of this machine ({exc.strerror})."
                         ) from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(addr)
        except OSError as exc:
            raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror}.") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
