"""``brace serve`` (docs/deploying.md): keys and roles, every route, the budget's 409 and
the library's 422, hostile requests (always a 4xx with a clear message, never a 500
or a traceback), no seed or diagnostics in any response, free repeats served from the
ledger, errors that say nothing after admission, a foreign ledger refused, and one real
server process. In process through Starlette's test client; the PostgreSQL case on the
throw-away server of ``conftest.py``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("starlette", reason="starlette not installed (the 'serve' extra)")
pytest.importorskip("httpx2", reason="httpx2 not installed (the 'serve' extra)")

from starlette.testclient import TestClient  # noqa: E402

from brace import PrivateMemory  # noqa: E402
from brace.budget import inspect_ledger  # noqa: E402
from brace.ledger import LedgerError  # noqa: E402
from brace.ledger.backend import ledger_class  # noqa: E402
from brace.mechanisms import DIAGNOSTIC_FIELDS  # noqa: E402
from brace.serve import Limits, ServeConfig, Service, create_app, hash_token, load_keys  # noqa: E402
from pgserver import free_port  # noqa: E402 (tests/, on the path for conftest.py)

ANALYST = "analyst-token-0123456789abcdef"
ADMIN = "admin-token-0123456789abcdefgh"
A = {"Authorization": f"Bearer {ANALYST}"}
ROOT = {"Authorization": f"Bearer {ADMIN}"}
SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def bank():
    return np.random.default_rng(0).normal(size=(300, 4))


def _keys(path: Path) -> Path:
    path.write_text(f"# test keys\nalice:{ANALYST}:analyst\n\nroot:{hash_token(ADMIN)}:admin\n")
    path.chmod(0o600)
    return path


def _deploy(tmp_path, bank, ledger=None, budget=8.0, **limits):
    np.save(tmp_path / "bank.npy", bank)
    ledger = ledger or str(tmp_path / "ledger.db")
    PrivateMemory(bank, radius=1.5, budget=(budget, 1e-5), ledger=ledger, create=True).close()
    return ServeConfig(bank=str(tmp_path / "bank.npy"), radius=1.5, ledger=ledger,
                       keys=str(_keys(tmp_path / "keys")), limits=Limits(**limits))


@pytest.fixture
def client(tmp_path, bank):
    config = _deploy(tmp_path, bank)
    service = Service(config)
    with TestClient(create_app(config, service=service),
                    raise_server_exceptions=False) as c:
        c.service, c.config = service, config
        yield c
    service.close()


def _q(bank, rows=slice(0, 1)):
    return np.asarray(bank[rows]).tolist()


def _walk_keys(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _walk_keys(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk_keys(v)


def _no_secrets(response):
    """No seed, no diagnostics, no traceback, in any response."""
    assert "Traceback" not in response.text
    assert response.headers["content-type"].startswith("application/json")
    keys = set(_walk_keys(response.json()))
    assert not keys & {"seed", "seed_record", "seed_null_reason", "diagnostics_not_private",
                       "clean_not_private", "clean", *DIAGNOSTIC_FIELDS}, keys


# --------------------------------------------------------------------------------------
def test_keys_roles_and_tokens(client, bank, tmp_path):
    body = {"queries": _q(bank), "steps": 1, "epsilon": 1.0}
    for headers, status in [({}, 401), ({"Authorization": "Bearer nope-" + "x" * 20}, 401),
                            ({"Authorization": f"Basic {ANALYST}"}, 401),
                            ({"Authorization": ANALYST}, 401), (A, 200), (ROOT, 200)]:
        r = client.post("/v1/retrieve", json=body, headers=headers)
        assert r.status_code == status, r.text
        _no_secrets(r)
    r = client.post("/v1/retrieve", json=body)
    assert r.headers["www-authenticate"] == "Bearer" and "Authorization: Bearer" in r.text
    r = client.post("/v1/snapshot", json={"epsilon": 1.0, "seeds": _q(bank, slice(0, 3))},
                    headers=A)
    assert r.status_code == 403 and "needs an admin key" in r.json()["message"]
    assert client.get("/v1/budget").status_code == 401
    # the keys file: clear or hashed tokens, one clear error per bad line
    ring, warnings = load_keys(client.config.keys)
    assert ring.names == ("alice", "root") and not warnings
    assert ring.identify(ADMIN).role == "admin" and ring.identify(ADMIN[:-1]) is None
    assert "digest" not in repr(ring.identify(ANALYST))
    for text, match in [("a:short:analyst", "at least 20"), ("a:" + "t" * 24 + ":boss", "role"),
                        ("x" * 24, "name:token:role"),
                        (f"a:{'t' * 24}:analyst\na:{'u' * 24}:admin", "used twice"),
                        (f"a:{'t' * 24}:analyst\nb:{'t' * 24}:admin", "already another"),
                        ("", "no key")]:
        (tmp_path / "bad").write_text(text)
        with pytest.raises(ValueError, match=match):
            load_keys(tmp_path / "bad")
    # a sha256= form is 64 hex digits, either case; anything else after sha256= is an
    # error, never a token in the clear; a token in the clear is printable ASCII
    digest = hash_token(ADMIN).removeprefix("sha256=")
    for form in (f"sha256={digest.upper()}", f"SHA256={digest}"):
        (tmp_path / "upper").write_text(f"root:{form}:admin\n")
        assert load_keys(tmp_path / "upper")[0].identify(ADMIN).name == "root"
    for text, match in [(f"a:sha256={digest[:-2]}:analyst", "64 hexadecimal.*got 62 char"),
                        (f"a:sha256={digest[:-1]}g:analyst", "not all hexadecimal"),
                        (f"a:sha256={digest}00:analyst", "got 66 character"),
                        (f"a:{'é' * 24}:analyst", "printable ASCII"),
                        (f"a:{'t' * 12}\x07{'t' * 12}:analyst", "printable ASCII")]:
        (tmp_path / "bad").write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=match):
            load_keys(tmp_path / "bad")
    with pytest.raises(ValueError, match="printable ASCII"):
        hash_token("é" * 24)
    assert ring.identify("\udcff" * 24) is None and ring.identify("é" * 24) is None
    (tmp_path / "bad").write_text(f"a:{'t' * 24}:analyst")
    (tmp_path / "bad").chmod(0o644)
    assert "chmod 600" in load_keys(tmp_path / "bad")[1][0]
    for mode in (0o666, 0o620, 0o602, 0o660):  # writable by the group or others: refused
        (tmp_path / "bad").chmod(mode)
        with pytest.raises(ValueError, match=f"written by other users \\(mode {mode:o}\\)"):
            load_keys(tmp_path / "bad")


def test_every_route(client, bank):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "ledger": "ok"}
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.") and set(doc["paths"]) >= {
        "/v1/retrieve", "/v1/budget", "/v1/snapshot", "/v1/synopsis", "/v1/complete",
        "/healthz"}
    r = client.get("/v1/budget", headers=A)
    assert r.json() == {"spent": 0.0, "remaining": 8.0, "epsilon": 8.0, "delta": 1e-5,
                        "releases": 0}
    r = client.post("/v1/retrieve", json={"queries": _q(bank, slice(0, 2)), "steps": 2,
                                          "epsilon": 1.0}, headers=A)
    out = r.json()
    assert r.status_code == 200 and out["release_id"] == 2 and out["repeat"] is False
    assert np.shape(out["outputs"]) == (2, 2, 4) and out["params"]["noise"] == "secure"
    assert out["privacy"]["epsilon"] == 1.0 and "queries" not in out
    grid = np.asarray(out["grid"])[..., None]  # exact noise: every output on its grid
    assert np.all(np.asarray(out["outputs"]) / grid == np.round(np.asarray(out["outputs"]) / grid))
    r = client.post("/v1/retrieve", json={"queries": _q(bank, slice(3, 4)), "steps": 3,
                                          "epsilon": 0.5, "delta": 1e-7, "method": "global"},
                    headers=A)
    assert r.status_code == 200 and r.json()["method"] == "global"
    budget = client.get("/v1/budget", headers=A).json()
    assert budget["releases"] == 2 and 0 < budget["spent"] < 8
    assert budget["spent"] + budget["remaining"] == pytest.approx(8.0)
    # the synopsis: none yet; released once by an admin; then free answers
    r = client.get("/v1/synopsis", headers=A)
    assert r.status_code == 404 and "no synopsis" in r.json()["message"]
    r = client.post("/v1/complete", json={"queries": _q(bank)}, headers=A)
    assert r.status_code == 404
    r = client.post("/v1/snapshot", json={"epsilon": 1.0, "seeds": _q(bank, slice(0, 6))},
                    headers=ROOT)
    assert r.status_code == 200, r.text
    _no_secrets(r)
    syn = r.json()
    assert syn["params"]["noise"] == "secure"
    spent = client.get("/v1/budget", headers=A).json()["spent"]
    r = client.post("/v1/snapshot", json={"epsilon": 1.0, "seeds": _q(bank, slice(0, 6))},
                    headers=ROOT)
    assert r.status_code == 409 and r.json()["error"] == "snapshot_exists"
    assert client.get("/v1/synopsis", headers=A).json() == syn
    for how in ("nearest", "lsr"):
        r = client.post("/v1/complete", json={"queries": _q(bank, slice(0, 3)), "how": how},
                        headers=A)
        assert r.status_code == 200 and np.shape(r.json()["completions"]) == (3, 4)
        _no_secrets(r)
    assert client.get("/v1/budget", headers=A).json()["spent"] == spent  # free
    r = client.post("/v1/snapshot", json={"epsilon": 0.5, "seeds": _q(bank, slice(0, 3)),
                                          "again": True}, headers=ROOT)
    assert r.status_code == 200 and client.get("/v1/budget", headers=A).json()["spent"] > spent


def test_409_and_422_bodies(client, bank):
    r = client.post("/v1/retrieve", json={"queries": _q(bank), "steps": 1, "epsilon": 500.0},
                    headers=A)
    body = r.json()
    assert r.status_code == 409 and body["error"] == "budget_exceeded"
    assert body["remaining"] == pytest.approx(8.0) and body["spent"] == 0.0
    assert 0 < body["affordable_epsilon"] < 500 and "Nothing was released" in body["message"]
    assert client.get("/v1/budget", headers=A).json()["releases"] == 0
    for extra, match in [({"epsilon": -1.0}, "'epsilon': input should be greater than or "
                          "equal to 1e-06; got -1.0."),
                         ({"queries": [[1.0, 2.0, 3.0]]}, "vector of length d = 4"),
                         ({"method": "naive"}, "'method': input should be 'brace', 'global' "
                          "or 'endpoint'"),
                         ({"release": "fancy"}, "'release': input should be"),
                         ({"delta": 2.0}, "'delta': input should be less than 1"),
                         # valid per the schema, refused by the library with its message
                         ({"epsilon": 1e-6, "delta": 1e-300, "release": "smooth"},
                          "secure noise for the smooth release needs gamma"),
                         ({"method": "global", "release": "count"}, "release=")]:
        r = client.post("/v1/retrieve", json={"queries": _q(bank), "steps": 1,
                                              "epsilon": 1.0, **extra}, headers=A)
        assert r.status_code == 422 and r.json()["error"] == "invalid_request", r.text
        assert match in r.json()["message"]
        _no_secrets(r)


@pytest.mark.parametrize("delta, method", [(5e-324, "global"), (1e-301, "endpoint"),
                                           (1e-320, None)])
def test_no_request_makes_the_ledger_unreadable(client, bank, delta, method):
    """Issue reproducer: delta=5e-324 was answered 200 and recorded; from then on the
    ledger could not be read (every server 503, no restart, /healthz still 200)."""
    body = {"queries": [[0.5, 0.1, 0.0, 0.0]], "steps": 1, "epsilon": 1, "delta": delta}
    if method is not None:
        body["method"] = method
    r = client.post("/v1/retrieve", json=body, headers=A)
    msg = r.json()["message"]  # the declared contract refuses it before the library
    assert r.status_code == 422 and "'delta'" in msg and "1e-300" in msg, msg
    ok = client.post("/v1/retrieve", json={**body, "delta": 1e-300}, headers=A)
    assert ok.status_code == 200, ok.text
    assert client.get("/healthz").json() == {"status": "ok", "ledger": "ok"}
    assert len(inspect_ledger(client.config.ledger).releases) == 1
    Service(client.config).close()  # a restarted server starts


def test_healthz_is_503_for_a_ledger_holding_an_unreadable_record(client, bank,
                                                                  monkeypatch):
    from brace.ledger import Ledger

    r = client.post("/v1/retrieve", json={"queries": _q(bank), "steps": 1, "epsilon": 1.0,
                                          "method": "global"}, headers=A)
    assert r.status_code == 200 and client.get("/healthz").status_code == 200
    db = Ledger.open(client.config.ledger)
    row = db.raw_rows()[0]
    with monkeypatch.context() as m:  # written by an earlier version: no check on write
        m.setattr(Ledger, "_parse_row", lambda self, row: None)
        with db.transaction():
            db.append(call_key="x", record={**json.loads(row[3]), "delta": 5e-324},
                      outputs=np.frombuffer(row[4]).reshape(1, 1, -1), released_counts=None,
                      centres=np.frombuffer(row[6]).reshape(1, -1),
                      radii=np.frombuffer(row[7]))
    db.close()
    client.service._probe = (-float("inf"), True, "ok")  # no cached answer
    r = client.get("/healthz")
    assert r.status_code == 503 and r.json() == {"status": "unavailable",
                                                 "ledger": "failed its check"}
    r = client.post("/v1/retrieve", json={"queries": _q(bank, slice(3, 4)), "steps": 1,
                                          "epsilon": 1.0}, headers=A)
    assert r.status_code == 503 and r.json()["error"] == "ledger_error"


def test_a_409_names_other_analysts_places_to_admins_only(tmp_path, bank, caplog):
    """Issue reproducer: a 409 answered to an analyst said "The most charged place is
    around [ 1.7 -0.31]": another analyst's query place."""
    config = _deploy(tmp_path, bank, budget=3.0)
    bob = "bob-token-0123456789abcdefghij"
    Path(config.keys).write_text(f"alice:{ANALYST}:analyst\nbob:{bob}:analyst\n"
                                 f"root:{hash_token(ADMIN)}:admin\n")
    service = Service(config)
    B = {"Authorization": f"Bearer {bob}"}
    place = [[7.25, -3.5, 0.0, 0.0]]  # alice's query, far from the bank
    with TestClient(create_app(config, service=service),
                    raise_server_exceptions=False) as c, caplog.at_level("INFO", "brace.serve"):
        r = c.post("/v1/retrieve", json={"queries": place, "steps": 2, "epsilon": 1.5},
                   headers=A)
        assert r.status_code == 200, r.text
        big = {"queries": place, "steps": 4, "epsilon": 50.0}
        answers = {}
        for who, headers in (("bob", B), ("alice", A), ("root", ROOT)):
            r = c.post("/v1/retrieve", json=big, headers=headers)
            assert r.status_code == 409 and r.json()["error"] == "budget_exceeded", r.text
            answers[who] = r.json()["message"]
    service.close()
    assert "most charged place is around [ 7.25 -3.5" in answers["root"]
    for who in ("bob", "alice"):  # an analyst: the budget, never a place
        assert "charged place" not in answers[who] and "7.25" not in answers[who]
        assert "Nothing was released or spent." in answers[who]
        assert answers[who] == answers["root"].replace(
            " " + answers["root"][answers["root"].index("The most charged"):
                                  answers["root"].index(" Nothing was")], "")
    assert any("most charged place is around [ 7.25" in rec.getMessage()
               for rec in caplog.records)  # the server's log has it


