"""Loading the benchmark data sets (.npy rows) for bench/compare.py.

A data set is a 2-D (or higher; trailing axes are flattened) .npy array whose
first axis indexes rows. bfloat16 is stored as ``uint16`` bit patterns: a
file is taken as bf16 when ``manifest.json`` beside it says ``"encodes":
"bfloat16"`` or, without a manifest, when its name contains ``bf16``.

Each data set gets a class (embedding table, KV cache, ...) from the
manifest's ``group`` or, failing that, from its name, for the per-class
plots and the paper-style summary.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Files that are not tensor rows (graph structure, labels, token ids).
DEFAULT_EXCLUDE = ("*edges*", "*labels*", "*token_ids*")

#: (name pattern, class) in priority order; the first match wins.
NAME_CLASSES = (
    ("*bow*", "sparse GNN features"),
    ("*pca*", "dense GNN features"),
    ("*tok_emb*", "embedding table"),
    ("*emb*", "embedding table"),
    ("*kv*", "LLM KV cache"),
    ("*linear*", "LLM weights"),
    ("*weight*", "LLM weights"),
    ("gauss*", "controls"),
    ("random*", "controls"),
    ("synthetic*", "synthetic"),
)

DTYPE_LABELS = {
    "float32": "f32", "float16": "f16", "float64": "f64", "uint8": "u8", "int8": "i8",
    "uint16": "u16", "int16": "i16", "uint32": "u32", "int32": "i32", "uint64": "u64",
    "int64": "i64", "bool": "bool",
}


@dataclass
class Dataset:
    """Rows of one data set, possibly a subset of the file's rows."""

    name: str
    path: Path | None
    cls: str
    dtype: str            # f32, bf16, f16, u8, ...
    elem_bytes: int
    rows: np.ndarray      # uint8 (nrows, row_bytes), C-contiguous
    file_rows: int        # rows in the file (rows.shape[0] may be fewer)

    @property
    def nrows(self) -> int:
        return int(self.rows.shape[0])

    @property
    def row_bytes(self) -> int:
        return int(self.rows.shape[1])

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes)

    def describe(self) -> str:
        sub = "" if self.nrows == self.file_rows else f" (subset of {self.file_rows})"
        return f"{self.name}: {self.nrows}{sub} rows x {self.row_bytes} B, {self.dtype}, {self.cls}"


def read_manifest(folder: Path) -> dict:
    """``manifest.json``'s ``files`` map in ``folder``, or {} when absent."""
    p = Path(folder) / "manifest.json"
    if not p.is_file():
        return {}
    try:
        return json.loads(p.read_text()).get("files", {})
    except (OSError, ValueError):
        return {}


def classify(name: str, group: str | None) -> str:
    """Data set class from the manifest group, else from the file name."""
    for pat, cls in NAME_CLASSES:
        if fnmatch.fnmatch(name, pat):
            return cls
    groups = {"embedding": "embedding table", "weights": "LLM weights", "kv": "LLM KV cache",
              "gnn": "GNN features", "controls": "controls"}
    return groups.get(group or "", "other")


def dtype_label(arr: np.ndarray, name: str, entry: dict) -> str:
    """Short element type; uint16 files that encode bfloat16 give 'bf16'."""
    if arr.dtype == np.uint16 and (entry.get("encodes") == "bfloat16" or
                                   (not entry and "bf16" in name)):
        return "bf16"
    return DTYPE_LABELS.get(str(arr.dtype), str(arr.dtype))


def find_files(paths: list[str], exclude=DEFAULT_EXCLUDE, include=None) -> list[Path]:
    """Expand directories (their *.npy, not recursive) and filter by name."""
    out = []
    for p in map(Path, paths):
        files = sorted(p.glob("*.npy")) if p.is_dir() else [p]
        for f in files:
            if any(fnmatch.fnmatch(f.name, e) for e in exclude):
                continue
            if include and not any(fnmatch.fnmatch(f.name, i) for i in include):
                continue
            out.append(f)
    return out


def load(path: Path, max_bytes: int = 0, seed: int = 0) -> Dataset | str:
    """Load ``path`` as rows; returns a Dataset or a string saying why not.

    With ``max_bytes`` > 0 and a larger file, a deterministic random subset of
    rows (sorted, seed ``seed``) that fits in ``max_bytes`` is taken.
    """
    path = Path(path)
    manifest = read_manifest(path.parent)
    entry = manifest.get(path.name, {})
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as e:  # corrupt or unsupported file
        return f"cannot load: {e}"
    if arr.ndim < 2:
        return f"skipped: {arr.ndim}-D array, no rows"
    if arr.dtype.byteorder == ">" or not (arr.flags.c_contiguous):
        arr = np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<")))
    name = path.stem
    n = int(arr.shape[0])
    row_bytes = int(arr.nbytes // max(n, 1))
    if n == 0 or row_bytes == 0:
        return "skipped: empty"
    take = n
    if max_bytes and arr.nbytes > max_bytes:
        take = max(1, max_bytes // row_bytes)
    if take < n:
        idx = np.sort(np.random.default_rng(seed).choice(n, size=take, replace=False))
        sel = np.asarray(arr[idx])
    else:
        sel = np.asarray(arr)
    rows = np.ascontiguousarray(sel).view(np.uint8).reshape(sel.shape[0], -1).copy()
    return Dataset(name=name, path=path, cls=classify(name, entry.get("group")),
                   dtype=dtype_label(arr, name, entry), elem_bytes=int(arr.dtype.itemsize),
                   rows=rows, file_rows=n)


def synthetic(kind: str, nrows: int, width: int, seed: int = 7) -> Dataset:
    """Synthetic controls for the Fig. 14 study.

    ``mixed_scale``: float32 rows whose scale changes from row to row (the
    case clustering is for, like the paper's asteroid rows); ``normal``:
    int32 round(N(10000, 1000)) (positive, so the high bits do not flip with
    the sign); ``uniform``: int32 uniform over all values.
    """
    rng = np.random.default_rng(seed)
    if kind == "mixed_scale":
        # Rows of float32 N(0, s) with s drawn per row from 8 scales 1e-3..1e4:
        # bits are invariant within a scale, not across them (local invariance).
        scales = 10.0 ** rng.integers(-3, 5, size=(nrows, 1))
        vals = (rng.standard_normal((nrows, width)) * scales).astype(np.float32)
        rows = vals.view(np.uint8).reshape(nrows, -1).copy()
        return Dataset(name="synthetic_mixed_scale_f32", path=None, cls="synthetic", dtype="f32",
                       elem_bytes=4, rows=rows, file_rows=nrows)
    if kind == "normal":
        vals = np.rint(rng.normal(10000.0, 1000.0, size=(nrows, width))).astype(np.int32)
    elif kind == "uniform":
        vals = rng.integers(np.iinfo(np.int32).min, np.iinfo(np.int32).max, size=(nrows, width),
                            dtype=np.int32, endpoint=True)
    else:
        raise ValueError(kind)
    rows = vals.view(np.uint8).reshape(nrows, -1).copy()
    return Dataset(name=f"synthetic_{kind}_i32", path=None, cls="synthetic", dtype="i32",
                   elem_bytes=4, rows=rows, file_rows=nrows)
