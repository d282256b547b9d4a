"""A Cora-like citation-style graph from Debian's package archive.

Nodes are Debian binary packages of a few sections (the sections are the
class labels, as Cora's 7 paper topics are); node features are binary
bag-of-words vectors over the packages' English descriptions; edges are the
packages' Depends / Pre-Depends / Recommends / Suggests relations between
nodes. Like Cora (2708 nodes, 1433 words, ~1.3% ones) the features are sparse
binary rows, saved as float32 0/1 (as Cora is distributed) and as uint8. A
dense float32 version reduced by PCA (as OGB-Products' 100-d features are)
is made with numpy's SVD.

Input: the ``Packages`` and ``Translation-en`` indexes that apt keeps under
/var/lib/apt/lists for the release's main component. Long descriptions are
only there after ``apt-get update -o Acquire::Languages=en`` (this image
sets Acquire::Languages to none).
"""

from __future__ import annotations

import collections
import re
import subprocess
from pathlib import Path

import numpy as np

from dsutil import describe, save_json, save_npy, sha256_bytes

APT_LISTS = Path("/var/lib/apt/lists")
APT_HELPER = "/usr/lib/apt/apt-helper"
#: Section -> class label, in label order (7 classes, as Cora has).
DEFAULT_SECTIONS = ("net", "science", "games", "sound", "graphics", "math", "video")
DEP_FIELDS = ("Pre-Depends", "Depends", "Recommends", "Suggests")
WORD_RE = re.compile(r"[a-z][a-z]+")
#: A small English stop list (function words only; no domain words).
STOPWORDS = frozenset("""
a about above after again against all also am an and any are as at be because
been before being below between both but by can could did do does doing down
during each etc few for from further had has have having he her here hers him
his how however i if in into is it its itself just may me might more most must
my no nor not now of off on once only or other our ours out over own same she
should so some such than that the their theirs them then there these they this
those through to too under until up upon us very via was we were what when
where whether which while who whom why will with within without would you your
yours yet eg ie
""".split())


def _read_index(path: Path) -> bytes:
    """Bytes of an apt index file, decompressed (lz4, xz, gz, zst or plain)."""
    if path.suffix in ("", ".txt"):
        return path.read_bytes()
    return subprocess.run([APT_HELPER, "cat-file", str(path)], check=True,
                          stdout=subprocess.PIPE).stdout


def parse_deb822(text: str):
    """Yield the stanzas of a Debian control-format file as dicts.

    Continuation lines are kept (joined with newlines) so that multi-line
    fields such as Description-en keep their long text.
    """
    rec, key = {}, None
    for line in text.splitlines():
        if not line.strip():
            if rec:
                yield rec
            rec, key = {}, None
        elif line[0] in " \t" and key:
            rec[key] += "\n" + line
        else:
            key, _, val = line.partition(":")
            rec[key] = val.strip()
    if rec:
        yield rec


def _release_info(lists: Path, suite: str) -> dict:
    """Version and Date of the release, from its InRelease file."""
    info = {}
    for path in sorted(lists.glob(f"*_dists_{suite}_InRelease")):
        text = path.read_text(errors="replace")
        for key in ("Origin", "Suite", "Codename", "Version", "Date"):
            m = re.search(rf"^{key}: *(.*)$", text, re.M)
            if m:
                info[key.lower()] = m.group(1).strip()
    return info