HOSTILE = [
    # (body bytes or JSON, content type, status, words of the message)
    (b'{"queries": [[NaN, 0, 0, 0]], "steps": 1, "epsilon": 1}', None, 400, "NaN"),
    (b'{"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": Infinity}', None, 400, "Infinity"),
    (b'{"queries": [[1e999, 0, 0, 0]], "steps": 1, "epsilon": 1}', None, 400, "overflows"),
    (b'{"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": 1', None, 400, "not valid JSON"),
    (b"\xff\xfe{}", None, 400, "UTF-8"),
    (b"[" * 200000, None, 400, "nests too deeply"),
    (b'{"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": ' + b"9" * 5000 + b"}", None,
     400, "not valid JSON"),
    ({"queries": [["a", 0, 0, 0]], "steps": 1, "epsilon": 1}, None, 422,
     "'queries'[0][0]: input should be a valid number; got 'a'."),
    ({"queries": [[True, 0, 0, 0]], "steps": 1, "epsilon": 1}, None, 422,
     "[0][0]: input should be a valid number; got True."),
    ({"queries": "0,0,0,0", "steps": 1, "epsilon": 1}, None, 422,
     "'queries': input should be a valid list"),
    ({"queries": [], "steps": 1, "epsilon": 1}, None, 422,
     "vector of length d = 4 (the bank's dimension), not 0"),
    ({"queries": [[0, 0, 0, 0], [0, 0]], "steps": 1, "epsilon": 1}, None, 422,
     "'queries'[1]: must be a vector of length d = 4"),
    ({"queries": [[0, 0, 0, 0, 0]], "steps": 1, "epsilon": 1}, None, 422,
     "'queries'[0]: must be a vector of length d = 4 (the bank's dimension), not 5"),
    ({"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": "1"}, None, 422,
     "'epsilon': input should be a valid number; got '1'."),
    ({"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": -2}, None, 422,
     "greater than or equal to 1e-06; got -2."),
    ({"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": 0}, None, 422,
     "greater than or equal to 1e-06; got 0."),
    ({"queries": [[0, 0, 0, 0]], "steps": 0, "epsilon": 1}, None, 422,
     "'steps': input should be greater than or equal to 1"),
    ({"queries": [[0, 0, 0, 0]], "steps": 10 ** 9, "epsilon": 1}, None, 422,
     "'steps': input should be less than or equal to 64; got 1000000000."),
    ({"queries": [[0, 0, 0, 0]], "steps": 1.5, "epsilon": 1}, None, 422,
     "'steps': input should be a valid integer; got 1.5."),
    ({"queries": [[0, 0, 0, 0]] * 300, "steps": 1, "epsilon": 1}, None, 422, "at most 256"),
    ({"steps": 1, "epsilon": 1}, None, 422, "missing field 'queries'."),
    ({"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": 1, "seed": 7}, None, 422,
     "unknown field 'seed' in a private release; its fields are queries, steps,"),
    ({"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": 1, "return_clean": True}, None, 422,
     "unknown field 'return_clean' in a private release"),
    ({"queries": [[0, 0, 0, 0]], "steps": None, "epsilon": 1}, None, 422,
     "'steps' must not be null"),
    ({"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": 2e6}, None, 422,
     "'epsilon': input should be less than or equal to 1e+06; got 2000000.0."),
    ({"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": 1, "delta": 1e-301}, None, 422,
     "'delta': input should be greater than or equal to 1e-300"),
    ({"queries": [[0, 0, 0, 1e300]], "steps": 1, "epsilon": 1}, None, 422,
     "'queries'[0][3]: input should be less than or equal to"),
    ([1, 2, 3], None, 422, "must be a JSON object"),
    ("just a string", None, 422, "must be a JSON object"),
    ({"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": 1}, "text/plain", 415, "application/json"),
    ({"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": 1}, "", 415, "application/json"),
    ({"queries": [[0, 0, 0, 0]], "steps": 1, "epsilon": 1},
     "application/x-www-form-urlencoded", 415, "application/json"),
]


