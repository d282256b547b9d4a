"""ibp.torch.ddp (DDP communication hook) and ibp.torch.fsdp (FSDP2 custom
all-gather / reduce-scatter): libibp's compressed collectives with
torch.distributed (gloo, CPU) as their transport.

One run of 2 gloo ranks (spawned processes, init_method file:// in a tmp
dir) does every scenario and writes its findings; the tests below check
them. The parent never imports torch (an import costs ~10 s on the CI
machine), so the whole module stays well under a minute.

What is asserted:
- lossless: DDP + the "exp" hook ends with parameters bit-identical to DDP
  without a hook (2 ranks: a + b is the same sum in any order, and the hook
  divides by the world size before the sum as DDP does) and to the same ring
  run with "none"; the exp path really compressed (stats). FSDP2 with the
  exp all-gather and reduce-scatter is bit-identical to plain FSDP2.
- lossy (fp8, dynamiq, pts, lsq): replicas stay identical, the loss falls
  below 1/2 of its start, parameters stay within a stated distance of the
  exact run, and one all-reduce of gradient-like data is within each codec's
  bound (below).
- errors raise ibp.Error subclasses: unknown codec (InvalidArgumentError),
  mismatched codecs across ranks (InvalidArgumentError "mismatch"), a corrupt
  payload (CorruptError on the receiver; its peer times out: FileError), a
  broken communicator (FileError at once), codecs a collective does not take.
"""

import importlib.util
import os
import sys

import numpy as np
import pytest

import ibp
from gloo_ranks import run_ranks

if importlib.util.find_spec("torch") is None:
    pytest.skip("torch is not installed", allow_module_level=True)

WORLD = 2
STEPS = 8

# Relative L2 error of one all-reduce of gradient-like data (2 ranks, 4096
# float32 values per rank: Gaussian within each 256-block, log-normal block
# scales), per codec. fp8: E4M3 has a 3-bit mantissa (relative step 2^-4,
# 1/sqrt(12) of it on average) re-encoded at each hop, TACO reports ~2-4%:
# bound 0.06. dynamiq: ~5 bits per element, but Gaussian data inside a
# super-group gets about 4-bit widths (docs/COLLECTIVES.md: rel-L2 0.17 on
# i.i.d. Gaussian data; 0.11 measured here): bound 0.2. lsq: 4-bit stochastic
# codes (7 levels) with one scale per 256 values: bound 0.3. pts: keeps each
# value with probability |g|/max|g|, so its variance is bounded by
# |g|_1 |g|_inf per rank (RCMoE): the squared error must stay below 3x that.
REL_BOUND = {"fp8": 0.06, "dynamiq": 0.2, "lsq": 0.3}
# Parameters after STEPS steps, distance to the exact run relative to the
# distance the exact run travelled from the initial weights.
PARAM_BOUND = {"fp8": 0.05, "dynamiq": 0.15, "lsq": 0.3, "pts": 1.5}  # measured 0.013, 0.057, 0.061, 0.78


