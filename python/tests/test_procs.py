"""ibp objects across processes, without torch (issue 27): stores and caches
in fork() children of a parent that used them (its worker pools running, or
another thread inside a gather at the fork), communicators and CUDA-bound
handles refused in a child; pickling and copying of stores (a file as its
path and open flags, verified again on load unless trusted; an in-memory
store as its compressed bytes) and codecs, a clear ibp error for objects
that cannot move; ibp.ClosedError from every method of a closed object."""

import copy
import ctypes as C
import multiprocessing as mp
import os
import pickle
import threading

import numpy as np
import pytest

import ibp
from ibp import _coll, _handle, _lib
from conftest import make_rows

CHILD_TIMEOUT = 60


def in_fork(fn, *args):
    """fn(*args) in a forked child; returns its result (an exception is
    re-raised here as a failure). A child that hangs fails the test."""
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def run():
        try:
            send.send(("ok", fn(*args)))
        except BaseException as e:  # noqa: B902 (reported to the parent)
            send.send(("err", "%s: %s" % (type(e).__name__, e), isinstance(e, ibp.Error)))

    p = ctx.Process(target=run)
    p.start()
    if not recv.poll(CHILD_TIMEOUT):
        p.kill()
        p.join()
        pytest.fail("the forked child hung (no answer in %d s)" % CHILD_TIMEOUT)
    got = recv.recv()
    p.join(CHILD_TIMEOUT)
    assert p.exitcode == 0
    return got


@pytest.fixture
def data(tmp_path):
    rng = np.random.default_rng(27)
    x = make_rows(rng, 4000, (64,), "float32")
    path = str(tmp_path / "x.ibp")
    ibp.pack(x, path)
    return x, path


# ---- fork -------------------------------------------------------------------

def test_store_and_cache_in_forked_child(data):
    x, path = data
    stores = {"file": ibp.open(path), "mmap": ibp.open(path, mmap=True),
              "exp": ibp.Store.from_array(x, codec="exp", block_rows=64)}
    cache = ibp.Cache(200 * stores["file"].row_bytes, store=stores["file"])
    ids = np.random.default_rng(1).integers(0, x.shape[0], 3000)
    assert stores["file"].max_threads >= 1
    for s in stores.values():  # the parent's pools run before the fork
        assert np.array_equal(s.gather(ids, nthreads=0), x[ids])
    assert np.array_equal(cache.gather(stores["file"], ids[:500]), x[ids[:500]])

    def child():
        out = {k: s.gather(ids, nthreads=0) for k, s in stores.items()}
        out.update({k + "/1": s.gather(ids[::-1], nthreads=1) for k, s in stores.items()})
        out["read"] = stores["exp"].read()
        out["cache"] = cache.gather(stores["file"], ids[:800])
        out["hits"] = cache.stats()["hits"]
        for s in stores.values():
            s.close()
        cache.close()
        return out

    status, got = in_fork(child)[:2]
    assert status == "ok", got
    for k in stores:
        assert np.array_equal(got[k], x[ids]), k
        assert np.array_equal(got[k + "/1"], x[ids[::-1]]), k
    assert np.array_equal(got["read"], x)
    assert np.array_equal(got["cache"], x[ids[:800]]) and got["hits"] > 0  # the parent's cached rows
    for s in stores.values():  # the parent is unchanged
        assert not s.closed and np.array_equal(s.gather(ids, nthreads=0), x[ids])
    for s in stores.values():
        s.close()
    cache.close()


def test_fork_while_another_thread_gathers(data):
    """Another thread is inside gathers at the fork: the child neither waits
    for that thread's calls (close() returns) nor finds the store's locks
    held (its gathers run)."""
    x, path = data
    s = ibp.open(path)
    ids = np.arange(x.shape[0], dtype=np.int64)
    stop, errors = threading.Event(), []

    def loop():
        out = np.empty_like(x)
        while not stop.is_set():
            s.gather(ids, out=out, nthreads=0)
            if not np.array_equal(out, x):
                errors.append("wrong rows")

    t = threading.Thread(target=loop)
    t.start()
    try:
        results = []
        for _ in range(3):
            results.append(in_fork(lambda: (np.array_equal(s.gather(ids[::7], nthreads=0), x[::7]),
                                            s.close(), s.closed)))
    finally:
        stop.set()
        t.join()
    assert results == [("ok", (True, None, True))] * 3
    assert not errors and not s.closed
    s.close()


def test_communicator_belongs_to_parent():
    world = _coll.InprocWorld(1)
    comm = ibp.Communicator(world.transport(0), calibrate=False)
    x = np.arange(16, dtype=np.float32)
    assert np.array_equal(comm.allreduce(x, codec="none"), x)

    def child():
        try:
            comm.allreduce(x, codec="none")
        except ibp.UnsupportedError as e:
            msg = str(e)
        else:
            msg = "no error"
        comm.close()  # frees nothing of the parent's
        return msg

    status, msg = in_fork(child)[:2]
    assert status == "ok"
    assert "ibp.Communicator belongs to the parent process" in msg and "allreduce" in msg
    assert np.array_equal(comm.allreduce(x, codec="none"), x)  # still the parent's
    comm.close()
    world.close()