@pytest.mark.parametrize("body,ctype,status,words", HOSTILE,
                         ids=[f"{i}-{h[2]}" for i, h in enumerate(HOSTILE)])
def test_hostile_requests_are_a_clear_4xx(client, body, ctype, status, words):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**A, "content-type": "application/json" if ctype is None else ctype}
    r = client.post("/v1/retrieve", content=data, headers=headers)
    assert r.status_code == status, r.text
    assert words in r.json()["message"] and r.json()["error"]
    _no_secrets(r)
    assert client.get("/v1/budget", headers=A).json()["releases"] == 0


def test_huge_bodies_and_wrong_routes(client, bank):
    big = b'{"queries": [' + b"[0.0, 0.0, 0.0, 0.0]," * 60000 + b"[0,0,0,0]]}"
    r = client.post("/v1/retrieve", content=big, headers={**A, "content-type":
                                                          "application/json"})
    assert r.status_code == 413 and "limit of 1048576 bytes" in r.json()["message"]

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(40):
            yield b" " * 65536

    r = client.post("/v1/retrieve", content=chunks(), headers={**A, "content-type":
                                                               "application/json"})
    assert r.status_code == 413
    r = client.post("/v1/retrieve", content=b"{}", headers={
        **A, "content-type": "application/json", "content-length": "-3"})
    assert r.status_code == 400 and "Content-Length" in r.json()["message"]
    for method, path, status in [("GET", "/v1/retrieve", 405), ("POST", "/v1/budget", 405),
                                 ("GET", "/nowhere", 404), ("DELETE", "/v1/synopsis", 405)]:
        r = client.request(method, path, headers=A)
        assert r.status_code == status and r.json()["error"] in ("not_found",
                                                                  "method_not_allowed")
        if status == 405:
            assert ("POST" if path == "/v1/retrieve" else "GET") in r.headers["allow"]
    for body, words in [({"seeds": _q(bank)}, "missing field 'epsilon'."),
                        ({"epsilon": 1.0, "seeds": [["x"]]}, "valid number"),
                        ({"epsilon": 1.0, "seeds": _q(bank), "rounds": 99}, "'rounds'"),
                        ({"epsilon": 1.0, "seeds": 5}, "bounds"),
                        ({"epsilon": 1.0, "bounds": [-1, 1], "project": "x"}, "project"),
                        ({"epsilon": 1.0, "seeds": _q(bank), "project": 2},
                         "unknown field 'project' in a synopsis from public seed points"),
                        ({"epsilon": 1.0}, "a snapshot needs public 'seeds'"),
                        ({"epsilon": 1.0, "seeds": None}, "'seeds' must not be null: omit it"),
                        ({"epsilon": 1.0, "seeds": 3, "bounds": [-1, 1], "steps": None},
                         "'steps' must not be null"),
                        ({"epsilon": 1.0, "seeds": 3, "bounds": [1, -1]}, "lo < hi")]:
        r = client.post("/v1/snapshot", json=body, headers=ROOT)
        assert r.status_code == 422 and words in r.json()["message"], r.text
    r = client.post("/v1/complete", json={"queries": _q(bank), "how": "magic"}, headers=A)
    assert r.status_code == 422
    r = client.post("/v1/complete", json={"queries": _q(bank), "how": "lsr", "steps": 65},
                    headers=A)
    assert r.status_code == 422 and "less than or equal to 64" in r.json()["message"]