def _scenarios(rank, world, res):
    import time
    t0 = time.monotonic()
    import torch
    import torch.distributed as dist
    import ibp.torch.ddp as D
    import ibp.torch.fsdp as F

    torch.set_num_threads(1)
    torch.manual_seed(1234)
    teacher = torch.nn.Linear(32, 4)
    g = torch.Generator().manual_seed(100 + rank)
    xs = torch.randn(STEPS, 16, 32, generator=g)
    with torch.no_grad():
        ys = torch.tanh(teacher(xs)) + 0.01 * torch.randn(STEPS, 16, 4, generator=g)

    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))

    def flat(params):
        return torch.cat([p.detach().reshape(-1).float() for p in params])

    def ddp(hook, steps=STEPS):
        m = torch.nn.parallel.DistributedDataParallel(net())
        if hook is not None:
            m.register_comm_hook(None, hook)
        opt = torch.optim.SGD(m.parameters(), lr=0.2)
        losses = []
        for s in range(steps):
            loss = torch.nn.functional.mse_loss(m(xs[s % 2]), ys[s % 2])  # two batches, revisited
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return flat(m.parameters()), losses

    def bits(t):
        return t.view(torch.int32).tolist()

    def same_on_all_ranks(t):
        got = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(got, t)
        return all(torch.equal(got[0].view(torch.int32), x.view(torch.int32)) for x in got)

    p0 = flat(net().parameters())
    ref, ref_losses = ddp(None)
    res["t"]["first_ddp"] = time.monotonic() - t0
    res["ref_losses"] = ref_losses
    travelled = float((ref - p0).norm())
    for codec in ("none", "exp", "fp8", "dynamiq", "pts", "lsq"):
        hook = D.compressed_allreduce_hook(codec, policy="always")
        p, losses = ddp(hook)
        st = hook.stats()
        res[codec] = {
            "identical_to_ref": bool(torch.equal(p.view(torch.int32), ref.view(torch.int32))),
            "param_rel": float((p - ref).norm()) / travelled,
            "losses": losses,
            "replicas_identical": same_on_all_ranks(p),
            "calls": st["calls"], "compressed": st["compressed"],
            "ratio": st["logical_bytes"] / max(st["wire_bytes"], 1),
        }
        hook.close()

    # policy "never" (and "auto" when the model says no codec can gain):
    # every bucket goes to gloo's own all-reduce, asynchronously, as DDP
    # does without a hook; comm.plain answers alike on every rank
    hook = D.compressed_allreduce_hook("exp", policy="never")
    p, losses = ddp(hook)
    st = hook.stats()
    res["never"] = {"identical_to_ref": bool(torch.equal(p.view(torch.int32), ref.view(torch.int32))),
                    "losses": losses, "hook_native": st["hook_native"], "calls": st["calls"],
                    "plain_ar": hook.comm.plain("allreduce", 1000, torch.float32, "exp"),
                    "plain_dq": hook.comm.plain("allreduce", 1000, torch.float32, "dynamiq")}
    hook.close()
    # policy "auto" where the model cannot rule (not calibrated): the trial,
    # 2 native steps, then 3 each way alternately, then the faster
    ref12, _ = ddp(None, 12)
    hook = D.compressed_allreduce_hook("exp", calibrate=False)
    p, _ = ddp(hook, 12)
    st = hook.stats()
    res["auto_trial"] = {"identical_to_ref": bool(torch.equal(p.view(torch.int32), ref12.view(torch.int32))),
                         "choice": st["hook_choice"], "trial": st["hook_trial"], "native": st["hook_native"],
                         "calls": st["calls"]}
    hook.close()
    c = D.communicator(policy="auto", calibrate=False)
    res["plain_api"] = {"none": c.plain("allgather", 10, "bf16", "none"),
                        "exp_uncalibrated": c.plain("allreduce", 10, torch.bfloat16, "exp"),
                        "dynamiq": c.plain("allreduce", 10, torch.float32, "dynamiq")}
    c.close()

    res["t"]["ddp_hooks"] = time.monotonic() - t0
    # one all-reduce of gradient-like data, per codec, against the exact sum
    comm = D.communicator(policy="always", calibrate=False)
    gen = torch.Generator().manual_seed(7)
    scales = torch.exp(1.5 * torch.randn(16, 1, generator=gen))
    xs_all = [(torch.randn(16, 256, generator=gen) * scales * 1e-3).reshape(-1) for _ in range(world)]
    exact = (xs_all[0].double() + xs_all[1].double())
    mine = xs_all[rank]
    errs = {}
    for codec in ("exp", "fp8", "dynamiq", "lsq", "pts"):
        t = mine.clone()
        D.allreduce_(t, comm, codec)
        err = (t.double() - exact)
        errs[codec] = {"rel": float(err.norm() / exact.norm()), "sq": float((err ** 2).sum()),
                       "identical": same_on_all_ranks(t)}
    # PTS bound: sum over ranks of |g|_1 |g|_inf
    errs["pts"]["bound"] = float(sum(float(x.abs().sum()) * float(x.abs().max()) for x in xs_all))
    errs["exp"]["bitexact_vs_f32_sum"] = bool(torch.equal(
        D.allreduce_(mine.clone(), comm, "exp").view(torch.int32), (xs_all[0] + xs_all[1]).view(torch.int32)))
    res["allreduce"] = errs
    comm.close()

    # pieces in flight through TorchTransport's nonblocking calls (pieces of
    # 256 raw bytes: ~40 a chunk): exp and none bit-identical to gloo's sum,
    # DynamiQ bit-identical to its whole-chunk run, more wire bytes (a
    # header a piece) than whole chunks
    big = [torch.randn(20000, generator=torch.Generator().manual_seed(50 + r)) * 1e-2 for r in range(world)]
    pieces = {}
    for env in ("256", "0"):
        os.environ["IBP_COLL_PIECE_BYTES"] = env
        cm = D.communicator(policy="always", calibrate=False)
        os.environ.pop("IBP_COLL_PIECE_BYTES")
        out = {}
        for codec in ("none", "exp", "dynamiq"):
            w0 = cm.stats()["wire_bytes"]
            out[codec] = (D.allreduce_(big[rank].clone(), cm, codec), cm.stats()["wire_bytes"] - w0)
        ag = torch.empty(world, 20000)
        cm.allgather(big[rank], out=ag, codec="exp")
        out["ag"] = ag
        pieces[env] = out
        cm.close()
    exact = big[0] + big[1]
    res["pieces"] = {
        "exp_vs_sum": bool(torch.equal(pieces["256"]["exp"][0].view(torch.int32), exact.view(torch.int32))),
        "none_vs_sum": bool(torch.equal(pieces["256"]["none"][0].view(torch.int32), exact.view(torch.int32))),
        "dynamiq_vs_whole": bool(torch.equal(pieces["256"]["dynamiq"][0].view(torch.int32),
                                             pieces["0"]["dynamiq"][0].view(torch.int32))),
        "ag_vs_cat": bool(torch.equal(pieces["256"]["ag"], torch.stack(big))),
        "wire": {c: [pieces["256"][c][1], pieces["0"][c][1]] for c in ("none", "exp", "dynamiq")},
    }
    res["t"]["allreduce"] = time.monotonic() - t0
    # FSDP2: plain vs compressed all-gather + reduce-scatter
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world,))

    def fsdp(ag, rs):
        m = net()
        for layer in m:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(m, mesh=mesh)
        if ag is not None:
            assert F.set_compressed_collectives(m, ag, rs) == 3
        opt = torch.optim.SGD(m.parameters(), lr=0.2)
        losses = []
        for s in range(4):
            loss = torch.nn.functional.mse_loss(m(xs[s % 2]), ys[s % 2])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return flat([p.full_tensor() for p in m.parameters()]), losses

    fref, _ = fsdp(None, None)
    ag, rs = F.CompressedAllGather("exp", policy="always"), F.CompressedReduceScatter("exp", policy="always")
    fexp, _ = fsdp(ag, rs)
    res["fsdp_exp"] = {"identical": bool(torch.equal(fref.view(torch.int32), fexp.view(torch.int32))),
                       "ag_compressed": ag.stats()["compressed"], "rs_compressed": rs.stats()["compressed"]}
    agn, rsn = F.CompressedAllGather("exp", policy="never"), F.CompressedReduceScatter("exp", policy="never")
    fnat, _ = fsdp(agn, rsn)
    res["fsdp_native"] = {"identical": bool(torch.equal(fref.view(torch.int32), fnat.view(torch.int32))),
                          "ag": agn.stats(), "rs": rsn.stats(), "native_avg": rsn._native_avg}
    # "auto" without calibration: no call is plain by the model, so every
    # (op, size) runs its trial (AllGathers: twice a step, decided in 4)
    aga, rsa = F.CompressedAllGather("exp", calibrate=False), F.CompressedReduceScatter("exp", calibrate=False)
    faut, _ = fsdp(aga, rsa)
    res["fsdp_auto"] = {"identical": bool(torch.equal(fref.view(torch.int32), faut.view(torch.int32))),
                        "ag": aga.stats(), "rs": rsa.stats()}
    # the trial keeps the faster way, whichever it is (stand-in calls that only sleep)
    picks = {}
    for slow in ("native", "libibp"):
        tr = F.CompressedAllGather("exp", calibrate=False)
        c = tr.comm(dist.group.WORLD)
        for _ in range(2 + 2 * 3 + 2):
            tr._dispatch(c, dist.group.WORLD, "allgather", 1006, torch.float32,
                         lambda: time.sleep(0.03 if slow == "native" else 0.001),
                         lambda: time.sleep(0.03 if slow == "libibp" else 0.001))
        picks[slow] = {k: v["choice"] for k, v in tr.stats()["hook_trials"].items()}
        tr.close()
    res["fsdp_trial_picks"] = picks
    ag8, rs8 = F.CompressedAllGather("fp8", policy="always"), F.CompressedReduceScatter("lsq")
    f8, l8 = fsdp(ag8, rs8)
    res["fsdp_lossy"] = {"param_rel": float((f8 - fref).norm() / (fref - p0).norm()), "losses": l8,
                         "replicas_identical": same_on_all_ranks(f8)}

    res["t"]["fsdp"] = time.monotonic() - t0
    # ---- errors ----
    errors = {}

    def raises(fn):
        try:
            fn()
        except ibp.Error as e:
            return type(e).__name__ + ": " + str(e)
        except Exception as e:  # not an ibp.Error: the test fails on the name
            return "NOT-IBP " + type(e).__name__ + ": " + str(e)
        return "no error"

    errors["unknown_codec"] = raises(lambda: D.compressed_allreduce_hook("zstd"))
    errors["unknown_policy"] = raises(lambda: D.compressed_allreduce_hook("exp", policy="sometimes"))
    errors["fsdp_ag_lsq"] = raises(lambda: F.CompressedAllGather("lsq"))
    errors["fsdp_rs_dynamiq"] = raises(lambda: F.CompressedReduceScatter("dynamiq"))
    errors["float64"] = raises(lambda: D.allreduce_(torch.zeros(4, dtype=torch.float64), comm, "exp"))
    cp = D.communicator(policy="auto", calibrate=False)
    errors["plain_op"] = raises(lambda: cp.plain("broadcast", 10, "f32", "exp"))
    errors["plain_lsq_ar"] = raises(lambda: cp.plain("allreduce", 10, "f32", "lsq"))
    errors["plain_f64"] = raises(lambda: cp.plain("allreduce", 10, torch.float64, "exp"))
    cp.close()

    # mismatch: rank 0 asks for exp, rank 1 for fp8 (each sees the other's header)
    c = D.communicator(policy="always", calibrate=False, timeout=10)
    x = torch.randn(1000) * 1e-2
    errors["mismatch"] = raises(lambda: c.allreduce(x, out=x.clone(), codec="exp" if rank == 0 else "fp8"))
    errors["broken_after"] = raises(lambda: c.allreduce(x, out=x.clone(), codec="exp"))


    # corrupt payload: rank 1 truncates every coded message it sends
    class Truncating(D.TorchTransport):
        def sendrecv(self, dst, payload, src, rcap, timeout):
            if payload is not None and payload.size > 64:
                payload = payload[:-5].copy()
            return super().sendrecv(dst, payload, src, rcap, timeout)

    tr = Truncating() if rank == 1 else D.TorchTransport()
    c2 = ibp._coll.Communicator(tr, policy="always", calibrate=False, timeout=3)
    y = torch.randn(4096) * 1e-2
    errors["corrupt"] = raises(lambda: c2.allreduce(y, out=y.clone(), codec="exp"))
    # the hook's collective fails on its worker thread (ranks disagree on the
    # codec; the transport's size check keeps gloo from ending the process on
    # a message larger than its receive): DDP's backward raises it, nothing
    # hangs
    # (last: the failed call leaves gloo's pairs closed; a group of its own)
    grp = dist.new_group(backend="gloo")
    hk = D.compressed_allreduce_hook("exp" if rank == 0 else "dynamiq", process_group=grp, policy="always",
                                     timeout=3)
    m = torch.nn.parallel.DistributedDataParallel(net(), process_group=grp)
    m.register_comm_hook(None, hk)

    def step():
        torch.nn.functional.mse_loss(m(xs[0]), ys[0]).backward()

    try:
        step()
        errors["hook_mismatch"] = "no error"
    except Exception as e:  # DDP wraps the future's ibp.Error
        errors["hook_mismatch"] = type(e).__name__ + ": " + str(e)
    res["errors"] = errors
    res["t"]["errors"] = time.monotonic() - t0


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return run_ranks(_scenarios, WORLD, str(tmp_path_factory.mktemp("ddp")))


