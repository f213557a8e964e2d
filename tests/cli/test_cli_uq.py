"""``brace uq``: regions written to JSON, one-line errors."""

from __future__ import annotations

import json

import numpy as np

from brace.cli import main
from brace.datasets import sample_mixture

Q0 = np.array([0.4, 0.25])


def test_cli_uq_writes_regions(tmp_path, capsys):
    np.save(tmp_path / "bank.npy", sample_mixture(1500, seed=0))
    np.save(tmp_path / "q.npy", np.array([Q0, [-0.9, 0.1]]))
    out = tmp_path / "uq.json"
    rc = main(["uq", "--bank", str(tmp_path / "bank.npy"), "--queries",
               str(tmp_path / "q.npy"), "--radius", "0.8", "--steps", "2", "--epsilon", "8",
               "--kappa", "0", "--seed", "1", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "bank ±" in text and "population ±" in text and "public bank ±" in text
    d = json.loads(out.read_text())
    assert set(d["regions"]) == {"bank", "population"}
    assert "not_formed" in d["public_regions"]["population"]
    rc = main(["uq", "--bank", str(tmp_path / "bank.npy"), "--queries",
               str(tmp_path / "q.npy"), "--radius", "0.8", "--steps", "2", "--epsilon", "8",
               "--level", "1.2", "--out", str(tmp_path / "bad.json")])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.strip() == "brace: error: level must lie in (0, 1). Found 1.2."
    assert not (tmp_path / "bad.json").exists()