def test_a_free_repeat_is_served_from_the_ledger(client, bank):
    body = {"queries": _q(bank, slice(4, 6)), "steps": 2, "epsilon": 1.0}
    first = client.post("/v1/retrieve", json=body, headers=A).json()
    spent = client.get("/v1/budget", headers=A).json()
    again = client.post("/v1/retrieve", json=body, headers=ROOT).json()
    assert again["repeat"] is True and again["release_id"] == first["release_id"]
    assert again["outputs"] == first["outputs"]
    assert client.get("/v1/budget", headers=A).json() == spent
    # every 200 is recorded, exactly once, with the outputs that were returned
    other = client.post("/v1/retrieve", json={**body, "epsilon": 0.7}, headers=A).json()
    db = ledger_class(client.config.ledger).open(client.config.ledger)
    try:
        assert db.meta["head"]["count"] == 4  # two releases, each after its charge
        for got in (first, other):
            outputs, _ = db.arrays(got["release_id"])
            assert np.array_equal(outputs, np.asarray(got["outputs"]))
    finally:
        db.close()


def test_errors_after_admission_and_ledger_errors_say_nothing(client, bank, monkeypatch):
    import brace.budget.facade as facade

    def fails(*args, **kw):
        raise ValueError("gate of 17 rows at 0.123456 (data-dependent)")

    monkeypatch.setattr(facade, "run_plan", fails)
    r = client.post("/v1/retrieve", json={"queries": _q(bank), "steps": 1, "epsilon": 1.0},
                    headers=A)
    assert r.status_code == 500 and r.json()["error"] == "internal"
    assert "0.123456" not in r.text and "17 rows" not in r.text and "reference" in r.text
    assert "budget was charged" in r.text  # admitted: the failure keeps its charge
    monkeypatch.undo()
    assert client.get("/v1/budget", headers=A).json()["releases"] == 1
    ok = client.post("/v1/retrieve", json={"queries": _q(bank), "steps": 1, "epsilon": 1.0},
                     headers=A)
    assert ok.status_code == 200
    import sqlite3

    conn = sqlite3.connect(client.config.ledger)  # damage the ledger under the server
    conn.execute("UPDATE releases SET call_key = 'x' WHERE id = 1")
    conn.commit()
    conn.close()
    client.service.pm._forget()  # make the server re-read (and verify) the whole ledger
    r = client.post("/v1/retrieve", json={"queries": _q(bank, slice(2, 3)), "steps": 1,
                                          "epsilon": 1.0}, headers=A)
    assert r.status_code == 503 and r.json()["error"] == "ledger_error"
    assert client.config.ledger not in r.text and "integrity" not in r.text
    r = client.get("/healthz")  # the metadata is intact, a release is not
    assert r.status_code == 503 and r.json()["ledger"] == "failed its check"