def test_exp_hook_bit_identical_to_ddp(ranks):
    for r, d in enumerate(ranks):
        assert d["exp"]["identical_to_ref"], "rank %d: exp hook params differ from DDP without a hook" % r
        assert d["none"]["identical_to_ref"], "rank %d: the uncompressed ring differs from DDP" % r
        assert d["exp"]["losses"] == d["ref_losses"]
        assert d["exp"]["compressed"] == d["exp"]["calls"] > 0  # every bucket went through the codec
        assert d["none"]["compressed"] == 0
        assert d["exp"]["ratio"] > d["none"]["ratio"]  # fewer bytes on the wire than plain


def test_pieces_in_flight_over_torch(ranks):
    """TorchTransport's async table: pipelined rings give the whole-chunk bits."""
    for r, d in enumerate(ranks):
        p = d["pieces"]
        assert p["exp_vs_sum"] and p["none_vs_sum"], (r, p)
        assert p["dynamiq_vs_whole"] and p["ag_vs_cat"], (r, p)
        for codec, (piece, whole) in p["wire"].items():
            assert piece > whole + 20 * 32, (r, codec, piece, whole)  # the pieces' headers


def test_plain_buckets_go_native(ranks):
    for r, d in enumerate(ranks):
        n = d["never"]
        assert n["identical_to_ref"] and n["losses"] == d["ref_losses"], "rank %d" % r
        assert n["hook_native"] == STEPS and n["calls"] == 0, n  # one bucket a step, none through libibp
        assert n["plain_ar"] is True and n["plain_dq"] is True
        assert d["plain_api"] == {"none": True, "exp_uncalibrated": False, "dynamiq": False}
        assert d["exp"]["calls"] == STEPS  # policy "always": through libibp


