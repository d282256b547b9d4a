"""The IBP paper's sensitivity studies, redone on our data with libibp.

Each study trains a codec with fixed options through ``ibp.train``
(``ibp_codec_train``: chunk, threshold, sample, clusters given explicitly,
seed fixed),
encodes every row of the data set and counts what decoding needs: encoded
rows + one flags byte per row (+ one cluster id per row when k > 1) + the
Mask and Bitval (and Xval, when the codec uses one) of every cluster. Savings = 1 - that / raw bytes.

Paper shapes reproduced (paper: /work/shared/papers/002_*.txt):

* Fig. 12 (:func:`chunk_threshold`): chunk size x threshold T/N -> savings.
* Table 5 (:func:`sampling`): fraction of rows used for training -> ratio
  on all rows.
* Fig. 14 (:func:`clusters`): number of clusters k -> net savings
  (metadata of every cluster subtracted).

The paper layout (``ibp_paper_layout_size``) is reported beside ours in
Fig. 12 for the same masks, since the paper's numbers use it.
"""

from __future__ import annotations

import time

from measure import ibp_stored_bytes, metadata_bytes as _meta, mode_counts as _modes

CHUNKS = (1, 2, 4, 8)
THRESHOLDS = (0.70, 0.75, 0.80, 0.85, 0.90, 0.95, 1.00)
SAMPLES = (0.01, 0.05, 0.10, 0.25, 0.50, 1.00)
CLUSTERS = (1, 2, 4, 8, 16, 32, 64)
SEED = 0x1B9


def _size(ibp, rows, **opts):
    """ibp.train with ``opts`` (nthreads 0), encode all rows; return a dict."""
    t0 = time.perf_counter()
    with ibp.train(rows, seed=SEED, nthreads=0, **opts) as codec:
        t1 = time.perf_counter()
        enc = codec.encode(rows, nthreads=0)
        total, parts = ibp_stored_bytes(codec, enc)
        back = codec.decode(enc, nthreads=0)
        ok = bool((back == rows).all())
        out = dict(total=total, parts=parts, raw=int(rows.nbytes), verified=ok,
                   train_s=t1 - t0, modes=_modes(enc), chunk=codec.chunk,
                   threshold=codec.threshold, k=codec.nclusters)
        out["savings"] = 100.0 * (1.0 - total / out["raw"])
        out["ratio"] = out["raw"] / total
        out["xval"] = codec.has_xval
        if opts.get("clusters", 1) == 1:
            paper = codec.paper_layout_size(rows)
            # same extras as ours, less the Xval the paper's layout has no use for
            extra = parts["flags"] + _meta(codec, with_xval=False)
            out["paper_savings"] = 100.0 * (1.0 - (paper + extra) / out["raw"])
    return out


def chunk_threshold(lib, ds, chunks=CHUNKS, thresholds=THRESHOLDS) -> dict:
    """Fig. 12: {(chunk, T): result} with sample 1.0 and one cluster."""
    res = {}
    for c in chunks:
        for t in thresholds:
            res[(c, t)] = _try(lambda: _size(lib, ds.rows, chunk=c, threshold=t,
                                             sample=1.0, clusters=1))
    return res


def sampling(lib, ds, samples=SAMPLES, chunk=4, threshold=0.80) -> dict:
    """Table 5: {fraction: result}, fixed chunk / threshold, one cluster."""
    return {s: _try(lambda: _size(lib, ds.rows, chunk=chunk, threshold=threshold,
                                  sample=s, clusters=1)) for s in samples}


def clusters(lib, ds, ks=CLUSTERS, chunk=4, threshold=0.80) -> dict:
    """Fig. 14: {k: result} with sample 1.0, fixed chunk / threshold."""
    return {k: _try(lambda: _size(lib, ds.rows, chunk=chunk, threshold=threshold,
                                  sample=1.0, clusters=k)) for k in ks if k <= max(1, ds.nrows)}


def _try(fn):
    """Run one study point; an ibp.Error becomes {'error': text}."""
    try:
        return fn()
    except Exception as e:  # keep the study going, show the failure in the table
        return {"error": f"{type(e).__name__}: {e}"}