@pytest.mark.parametrize("where", ["release_cell_round", "run_plan", "private_seeds"])
def test_errors_inside_an_admitted_snapshot_say_nothing(client, bank, monkeypatch, where):
    import brace.budget.seedless as seedless
    import brace.budget.snapshot as snapshot

    def fails(*args, **kw):
        raise ValueError("secret detail: a cell of 3 rows at 0.654321")

    if where == "private_seeds":  # the snapshot without seeds
        monkeypatch.setattr(seedless, where, fails)
        body = {"epsilon": 1.0, "bounds": [-4.0, 4.0]}
    else:
        monkeypatch.setattr(snapshot, where, fails)
        body = {"epsilon": 1.0, "seeds": _q(bank, slice(0, 4)), "steps": 1 if where ==
                "run_plan" else 0}
    r = client.post("/v1/snapshot", json=body, headers=ROOT)
    assert r.status_code == 500 and r.json()["error"] == "internal", r.text
    assert "secret" not in r.text and "0.654321" not in r.text and "reference" in r.text
    _no_secrets(r)
    assert "budget was charged" in r.text
    monkeypatch.undo()
    assert client.get("/v1/budget", headers=A).json()["releases"] > 0  # charged
    assert client.get("/v1/synopsis", headers=A).status_code == 404
    assert client.post("/v1/snapshot", json=body, headers=ROOT).status_code == 200