def test_auto_trial_keeps_the_faster_path(ranks):
    choices = set()
    for r, d in enumerate(ranks):
        a = d["auto_trial"]
        assert a["identical_to_ref"], "rank %d" % r
        assert a["choice"] in ("native", "libibp"), a
        assert a["trial"]["native_s"] > 0 and a["trial"]["libibp_s"] > 0
        # steps 0-1 native, 2-7 alternate (native first), 8-11 the choice
        extra = 4 if a["choice"] == "native" else 0
        assert a["native"] == 2 + 3 + extra and a["calls"] == 3 + (4 - extra), a
        choices.add(a["choice"])
    assert len(choices) == 1, "ranks chose differently: %s" % choices


def test_lossy_hooks_converge_within_bounds(ranks):
    for r, d in enumerate(ranks):
        ref = d["ref_losses"]
        assert ref[-1] < 0.5 * ref[0]
        for codec in ("fp8", "dynamiq", "pts", "lsq"):
            x = d[codec]
            print("rank %d %s: loss %.4f -> %.4f, params %.4f of the travel from the exact run, ratio %.2f"
                  % (r, codec, x["losses"][0], x["losses"][-1], x["param_rel"], x["ratio"]))
        for codec in ("fp8", "dynamiq", "pts", "lsq"):
            x = d[codec]
            assert x["replicas_identical"], codec
            assert x["compressed"] == x["calls"] > 0, codec
            assert not x["identical_to_ref"], codec  # lossy: it did change the numbers
            assert x["losses"][-1] < 0.5 * x["losses"][0], codec
            assert x["param_rel"] < PARAM_BOUND[codec], codec


