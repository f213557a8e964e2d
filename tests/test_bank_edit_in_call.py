"""What a pinned call checks of the bank (docs/scale.md, "No copies"): an edit still in
place at exit is refused; one made and undone within the call is not detected, and the
docs say so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from brace import BankMutatedError, LSRMemory, private_retrieve

DOCS = Path(__file__).resolve().parents[1] / "docs"
KW = dict(method="brace", epsilon=8.0, delta=1e-5, steps=4, seed=1, release="smooth",
          kappa=0.0)


def _bank():
    X = np.random.default_rng(0).normal(size=(400, 2))
    return X, X[:3] + 0.01


def test_bank_edited_and_restored_within_a_call_is_not_detected():
    """A progress callback that edits the bank and undoes the edit before the call returns
    changes the release without an error. docs/scale.md states this limit; if the code
    learns to detect it, this test fails and the docs must say so instead."""
    X, q = _bank()
    clean = private_retrieve(LSRMemory(X.copy(), radius=0.8), q, **KW)
    mem = LSRMemory(X, radius=0.8)
    saved = X.copy()

    def edit_and_restore(t: int, T: int) -> None:
        if t == 1:
            X[:] = X + 5.0
        elif t == 3:
            X[:] = saved

    res = private_retrieve(mem, q, progress=edit_and_restore, **KW)
    assert not np.array_equal(res.outputs, clean.outputs)  # the release changed, unnoticed
    text = (DOCS / "scale.md").read_text(encoding="utf-8")
    assert "test_bank_edited_and_restored_within_a_call_is_not_detected" in text
    assert "*and undone* within one call" in text and "is not detected" in text
    assert "so every pass\n  inside read the validated bank" not in text


def test_an_edit_in_place_at_exit_is_refused():
    X, q = _bank()
    mem = LSRMemory(X, radius=0.8)

    def edit(t: int, T: int) -> None:
        if t == 2:
            X[7, 1] += 1e-9

    with pytest.raises(BankMutatedError, match="fingerprint mismatch"):
        private_retrieve(mem, q, progress=edit, **KW)