def test_a_snapshot_that_cannot_be_published_says_it_was_released(client, bank,
                                                                  monkeypatch):
    def fails(text):
        raise OSError("disk full under /secret/path")

    monkeypatch.setattr(client.service.store, "put", fails)
    body = {"epsilon": 1.0, "seeds": _q(bank, slice(0, 4))}
    r = client.post("/v1/snapshot", json=body, headers=ROOT)
    assert r.status_code == 503 and r.json()["error"] == "not_published", r.text
    message = r.json()["message"]
    assert "released and charged" in message and "nothing was" not in message
    assert "secret" not in r.text and "reference" in message
    monkeypatch.undo()
    assert client.get("/v1/budget", headers=A).json()["releases"] == 2  # charged
    r = client.get("/v1/synopsis", headers=A)
    assert r.status_code == 404 and "not published" in r.json()["message"]
    # a non-finite value in the synopsis is null with a reason, never a 422
    public = client.service._public_synopsis

    def with_inf(syn):
        d = public(syn)
        d["params"]["count_std"] = float("inf")
        return d

    monkeypatch.setattr(client.service, "_public_synopsis", with_inf)
    r = client.post("/v1/snapshot", json={**body, "again": True}, headers=ROOT)
    assert r.status_code == 200, r.text
    params = r.json()["params"]
    assert params["count_std"] is None and params["count_std_null_reason"] == "infinite"
    assert client.get("/v1/synopsis", headers=A).json() == r.json()
    # only an admitted call that failed before its record says nothing was spent
    monkeypatch.setattr(client.service, "budget", lambda: 1 / 0)
    r = client.get("/v1/budget", headers=A)
    assert r.status_code == 500 and "nothing was" not in r.json()["message"]


