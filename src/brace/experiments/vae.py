"""The MNIST VAE and the 2-D feature pipeline of the MNIST experiment (``docs/spec.md`` §7).

VAE: encoder 784-400-(10 mean, 10 log-variance), decoder 10-400-784 with a sigmoid output,
ReLU hidden layers; Adam (lr 1e-3), batch 256, 15 epochs; loss per image = binary
cross-entropy summed over pixels + w_e * KL(q(z|x) || N(0, I)) with KL weight
``w_e = min(1, e/3)`` at (1-based) epoch ``e``; pixels scaled by 1/255; seed 20271006.

Features: PCA (no whitening) of the VAE posterior means, fitted on the *training*
posterior means; bank, dev and test images are mapped through the same encoder and PCA.

Randomness: one :class:`numpy.random.Generator` from ``check_rng(config.seed)`` drives
everything. It draws the torch seeds for weight initialisation (applied inside
:func:`torch.random.fork_rng`, so torch's global state is left untouched) and for the
reparameterisation noise (a private :class:`torch.Generator`), and it shuffles the
mini-batches. Results are reproducible for a fixed torch build and thread count.

Requires the ``mnist`` extra (torch); ``tqdm`` (``experiments`` extra) is optional.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from brace._validation import (
    as_float_array,
    check_int_at_least,
    check_positive,
    check_rng,
)
from brace.experiments.mnist_data import (
    PCA2D,
    corrupt_queries,
    fit_pca_2d,
    load_mnist_test,
    split_indices,
)

from .._io import atomic_write_bytes

__all__ = [
    "PAPER_SEED",
    "VAEConfig",
    "QUICK_CONFIG",
    "VAE",
    "kl_weight",
    "train_vae",
    "load_or_train_vae",
    "default_cache_dir",
    "encode_means",
    "decode",
    "MnistFeatures",
    "build_features",
    # re-exported from mnist_data (numpy only) for convenience
    "PCA2D",
    "fit_pca_2d",
    "corrupt_queries",
]

PAPER_SEED = 20271006
N_PIXELS = 28 * 28

# Bump when the model, loss, schedule or cache layout changes: it enters every cache key.
_FORMAT = (
    "brace-mnist-vae/1: relu mlp 784-h-(z,z) / z-h-784 sigmoid; "
    "loss bce(sum over pixels) + min(1, e/3) * kl, mean over batch; adam; pixels/255"
)


@dataclass(frozen=True)
class VAEConfig:
    """Hyper-parameters of the VAE (defaults: the paper's, ``docs/spec.md`` §7).

    ``n_train=None`` trains on every image passed; an int uses the first ``n_train``.
    """

    latent: int = 10
    hidden: int = 400
    epochs: int = 15
    batch_size: int = 256
    lr: float = 1e-3
    seed: int = PAPER_SEED
    n_train: int | None = None

    def __post_init__(self) -> None:
        check_int_at_least("latent", self.latent, 2)
        check_int_at_least("hidden", self.hidden, 1)
        check_int_at_least("epochs", self.epochs, 1)
        check_int_at_least("batch_size", self.batch_size, 1)
        check_positive("lr", self.lr)
        check_int_at_least("seed", self.seed, 0)
        if self.n_train is not None:
            check_int_at_least("n_train", self.n_train, 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def config_hash(self, split: Mapping[str, Any] | None = None) -> str:
        """SHA-256 (hex) of the canonical JSON of this config plus a data-split description.

        ``split`` should describe exactly which images the VAE sees (e.g. split seed, sizes,
        a digest of the training images); equal inputs give equal hashes across runs.
        """
        blob = json.dumps(
            {"format": _FORMAT, "config": self.to_dict(), "split": dict(split or {})},
            sort_keys=True,
            separators=(",", ":"),
            default=str,
        )
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


#: A tiny configuration for smoke tests: the whole pipeline runs in seconds on one core.
QUICK_CONFIG = VAEConfig(hidden=64, epochs=2, n_train=2000)


def kl_weight(epoch: int) -> float:
    """KL weight ``min(1, e/3)`` at 1-based epoch ``e``: 1/3, 2/3, 1, 1, ..."""
    e = check_int_at_least("epoch", epoch, 1)
    return min(1.0, e / 3.0)


class VAE(nn.Module):
    """Gaussian-latent VAE with one ReLU hidden layer each side and Bernoulli pixels."""

    def __init__(self, latent: int = 10, hidden: int = 400, n_pixels: int = N_PIXELS):
        super().__init__()
        self.enc = nn.Linear(n_pixels, hidden)
        self.enc_mean = nn.Linear(hidden, latent)
        self.enc_logvar = nn.Linear(hidden, latent)
        self.dec_hidden = nn.Linear(latent, hidden)
        self.dec_out = nn.Linear(hidden, n_pixels)
        #: Per-epoch training record (filled by :func:`train_vae`, restored from the cache).
        self.history: list[dict[str, float]] = []
        #: Cache key set by :func:`load_or_train_vae` (None for a model it did not produce).
        self.config_hash: str | None = None

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.relu(self.enc(x))
        return self.enc_mean(h), self.enc_logvar(h)

    def decode_logits(self, z: torch.Tensor) -> torch.Tensor:
        return self.dec_out(F.relu(self.dec_hidden(z)))

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.decode_logits(z))


def _unit_pixels(name: str, images: Any) -> np.ndarray:
    """``(N, 28, 28)`` or ``(N, 784)`` images as float32 ``(N, 784)`` in [0, 1].

    uint8 input is divided by 255; real input must already lie in [0, 1].
    """
    arr = np.asarray(images)
    if arr.ndim == 3 and arr.shape[1:] == (28, 28):
        arr = arr.reshape(arr.shape[0], N_PIXELS)
    if arr.ndim != 2 or arr.shape[1] != N_PIXELS or arr.shape[0] == 0:
        raise ValueError(
            f"{name} must have shape (N, 28, 28) or (N, 784) with N >= 1; got {arr.shape}."
        )
    if arr.dtype == np.uint8:
        return (arr.astype(np.float32) / np.float32(255.0)).astype(np.float32)
    x = as_float_array(name, arr)
    lo, hi = float(x.min()), float(x.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(
            f"{name} must hold pixels in [0, 1] (or uint8 0..255); found range [{lo}, {hi}]."
        )
    return x.astype(np.float32)


def _progress_iter(n: int, enabled: bool):
    if enabled:
        try:
            from tqdm import tqdm
        except ImportError:  # tqdm is an optional extra: train silently without it
            pass
        else:
            return tqdm(range(1, n + 1), desc="VAE", unit="epoch")
    return range(1, n + 1)


def train_vae(images_float01: Any, config: VAEConfig, *, progress: bool = True) -> VAE:
    """Train the VAE on ``images_float01`` (``(N, 28, 28)`` or ``(N, 784)``, in [0, 1]).

    Uses the first ``config.n_train`` images when set. Returns the model in eval mode, with
    ``model.history`` holding per-epoch mean BCE, KL and loss per image.
    """
    if not isinstance(config, VAEConfig):
        raise TypeError(f"config must be a VAEConfig. Found {type(config).__name__}.")
    x = _unit_pixels("images_float01", images_float01)
    if config.n_train is not None:
        if config.n_train > x.shape[0]:
            raise ValueError(
                f"config.n_train = {config.n_train} exceeds the {x.shape[0]} images given."
            )
        x = x[: config.n_train]
    n = x.shape[0]
    rng = check_rng(config.seed)
    init_seed, noise_seed = (int(s) for s in rng.integers(0, 2**62, size=2))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        model = VAE(latent=config.latent, hidden=config.hidden)
    noise = torch.Generator().manual_seed(noise_seed)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    X = torch.from_numpy(x)
    model.train()
    epochs = _progress_iter(config.epochs, progress)
    for epoch in epochs:
        w = kl_weight(epoch)
        perm = torch.from_numpy(rng.permutation(n))
        sums = {"bce": 0.0, "kl": 0.0, "loss": 0.0}
        for start in range(0, n, config.batch_size):
            xb = X[perm[start : start + config.batch_size]]
            mean, logvar = model.encode(xb)
            eps = torch.randn(mean.shape, generator=noise, dtype=mean.dtype)
            z = mean + torch.exp(0.5 * logvar) * eps
            # BCE on sigmoid(logits), computed stably from the logits.
            bce = F.binary_cross_entropy_with_logits(model.decode_logits(z), xb, reduction="sum")
            kl = -0.5 * torch.sum(1.0 + logvar - mean.pow(2) - logvar.exp())
            loss = (bce + w * kl) / xb.shape[0]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sums["bce"] += bce.item()
            sums["kl"] += kl.item()
            sums["loss"] += loss.item() * xb.shape[0]
        rec = {"epoch": float(epoch), "kl_weight": w, **{k: v / n for k, v in sums.items()}}
        model.history.append(rec)
        if hasattr(epochs, "set_postfix"):
            epochs.set_postfix(bce=f"{rec['bce']:.1f}", kl=f"{rec['kl']:.2f}")
    model.eval()
    return model


def default_cache_dir() -> Path:
    """``$BRACE_CACHE_DIR`` if set, else ``~/.cache/brace``."""
    return Path(os.environ.get("BRACE_CACHE_DIR") or "~/.cache/brace").expanduser()


def _images_digest(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()


def _atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` into memory, then an atomic write (temp file + ``os.replace``)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def _load_cached(path: Path, config: VAEConfig, key: str) -> VAE:
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if payload.get("hash") != key or json.loads(payload["config_json"]) != config.to_dict():
        raise ValueError(f"{path}: cache entry does not match the requested config.")
    model = VAE(latent=config.latent, hidden=config.hidden)
    model.load_state_dict(payload["state_dict"], strict=True)
    model.history = json.loads(payload.get("history_json", "[]"))
    model.eval()
    return model


def load_or_train_vae(
    images: Any,
    config: VAEConfig,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    split: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> VAE:
    """Load the VAE for ``(images, config)`` from ``cache_dir``, training and caching it if absent.

    The cache key is :meth:`VAEConfig.config_hash` of ``split`` extended with a SHA-256 of
    the pixel array, so different data never hits the same entry. The entry
    ``cache_dir/vae-<hash>.pt`` holds the ``state_dict`` plus the config JSON and is written
    atomically. An unreadable or mismatching entry is retrained (with a warning) and replaced.
    The returned model carries the key as ``model.config_hash``.
    """
    if not isinstance(config, VAEConfig):
        raise TypeError(f"config must be a VAEConfig. Found {type(config).__name__}.")
    x = _unit_pixels("images", images)
    desc = {**dict(split or {}), "images_sha256": _images_digest(x), "n_images": x.shape[0]}
    key = config.config_hash(desc)
    cdir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    path = cdir / f"vae-{key}.pt"
    if path.is_file():
        try:
            model = _load_cached(path, config, key)
            model.config_hash = key
            return model
        except Exception as exc:  # corrupt/foreign file: retrain and overwrite
            warnings.warn(
                f"ignoring unusable VAE cache entry {path} ({type(exc).__name__}: {exc}); "
                "retraining.",
                RuntimeWarning,
                stacklevel=2,
            )
    model = train_vae(x, config, progress=progress)
    cdir.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": _FORMAT,
        "hash": key,
        "config_json": json.dumps(config.to_dict(), sort_keys=True),
        "split_json": json.dumps(desc, sort_keys=True, default=str),
        "history_json": json.dumps(model.history),
        "state_dict": model.state_dict(),
    }
    _atomic_torch_save(payload, path)
    model.config_hash = key
    return model


def encode_means(model: VAE, images: Any, *, batch_size: int = 2048) -> np.ndarray:
    """Posterior means ``E[z | x]`` of ``images`` as a float64 ``(N, latent)`` array."""
    x = _unit_pixels("images", images)
    model.eval()
    out = []
    with torch.no_grad():
        for start in range(0, x.shape[0], batch_size):
            mean, _ = model.encode(torch.from_numpy(x[start : start + batch_size]))
            out.append(mean.numpy().astype(np.float64))
    return np.concatenate(out, axis=0)


def decode(model: VAE, latents: Any) -> np.ndarray:
    """Decoded pixel means in [0, 1] of ``(N, latent)`` codes, as float64 ``(N, 28, 28)``."""
    Z = as_float_array("latents", latents)
    latent = model.enc_mean.out_features
    if Z.ndim != 2 or Z.shape[1] != latent:
        raise ValueError(f"latents must have shape (N, {latent}); got {Z.shape}.")
    model.eval()
    with torch.no_grad():
        y = model.decode(torch.from_numpy(Z.astype(np.float32)))
    return y.numpy().astype(np.float64).reshape(-1, 28, 28)


def _ro(a: np.ndarray, dtype: Any = None) -> np.ndarray:
    a = np.array(a, dtype=dtype, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class MnistFeatures:
    """2-D MNIST features for the retrieval experiment (``docs/spec.md`` §7).

    ``bank`` (1000, 2), ``dev`` (128, 2) and ``test`` (256, 2) are float64 PCA coordinates
    of VAE posterior means, the PCA fitted on the training posterior means. ``indices`` maps
    ``"bank"``/``"dev"``/``"test"``/``"train"`` to rows of the MNIST test split. Arrays are
    read-only.
    """

    bank: np.ndarray
    dev: np.ndarray
    test: np.ndarray
    bank_labels: np.ndarray
    dev_labels: np.ndarray
    test_labels: np.ndarray
    test_images: np.ndarray
    pca: PCA2D
    config: VAEConfig
    config_hash: str
    split_seed: int
    indices: Mapping[str, np.ndarray]
    model: VAE = field(repr=False)

    def decode_features(self, features: Any) -> np.ndarray:
        """Images ``(N, 28, 28)`` in [0, 1] for 2-D features: PCA inverse, then decoder."""
        return decode(self.model, self.pca.inverse_transform(features))

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary (config, hash, split sizes, PCA variance shares)."""
        return {
            "config": self.config.to_dict(),
            "config_hash": self.config_hash,
            "split_seed": self.split_seed,
            "sizes": {k: int(v.shape[0]) for k, v in self.indices.items()},
            "pca_explained_variance_ratio": [float(v) for v in self.pca.explained_variance_ratio_],
        }


def build_features(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    config: VAEConfig | None = None,
    split_seed: int = PAPER_SEED,
    cache_dir: str | os.PathLike[str] | None = None,
    quick: bool = False,
    verify: bool = True,
    progress: bool = False,
) -> MnistFeatures:
    """Load MNIST, split it, train (or load) the VAE and return the 2-D features.

    Parameters
    ----------
    data_dir : where the IDX files are (see :func:`~brace.experiments.mnist_data.find_mnist_dir`).
    config : VAE hyper-parameters; default ``VAEConfig()`` (the paper's).
    split_seed : seed of the bank/dev/test/train split (default: the paper's seed).
    cache_dir : VAE cache directory; default :func:`default_cache_dir`.
    quick : use :data:`QUICK_CONFIG` (tiny VAE, seconds on one core); cannot be combined
        with an explicit ``config``.
    verify : check the data checksums.
    progress : show a tqdm bar while training.
    """
    if quick and config is not None:
        raise ValueError("give either quick=True or an explicit config, not both.")
    cfg = QUICK_CONFIG if quick else (config if config is not None else VAEConfig())
    if not isinstance(cfg, VAEConfig):
        raise TypeError(f"config must be a VAEConfig. Found {type(cfg).__name__}.")
    split_seed = check_int_at_least("split_seed", split_seed, 0)
    images, labels = load_mnist_test(data_dir, verify=verify)
    n_bank, n_dev, n_test = 1000, 128, 256
    idx = split_indices(images.shape[0], n_bank=n_bank, n_dev=n_dev, n_test=n_test, seed=split_seed)
    split = {
        "dataset": "mnist-t10k",
        "split_seed": split_seed,
        "n_bank": n_bank,
        "n_dev": n_dev,
        "n_test": n_test,
    }
    x_train = _unit_pixels("train images", images[idx["train"]])
    model = load_or_train_vae(x_train, cfg, cache_dir, split=split, progress=progress)
    n_used = cfg.n_train if cfg.n_train is not None else x_train.shape[0]
    pca = fit_pca_2d(encode_means(model, x_train[:n_used]))

    def feats(name: str) -> np.ndarray:
        return _ro(pca.transform(encode_means(model, images[idx[name]])), np.float64)

    return MnistFeatures(
        bank=feats("bank"),
        dev=feats("dev"),
        test=feats("test"),
        bank_labels=_ro(labels[idx["bank"]]),
        dev_labels=_ro(labels[idx["dev"]]),
        test_labels=_ro(labels[idx["test"]]),
        test_images=_ro(images[idx["test"]]),
        pca=pca,
        config=cfg,
        config_hash=model.config_hash,
        split_seed=split_seed,
        indices={k: _ro(v) for k, v in idx.items()},
        model=model,
    )
