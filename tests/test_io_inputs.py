"""Input files (.npy, .npz, .csv) and strict JSON output (brace._io)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from brace._io import check_output_path, dumps_strict, load_npy, write_json


def test_csv_bank_is_read_as_float64(tmp_path):
    p = tmp_path / "bank.csv"
    p.write_text("# two memories\n1,2.5\n-3,4e-1\n\n")
    arr = load_npy(p, "bank")
    assert arr.dtype == np.float64
    np.testing.assert_array_equal(arr, [[1.0, 2.5], [-3.0, 0.4]])


@pytest.mark.parametrize(
    ("text", "match"),
    [("x,y\n1,2\n", "line 1: not a comma-separated list of numbers"),
     ("1,2\n3\n", "different lengths"), ("# nothing\n", "holds no rows")],
)
def test_bad_csv_is_a_clear_error(tmp_path, text, match):
    p = tmp_path / "bank.csv"
    p.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_npy(p, "bank")


def test_a_text_file_named_npy_is_said_not_to_be_npy(tmp_path):
    p = tmp_path / "bank.npy"
    p.write_text("1,2\n3,4\n")
    with pytest.raises(ValueError, match=r"bank file .* is not a \.npy or \.npz file.*\.csv"):
        load_npy(p, "bank")


def test_npy_and_single_array_npz(tmp_path):
    a = np.arange(6.0).reshape(3, 2)
    np.save(tmp_path / "a.npy", a)
    np.savez(tmp_path / "a.npz", x=a)
    np.testing.assert_array_equal(load_npy(tmp_path / "a.npy", "bank"), a)
    np.testing.assert_array_equal(load_npy(tmp_path / "a.npz", "bank"), a)


def test_json_output_is_strict_with_reasons(tmp_path):
    obj = {"sd": float("nan"), "eps": math.inf, "ok": 1.5, "arr": np.array([1.0, np.nan]),
           "n": np.float64("nan"), "nested": [{"v": float("nan")}],
           "given": float("nan"), "given_null_reason": "fewer than 2 memories"}
    text = dumps_strict(obj)
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert doc["sd"] is None and doc["sd_null_reason"] == "undefined (NaN)"
    assert doc["eps"] is None and doc["eps_null_reason"] == "infinite"
    assert doc["arr"] == [1.0, None] and doc["n"] is None and doc["ok"] == 1.5
    assert "NaN" in doc["arr_null_reason"] and "ok_null_reason" not in doc
    assert doc["nested"] == [{"v": None, "v_null_reason": "undefined (NaN)"}]
    assert doc["given_null_reason"] == "fewer than 2 memories"
    p = write_json(tmp_path / "o.json", obj)
    json.loads(p.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))


def test_output_path_checks(tmp_path):
    bank = tmp_path / "bank.npy"
    np.save(bank, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="same file as --bank"):
        check_output_path(bank, inputs={"--bank": bank})
    with pytest.raises(ValueError, match="same file as --bank"):
        check_output_path(tmp_path / "." / "bank.npy", inputs={"--bank": str(bank)})
    with pytest.raises(ValueError, match="already exists; pass --overwrite"):
        check_output_path(bank, inputs={"--queries": tmp_path / "q.npy"})
    assert check_output_path(bank, overwrite=True) == bank
    with pytest.raises(ValueError, match=r"must end in \.npz or \.json"):
        check_output_path(tmp_path / "o.txt", suffixes=(".npz", ".json"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_output_path(tmp_path / "no" / "o.npz")
    assert check_output_path(tmp_path / "new.npz", suffixes=(".npz",)).name == "new.npz"