def test_a_foreign_ledger_is_refused(tmp_path, bank):
    config = _deploy(tmp_path, bank)
    np.save(tmp_path / "other.npy", bank[:-1])
    with pytest.raises(LedgerError, match="another bank"):
        Service(ServeConfig(**{**config.__dict__, "bank": str(tmp_path / "other.npy")}))
    with pytest.raises(LedgerError, match="another bank"):
        Service(ServeConfig(**{**config.__dict__, "radius": 1.4}))
    from brace.cli import main

    assert main(["serve", "--bank", str(tmp_path / "other.npy"), "--radius", "1.5",
                 "--ledger", config.ledger, "--keys", config.keys, "--port", "9"]) == 2
    assert main(["serve", "--bank", str(tmp_path / "bank.npy")]) == 2


def test_the_service_on_a_postgresql_ledger(tmp_path, bank, pg_url):
    config = _deploy(tmp_path, bank, ledger=pg_url)
    with TestClient(create_app(config), raise_server_exceptions=False) as c:
        r = c.post("/v1/retrieve", json={"queries": _q(bank), "steps": 2, "epsilon": 1.0},
                   headers=A)
        assert r.status_code == 200 and r.json()["release_id"] == 2
        r = c.post("/v1/snapshot", json={"epsilon": 1.0, "seeds": _q(bank, slice(0, 5))},
                   headers=ROOT)
        assert r.status_code == 200
        assert c.get("/v1/synopsis", headers=A).json() == r.json()
        assert c.get("/v1/budget", headers=A).json()["releases"] == 3  # 1 + 2 cell rounds
        assert c.get("/healthz").json()["ledger"] == "ok"
    assert len(inspect_ledger(pg_url).releases) == 3


