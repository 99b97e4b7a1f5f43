"""Reading (and writing) MNIST-format IDX files, and the paper's three-way split.

The IDX format (LeCun et al., http://yann.lecun.com/exdb/mnist/) is a 4-byte magic number
``0x00 0x00 <type code> <ndim>``, then ``ndim`` big-endian uint32 dimension sizes, then the
values in row-major order. MNIST and Fashion-MNIST ship four such files, usually gzipped:

``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
``t10k-labels-idx1-ubyte``.

Everything here is NumPy only (no torch), so it is cheap to import.
"""

from __future__ import annotations

import gzip
import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError, ParameterError

__all__ = [
    "read_idx",
    "write_idx",
    "find_idx_file",
    "MnistData",
    "load_mnist",
    "split_train_test1",
]

#: IDX type codes -> big-endian NumPy dtypes (the format's own table).
_IDX_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read IDX file {str(path)!r}: {exc.strerror or exc}") from None
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataError(
                f"IDX file {str(path)!r} starts like gzip but does not decompress ({exc}); "
                "the download is probably truncated: fetch it again"
            ) from None
    return raw


def read_idx(path) -> np.ndarray:
    """Read one IDX file (plain or gzipped; detected from its first bytes).

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    ndarray
        Shape given by the file's dimensions, native byte order (uint8 for MNIST images and
        labels).

    Raises
    ------
    DataError
        For an unreadable, truncated or malformed file; the message names the file, what was
        expected and what was found.
    """
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise DataError(
            f"IDX file {str(path)!r} has {len(raw)} bytes; expected at least a 4-byte "
            "magic number"
        )
    zero, type_code, ndim = raw[:2], raw[2], raw[3]
    if zero != b"\x00\x00" or type_code not in _IDX_TYPES or ndim == 0:
        raise DataError(
            f"IDX file {str(path)!r} has magic number 0x{raw[:4].hex()}; expected 0x0000TTNN "
            f"(TT a type code in {sorted(f'{t:02x}' for t in _IDX_TYPES)}, NN >= 1 dimensions)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(
            f"IDX file {str(path)!r} is truncated in its header: expected {header} bytes for "
            f"{ndim} dimensions, found {len(raw)}"
        )
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = _IDX_TYPES[type_code]
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    found = len(raw) - header
    if found != expected:
        raise DataError(
            f"IDX file {str(path)!r} declares shape {tuple(dims)} ({expected} data bytes) "
            f"but holds {found} data bytes; the file is truncated or not an IDX file"
        )
    arr = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="), copy=True)


