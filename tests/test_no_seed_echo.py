"""A release without a seed carries no seed (``docs/privacy.md`` §10).

The operating system's entropy is replaced by a known, distinctive value; every path a
result leaves by — its attributes and ``params``, ``repr``/``str``, ``to_dict`` (even with
``include_seed=True``), JSON and NPZ files, pickles, the ledger — must not contain it, nor
the generator state it seeds. A seed the caller passed is echoed (in memory) and withheld
from files unless asked.
"""

from __future__ import annotations

import dataclasses
import json
import pickle

import numpy as np
import numpy.random.bit_generator as bitgen
import pytest

import brace
from brace import PrivateMemory, load_result, private_retrieve, save_result

SECRET = 0xDEADBEEFCAFEBABE1234567890ABCDEF


@pytest.fixture
def known_entropy(monkeypatch):
    """OS entropy replaced by ``SECRET``: returns every form in which it could leak — its
    decimal and hex text, and the PCG64 state words it seeds."""
    monkeypatch.setattr(bitgen, "randbits", lambda k: SECRET)
    # the patch must reach numpy's entropy (else every test here would pass vacuously)
    assert np.random.SeedSequence().entropy == SECRET
    state = np.random.PCG64(np.random.SeedSequence(SECRET)).state["state"]
    ints = {SECRET, int(state["state"]), int(state["inc"])}
    texts = {str(i) for i in ints} | {hex(i)[2:] for i in ints}
    return ints, texts


def _leaks(obj, ints, texts, seen=None) -> list[str]:
    """Where in ``obj`` (recursively) one of the secret values appears."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    out = []
    if isinstance(obj, bool):
        return out
    if isinstance(obj, int) and obj in ints:
        out.append(repr(obj))
    elif isinstance(obj, str | bytes):
        s = obj if isinstance(obj, str) else obj.decode("latin-1")
        out += [t for t in texts if t in s]
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out += _leaks(k, ints, texts, seen) + _leaks(v, ints, texts, seen)
    elif isinstance(obj, list | tuple | set):
        for v in obj:
            out += _leaks(v, ints, texts, seen)
    elif isinstance(obj, np.integer):
        out += _leaks(int(obj), ints, texts, seen)
    elif isinstance(obj, np.ndarray):
        if obj.dtype == object:
            out += _leaks(obj.tolist(), ints, texts, seen)
        elif obj.dtype.kind in "iu":
            out += [repr(i) for i in ints if np.any(obj == i)] if obj.size else []
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            out += _leaks(getattr(obj, f.name), ints, texts, seen)
    return out


def _check_result(res, tmp_path, ints, texts, tag: str) -> None:
    assert res.params["seed"] is None
    assert not _leaks(res, ints, texts), tag
    for text in (repr(res), str(res), res.summary(diagnostics=True),
                 json.dumps(res.to_dict(include_seed=True, include_diagnostics=True))):
        assert not any(t in text for t in texts), tag
    assert not _leaks(pickle.loads(pickle.dumps(res)), ints, texts)
    for t in texts:
        assert t.encode() not in pickle.dumps(res)
    for suffix in (".npz", ".json"):
        path = save_result(res, tmp_path / f"{tag}{suffix}", include_seed=True,
                           include_diagnostics=True)
        raw = path.read_bytes()
        assert not any(t.encode() in raw for t in texts), (tag, suffix)
        assert load_result(path).params["seed"] is None


@pytest.fixture(scope="module")
def bank():
    return np.random.default_rng(0).normal(size=(300, 2))


@pytest.mark.parametrize("noise", ["plain", "auto", "secure"])
@pytest.mark.parametrize("method,kw", [("brace", {}), ("brace", {"kappa": 0.0}),
                                       ("brace", {"release": "count"}), ("global", {}),
                                       ("endpoint", {})])
def test_private_retrieve_without_a_seed_carries_none(bank, tmp_path, known_entropy, noise,
                                                      method, kw):
    ints, texts = known_entropy
    m = brace.LSRMemory(bank, radius=0.8)
    res = private_retrieve(m, bank[:3], method=method, epsilon=2.0, delta=1e-5, steps=2,
                           noise=noise, **kw)
    assert res.params["noise"] == ("plain" if noise == "plain" else "secure")
    assert "seed_null_reason" in res.params
    _check_result(res, tmp_path, ints, texts, f"{method}-{noise}")


def test_private_memory_and_its_ledger_carry_no_seed(bank, tmp_path, known_entropy):
    ints, texts = known_entropy
    path = tmp_path / "ledger.db"
    with PrivateMemory(bank, radius=0.8, budget=(20.0, 1e-5), ledger=path,
                       create=True) as pm:
        for noise in ("plain", "auto"):
            res = pm.retrieve(bank[:3], steps=2, epsilon=1.0, noise=noise)
            _check_result(res, tmp_path, ints, texts, f"pm-{noise}")
        rep = pm.retrieve(bank[:3], steps=2, epsilon=1.0, noise="plain")  # a free repeat
        assert rep.params.get("seed") is None and not _leaks(rep, ints, texts)
        for syn in (pm.snapshot(bank[:5], epsilon=1.0, steps=1),  # from public seeds
                    pm.snapshot(bounds=(-4.0, 4.0), epsilon=1.0),  # seeds found privately
                    pm.snapshot(bounds=(-4.0, 4.0), epsilon=1.0, noise="plain")):
            assert syn.params.get("seed") is None and not _leaks(syn, ints, texts)
            for text in (repr(syn), str(syn), syn.to_json(include_seed=True)):
                assert not any(t in text for t in texts)
            assert not _leaks(pickle.loads(pickle.dumps(syn)), ints, texts)
        assert not _leaks(pm.releases, ints, texts)
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("ledger.db*"))
    assert not any(t.encode() in raw for t in texts)


def test_a_given_seed_is_echoed_and_withheld_from_files(bank, tmp_path):
    m = brace.LSRMemory(bank, radius=0.8)
    res = private_retrieve(m, bank[:3], method="global", epsilon=2.0, delta=1e-5, steps=2,
                           seed=12345)
    assert res.params["seed"] == 12345 and res.params["noise"] == "plain"
    assert res.to_dict()["params"]["seed"] is None
    assert res.to_dict(include_seed=True)["params"]["seed"] == 12345
    back = load_result(save_result(res, tmp_path / "r.npz"))
    assert back.params["seed"] is None