def test_brace_serve_runs_a_real_server(tmp_path, bank):
    config = _deploy(tmp_path, bank)
    port = free_port()
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "brace.cli", "serve", "--bank", config.bank, "--radius", "1.5",
         "--ledger", config.ledger, "--keys", config.keys, "--port", str(port),
         "--log-level", "warning"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as resp:
                    assert json.load(resp)["status"] == "ok"
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()  # then its output, which cannot wait for it forever
                    pytest.fail(f"the server did not answer: "
                                f"{proc.communicate(timeout=10)[1][-3000:]}")
                time.sleep(0.2)
        req = urllib.request.Request(
            f"{url}/v1/retrieve", method="POST", headers={**A, "Content-Type":
                                                         "application/json"},
            data=json.dumps({"queries": _q(bank), "steps": 1, "epsilon": 1.0}).encode())
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert json.load(resp)["release_id"] == 2  # after its pending charge
    finally:
        if proc.returncode is None:  # still running (a failed start was collected)
            proc.send_signal(signal.SIGTERM)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate(timeout=10)
                raise
    assert "brace serve: bank" in err and "Traceback" not in err
    assert len(inspect_ledger(config.ledger).releases) == 1


def test_worker_processes_are_configured_from_the_environment(tmp_path, bank, monkeypatch,
                                                               capsys):
    from brace.cli import main
    from brace.serve import app_from_env
    from brace.serve.service import CONFIG_ENV

    config = _deploy(tmp_path, bank, max_queries=3)
    assert ServeConfig.from_json(config.to_json()) == config
    monkeypatch.setenv(CONFIG_ENV, config.to_json())
    with TestClient(app_from_env(), raise_server_exceptions=False) as c:  # opens its own
        r = c.post("/v1/retrieve", json={"queries": _q(bank, slice(0, 4)), "steps": 1,
                                         "epsilon": 1.0}, headers=A)
        assert r.status_code == 422 and "at most 3" in r.json()["message"]
        assert c.get("/v1/budget", headers=ROOT).json()["releases"] == 0
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO(ADMIN + "\n"))
    assert main(["serve", "--hash-token"]) == 0
    assert capsys.readouterr().out.strip() == hash_token(ADMIN)


def test_the_server_holds_an_immutable_copy_of_the_bank_or_a_map(tmp_path, bank):
    """``--bank-mode copy`` (the default): an immutable in-memory copy, hashed once, so
    a call skips the per-call re-hash; ``mmap``: the .npy memory-mapped (re-hashed at
    every call); anything else is refused."""
    from brace.memory import _is_frozen
    from brace.serve.service import load_bank

    config = _deploy(tmp_path, bank)
    service = Service(config)
    assert config.bank_mode == "copy" and _is_frozen(service.bank)
    assert np.array_equal(service.bank, bank) and "immutable copy" in service.describe()
    service.close()
    mapped = Service(ServeConfig(**{**config.__dict__, "bank_mode": "mmap"}))
    assert isinstance(mapped.bank, np.memmap) and not _is_frozen(mapped.bank)
    assert "memory-mapped" in mapped.describe()
    mapped.close()
    with pytest.raises(ValueError, match="bank mode must be one of"):
        load_bank(config.bank, "copy-on-write")
    assert ServeConfig.from_json(config.to_json()) == config


def test_a_ledger_lost_while_recording_is_a_503_that_says_the_charge_stands():
    """The database going away after admission (the completion's transaction) is the
    ledger's unavailability, answered 503 with Retry-After, and says the budget was
    charged — not a 500, and never "nothing spent"."""
    from brace.budget import AdmittedCallFailed
    from brace.ledger.backend import LedgerUnavailable
    from brace.serve.app import _response_for

    try:
        try:
            raise LedgerUnavailable("connection lost")
        except LedgerUnavailable as cause:
            raise AdmittedCallFailed("charged") from cause
    except AdmittedCallFailed as exc:
        r = _response_for(exc, "retrieve")
    body = json.loads(r.body)
    assert r.status_code == 503 and r.headers["Retry-After"] == "2"
    assert body["error"] == "ledger_unavailable" and "was charged" in body["message"]
    r = _response_for(AdmittedCallFailed("charged"), "retrieve")  # any other cause: 500
    assert r.status_code == 500 and "was charged" in json.loads(r.body)["message"]
