"""Load and fault test of ``brace serve`` (``docs/deploying.md``): loopback only,
bounded in count and time, and it stops by itself.

On a bank of n = 100,000 points in d = 64 (a seeded 16-component Gaussian mixture, as
``bench_retrieve.py``; the radius holds about 50 memories at a query), one query per
call, T = 1, exact OS noise (the server's ``noise="secure"``):

1. **Overhead.** One client, one call at a time, fresh queries: in-process
   ``PrivateMemory.retrieve`` (no ledger; an SQLite ledger; a PostgreSQL ledger) against
   the same call over HTTP to a server on each ledger, interleaved, each round's query
   the same on every path (each path has its own ledger). Target: HTTP and ledger
   overhead ≤ 3 ms per call at p50 (paired: the same query over HTTP minus in process
   without a ledger; also HTTP p50 − in-process p50).
2. **Load.** Two server processes (two ``brace serve``, as on two hosts) on one ledger
   (SQLite; PostgreSQL), C concurrent clients (each on one server, fresh queries near one
   point, so that every call is charged to the same memories) asking until the budget
   refuses them (each stops at its first 409). The budget is the smallest that admits
   ``--calls`` such calls. Checked: spent ≤ budget, no 5xx, every 200 recorded exactly
   once (its release id is in the ledger, once, with the outputs that were returned).
3. **kill -9.** As 2, with one server killed (SIGKILL) mid-load and restarted with the
   same command: the 200s are all recorded (at most the call in flight is recorded and
   never received), the budget holds; the time until the restarted server answers.
4. **PostgreSQL restarted mid-load** (``pg_ctl stop -m immediate``, as a crash, then
   start): calls fail with a clear 503 while it is down, none is served unrecorded, and
   service resumes.
5. **Hostile requests** to a real server: huge bodies, NaN, strings, wrong dimension,
   negative ε, missing fields, wrong content type, bad JSON, deep nesting, bad keys,
   garbage HTTP, a 1 MiB header (431): each must be a 4xx with a clear message, never a
   5xx.

PostgreSQL runs on a throw-away server (``tests/pgserver.py``: ``initdb`` in a
temporary directory, a loopback port); without the server binaries its parts are
skipped.

    python benchmarks/bench_serve.py [--quick] [--clients 24 64] [--json PATH]

The exit status is 1 if a check fails (:func:`problems`: the budget, a 200 not recorded,
a 5xx other than a database restart's 503s, a hostile request not a 4xx).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
from _bench import choose_radius, make_bank  # noqa: E402
from _bench import percentile as pct  # noqa: E402

if __name__ == "__main__":
    _bench.limit_threads(sys.argv[1:])

import numpy as np  # noqa: E402

import brace  # noqa: E402
from brace.accounting.filter import FilterSpec, event_weights  # noqa: E402
from brace.budget import inspect_ledger  # noqa: E402
from brace.ledger.backend import ledger_class  # noqa: E402
from brace.plan import plan_release  # noqa: E402
from brace.serve.service import load_bank  # noqa: E402

pgserver = _bench.pgserver()  # tests/pgserver.py: the throw-away server, free_port
ANALYST = "bench-analyst-token-0123456789"
ADMIN = "bench-admin-token-0123456789ab"
DELTA_BUDGET = 1e-5


# --------------------------------------------------------------------------------------
# servers and clients
# --------------------------------------------------------------------------------------


class Server:
    """One ``brace serve`` process (one worker) on a loopback port."""

    bank_mode = "copy"  # set by main() from --bank-mode

    def __init__(self, bank: Path, radius: float, ledger: str, keys: Path, log: Path,
                 lock_timeout: float = 120.0, log_level: str = "warning") -> None:
        self.port = pgserver.free_port()
        self.cmd = [sys.executable, "-m", "brace.cli", "serve", "--bank", str(bank),
                    "--radius", repr(radius), "--ledger", ledger, "--keys", str(keys),
                    "--port", str(self.port), "--log-level", log_level,
                    "--lock-timeout", str(lock_timeout), "--bank-mode", self.bank_mode]
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> float:
        """Start and wait until ``/healthz`` answers 200; the seconds that took."""
        t0 = time.perf_counter()
        fh = open(self.log, "a")  # noqa: SIM115 (the process keeps it)
        self.proc = subprocess.Popen(self.cmd, stdout=fh, stderr=subprocess.STDOUT)
        while True:
            with contextlib.suppress(OSError, http.client.HTTPException):
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    conn.close()
                    return time.perf_counter() - t0
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-2000:]}")
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError("server did not start in time")
            time.sleep(0.05)

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Api:
    """One keep-alive HTTP connection."""

    def __init__(self, port: int, token: str = ANALYST, timeout: float = 300.0) -> None:
        self.port, self.token, self.timeout = port, token, timeout
        self.conn: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, dict]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                   timeout=self.timeout)
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            self.conn.request(method, path, data, headers)
            resp = self.conn.getresponse()
            text = resp.read()
        except BaseException:
            self.conn.close()
            self.conn = None
            raise
        return resp.status, json.loads(text)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def retrieve_body(q: np.ndarray, steps: int, eps: float) -> dict[str, Any]:
    return {"queries": q.tolist(), "steps": steps, "epsilon": eps}


# --------------------------------------------------------------------------------------
# 1. overhead
# --------------------------------------------------------------------------------------


def overhead(ctx: dict[str, Any], ledgers: dict[str, tuple[str, str]], calls: int
             ) -> dict[str, Any]:
    """``ledgers``: backend -> (the in-process memory's ledger, the server's ledger)."""
    X, r, steps, eps = ctx["X"], ctx["radius"], ctx["steps"], ctx["eps"]
    rng = np.random.default_rng(11)
    budget = (1e6, DELTA_BUDGET)
    inproc = {"none": brace.PrivateMemory(ctx["bank_mm"], radius=r, budget=budget)}
    servers, apis = {}, {}
    for name, (mine, theirs) in ledgers.items():
        inproc[name] = brace.PrivateMemory(ctx["bank_mm"], radius=r, budget=budget,
                                           ledger=mine, create=True)
        brace.PrivateMemory(X, radius=r, budget=budget, ledger=theirs, create=True).close()
        servers[name] = Server(ctx["bank"], r, theirs, ctx["keys"],
                               ctx["dir"] / f"o-{name}.log", log_level="debug")
        servers[name].start()
        apis[name] = Api(servers[name].port)
    times: dict[str, list[float]] = {k: [] for k in
                                     [*inproc, *(f"http-{k}" for k in servers)]}
    try:
        paths = [*inproc, *(f"http-{k}" for k in apis)]
        for i in range(calls + 2):  # two warm-up rounds, not counted
            # one fresh query per round, the same for every path (each has its own ledger,
            # so it is new to each): paired differences cancel the query's own cost
            q = fresh(X, rng)
            for path in rng.permutation(paths):  # a new order each round
                t0 = time.perf_counter()
                if path.startswith("http-"):
                    status, _ = apis[path[5:]].call("POST", "/v1/retrieve",
                                                    retrieve_body(q, steps, eps))
                    assert status == 200, status
                else:
                    inproc[path].retrieve(q, steps=steps, epsilon=eps, noise="secure")
                if i >= 2:
                    times[path].append(time.perf_counter() - t0)
    finally:
        for s in servers.values():
            s.stop()
        for pm in inproc.values():
            pm.close()
    out = {k: _bench.latency(v) for k, v in times.items()}
    for name, server in servers.items():
        # the server's own time in PrivateMemory.retrieve, call by call (its debug log):
        # what the client waited beyond it is the HTTP path (parsing, the thread hop,
        # serialising, the loopback)
        lib = [float(m.group(1)) / 1e3 for m in re.finditer(
            r"PrivateMemory.retrieve ([0-9.]+) ms", server.log.read_text())][2:]
        http_path = [c - s_ for c, s_ in zip(times[f"http-{name}"], lib, strict=True)]
        out[f"http-{name}"]["server_library_p50_ms"] = 1e3 * pct(lib, 50)
        out[f"http-{name}"]["http_path_p50_ms"] = 1e3 * pct(http_path, 50)
        out[f"http-{name}"]["http_path_p99_ms"] = 1e3 * pct(http_path, 99)
    base = out["none"]["p50_ms"]
    for k in out:  # paired: the same query's time on this path minus in process, no ledger
        if k != "none":
            diff = np.subtract(times[k], times["none"])
            out[k]["paired_overhead_p50_ms"] = 1e3 * pct(list(diff), 50)
    for name in servers:
        out[f"http-{name}"]["overhead_vs_no_ledger_ms"] = out[f"http-{name}"]["p50_ms"] - base
        out[f"http-{name}"]["overhead_vs_same_ledger_ms"] = (
            out[f"http-{name}"]["p50_ms"] - out[name]["p50_ms"])
        out[name]["ledger_overhead_ms"] = out[name]["p50_ms"] - base
    return out


def fsync_ms(where: Path, n: int = 50) -> float:
    """Median time of an 8 KiB write and fsync in ``where``: a durable commit's floor."""
    ts = []
    fd = os.open(where / "fsync.probe", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(n):
            os.write(fd, b"\0" * 8192)
            t0 = time.perf_counter()
            os.fsync(fd)
            ts.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return 1e3 * pct(ts, 50)


def fresh(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One query near a random bank row (distinct bit for bit: never a repeat)."""
    return _bench.near_rows(X, 1, rng, spread=0.1)


# --------------------------------------------------------------------------------------
# 2-4. load, kill -9, database restart
# --------------------------------------------------------------------------------------


def k_call_budget(ctx: dict[str, Any], k: int) -> float:
    """The smallest budget ε whose filter admits ``k`` calls but not ``k + 1`` (all
    charged to the same memories)."""
    X = ctx["X"]
    plan = plan_release(X.shape, radius=ctx["radius"], method="brace", epsilon=ctx["eps"],
                        delta=DELTA_BUDGET * 0.01, steps=ctx["steps"], noise="secure")
    w = event_weights(plan.spent.step_event) * ctx["steps"]
    lo, hi = 1e-3, 1e4
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if FilterSpec.for_budget(mid, DELTA_BUDGET).admits(k * w) \
            else (mid, hi)
    return hi * 1.000001


class Load:
    """C clients, each on one server, asking until refused (or the deadline)."""

    def __init__(self, ports: list[int], clients: int, ctx: dict[str, Any],
                 deadline: float) -> None:
        self.ports, self.ctx, self.deadline = ports, ctx, deadline
        self.lock = threading.Lock()
        self.records: list[dict[str, Any]] = []
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                        for i in range(clients)]

    def _client(self, i: int) -> None:
        ctx = self.ctx
        rng = np.random.default_rng([7, i])
        api = Api(self.ports[i % len(self.ports)])
        centre = ctx["centre"]
        while time.monotonic() < self.deadline:
            q = centre[None] + 1e-3 * rng.normal(size=(1, centre.shape[0]))
            t0 = time.perf_counter()
            try:
                status, body = api.call("POST", "/v1/retrieve",
                                        retrieve_body(q, ctx["steps"], ctx["eps"]))
            except (OSError, http.client.HTTPException) as exc:
                self._add(kind="connection", error=type(exc).__name__, t=time.monotonic(),
                          latency=time.perf_counter() - t0, server=i % len(self.ports))
                time.sleep(0.1)
                continue
            rec = {"kind": status, "t": time.monotonic(), "latency": time.perf_counter() - t0,
                   "server": i % len(self.ports), "error": body.get("error")}
            if status == 200:
                rec.update(release_id=body["release_id"], repeat=body["repeat"],
                           outputs=np.asarray(body["outputs"]))
            self._add(**rec)
            if status == 409:
                break
            if status >= 500:
                time.sleep(0.2)
        api.close()

    def _add(self, **rec: Any) -> None:
        with self.lock:
            self.records.append(rec)

    def run(self, during: Any = None) -> float:
        t0 = time.monotonic()
        for t in self.threads:
            t.start()
        if during is not None:
            during(self)
        for t in self.threads:
            t.join(max(0.0, self.deadline - time.monotonic()) + 30)
        return time.monotonic() - t0

    def count(self, kind: Any) -> int:
        with self.lock:
            return sum(1 for r in self.records if r["kind"] == kind)


def verify(load: Load, ledger: str, budget: float) -> dict[str, Any]:
    """Every 200 recorded exactly once with its outputs; spent ≤ budget."""
    ok = [r for r in load.records if r["kind"] == 200]
    ids = [r["release_id"] for r in ok]
    state = inspect_ledger(ledger)
    n = len(state.releases) - len(state.pending)  # releases (not charges left pending)
    known = set(state.ids) - set(state.pending)
    db = ledger_class(ledger).open(ledger)
    try:
        mismatched = sum(1 for r in ok if r["release_id"] not in known or not np.array_equal(
            db.arrays(r["release_id"])[0], r["outputs"]))
    finally:
        db.close()
    statuses = dict(Counter(str(r["kind"]) for r in load.records))
    errors = dict(Counter(f"{r['kind']}:{r.get('error')}" for r in load.records
                          if r["kind"] not in (200, 409)))
    return {
        "ok_200": len(ok), "distinct_ids": len(set(ids)), "repeats": sum(r["repeat"]
                                                                         for r in ok),
        "ledger_releases": n, "recorded_not_received": n - len(set(ids)),
        "unrecorded_or_mismatched_200": mismatched + (len(ids) - len(set(ids))),
        "spent": state.spent_local, "budget": budget, "within_budget":
            state.spent_local <= budget, "statuses": statuses, "errors": errors,
        "no_500": not any(isinstance(r["kind"], int) and r["kind"] >= 500 and
                          r.get("error") not in ("ledger_unavailable",) for r in load.records),
        "any_5xx": sum(1 for r in load.records if isinstance(r["kind"], int) and
                       r["kind"] >= 500),
    }


def summarise(load: Load, wall: float) -> dict[str, Any]:
    ok = [r for r in load.records if r["kind"] == 200]
    refused = [r for r in load.records if r["kind"] == 409]
    span = (max(r["t"] for r in ok) - min(r["t"] - r["latency"] for r in ok)) if ok else 0
    return {"wall_s": wall, "throughput_per_s": len(ok) / span if span else math.nan,
            "p50_ms": 1e3 * pct([r["latency"] for r in ok], 50),
            "p99_ms": 1e3 * pct([r["latency"] for r in ok], 99),
            "refusal_p50_ms": 1e3 * pct([r["latency"] for r in refused], 50)}


def scenario(ctx: dict[str, Any], backend: str, clients: int, fault: str | None,
             k: int, limit: float) -> dict[str, Any]:
    """Two servers on one fresh ledger, ``clients`` clients; ``fault``: None, "kill9"
    or "db-restart"."""
    X, r = ctx["X"], ctx["radius"]
    tag = f"{backend}-{clients}-{fault or 'load'}"
    ledger = str(ctx["dir"] / f"{tag}.db") if backend == "sqlite" else \
        ctx["pg"].new_schema(f"s{os.getpid()}_{tag.replace('-', '_')}")
    budget = k_call_budget(ctx, k)
    brace.PrivateMemory(X, radius=r, budget=(budget, DELTA_BUDGET), ledger=ledger,
                        create=True).close()
    servers = [Server(ctx["bank"], r, ledger, ctx["keys"], ctx["dir"] / f"{tag}-{i}.log")
               for i in range(2)]
    for s in servers:
        s.start()
    events: dict[str, Any] = {}

    def fault_kill9(load: Load) -> None:
        while load.count(200) < max(3, k // 4) and time.monotonic() < load.deadline:
            time.sleep(0.05)
        before = load.count(200)
        servers[1].kill9()
        events["killed_after_200s"] = before
        time.sleep(1.0)
        events["restart_to_healthy_s"] = servers[1].start()
        events["first_answer_after_restart_s"] = wait_for(
            load, lambda rec: rec["kind"] in (200, 409) and rec["server"] == 1, load.deadline)

    def fault_db(load: Load) -> None:
        while load.count(200) < max(3, k // 4) and time.monotonic() < load.deadline:
            time.sleep(0.05)
        events["stopped_after_200s"] = load.count(200)
        t0 = time.monotonic()
        ctx["pg"].stop("immediate")
        events["db_down_at"] = t0
        time.sleep(3.0)
        ctx["pg"].start()
        t_up = time.monotonic()
        events["db_down_s"] = t_up - t0
        events["first_200_after_db_start_s"] = wait_for(
            load, lambda rec: rec["kind"] == 200 and rec["t"] > t_up, load.deadline)
        with load.lock:
            events["503_while_down"] = sum(1 for rec in load.records if rec["kind"] == 503
                                           and t0 <= rec["t"] <= t_up + 10)

    load = Load([s.port for s in servers], clients, ctx, time.monotonic() + limit)
    try:
        wall = load.run({"kill9": fault_kill9, "db-restart": fault_db, None: None}[fault])
    finally:
        for s in servers:
            s.stop()
    out = {"backend": backend, "clients": clients, "fault": fault,
           "budget_epsilon": budget, "calls_the_budget_holds": k,
           **summarise(load, wall), **verify(load, ledger, budget), **events}
    out.pop("db_down_at", None)
    # only a database restart may answer 5xx: its clear 503s while the database is down
    expected = (503,) if fault == "db-restart" else ()
    out["unexpected_5xx"] = sum(1 for r in load.records if isinstance(r["kind"], int)
                                and r["kind"] >= 500 and r["kind"] not in expected)
    return out


def wait_for(load: Load, pred: Any, deadline: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() < deadline:
        with load.lock:
            if any(pred(rec) for rec in load.records if rec["t"] >= t0 - 0.001):
                return time.monotonic() - t0
        time.sleep(0.05)
    return math.nan


# --------------------------------------------------------------------------------------
# 5. hostile requests
# --------------------------------------------------------------------------------------


def raw(port: int, data: bytes, read_timeout: float = 10.0) -> tuple[int, str]:
    """Send raw bytes; the status and body of the answer (0 if the server closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as s:
        with contextlib.suppress(OSError):
            s.sendall(data)
        chunks = []
        with contextlib.suppress(OSError):
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
                if b"\r\n\r\n" in b"".join(chunks):
                    head, _, rest = b"".join(chunks).partition(b"\r\n\r\n")
                    m = [h for h in head.split(b"\r\n") if h.lower().startswith(
                        b"content-length:")]
                    if m and len(rest) >= int(m[0].split(b":")[1]):
                        break
    text = b"".join(chunks).decode("latin-1")
    if not text.startswith("HTTP/1.1 "):
        return 0, text[:200]
    head, _, body = text.partition("\r\n\r\n")
    return int(head.split()[1]), body[:300]


def request_bytes(body: bytes, ctype: str = "application/json", token: str = ANALYST,
                  path: str = "/v1/retrieve") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def hostile(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    X = ctx["X"]
    d = X.shape[1]
    ledger = str(ctx["dir"] / "hostile.db")
    brace.PrivateMemory(X, radius=ctx["radius"], budget=(8.0, DELTA_BUDGET), ledger=ledger,
                        create=True).close()
    server = Server(ctx["bank"], ctx["radius"], ledger, ctx["keys"], ctx["dir"] / "h.log")
    server.start()
    q = json.dumps(X[:1].tolist())
    ok = f'{{"queries": {q}, "steps": 1, "epsilon": 1.0}}'

    def j(text: str) -> bytes:
        return text.encode()

    cases = [
        ("huge body (8 MB, Content-Length)", request_bytes(b"[" + b"0," * 4_000_000 + b"0]")),
        ("huge body (chunked, 3 MB)", (
            b"POST /v1/retrieve HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + ANALYST.encode() + b"\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            + b"".join(b"10000\r\n" + b" " * 65536 + b"\r\n" for _ in range(48))
            + b"0\r\n\r\n")),
        ("NaN", request_bytes(j(ok.replace(q, "[[NaN" + ", 0" * (d - 1) + "]]")))),
        ("Infinity epsilon", request_bytes(j(ok.replace("1.0}", "Infinity}")))),
        ("1e999", request_bytes(j(ok.replace("1.0}", "1e999}")))),
        ("string in queries", request_bytes(j(ok.replace(q, '[["x"' + ", 0" * (d - 1)
                                                        + "]]")))),
        ("wrong dimension", request_bytes(j(ok.replace(q, "[[0, 0, 0]]")))),
        ("negative epsilon", request_bytes(j(ok.replace("1.0}", "-1.0}")))),
        ("missing fields", request_bytes(b'{"steps": 1}')),
        ("unknown field (seed)", request_bytes(j(ok[:-1] + ', "seed": 1}'))),
        ("not an object", request_bytes(b"[1, 2, 3]")),
        ("wrong content type", request_bytes(j(ok), ctype="text/plain")),
        ("form content type", request_bytes(b"queries=1", ctype=
                                            "application/x-www-form-urlencoded")),
        ("truncated JSON", request_bytes(j(ok[:-5]))),
        ("invalid UTF-8", request_bytes(b"\xff\xfe\x00{")),
        ("deep nesting", request_bytes(b"[" * 500_000)),
        ("2000 queries", request_bytes(j(ok.replace(q, json.dumps([[0.0] * d] * 2000))))),
        ("steps 1e9", request_bytes(j(ok.replace('"steps": 1', '"steps": 1000000000')))),
        ("no key", request_bytes(j(ok), token="")),
        ("wrong key", request_bytes(j(ok), token="x" * 30)),
        ("analyst on admin route", request_bytes(b'{"epsilon": 1}', path="/v1/snapshot")),
        ("GET on a POST route", b"GET /v1/retrieve HTTP/1.1\r\nHost: x\r\nConnection: "
                                b"close\r\n\r\n"),
        ("garbage request line", b"\x16\x03\x01 NOT HTTP\r\n\r\n"),
        ("1 MiB header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (1 << 20)
         + b"\r\nConnection: close\r\n\r\n"),
        ("head that never ends (1 MiB)", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: "
         + b"a" * (1 << 20)),
    ]
    out = []
    try:
        for name, data in cases:
            status, body = raw(server.port, data)
            try:
                message = json.loads(body).get("message", body)
            except ValueError:
                message = body.strip()[:120]
            out.append({"request": name, "status": status, "message": message[:160],
                        "4xx": 400 <= status < 500})
        status, _ = raw(server.port, request_bytes(j(ok)))
        out.append({"request": AFTER, "status": status, "message": "", "4xx": False})
    finally:
        server.stop()
    out.append({"request": RECORDED, "status": len(inspect_ledger(ledger).releases),
                "message": "", "4xx": False})
    return out


AFTER, RECORDED = "a valid call afterwards", "releases recorded by all of these"


def problems(result: dict[str, Any]) -> list[str]:
    """What makes the run fail (exit status 1): a load run over its budget, a 200 not
    recorded as returned, a 5xx but the 503s of a database restart; a hostile request
    answered other than by a 4xx, the valid call after them not a 200, or other than its
    one release recorded."""
    out = []
    for r in result.get("runs", []):
        tag = f"{r['backend']}, {r['clients']} clients, {r['fault'] or 'load'}"
        if not r["within_budget"]:
            out.append(f"{tag}: spent {r['spent']:.6g} > budget {r['budget']:.6g}")
        if r["unrecorded_or_mismatched_200"]:
            out.append(f"{tag}: {r['unrecorded_or_mismatched_200']} 200s not recorded as "
                       "returned")
        if r["unexpected_5xx"]:
            out.append(f"{tag}: {r['unexpected_5xx']} unexpected 5xx ({r['errors']})")
    for h in result.get("hostile", []):
        if h["request"] == AFTER and h["status"] != 200:
            out.append(f"hostile: the valid call afterwards answered {h['status']}")
        elif h["request"] == RECORDED and h["status"] != 1:
            out.append(f"hostile: {h['status']} releases recorded, not 1")
        elif h["request"] not in (AFTER, RECORDED) and not h["4xx"]:
            out.append(f"hostile: {h['request']} answered {h['status']}, not a 4xx")
    return out


# --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = _bench.parser(__doc__, quick="a small smoke run (about a minute)")
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--epsilon", type=float, default=1.0, help="per call")
    p.add_argument("--calls", type=int, default=60, help="calls the load budget admits")
    p.add_argument("--clients", type=int, nargs="+", default=[24, 64])
    p.add_argument("--overhead-calls", type=int, default=15)
    p.add_argument("--time-limit", type=float, default=240.0, help="per load scenario, s")
    p.add_argument("--no-pg", action="store_true", help="skip the PostgreSQL parts")
    p.add_argument("--only", nargs="+", choices=("overhead", "load", "kill9", "db-restart",
                                                 "hostile"))
    p.add_argument("--bank-mode", choices=("copy", "mmap"), default="copy",
                   help="how the servers (and the in-process memories) hold the bank")
    args = p.parse_args(argv)
    Server.bank_mode = args.bank_mode
    if args.quick:
        args.n, args.d, args.calls, args.clients = 5000, 16, 20, [8]
        args.overhead_calls, args.time_limit = 8, 90.0
    parts = set(args.only or ("overhead", "load", "kill9", "db-restart", "hostile"))
    base = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    rng = np.random.default_rng(0)
    X = make_bank(args.n, args.d, 0)
    np.save(base / "bank.npy", X)
    queries = _bench.near_rows(X, 64, rng, spread=0.1)
    radius, _ = choose_radius(X, queries, 50 / args.n)
    keys = base / "keys"
    keys.write_text(f"bench:{ANALYST}:analyst\nroot:{ADMIN}:admin\n")
    keys.chmod(0o600)
    ctx: dict[str, Any] = {"X": X, "bank": base / "bank.npy", "radius": radius,
                           # in process, the bank as the servers hold it
                           "bank_mm": load_bank(base / "bank.npy", args.bank_mode),
                           "keys": keys, "dir": base, "steps": args.steps,
                           "eps": args.epsilon, "centre": X[0].copy(), "pg": None}
    result: dict[str, Any] = {
        "benchmark": "bench_serve", "started": _bench.now(), **_bench.environment(),
        "n": args.n, "d": args.d, "steps": args.steps,
        "epsilon_per_call": args.epsilon, "radius": radius, "bank_mode": args.bank_mode}
    with _bench.temp_postgres(not args.no_pg) as pg:
        ctx["pg"] = pg
        run_parts(ctx, args, parts, result)
    report(result)
    _bench.save_json(args.json, result)
    failed = problems(result)
    for line in failed:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if failed else 0


def run_parts(ctx: dict[str, Any], args: Any, parts: set[str], result: dict[str, Any]
              ) -> None:
    """The parts asked for, into ``result`` (printed as they finish)."""
    base, pg = ctx["dir"], ctx["pg"]
    backends = ["sqlite"] + (["postgresql"] if pg is not None else [])
    if "overhead" in parts:
        ledgers = {"sqlite": (str(base / "overhead-inproc.db"),
                              str(base / "overhead-server.db"))}
        if pg is not None:
            ledgers["postgresql"] = (pg.new_schema(f"inproc{os.getpid()}"),
                                     pg.new_schema(f"server{os.getpid()}"))
        result["fsync_ms"] = fsync_ms(base)
        result["overhead"] = overhead(ctx, ledgers, args.overhead_calls)
        print(json.dumps(result["overhead"], indent=1), flush=True)
    runs = []
    for backend in backends:
        if "load" in parts:
            for c in args.clients:
                runs.append(scenario(ctx, backend, c, None, args.calls,
                                     args.time_limit))
                print(json.dumps(runs[-1]), flush=True)
        if "kill9" in parts:
            runs.append(scenario(ctx, backend, max(args.clients), "kill9", args.calls,
                                 args.time_limit))
            print(json.dumps(runs[-1]), flush=True)
    if "db-restart" in parts and pg is not None:
        runs.append(scenario(ctx, "postgresql", max(args.clients), "db-restart",
                             args.calls, args.time_limit))
        print(json.dumps(runs[-1]), flush=True)
    result["runs"] = runs
    if "hostile" in parts:
        result["hostile"] = hostile(ctx)
        for h in result["hostile"]:
            print(f"  {h['status']:>4}  {h['request']:<34} {h['message']}")


def report(result: dict[str, Any]) -> None:
    if "overhead" in result:
        rows = []
        for k, v in result["overhead"].items():
            extra = v.get("overhead_vs_no_ledger_ms", v.get("ledger_overhead_ms"))
            paired = v.get("paired_overhead_p50_ms")
            rows.append((k, f"{v['p50_ms']:.1f}", f"{v['p99_ms']:.1f}",
                         "" if extra is None else f"{extra:+.1f} ms",
                         "" if paired is None else f"{paired:+.2f} ms",
                         f"{v['http_path_p50_ms']:.2f} ({v['http_path_p99_ms']:.2f}) ms"
                         if "http_path_p50_ms" in v else ""))
        print("\n" + _bench.markdown(("path", "p50 ms", "p99 ms", "p50 − in-process without "
                                      "a ledger", "paired overhead p50",
                                      "HTTP path p50 (p99)"), rows))
        print(f"(fsync of this disk: median {result['fsync_ms']:.2f} ms)")
    if result.get("runs"):
        rows = [(r["backend"], r["clients"], r["fault"] or "-", r["ok_200"],
                 r["statuses"].get("409", 0), r["any_5xx"], f"{r['throughput_per_s']:.2f}",
                 f"{r['p50_ms']:.0f}", f"{r['p99_ms']:.0f}",
                 f"{r['spent']:.3f} / {r['budget']:.3f}", r["recorded_not_received"],
                 r["unrecorded_or_mismatched_200"]) for r in result["runs"]]
        print("\n" + _bench.markdown(("ledger", "clients", "fault", "200s", "409s", "5xx",
                                      "throughput /s", "p50 ms", "p99 ms", "spent / budget",
                                      "recorded not received", "unrecorded 200s"), rows))


if __name__ == "__main__":
    sys.exit(main())