def _host_suite_arch() -> tuple[str, str]:
    codename = "bookworm"
    osr = Path("/etc/os-release")
    if osr.exists():
        m = re.search(r"^VERSION_CODENAME=(\S+)", osr.read_text(), re.M)
        if m:
            codename = m.group(1)
    try:
        arch = subprocess.run(["dpkg", "--print-architecture"], check=True,
                              stdout=subprocess.PIPE, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        arch = "amd64"
    return codename, arch


def load_archive(lists: Path = APT_LISTS, suite: str | None = None, arch: str | None = None):
    """Read the main component's Packages and Translation-en indexes.

    Returns ``(packages, descriptions, source_info)``: package stanzas, a map
    (package, Description-md5) -> English description, and provenance.
    """
    host_suite, host_arch = _host_suite_arch()
    suite, arch = suite or host_suite, arch or host_arch
    pk = sorted(lists.glob(f"*_dists_{suite}_main_binary-{arch}_Packages*"))
    tr = sorted(lists.glob(f"*_dists_{suite}_main_i18n_Translation-en*"))
    if not pk:
        raise SystemExit(f"no {suite}/main {arch} Packages index in {lists}: run apt-get update")
    if not tr:
        raise SystemExit(f"no {suite}/main Translation-en index in {lists}: run\n"
                         "  apt-get update -o Acquire::Languages=en")
    pk_bytes, tr_bytes = _read_index(pk[0]), _read_index(tr[0])
    packages = list(parse_deb822(pk_bytes.decode("utf-8", "replace")))
    desc = {(r["Package"], r.get("Description-md5", "")): r.get("Description-en", "")
            for r in parse_deb822(tr_bytes.decode("utf-8", "replace"))}
    source = {"release": _release_info(lists, suite),
              "packages_index": pk[0].name, "packages_sha256": sha256_bytes(pk_bytes),
              "translation_index": tr[0].name, "translation_sha256": sha256_bytes(tr_bytes),
              "n_packages": len(packages)}
    return packages, desc, source


def _dep_names(rec: dict, fields) -> set:
    """Package names a stanza relates to (all alternatives, no versions/archs)."""
    names = set()
    for field in fields:
        for alt in rec.get(field, "").replace("|", ",").split(","):
            name = alt.strip().split(" ")[0].split(":")[0]
            if name:
                names.add(name)
    return names


def build_graph(packages, desc, sections=DEFAULT_SECTIONS, max_nodes=None,
                dep_fields=DEP_FIELDS):
    """Select nodes and edges.

    Packages of ``sections`` with an English description, one per distinct
    description (a dependency on a dropped duplicate goes to the package
    kept for that description); edges u -> v for "u depends on v" (any of
    ``dep_fields``); nodes without any edge are dropped. With ``max_nodes``,
    the best-connected nodes are kept (degree, then name). Nodes are sorted
    by package name. Returns (names, labels, edges (E, 2) int64, docs).
    """
    label_of = {s: i for i, s in enumerate(sections)}
    by_md5, rep, recs = {}, {}, {}
    for r in sorted(packages, key=lambda r: r["Package"]):
        name, md5 = r["Package"], r.get("Description-md5", "")
        if r.get("Section") not in label_of or (name, md5) not in desc or name in rep:
            continue
        rep[name] = by_md5.setdefault(md5, name)
        if rep[name] == name:
            recs[name] = r
    deps = {n: {rep[d] for d in _dep_names(r, dep_fields) if d in rep} - {n}
            for n, r in recs.items()}

    def connected(nodes):
        keep = set(nodes)
        deg = collections.Counter()
        for u in keep:
            for v in deps[u] & keep:
                deg[u] += 1
                deg[v] += 1
        return deg

    deg = connected(recs)
    nodes = [n for n in recs if deg[n]]
    if max_nodes and len(nodes) > max_nodes:
        nodes = sorted(nodes, key=lambda n: (-deg[n], n))[:max_nodes]
        deg = connected(nodes)
        nodes = [n for n in nodes if deg[n]]
    nodes.sort()
    index = {n: i for i, n in enumerate(nodes)}
    edges = sorted((index[u], index[v]) for u in nodes for v in deps[u] if v in index)
    labels = np.array([label_of[recs[n]["Section"]] for n in nodes], dtype=np.int64)
    docs = [desc[(n, recs[n].get("Description-md5", ""))] for n in nodes]
    return nodes, labels, np.array(edges, dtype=np.int64).reshape(-1, 2), docs


def bag_of_words(docs, vocab_size=1433, min_df=10, max_df=0.05):
    """Binary bag-of-words, Cora style.

    Words are lower-case alphabetic runs of 2+ letters minus ``STOPWORDS``;
    words in fewer than ``min_df`` documents or in more than ``max_df`` of
    them are dropped; the ``vocab_size`` most frequent remaining words (ties
    by spelling) form the vocabulary, sorted alphabetically. Returns
    (features (n, V) uint8, vocab).
    """
    word_sets = [set(WORD_RE.findall(d.lower())) - STOPWORDS for d in docs]
    df = collections.Counter(w for ws in word_sets for w in ws)
    limit = max_df * len(docs)
    cand = sorted((w for w, c in df.items() if min_df <= c <= limit),
                  key=lambda w: (-df[w], w))
    vocab = sorted(cand[:vocab_size])
    col = {w: j for j, w in enumerate(vocab)}
    feats = np.zeros((len(docs), len(vocab)), dtype=np.uint8)
    for i, ws in enumerate(word_sets):
        feats[i, [col[w] for w in ws if w in col]] = 1
    return feats, vocab


def pca(x: np.ndarray, dims: int):
    """Project centred rows onto the top ``dims`` principal axes (numpy SVD).

    Each axis is signed so that its largest-magnitude loading is positive
    (deterministic output). Returns (float32 (n, dims), explained-variance
    ratio of the kept axes).
    """
    xc = x.astype(np.float64)
    xc -= xc.mean(axis=0)
    _, s, vt = np.linalg.svd(xc, full_matrices=False)
    vt = vt[:dims]
    signs = np.sign(vt[np.arange(len(vt)), np.abs(vt).argmax(axis=1)])
    vt *= signs[:, None]
    ratio = (s ** 2) / (s ** 2).sum()
    return (xc @ vt.T).astype(np.float32), ratio[:dims]


def build(out: Path, max_nodes=None, vocab_size=1433, pca_dims=100,
          sections=DEFAULT_SECTIONS, lists: Path = APT_LISTS) -> list[dict]:
    """Make the graph files in ``out``; returns their summaries."""
    packages, desc, source = load_archive(lists)
    rel = source["release"]
    print(f"[debgraph] Debian {rel.get('codename', '?')} {rel.get('version', '?')} "
          f"({rel.get('date', '?')}): {source['n_packages']} packages", flush=True)
    nodes, labels, edges, docs = build_graph(packages, desc, sections, max_nodes)
    feats, vocab = bag_of_words(docs, vocab_size)
    ones = feats.sum(axis=1)
    print(f"  nodes {len(nodes)}  edges {len(edges)}  vocab {len(vocab)}  "
          f"ones/row mean {ones.mean():.2f} (min {ones.min()}, max {ones.max()})  "
          f"fraction of ones {feats.mean():.4%}  empty rows {(ones == 0).sum()}", flush=True)
    counts = np.bincount(labels, minlength=len(sections))
    print("  classes: " + ", ".join(f"{s}={c}" for s, c in zip(sections, counts)), flush=True)
    infos = []
    f32 = feats.astype(np.float32)
    infos.append(describe("debian_bow_f32", f32, save_npy(out / "debian_bow_f32.npy", f32)))
    infos.append(describe("debian_bow_u8", feats, save_npy(out / "debian_bow_u8.npy", feats)))
    infos.append(describe("debian_edges", edges, save_npy(out / "debian_edges.npy", edges)))
    infos.append(describe("debian_labels", labels, save_npy(out / "debian_labels.npy", labels)))
    dims = min(pca_dims, *feats.shape)
    dense, ratio = pca(feats, dims)
    print(f"  PCA {dims} dims keep {ratio.sum():.1%} of the variance", flush=True)
    infos.append(describe(f"debian_pca{dims}_f32", dense,
                          save_npy(out / f"debian_pca{dims}_f32.npy", dense)))
    save_json(out / "debian_graph_meta.json", {
        "source": source, "sections": list(sections), "nodes": nodes, "vocab": vocab,
        "edge_fields": list(DEP_FIELDS), "edge_direction": "row i -> row j: i depends on j",
        "fraction_of_ones": float(feats.mean()), "pca_explained_variance": float(ratio.sum()),
    })
    return infos
