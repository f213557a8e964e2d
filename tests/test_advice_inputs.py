"""Public advice (``affordable_epsilon``, ``recommend``) refuses arguments it cannot
answer for, instead of a wrong answer (issue reproducers)."""

from __future__ import annotations

import numpy as np
import pytest

from brace import PrivateMemory

X = np.random.default_rng(0).normal(size=(200, 2))


@pytest.fixture(scope="module")
def pm():
    return PrivateMemory(X, radius=0.8, budget=(8.0, 1e-5))


def test_affordable_epsilon_refuses_a_bogus_noise_mode(pm):
    """Issue reproducer: ``noise="bogus"`` answered 0.0 (every trial plan failed)."""
    with pytest.raises(ValueError, match="noise must be 'auto', 'plain' or 'secure'; got 'bogus'"):
        pm.affordable_epsilon(X[:2], steps=1, noise="bogus")
    with pytest.raises(TypeError, match="noise must be"):
        pm.affordable_epsilon(X[:2], steps=1, noise=3)


def test_affordable_epsilon_surfaces_a_plan_that_fails_at_every_epsilon(pm):
    """A keyword no plan accepts is the plan's own error, not an answer of 0.0."""
    with pytest.raises(ValueError, match="release must be"):
        pm.affordable_epsilon(X[:2], steps=1, release="bogus")
    with pytest.raises(ValueError, match="kappa"):
        pm.affordable_epsilon(X[:2], steps=1, kappa=-1.0)
    assert pm.affordable_epsilon(X[:2], steps=1) > 0.0
    assert pm.spent == 0.0


@pytest.mark.parametrize("gate", [1e12, 201, 0.5, 0.0, -3.0])
def test_recommend_refuses_a_gate_the_bank_cannot_hold(pm, gate):
    """Issue reproducer: ``recommend(10, gate_size=1e12)`` on a 200-row bank advised a
    release from an impossible gate; the range is [1, n]."""
    with pytest.raises(ValueError, match=r"gate_size must be (in \[1, n\] = \[1, 200\]|> 0)"):
        pm.recommend(10, gate_size=gate)
    for bad, err in ((float("nan"), ValueError), ("32", TypeError)):
        with pytest.raises(err, match="gate_size"):
            pm.recommend(10, gate_size=bad)


def test_recommend_gate_defaults_to_min_32_n():
    """The default gate is 32 memories, or the whole bank when smaller; the edges of
    [1, n] are accepted and a larger gate predicts less noise."""
    small = PrivateMemory(X[:20], radius=0.8, budget=(8.0, 1e-5))
    assert small.recommend(5).step_noise == small.recommend(5, gate_size=20).step_noise
    big = PrivateMemory(X, radius=0.8, budget=(8.0, 1e-5))
    assert big.recommend(5).step_noise == big.recommend(5, gate_size=32).step_noise
    assert big.recommend(5, gate_size=200).step_noise < big.recommend(5, gate_size=1).step_noise