def test_process_bound_handle_in_child():
    """The mechanism a CUDA store (which this machine may not make) uses: a
    process-bound handle raises in a child, and closing it there does not
    call its C free function; in the parent both work."""
    freed = []
    h = _handle.Handle(1234, freed.append, "ibp.CudaStore (cuda:0)", process_bound=True)

    def child():
        try:
            h.acquire("CudaStore.gather")
        except ibp.UnsupportedError as e:
            msg = str(e)
        h.close()
        return msg, freed

    status, (msg, freed_child) = in_fork(child)[:2]
    assert status == "ok" and freed_child == []
    assert msg.startswith("CudaStore.gather: ibp.CudaStore (cuda:0) belongs to the parent process")
    assert h.acquire("x") == 1234
    h.release()
    h.close()
    assert freed == [1234]


# ---- pickling -----------------------------------------------------------------

def _payload_offset(store):
    c = _lib.lib.ibp_store_container(store._handle._h)
    n = _lib.c_u64()
    img = _lib.lib.ibp_container_image(c, C.byref(n))
    pl = _lib.lib.ibp_container_payload(c, C.byref(n))
    return pl - img, n.value


@pytest.mark.parametrize("mmap", [False, True])
def test_pickle_file_store(data, mmap):
    x, path = data
    ids = np.array([5, 3999, 0, 5])
    pickled = {}
    for verify in (True, "full", False):
        s = ibp.open(path, verify=verify, mmap=mmap)
        for t in (pickle.loads(pickle.dumps(s)), pickle.loads(pickle.dumps(s, protocol=2)),
                  copy.deepcopy(s), copy.copy(s)):
            assert t is not s and t.path == path and t.shape == s.shape
            assert np.array_equal(t.read(), x) and np.array_equal(t[ids], x[ids])
            t.close()
        b = pickle.dumps(s)
        assert len(b) < 1000  # the path and the flags, not the file
        pickled[verify] = b
        off, plen = _payload_offset(s)
        s.close()
    # damage one payload byte: the stores are opened again on load, verified
    # unless they were opened trusted
    with open(path, "r+b") as f:
        f.seek(off + plen // 2)
        b0 = f.read(1)
        f.seek(off + plen // 2)
        f.write(bytes([b0[0] ^ 0x40]))
    for verify in (True, "full"):
        with pytest.raises(ibp.CorruptError):
            pickle.loads(pickled[verify])
    t = pickle.loads(pickled[False])
    assert t.shape == x.shape
    t.close()
    os.remove(path)
    with pytest.raises(ibp.FileError):
        pickle.loads(pickled[True])


@pytest.mark.parametrize("codec,opts", [("ibp", {}), ("exp", {"block_rows": 100}),
                                        ("fp8", {"lossy": True, "block_rows": 100})])
def test_pickle_array_store(data, codec, opts):
    x, _ = data
    s = ibp.Store.from_array(x, codec=codec, **opts)
    ref = s.read()
    if codec != "fp8":
        assert np.array_equal(ref, x)
    for proto in (2, 4, pickle.HIGHEST_PROTOCOL):
        b = pickle.dumps(s, protocol=proto)
        # the compressed bytes, never the decoded rows (protocol 2 writes
        # bytes as text: half again as large)
        assert len(b) < (s.file_bytes if proto > 2 else 1.6 * s.file_bytes) + 1024
        assert s.file_bytes < 0.9 * x.nbytes
        t = pickle.loads(b)
        assert t.path is None and t.codec == codec and t.shape == s.shape
        assert np.array_equal(t.container_bytes(), s.container_bytes())
        assert np.array_equal(t.read(), ref)
        t.close()
    t = copy.deepcopy(s)
    ids = np.arange(0, 4000, 13)
    assert np.array_equal(t.gather(ids, nthreads=0), ref[ids])
    t.close()
    s.close()


def test_container_bytes_and_from_bytes(data):
    x, path = data
    with ibp.open(path) as s:
        img = s.container_bytes()
    with open(path, "rb") as f:
        assert img.tobytes() == f.read()
    for src in (img, img.tobytes(), bytearray(img.tobytes())):
        with ibp.Store.from_bytes(src) as t:
            assert t.path is None and np.array_equal(t.read(), x)
            assert np.array_equal(t.container_bytes(), img)
    with ibp.Store.from_bytes(img, verify="full") as t:
        assert np.array_equal(t[[7]], x[[7]])
    bad = img.copy()
    with ibp.open(path) as s:
        off, plen = _payload_offset(s)
    bad[off + plen // 3] ^= 1
    with pytest.raises(ibp.ChecksumError, match="<memory>"):
        ibp.Store.from_bytes(bad)
    ibp.Store.from_bytes(bad, verify=False).close()  # trusted: payload sums not checked
    with pytest.raises(ibp.CorruptError):
        ibp.Store.from_bytes(img[:100])
    with pytest.raises(ibp.InvalidArgumentError, match="verify"):
        ibp.Store.from_bytes(img, verify="yes")


def test_array_store_errors_name_memory(data):
    x, _ = data
    with ibp.Store.from_array(x) as s:
        with pytest.raises(ibp.OutOfRangeError) as e:
            s.gather([4000])
    msg = str(e.value)
    assert "<memory>" in msg and "array.ibp" not in msg and "ibp-" not in msg, msg
    assert "<memory>" in repr(s)


@pytest.mark.parametrize("xval", [0, 1])
def test_pickle_codec(data, xval):
    x, _ = data
    codec = ibp.train(x[:1000], clusters=2, xval=xval)
    enc = codec.encode(x)
    for c2 in (pickle.loads(pickle.dumps(codec)), copy.deepcopy(codec)):
        assert (c2.chunk, c2.nclusters, c2.threshold, c2.has_xval) == \
            (codec.chunk, codec.nclusters, codec.threshold, codec.has_xval)
        e2 = c2.encode(x)
        assert e2.payload.tobytes() == enc.payload.tobytes()
        assert np.array_equal(e2.offsets, enc.offsets) and np.array_equal(e2.flags, enc.flags)
        assert np.array_equal(c2.decode(enc), x)
        c2.close()
    codec.close()


def test_unpicklable_objects_raise_ibp_errors(data):
    x, path = data
    s = ibp.open(path)
    world = _coll.InprocWorld(1)
    objs = [ibp.Cache(1 << 20, store=s), ibp.SlabPool(1 << 20, 4096, pinned=False),
            ibp.Communicator(world.transport(0), calibrate=False)]
    for o in objs:
        name = "ibp." + type(o).__name__
        for f in (pickle.dumps, copy.deepcopy, copy.copy):
            with pytest.raises(ibp.UnsupportedError, match=r"%s cannot be pickled or copied" % name):
                f(o)
        o.close()
    world.close()
    s.close()


# ---- closed objects -------------------------------------------------------------

def _all_closed(calls, name):
    for what, f in calls:
        with pytest.raises(ibp.ClosedError, match="%s.* is closed" % name) as e:
            f()
        assert isinstance(e.value, ibp.Error) and isinstance(e.value, ValueError), what


def test_closed_error_from_every_method(data):
    x, path = data
    ids = np.array([1, 2])
    s = ibp.open(path)
    s.close()
    _all_closed([("gather", lambda: s.gather(ids)), ("gather 1", lambda: s.gather(ids, nthreads=1)),
                 ("getitem", lambda: s[3]), ("slice", lambda: s[1:3]), ("read", s.read),
                 ("verify", s.verify), ("max_threads", lambda: s.max_threads),
                 ("impl", lambda: s.impl), ("set_impl", lambda: s.set_impl("portable")),
                 ("container_bytes", s.container_bytes), ("to_cuda", s.to_cuda),
                 ("op_handle", lambda: s.op_handle), ("pickle", lambda: pickle.dumps(s)),
                 ("deepcopy", lambda: copy.deepcopy(s))], "ibp.Store " + path)
    assert "closed" in repr(s)

    live = ibp.open(path)
    codec = ibp.train(x[:500])
    enc = codec.encode(x[:10])
    codec.close()
    _all_closed([("encode", lambda: codec.encode(x)), ("decode", lambda: codec.decode(enc)),
                 ("static_bits", lambda: codec.static_bits(0)),
                 ("paper", lambda: codec.paper_layout_size(x)), ("impl", lambda: codec.impl),
                 ("set_impl", lambda: codec.set_impl("portable")), ("pickle", lambda: pickle.dumps(codec))],
                "ibp.Codec")

    cache = ibp.Cache(1 << 20, store=live)
    cache.close()
    _all_closed([("gather", lambda: cache.gather(live, ids)), ("prefetch", lambda: cache.prefetch(live, ids)),
                 ("preload", lambda: cache.preload(live, np.ones(live.nrows))),
                 ("invalidate", cache.invalidate), ("stats", cache.stats), ("class_stats", cache.class_stats)],
                "ibp.Cache")
    # a closed store given to an open cache names the store
    cache = ibp.Cache(1 << 20, store=live)
    with pytest.raises(ibp.ClosedError, match="ibp.Store " + path):
        cache.gather(s, ids)
    cache.close()

    pool = ibp.SlabPool(1 << 20, 4096, pinned=False)
    h = pool.put(b"abc")
    pool.close()
    _all_closed([("put", lambda: pool.put(b"x")), ("get", lambda: pool.get(h)), ("size", lambda: pool.size(h)),
                 ("remove", lambda: pool.remove(h)), ("stats", pool.stats), ("len", lambda: len(pool)),
                 ("contains", lambda: h in pool), ("class_stats", pool.class_stats)], "ibp.SlabPool")

    world = _coll.InprocWorld(1)
    comm = ibp.Communicator(world.transport(0), calibrate=False)
    comm.close()
    f = np.ones(4, np.float32)
    _all_closed([("allreduce", lambda: comm.allreduce(f)), ("allgather", lambda: comm.allgather(f)),
                 ("stats", comm.stats), ("set_policy", lambda: comm.set_policy("never")),
                 ("set_lsq_bits", lambda: comm.set_lsq_bits(4))], "ibp.Communicator")
    world.close()
    live.close()