def test_allreduce_error_bounds(ranks):
    for d in ranks:
        e = d["allreduce"]
        assert e["exp"]["rel"] < 1e-7 and e["exp"]["bitexact_vs_f32_sum"]
        for codec, bound in REL_BOUND.items():
            print(codec, "relative L2 error %.4f (bound %.2f)" % (e[codec]["rel"], bound))
        print("pts squared error %.3g, bound %.3g" % (e["pts"]["sq"], e["pts"]["bound"]))
        for codec, bound in REL_BOUND.items():
            assert 0 < e[codec]["rel"] < bound, codec
        assert 0 < e["pts"]["sq"] < 3 * e["pts"]["bound"]
        for codec in e:
            assert e[codec]["identical"], codec
    # every rank got the same result
    assert ranks[0]["allreduce"]["fp8"]["rel"] == ranks[1]["allreduce"]["fp8"]["rel"]


def test_fsdp2_custom_collectives(ranks):
    for d in ranks:
        assert d["fsdp_exp"]["identical"]
        assert d["fsdp_exp"]["ag_compressed"] > 0 and d["fsdp_exp"]["rs_compressed"] > 0
        n = d["fsdp_native"]  # policy "never": torch.distributed's own collectives, the same numbers
        assert n["identical"], n
        assert n["ag"]["hook_native"] > 0 and n["rs"]["hook_native"] > 0, n
        assert n["ag"]["calls"] == 0 and n["rs"]["calls"] == 0, n
        assert n["native_avg"] is True, n  # FSDP2's AVG passed to gloo as it is (one call, asynchronous if asked)
        a = d["fsdp_auto"]  # trials: both ways taken, bit-identical, the same choice on every rank
        assert a["identical"], a
        assert a["ag"]["hook_native"] > 0 and a["ag"]["calls"] > 0, a  # calls: through libibp (its switcher decides)
        assert a["rs"]["hook_native"] > 0 and a["rs"]["calls"] > 0, a
        decided = {k: v for k, v in a["ag"]["hook_trials"].items() if v["choice"] is not None}
        assert decided and all(v["native_s"] > 0 and v["libibp_s"] > 0 for v in decided.values()), a
        assert all(v["choice"] is None for v in a["rs"]["hook_trials"].values()), a  # 4 calls: still on trial
        assert {k: v["choice"] for k, v in decided.items()} == {
            k: v["choice"] for k, v in ranks[0]["fsdp_auto"]["ag"]["hook_trials"].items() if v["choice"]}
        assert d["fsdp_trial_picks"] == {"native": {"allgather 1006 float32": "libibp"},
                                         "libibp": {"allgather 1006 float32": "native"}}, d["fsdp_trial_picks"]
        lossy = d["fsdp_lossy"]
        assert lossy["replicas_identical"]
        assert 0 < lossy["param_rel"] < 0.15
        assert lossy["losses"][-1] < lossy["losses"][0]


