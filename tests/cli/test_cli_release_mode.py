"""``--release-mode``: the BRACE release chosen on the command line (retrieve, uq, audit)."""

from __future__ import annotations

import numpy as np
import pytest

from brace import load_result
from brace.cli import main


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    bank = tmp_path / "bank.npy"
    queries = tmp_path / "q.npy"
    np.save(bank, rng.normal(size=(300, 2)))
    np.save(queries, rng.normal(size=(3, 2)) * 0.3)
    return tmp_path, bank, queries


def _retrieve(bank, queries, out, *extra):
    return ["retrieve", "--bank", str(bank), "--queries", str(queries), "--radius", "0.8",
            "--steps", "2", "--epsilon", "8", "--seed", "1", "--out", str(out), *extra]


@pytest.mark.parametrize("mode", ["count", "smooth", None])
def test_retrieve_release_mode(files, mode):
    tmp, bank, queries = files
    out = tmp / f"r_{mode}.npz"
    extra = ["--kappa", "inf"] + ([] if mode is None else ["--release-mode", mode])
    assert main(_retrieve(bank, queries, out, *extra)) == 0
    res = load_result(out)
    if mode is None:  # the library default: auto
        assert res.params["release_rule"].startswith("auto")
    else:
        assert res.params["release"] == mode and res.params["release_rule"] == "given"


def test_release_mode_bad_value(files, capsys):
    tmp, bank, queries = files
    for command in (_retrieve(bank, queries, tmp / "x.npz", "--release-mode", "ptr"),
                    ["audit", "--bank", str(bank), "--query", str(queries), "--radius", "0.8",
                     "--release-mode", "ptr"]):
        with pytest.raises(SystemExit) as e:
            main(command)
        assert e.value.code == 2
        assert "release-mode" in capsys.readouterr().err
