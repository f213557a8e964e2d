"""A throw-away PostgreSQL server for the tests and benchmarks: ``initdb`` in a temporary
directory, ``pg_ctl`` on a loopback port, stopped and removed at the end.

``initdb`` and ``postgres`` refuse to run as root; as root the server runs as an
unprivileged user (``postgres`` if it exists, else ``nobody``) through ``setpriv`` (or
``runuser``). Without the server binaries :func:`find_binaries` returns None and the
tests skip with :data:`PG_SKIP`.

As a script: ``python tests/pgserver.py`` starts one, prints its URL and waits (Ctrl-C
stops it and removes its directory).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_SKIP = ("PostgreSQL server binaries (initdb, pg_ctl) not found: the PostgreSQL "
           "ledger tests are skipped")


def find_binaries() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    env = os.environ.get("BRACE_PG_BIN")
    candidates = [Path(env)] if env else []
    found = shutil.which("initdb")
    if found:
        candidates.append(Path(os.path.realpath(found)).parent)
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                                           key=lambda p: int(p.split("/")[-2])
                                           if p.split("/")[-2].isdigit() else 0,
                                           reverse=True)]
    for c in candidates:
        if all((c / b).is_file() for b in ("initdb", "pg_ctl", "postgres")):
            return c
    return None


def free_port() -> int:
    """A TCP port of the loopback that was free a moment ago (nothing listens on it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TempPostgres:
    """One PostgreSQL server on ``127.0.0.1``, in a temporary directory."""

    def __init__(self, bindir: Path, *, user: str = "brace") -> None:
        self.bindir = bindir
        self.user = user
        # as root, in /tmp: the server's user must reach the directory ($TMPDIR may sit
        # in a directory only root can enter)
        root = os.geteuid() == 0 and os.path.isdir("/tmp")
        self.base = Path(tempfile.mkdtemp(prefix="brace-pg-", dir="/tmp" if root else None))
        self.data = self.base / "data"
        self.socket_dir = self.base / "sock"
        self.log = self.base / "server.log"
        self.port = free_port()
        self._prefix: list[str] = []
        if os.geteuid() == 0:
            name = "postgres" if _has_user("postgres") else "nobody"
            pw = pwd.getpwnam(name)
            if shutil.which("setpriv"):
                self._prefix = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
                                "--clear-groups", "--"]
            elif shutil.which("runuser"):
                self._prefix = ["runuser", "-u", name, "--"]
            else:
                raise RuntimeError("running as root without setpriv or runuser: cannot "
                                   "start PostgreSQL as an unprivileged user")
            self.socket_dir.mkdir()
            for p in (self.base, self.socket_dir):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        else:
            self.socket_dir.mkdir()
        self._run("initdb", "-D", str(self.data), "-U", user, "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")
        with open(self.data / "postgresql.conf", "a") as fh:
            fh.write(f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                     f"unix_socket_directories = '{self.socket_dir}'\n"
                     "fsync = on\nsynchronous_commit = on\nmax_connections = 200\n"
                     "shared_buffers = 32MB\nlog_min_messages = warning\n")

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def _run(self, binary: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        return subprocess.run([*self._prefix, str(self.bindir / binary), *args], env=env,
                              cwd=self.base, capture_output=True, text=True, timeout=120,
                              check=check)

    def start(self) -> TempPostgres:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                  "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """``mode``: ``fast`` (clean shutdown) or ``immediate`` (as a crash: recovery from
        the WAL at the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop",
                  check=False)

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False
                         ).returncode == 0

    def new_schema(self, name: str) -> str:
        """Create schema ``name`` (lower case) and return a URL whose tables live in it."""
        import psycopg

        name = name.lower()
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.url}?options=-csearch_path%3D{name}"

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


if __name__ == "__main__":
    binaries = find_binaries()
    if binaries is None:
        raise SystemExit(PG_SKIP)
    pg = TempPostgres(binaries).start()
    print(pg.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        pg.cleanup()