def test_errors_are_ibp_errors(ranks):
    for r, d in enumerate(ranks):
        e = d["errors"]
        assert e["unknown_codec"].startswith("InvalidArgumentError") and "zstd" in e["unknown_codec"]
        assert e["unknown_policy"].startswith("InvalidArgumentError")
        assert e["fsdp_ag_lsq"].startswith("InvalidArgumentError")
        assert e["fsdp_rs_dynamiq"].startswith("InvalidArgumentError")
        assert e["float64"].startswith("InvalidArgumentError")
        assert e["plain_op"].startswith("InvalidArgumentError") and "broadcast" in e["plain_op"], e["plain_op"]
        assert e["plain_lsq_ar"].startswith("InvalidArgumentError") and "lsq" in e["plain_lsq_ar"]
        assert e["plain_f64"].startswith("InvalidArgumentError")
        assert e["mismatch"].startswith("InvalidArgumentError") and "mismatch" in e["mismatch"], e["mismatch"]
        assert e["broken_after"].startswith("FileError") and "broken" in e["broken_after"], e["broken_after"]
        # the rank that sees the other's header names the mismatch; its peer
        # may instead lose the connection when that rank leaves: an I/O error
        assert "mismatch" in e["hook_mismatch"] or "I/O error" in e["hook_mismatch"], e["hook_mismatch"]
    assert any("mismatch" in d["errors"]["hook_mismatch"] for d in ranks), [d["errors"]["hook_mismatch"] for d in ranks]
    # rank 0 received the truncated payload; rank 1 then waited for rank 0 in
    # vain: a timeout, or gloo's "connection closed" once rank 0 has exited
    assert ranks[0]["errors"]["corrupt"].startswith("CorruptError"), ranks[0]["errors"]["corrupt"]
    assert ranks[1]["errors"]["corrupt"].startswith("FileError"), ranks[1]["errors"]["corrupt"]
    assert "from rank 0" in ranks[1]["errors"]["corrupt"]