def write_idx(path, array, *, compress: bool | None = None) -> Path:
    """Write ``array`` as an IDX file (gzipped when ``compress`` or the name ends in .gz).

    Used by the tests to make synthetic MNIST-format data; handy for any image set one wants
    to push through the experiment.
    """
    path = Path(path)
    arr = np.asarray(array)
    codes = {v.newbyteorder("="): k for k, v in _IDX_TYPES.items()}
    native = arr.dtype.newbyteorder("=")
    if native not in codes:
        raise ParameterError(
            f"write_idx: dtype {arr.dtype} has no IDX type code; use uint8, int8, int16, "
            "int32, float32 or float64"
        )
    if arr.ndim == 0 or arr.ndim > 255:
        raise ParameterError(f"write_idx: array must have 1 to 255 dimensions, has {arr.ndim}")
    head = bytes([0, 0, codes[native], arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    body = head + arr.astype(_IDX_TYPES[codes[native]], copy=False).tobytes()
    if compress is None:
        compress = path.suffix == ".gz"
    path.write_bytes(gzip.compress(body, mtime=0) if compress else body)
    return path


def find_idx_file(data_dir, stem: str) -> Path:
    """The file for ``stem`` (e.g. ``"train-images-idx3-ubyte"``) in ``data_dir``.

    Accepts the plain and gzipped names and the ``train-images.idx3-ubyte`` spelling some
    mirrors use.
    """
    d = Path(data_dir)
    alt = stem.replace("-idx", ".idx")
    candidates = [d / n for base in (stem, alt) for n in (base, base + ".gz")]
    for c in candidates:
        if c.is_file():
            return c
    if not d.is_dir():
        raise DataError(
            f"data directory {str(d)!r} does not exist; pass --data-dir with the four "
            "MNIST-format IDX files (on Debian: apt-get install dataset-fashion-mnist, "
            "files in /usr/share/datasets/fashion-mnist)"
        )
    raise DataError(
        f"no {stem}[.gz] in {str(d)!r}; the directory must hold train-images-idx3-ubyte, "
        "train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte "
        "(gzipped or not)"
    )


@dataclass(frozen=True, eq=False)
class MnistData:
    """The four MNIST-format arrays of a data directory.

    Attributes
    ----------
    train_images : ndarray of uint8, shape (n_train, rows, cols)
    train_labels : ndarray of uint8, shape (n_train,)
    test_images : ndarray of uint8, shape (n_test, rows, cols)
    test_labels : ndarray of uint8, shape (n_test,)
    source : str
        The directory they came from.
    """

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    source: str

    @property
    def n_classes(self) -> int:
        """Number of classes: largest label + 1 (10 for MNIST)."""
        return int(max(self.train_labels.max(), self.test_labels.max())) + 1

    def fingerprint(self) -> str:
        """SHA-256 (first 16 hex digits) of all four arrays: names the cache."""
        h = hashlib.sha256()
        for a in (self.train_images, self.train_labels, self.test_images, self.test_labels):
            h.update(str(a.shape).encode())
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()[:16]


def _check_pair(
    images: np.ndarray, labels: np.ndarray, img_path: Path, lab_path: Path
) -> None:
    if images.ndim != 3:
        raise DataError(
            f"IDX file {str(img_path)!r} holds an array of shape {images.shape}; expected "
            "images (n, rows, cols)"
        )
    if labels.ndim != 1:
        raise DataError(
            f"IDX file {str(lab_path)!r} holds an array of shape {labels.shape}; expected "
            "labels (n,)"
        )
    if images.dtype != np.uint8 or labels.dtype != np.uint8:
        raise DataError(
            f"IDX files {str(img_path)!r} / {str(lab_path)!r} hold {images.dtype} / "
            f"{labels.dtype}; expected unsigned bytes (type code 0x08) as in MNIST"
        )
    if images.shape[0] != labels.shape[0]:
        raise DataError(
            f"{str(img_path)!r} has {images.shape[0]} images but {str(lab_path)!r} has "
            f"{labels.shape[0]} labels; they must match one for one"
        )


def load_mnist(data_dir) -> MnistData:
    """Read the four MNIST-format IDX files of ``data_dir`` and check them.

    Raises
    ------
    DataError
        When a file is missing or malformed, or images and labels disagree.
    """
    paths = {
        key: find_idx_file(data_dir, stem)
        for key, stem in (
            ("train_images", "train-images-idx3-ubyte"),
            ("train_labels", "train-labels-idx1-ubyte"),
            ("test_images", "t10k-images-idx3-ubyte"),
            ("test_labels", "t10k-labels-idx1-ubyte"),
        )
    }
    arrays = {k: read_idx(p) for k, p in paths.items()}
    _check_pair(
        arrays["train_images"],
        arrays["train_labels"],
        paths["train_images"],
        paths["train_labels"],
    )
    _check_pair(
        arrays["test_images"],
        arrays["test_labels"],
        paths["test_images"],
        paths["test_labels"],
    )
    if arrays["train_images"].shape[1:] != arrays["test_images"].shape[1:]:
        raise DataError(
            f"training images are {arrays['train_images'].shape[1:]} but test images are "
            f"{arrays['test_images'].shape[1:]}; both must have the same size"
        )
    return MnistData(**arrays, source=str(Path(data_dir)))


def split_train_test1(n_train_total: int, n_test1: int, seed) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of the official training images into training set and test set 1.

    The paper splits MNIST's 60,000 training images into 50,000 for training and 10,000 for
    "test set 1"; the official 10,000 test images are "test set 2".

    Parameters
    ----------
    n_train_total : int
        Number of official training images.
    n_test1 : int
        Size of test set 1.
    seed : int or numpy.random.SeedSequence

    Returns
    -------
    train_index, test1_index : ndarray of int64
        Disjoint, each sorted, together covering ``range(n_train_total)``.
    """
    if not 0 < n_test1 < n_train_total:
        raise ParameterError(
            f"test set 1 size must be between 1 and {n_train_total - 1} (the training "
            f"images), got {n_test1}"
        )
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n_train_total)
    return np.sort(perm[n_test1:]).astype(np.int64), np.sort(perm[:n_test1]).astype(np.int64)
