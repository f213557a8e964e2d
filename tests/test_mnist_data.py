"""MNIST data loading, splitting, PCA, query corruption and the quick VAE feature pipeline."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pytest

from brace.experiments import mnist_data as md
from brace.experiments.mnist_data import (
    IMAGES_FILE,
    LABELS_FILE,
    corrupt_queries,
    find_mnist_dir,
    fit_pca_2d,
    load_mnist_test,
    read_idx,
    split_indices,
)


@pytest.fixture(scope="module")
def mnist(mnist_dir):
    return mnist_dir, load_mnist_test(mnist_dir)


@pytest.fixture()
def no_env(monkeypatch):
    monkeypatch.delenv(md.ENV_VAR, raising=False)


# --------------------------------------------------------------------------- loading


def test_loads_with_checksums(mnist):
    _, (images, labels) = mnist
    assert images.shape == (10_000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (10_000,) and labels.dtype == np.uint8
    counts = np.bincount(labels, minlength=10)
    assert counts.sum() == 10_000 and counts.size == 10 and counts.min() > 800
    # Well-known class counts of the MNIST test split: a check of the parsing.
    assert counts.tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert images.max() == 255 and images.min() == 0


def test_plain_copy_verifies_too(mnist, tmp_path):
    d, (images, labels) = mnist
    for stem in (IMAGES_FILE, LABELS_FILE):
        with gzip.open(d / f"{stem}.gz", "rb") as src:
            (tmp_path / stem).write_bytes(src.read())
    im2, lb2 = load_mnist_test(tmp_path)
    assert np.array_equal(im2, images) and np.array_equal(lb2, labels)


def _copy(d, tmp_path):
    for stem in (IMAGES_FILE, LABELS_FILE):
        shutil.copy(d / f"{stem}.gz", tmp_path / f"{stem}.gz")


def test_truncated_gzip_raises_clear_error(mnist, tmp_path):
    d, _ = mnist
    _copy(d, tmp_path)
    p = tmp_path / f"{LABELS_FILE}.gz"
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="corrupt or truncated gzip"):
        load_mnist_test(tmp_path)


def test_truncated_idx_payload_raises(mnist, tmp_path):
    d, _ = mnist
    with gzip.open(d / f"{LABELS_FILE}.gz", "rb") as src:
        payload = src.read()
    for stem in (IMAGES_FILE, LABELS_FILE):
        shutil.copy(d / f"{stem}.gz", tmp_path / f"{stem}.gz")
    (tmp_path / f"{LABELS_FILE}.gz").write_bytes(gzip.compress(payload[:-10]))
    with pytest.raises(ValueError, match="truncated"):
        load_mnist_test(tmp_path, verify=False)
    with pytest.raises(ValueError, match="truncated"):
        read_idx(tmp_path / f"{LABELS_FILE}.gz")


def test_flipped_byte_fails_checksum(mnist, tmp_path):
    d, (_, labels) = mnist
    _copy(d, tmp_path)
    with gzip.open(d / f"{LABELS_FILE}.gz", "rb") as src:
        payload = bytearray(src.read())
    payload[100] = (payload[100] + 1) % 10  # still a valid label, wrong data
    (tmp_path / f"{LABELS_FILE}.gz").write_bytes(gzip.compress(bytes(payload)))
    with pytest.raises(ValueError) as info:
        load_mnist_test(tmp_path)
    msg = str(info.value)
    assert "checksum mismatch" in msg and LABELS_FILE in msg
    assert md.CHECKSUMS[LABELS_FILE].sha256 in msg
    # verify=False loads the altered data.
    _, lb = load_mnist_test(tmp_path, verify=False)
    assert int(np.sum(lb != labels)) == 1


def test_bad_magic_raises(tmp_path):
    p = tmp_path / "x-idx1-ubyte"
    p.write_bytes(b"\x01\x02\x08\x01" + b"\x00" * 8)
    with pytest.raises(ValueError, match="bad magic number"):
        read_idx(p)


def test_read_idx_roundtrip_other_dtype(tmp_path):
    a = np.arange(6, dtype=">i4").reshape(2, 3)
    p = tmp_path / "a.idx"
    p.write_bytes(b"\x00\x00\x0c\x02" + np.array([2, 3], ">u4").tobytes() + a.tobytes())
    out = read_idx(p)
    assert out.dtype == np.int32 and np.array_equal(out, a)


# --------------------------------------------------------------------------- locating


def test_missing_dir_message(tmp_path, no_env):
    with pytest.raises(FileNotFoundError) as info:
        find_mnist_dir(tmp_path / "nope")
    msg = str(info.value)
    assert "--data-dir" in msg and md.ENV_VAR in msg and "nope" in msg
    assert f"{IMAGES_FILE}.gz" in msg and f"{LABELS_FILE}.gz" in msg


def test_env_var_is_used_and_checked(tmp_path, monkeypatch):
    monkeypatch.setenv(md.ENV_VAR, str(tmp_path))
    with pytest.raises(FileNotFoundError, match=md.ENV_VAR):
        find_mnist_dir()
    (tmp_path / IMAGES_FILE).write_bytes(b"")
    (tmp_path / f"{LABELS_FILE}.gz").write_bytes(b"")
    assert find_mnist_dir() == tmp_path.resolve()


def test_no_directory_given_is_a_clear_error(no_env):
    with pytest.raises(FileNotFoundError) as info:
        find_mnist_dir()
    msg = str(info.value)
    assert "--data-dir" in msg and md.ENV_VAR in msg and "data_dir=None" in msg


# --------------------------------------------------------------------------- splitting


def test_split_disjoint_seeded_reproducible():
    s = split_indices(10_000, seed=7)
    sizes = {k: v.size for k, v in s.items()}
    assert sizes == {"bank": 1000, "dev": 128, "test": 256, "train": 10_000 - 1384}
    allidx = np.concatenate([s["bank"], s["dev"], s["test"], s["train"]])
    assert np.array_equal(np.sort(allidx), np.arange(10_000))
    again = split_indices(10_000, seed=7)
    assert all(np.array_equal(s[k], again[k]) for k in s)
    other = split_indices(10_000, seed=8)
    assert not np.array_equal(s["bank"], other["bank"])
    with pytest.raises(ValueError, match="exceeds"):
        split_indices(100, seed=0)


# --------------------------------------------------------------------------- PCA, queries


def test_pca_roundtrip_synthetic():
    rng = np.random.default_rng(3)
    basis = np.linalg.qr(rng.standard_normal((10, 2)))[0].T  # (2, 10) orthonormal rows
    coef = rng.standard_normal((500, 2)) * np.array([5.0, 1.0])
    Z = coef @ basis + rng.standard_normal(10)
    pca = fit_pca_2d(Z)
    assert pca.components_.shape == (2, 10) and pca.mean_.shape == (10,)
    assert np.allclose(pca.components_ @ pca.components_.T, np.eye(2))
    assert np.allclose(pca.inverse_transform(pca.transform(Z)), Z)
    assert np.isclose(pca.explained_variance_ratio_.sum(), 1.0)
    assert pca.explained_variance_ratio_[0] > pca.explained_variance_ratio_[1]
    # Features are uncorrelated with variances in decreasing order (no whitening).
    cov = np.cov(pca.transform(Z).T)
    assert abs(cov[0, 1]) < 1e-8 and cov[0, 0] > cov[1, 1] > 0.5
    F = rng.standard_normal((7, 2))
    assert np.allclose(pca.transform(pca.inverse_transform(F)), F)
    # Signs are deterministic: refitting on permuted rows gives the same axes.
    pca2 = fit_pca_2d(Z[rng.permutation(500)])
    assert np.allclose(pca2.components_, pca.components_)
    with pytest.raises(ValueError, match="zero variance"):
        fit_pca_2d(np.ones((5, 3)))


def test_corrupt_queries_variance():
    X = np.zeros((200_000, 2)) + np.array([1.0, -2.0])
    Q = corrupt_queries(X, seed=11)
    var = (Q - X).var(axis=0)
    assert np.all(np.abs(var / 9.0 - 1.0) < 0.1), var
    assert np.allclose((Q - X).mean(axis=0), 0.0, atol=0.05)
    assert np.array_equal(Q, corrupt_queries(X, seed=11))
    assert np.array_equal(corrupt_queries(X, scale=0.0, seed=1), X)


# --------------------------------------------------------------------------- VAE pipeline


def test_vae_config_hash_stable():
    pytest.importorskip("torch")
    from brace.experiments.vae import QUICK_CONFIG, VAEConfig, kl_weight

    a, b = VAEConfig(), VAEConfig()
    assert a.config_hash({"s": 1}) == b.config_hash({"s": 1})
    assert a.config_hash({"s": 1}) != a.config_hash({"s": 2})
    assert a.config_hash() != QUICK_CONFIG.config_hash()
    assert len(a.config_hash()) == 64
    assert [kl_weight(e) for e in (1, 2, 3, 4)] == [1 / 3, 2 / 3, 1.0, 1.0]
    with pytest.raises(ValueError):
        VAEConfig(epochs=0)


def test_quick_features_end_to_end(mnist, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from brace.experiments import vae as vae_mod

    d, (images, labels) = mnist
    cache = tmp_path / "cache"
    f = vae_mod.build_features(d, quick=True, cache_dir=cache)
    assert f.bank.shape == (1000, 2) and f.dev.shape == (128, 2) and f.test.shape == (256, 2)
    for a in (f.bank, f.dev, f.test):
        assert a.dtype == np.float64 and np.all(np.isfinite(a))
    assert f.test_images.shape == (256, 28, 28) and f.test_images.dtype == np.uint8
    assert np.array_equal(f.test_images, images[f.indices["test"]])
    assert np.array_equal(f.bank_labels, labels[f.indices["bank"]])
    assert f.pca.components_.shape == (2, 10)
    # Features are not degenerate (both PCA axes carry spread).
    assert np.all(f.bank.std(axis=0) > 0)
    recon = f.decode_features(f.test[:5])
    assert recon.shape == (5, 28, 28) and recon.min() >= 0.0 and recon.max() <= 1.0

    # One cache file, atomically written: no temporary files left behind.
    files = sorted(p.name for p in cache.iterdir())
    assert files == [f"vae-{f.config_hash}.pt"]

    # Second call loads the cached model (training would fail) and gives identical features.
    def boom(*args, **kwargs):
        raise AssertionError("train_vae called although a cache entry exists")

    monkeypatch.setattr(vae_mod, "train_vae", boom)
    g = vae_mod.build_features(d, quick=True, cache_dir=cache)
    assert g.config_hash == f.config_hash
    for name in ("bank", "dev", "test"):
        assert np.array_equal(getattr(f, name), getattr(g, name))
    assert g.model.history == f.model.history
    assert sorted(p.name for p in cache.iterdir()) == files


def test_training_is_reproducible_and_leaves_torch_rng_alone():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from brace.experiments.vae import VAEConfig, encode_means, train_vae

    rng = np.random.default_rng(0)
    x = (rng.random((64, 784)) < 0.2).astype(np.float32)
    cfg = VAEConfig(hidden=16, epochs=2, batch_size=32, seed=5)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    m1 = train_vae(x, cfg, progress=False)
    assert torch.equal(before, torch.get_rng_state())
    m2 = train_vae(x, cfg, progress=False)
    assert np.array_equal(encode_means(m1, x), encode_means(m2, x))
    assert len(m1.history) == 2 and m1.history[0]["kl_weight"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        train_vae(x * 255.0, cfg, progress=False)


def test_corrupt_cache_entry_is_retrained(tmp_path):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from brace.experiments.vae import VAEConfig, encode_means, load_or_train_vae

    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, size=(40, 28, 28), dtype=np.uint8)
    cfg = VAEConfig(hidden=8, epochs=1, batch_size=16)
    m1 = load_or_train_vae(x, cfg, tmp_path, progress=False)
    path = tmp_path / f"vae-{m1.config_hash}.pt"
    path.write_bytes(b"garbage")
    with pytest.warns(RuntimeWarning, match="unusable VAE cache entry"):
        m2 = load_or_train_vae(x, cfg, tmp_path, progress=False)
    assert np.array_equal(encode_means(m1, x), encode_means(m2, x))
    m3 = load_or_train_vae(x, cfg, tmp_path, progress=False)  # loads the rewritten entry
    assert np.array_equal(encode_means(m1, x), encode_means(m3, x))
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