def test_codec_table_matches_c():
    from ibp import _coll
    for name, cid in _coll.CODECS.items():
        assert _coll._c("ibp_coll_codec_name")(cid).decode() == name


def test_struct_mirrors_match_c(tmp_path):
    """_coll's ctypes mirrors against the C compiler's layout of coll.h."""
    import shutil
    import subprocess
    from conftest import REPO
    from ibp import _coll
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = tmp_path / "lay.c"
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include \"ibp/coll.h\"", "int main(void) {"]
    for cls, cname in ((_coll.CollOpts, "ibp_coll_opts_t"), (_coll.CollStats, "ibp_coll_stats_t"),
                       (_coll.CollTransport, "ibp_coll_transport_t")):
        lines.append('printf("%s %%zu\\n", sizeof(%s));' % (cname, cname))
        for f, _ in cls._fields_:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (cname, f, cname, f))
    lines.append("return 0; }")
    src.write_text("\n".join(lines))
    exe = tmp_path / "lay"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), str(src), "-o", str(exe)], check=True)
    got = dict(line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                       check=True).stdout.splitlines())
    import ctypes
    for cls, cname in ((_coll.CollOpts, "ibp_coll_opts_t"), (_coll.CollStats, "ibp_coll_stats_t"),
                       (_coll.CollTransport, "ibp_coll_transport_t")):
        assert int(got[cname]) == ctypes.sizeof(cls), cname
        for f, _ in cls._fields_:
            assert int(got["%s.%s" % (cname, f)]) == getattr(cls, f).offset, (cname, f)


def test_inproc_communicator_exp_equals_none():
    """The Python binding without torch: libibp's in-process transport,
    3 threads as ranks; exp and none give bit-identical sums."""
    import threading
    from ibp import _coll
    w = _coll.InprocWorld(3)
    out, errs = {}, []

    def run(r):
        try:
            with _coll.Communicator(w.transport(r), policy="always", calibrate=False) as c:
                x = (np.random.default_rng(r).standard_normal(5000) * 1e-3).astype(np.float32)
                out[r] = (c.allreduce(x, codec="exp"), c.allreduce(x, codec="none"), c.stats())
        except Exception as e:  # pragma: no cover (reported below)
            errs.append(e)

    ts = [threading.Thread(target=run, args=(r,)) for r in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    w.close()
    assert not errs, errs
    for r in range(3):
        a, b, st = out[r]
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert np.array_equal(a.view(np.uint32), out[0][0].view(np.uint32))
        assert st["compressed"] == 1 and st["plain"] == 1
    with pytest.raises(ibp.InvalidArgumentError):
        _coll.codec_id("gzip", "t")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
