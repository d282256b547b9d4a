/* harness_cache.cpp - the slab cache's device steps (kernels/slab_cache.cu:
 * probe, erase, insert, gather-from-slab, and the table's device memory from
 * cache/slab_cudahost.c) on the emulator, against their CPU twins
 * (cache/slab_batch.c), round after round of a random batch sequence on two
 * copies of one table (host memory for the twins, emulator device memory
 * for the kernels): every probe entry and pin count, every staged byte,
 * length and codec byte, the erase counts, and after each round the index
 * (each live key once, with the same entry) and every resident slot's
 * bytes. Probes carry many duplicates, so pins of one slot come from many
 * threads at once. A small index makes chains long and wrap around. Then
 * erase, insert and probe launched at the same time (concurrent_case), and
 * the product's launches on two streams (stream_case).
 * Suite streams: the emulator's streams and events (emu.h), with host code
 * that uses them (src/mem/pinned_cudahost.c).
 * Usage: harness_cache [cache|streams] [--seed S] [--quick] [--defect N] [--preempt M]
 * (run.sh builds and runs it; exit status 0 = all equal). */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "k_slab.inc"

extern "C" {
#include "../../cache/slab_batch.h"
#include "ibp/alloc.h"
}
#include "../../cache/slab_cudahost.c"


#include "harness_check.h"

template <class T> static T *dev(size_t n, const char *name)
{
	T *p = (T *)emu_dev_alloc(n * sizeof(T) + 1, 0, name);
	memset((void *)p, 0xA7, n * sizeof(T) + 1);
	return p;
}

struct Slot {
	int64_t key;
	uint64_t entry;
};

/* One table geometry run for `rounds` rounds. */
static void run_case(uint64_t cap, uint64_t nslabs, int rounds)
{
	const uint32_t nclasses = 4;
	const uint32_t slot_bytes[nclasses] = { 48, 128, 272, 512 };
	const uint64_t slab_bytes = 2048, spp = slab_bytes / slot_bytes[0], nslots = nslabs * spp;
	const uint64_t mem_bytes = nslabs * slab_bytes;
	/* host twin table */
	std::vector<int64_t> hkeys(cap, IBP_SLAB_KEY_EMPTY);
	std::vector<uint64_t> hvals(cap, 0);
	std::vector<uint32_t> hpin(nslots, 0);
	std::vector<uint16_t> hmeta(nslots, 0);
	std::vector<uint8_t> hmem(mem_bytes, 0x5C);
	ibp_slab_table_t H = { hkeys.data(), hvals.data(), cap, hpin.data(), hmeta.data(), hmem.data(), slot_bytes, spp,
			       slab_bytes };
	/* device table */
	ibp_slab_table_t D;
	OK(ibpi_slab_table_alloc_cuda(&D, cap, nslots, mem_bytes, slot_bytes, nclasses));
	D.spp = spp;
	D.slab_bytes = slab_bytes;
	memset(D.mem, 0x5C, mem_bytes);
	/* model: each slab's class, its free slots, the live keys */
	std::vector<int> scls(nslabs);
	std::vector<std::vector<uint64_t>> freeslots(nslabs);
	for (uint64_t s = 0; s < nslabs; s++) {
		scls[s] = (int)(rnd() % nclasses);
		for (uint64_t b = 0; b < slab_bytes / slot_bytes[scls[s]]; b++)
			freeslots[s].push_back(b);
	}
	std::map<int64_t, uint64_t> live; /* key -> entry */
	int64_t next_key = (int64_t)(rnd() % 1000);
	unsigned long long *dcount = dev<unsigned long long>(2, "counters");
	const uint64_t maxn = 160;
	int64_t *dids = dev<int64_t>(maxn, "ids");
	uint64_t *dent = dev<uint64_t>(maxn, "entries");
	ibp_slab_insert_op_t *dops = dev<ibp_slab_insert_op_t>(maxn, "insert ops");
	uint8_t *dsrc = dev<uint8_t>(maxn * 512, "source bytes");
	std::vector<uint8_t> hsrc(maxn * 512);
	const uint64_t stride = 520;
	uint8_t *dstage = dev<uint8_t>(maxn * stride, "stage");
	uint32_t *dlen = dev<uint32_t>(maxn, "lengths");
	uint32_t *dmeta = dev<uint32_t>(maxn, "codec bytes");

	for (int round = 0; round < rounds; round++) {
		/* ---- erase: some live keys (victims, invalidations) and some absent ones ---- */
		std::vector<int64_t> er;
		for (auto &kv : live)
			if (rnd() % 4 == 0 && er.size() < maxn / 2)
				er.push_back(kv.first);
		for (int i = 0; i < 5; i++)
			er.push_back(next_key + 100000 + (int64_t)(rnd() % 1000)); /* never inserted */
		std::shuffle(er.begin(), er.end(), std::mt19937_64(rnd()));
		unsigned long long hn = 0;
		OK(ibpi_slab_erase(&H, er.data(), er.size(), &hn));
		memcpy(dids, er.data(), er.size() * 8);
		dcount[0] = 0;
		OK(ibpi_slab_erase_cuda(&D, dids, er.size(), dcount, nullptr));
		CHECK(dcount[0] == hn, "round %d: erase counted %llu, twin %llu", round, dcount[0], hn);
		for (int64_t k : er) {
			auto it = live.find(k);
			if (it == live.end())
				continue;
			uint64_t e = it->second, s = IBP_SLAB_SLAB(e);
			freeslots[s].push_back(IBP_SLAB_SLOT(e));
			live.erase(it);
		}
		/* ---- insert: new keys into free slots (keys with ids colliding on purpose) ---- */
		std::vector<ibp_slab_insert_op_t> hops, dv;
		uint64_t want = 1 + rnd() % (maxn / 2);
		for (uint64_t i = 0; i < want && live.size() + hops.size() < cap * 3 / 4; i++) {
			uint64_t s = rnd() % nslabs;
			if (freeslots[s].empty())
				continue;
			size_t j = rnd() % freeslots[s].size();
			uint64_t b = freeslots[s][j];
			freeslots[s].erase(freeslots[s].begin() + (long)j);
			uint32_t cls = (uint32_t)scls[s];
			uint64_t len = rnd() % 7 == 0 ? 0 : 1 + rnd() % slot_bytes[cls];
			uint64_t e = IBP_SLAB_ENTRY(IBP_SLAB_READY, cls, len, s, b);
			uint64_t k = hops.size();
			for (uint64_t x = 0; x < len; x++)
				hsrc[k * 512 + x] = (uint8_t)rnd();
			ibp_slab_insert_op_t o = { next_key, e, &hsrc[k * 512], (uint32_t)(rnd() % 65536) };
			next_key += 1 + (int64_t)(rnd() % 3);
			hops.push_back(o);
			o.src = dsrc + k * 512;
			dv.push_back(o);
			live[o.key] = e;
		}
		memcpy(dsrc, hsrc.data(), hops.size() * 512);
		hn = 0;
		OK(ibpi_slab_insert(&H, hops.data(), hops.size(), &hn));
		if (!dv.empty())
			memcpy(dops, dv.data(), dv.size() * sizeof(ibp_slab_insert_op_t));
		dcount[1] = 0;
		OK(ibpi_slab_insert_cuda(&D, dops, dv.size(), dcount + 1, nullptr));
		CHECK(hn == 0 && dcount[1] == 0, "round %d: full table (twin %llu, device %llu)", round, hn, dcount[1]);
		/* ---- probe with duplicates, then gather and unpin ---- */
		std::vector<int64_t> ids;
		std::vector<int64_t> keys;
		for (auto &kv : live)
			keys.push_back(kv.first);
		uint64_t n = 1 + rnd() % maxn;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t r = rnd() % 10;
			if (r < 4 && !keys.empty())
				ids.push_back(keys[rnd() % std::min<size_t>(keys.size(), 3)]); /* hot: many pins of one slot */
			else if (r < 8 && !keys.empty())
				ids.push_back(keys[rnd() % keys.size()]);
			else if (r < 9)
				ids.push_back(next_key + 5000 + (int64_t)(rnd() % 100)); /* absent */
			else
				ids.push_back(-1 - (int64_t)(rnd() % 3)); /* never a key */
		}
		std::vector<uint64_t> hent(n);
		OK(ibpi_slab_probe(&H, ids.data(), n, hent.data(), 1));
		memcpy(dids, ids.data(), n * 8);
		OK(ibpi_slab_probe_cuda(&D, dids, n, dent, 1, nullptr));
		for (uint64_t k = 0; k < n; k++) {
			CHECK(dent[k] == hent[k], "round %d: probe %llu (id %lld): entry %llx, twin %llx", round,
			      (unsigned long long)k, (long long)ids[k], (unsigned long long)dent[k],
			      (unsigned long long)hent[k]);
			auto it = live.find(ids[k]);
			CHECK(hent[k] == (it == live.end() ? 0 : it->second), "round %d: twin probe of %lld wrong", round,
			      (long long)ids[k]);
		}
		CHECK(!memcmp(D.pin, hpin.data(), nslots * 4), "round %d: pin counts differ after the probe", round);
		std::vector<uint8_t> hstage(n * stride, 0x3E);
		memset(dstage, 0x3E, n * stride);
		std::vector<uint32_t> hlen(n), hm(n);
		OK(ibpi_slab_gather(&H, hent.data(), n, hstage.data(), stride, hlen.data(), hm.data(), 1));
		OK(ibpi_slab_gather_cuda(&D, dent, n, dstage, stride, dlen, dmeta, 1, nullptr));
		CHECK(!memcmp(dlen, hlen.data(), n * 4), "round %d: gathered lengths differ", round);
		CHECK(!memcmp(dmeta, hm.data(), n * 4), "round %d: gathered codec bytes differ", round);
		CHECK(!memcmp(dstage, hstage.data(), n * stride), "round %d: staged bytes differ", round);
		for (uint32_t p : hpin)
			CHECK(p == 0, "round %d: a slot still pinned after the gather", round);
		CHECK(!memcmp(D.pin, hpin.data(), nslots * 4), "round %d: pins differ after the gather", round);
		/* ---- the index and the slots ---- */
		std::map<int64_t, uint64_t> seen;
		for (uint64_t p = 0; p < cap; p++) {
			int64_t k = D.keys[p];
			CHECK(k >= 0 || k == IBP_SLAB_KEY_EMPTY || k == IBP_SLAB_KEY_TOMB, "bad key %lld", (long long)k);
			if (k < 0)
				continue;
			CHECK(!seen.count(k), "round %d: key %lld stored twice on the device", round, (long long)k);
			seen[k] = D.vals[p];
		}
		CHECK(seen == live, "round %d: device index has %zu keys, the model %zu (or other entries)", round,
		      seen.size(), live.size());
		for (auto &kv : live) {
			uint64_t e = kv.second, l = IBP_SLAB_LEN(e);
			CHECK(!memcmp(ibp_slab_addr(&D, e), ibp_slab_addr(&H, e), l), "round %d: slot bytes of %lld differ",
			      round, (long long)kv.first);
			CHECK(D.meta[ibp_slab_slot(&D, e)] == hmeta[ibp_slab_slot(&H, e)], "round %d: codec byte differs", round);
		}
	}
	emu_dev_free(dcount);
	emu_dev_free(dids);
	emu_dev_free(dent);
	emu_dev_free(dops);
	emu_dev_free(dsrc);
	emu_dev_free(dstage);
	emu_dev_free(dlen);
	emu_dev_free(dmeta);
	ibpi_slab_table_free_cuda(&D);
	CHECK(D.keys == nullptr && D.mem == nullptr, "table not cleared by free");
}

/* Launches running at the same time, as on three streams: an erase of some
 * live keys, an insert of new keys (into positions those tombstones free,
 * on a small index) and a probe of old, erased, new and absent ids, their
 * blocks interleaved by the emulator (emu_run_grids; no access of one
 * ordered with another's). A key live throughout is always found with its
 * entry; an erased or inserted one is found with its own entry or missed,
 * never with another row's; afterwards the index holds exactly the model's
 * keys and no CLAIMED position is left. */
static void concurrent_case(uint64_t cap, int rounds)
{
	const uint32_t nclasses = 2;
	const uint32_t slot_bytes[nclasses] = { 64, 256 };
	const uint64_t nslabs = 8, slab_bytes = 4096, spp = slab_bytes / slot_bytes[0], nslots = nslabs * spp;
	ibp_slab_table_t D;
	OK(ibpi_slab_table_alloc_cuda(&D, cap, nslots, nslabs * slab_bytes, slot_bytes, nclasses));
	D.spp = spp;
	D.slab_bytes = slab_bytes;
	std::vector<std::vector<uint64_t>> freeslots(nslabs);
	for (uint64_t s = 0; s < nslabs; s++)
		for (uint64_t b = 0; b < slab_bytes / slot_bytes[s % nclasses]; b++)
			freeslots[s].push_back(b);
	std::map<int64_t, uint64_t> live;
	int64_t next_key = 7;
	const uint64_t maxn = 96;
	int64_t *der = dev<int64_t>(maxn, "erased ids"), *dids = dev<int64_t>(maxn, "probed ids");
	uint64_t *dent = dev<uint64_t>(maxn, "entries");
	ibp_slab_insert_op_t *dops = dev<ibp_slab_insert_op_t>(maxn, "insert ops");
	uint8_t *dsrc = dev<uint8_t>(maxn * 64, "source bytes");
	unsigned long long *dcount = dev<unsigned long long>(2, "counters");
	for (int round = 0; round < rounds; round++) {
		std::vector<int64_t> er, stay;
		for (auto &kv : live)
			(rnd() % 3 == 0 && er.size() < maxn / 3 ? er : stay).push_back(kv.first);
		std::vector<ibp_slab_insert_op_t> ops;
		std::map<int64_t, uint64_t> born;
		const uint64_t want = 1 + rnd() % (maxn / 3);
		for (uint64_t i = 0; i < want && stay.size() + ops.size() < cap / 2; i++) {
			uint64_t s = rnd() % nslabs;
			if (freeslots[s].empty())
				continue;
			const uint64_t b = freeslots[s].back();
			freeslots[s].pop_back();
			const uint32_t cls = (uint32_t)(s % nclasses);
			const uint64_t len = 1 + rnd() % 64, k = ops.size();
			for (uint64_t x = 0; x < len; x++)
				dsrc[k * 64 + x] = (uint8_t)rnd();
			const uint64_t e = IBP_SLAB_ENTRY(IBP_SLAB_READY, cls, len, s, b);
			int64_t key = next_key;
			if (i < er.size()) /* most new keys start their chain where an erased key was: its tombstone is theirs */
				while ((ibp_slab_hash(key) & (cap - 1)) != (ibp_slab_hash(er[i]) & (cap - 1)))
					key++;
			ops.push_back({ key, e, dsrc + k * 64, (uint32_t)(rnd() % 65536) });
			born[key] = e;
			next_key = key + 1 + (int64_t)(rnd() % 5);
		}
		std::vector<int64_t> ids;
		const uint64_t n = 16 + rnd() % (maxn - 16);
		for (uint64_t i = 0; i < n; i++) {
			const uint64_t r = rnd() % 8;
			if (r < 3 && !stay.empty())
				ids.push_back(stay[rnd() % stay.size()]);
			else if (r < 5 && !er.empty())
				ids.push_back(er[rnd() % er.size()]);
			else if (r < 7 && !ops.empty())
				ids.push_back(ops[rnd() % ops.size()].key);
			else
				ids.push_back(next_key + 1000 + (int64_t)(rnd() % 50)); /* absent */
		}
		if (!er.empty())
			memcpy(der, er.data(), er.size() * 8);
		memcpy(dids, ids.data(), n * 8);
		if (!ops.empty())
			memcpy(dops, ops.data(), ops.size() * sizeof(ops[0]));
		dcount[0] = dcount[1] = 0;
		memset(dent, 0xEE, n * 8);
		/* the launches the _cuda functions make, all three at once */
		typedef void (*erase_k)(ibp_slab_table_t, const int64_t *, uint64_t, ull *);
		typedef void (*insert_k)(ibp_slab_table_t, const ibp_slab_insert_op_t *, uint64_t, ull *);
		typedef void (*probe_k)(ibp_slab_table_t, const int64_t *, uint64_t, uint64_t *, int);
		emu_job_t<erase_k, ibp_slab_table_t, const int64_t *, uint64_t, ull *> je(
			erase_kernel, D, der, (uint64_t)er.size(), (ull *)dcount);
		emu_job_t<insert_k, ibp_slab_table_t, const ibp_slab_insert_op_t *, uint64_t, ull *> ji(
			insert_kernel, D, dops, (uint64_t)ops.size(), (ull *)dcount + 1);
		emu_job_t<probe_k, ibp_slab_table_t, const int64_t *, uint64_t, uint64_t *, int> jp(probe_kernel, D, dids, n,
												dent, 0);
		std::vector<emu_grid_spec> g;
		/* warps, not the real launches' 256-thread blocks (the kernels loop over
		 * their grid), so that the scheduler interleaves them densely */
		if (!er.empty())
			g.push_back({ &je, emu_dim3(1), emu_dim3(32), 0, "slab erase" });
		if (!ops.empty())
			g.push_back({ &ji, emu_dim3((unsigned)std::min<size_t>(ops.size(), 4)), emu_dim3(32), 0, "slab insert" });
		g.push_back({ &jp, emu_dim3(2), emu_dim3(32), 0, "slab probe" });
		emu_stall_rate = 4;
		emu_run_grids(g.data(), (int)g.size());
		emu_stall_rate = 0;
		CHECK(dcount[0] == er.size(), "concurrent round %d: %llu of %zu keys erased", round, dcount[0], er.size());
		CHECK(dcount[1] == 0, "concurrent round %d: the index was full", round);
		for (uint64_t k = 0; k < n; k++) {
			const int64_t id = ids[k];
			const uint64_t e = dent[k];
			const auto lv = live.find(id);
			const auto bn = born.find(id);
			const bool erased = std::find(er.begin(), er.end(), id) != er.end();
			if (lv != live.end() && !erased)
				CHECK(e == lv->second, "concurrent round %d: live id %lld probed %llx, not its entry %llx", round,
				      (long long)id, (unsigned long long)e, (unsigned long long)lv->second);
			else if (erased)
				CHECK(e == 0 || e == lv->second, "concurrent round %d: erased id %lld probed %llx (another row's)",
				      round, (long long)id, (unsigned long long)e);
			else if (bn != born.end())
				CHECK(e == 0 || e == bn->second, "concurrent round %d: inserted id %lld probed %llx (another row's)",
				      round, (long long)id, (unsigned long long)e);
			else
				CHECK(e == 0, "concurrent round %d: absent id %lld probed %llx", round, (long long)id,
				      (unsigned long long)e);
		}
		for (int64_t k : er) {
			const uint64_t e = live[k];
			freeslots[IBP_SLAB_SLAB(e)].push_back(IBP_SLAB_SLOT(e));
			live.erase(k);
		}
		for (auto &kv : born)
			live[kv.first] = kv.second;
		std::map<int64_t, uint64_t> seen;
		for (uint64_t p = 0; p < cap; p++) {
			const int64_t k = D.keys[p];
			CHECK(k >= 0 || k == IBP_SLAB_KEY_EMPTY || k == IBP_SLAB_KEY_TOMB, "concurrent round %d: key %lld left",
			      round, (long long)k);
			if (k >= 0)
				seen[k] = D.vals[p];
		}
		CHECK(seen == live, "concurrent round %d: the index has %zu keys, the model %zu (or other entries)", round,
		      seen.size(), live.size());
		for (const auto &o : ops)
			CHECK(!memcmp(ibp_slab_addr(&D, o.entry), o.src, IBP_SLAB_LEN(o.entry)),
			      "concurrent round %d: slot bytes of %lld", round, (long long)o.key);
	}
	emu_dev_free(der);
	emu_dev_free(dids);
	emu_dev_free(dent);
	emu_dev_free(dops);
	emu_dev_free(dsrc);
	emu_dev_free(dcount);
	ibpi_slab_table_free_cuda(&D);
}

/* The same protocol through the product's own launches on two streams
 * (the emulator's streams: emu.h): erase and insert on stream A, probe
 * (pinning) and gather (unpinning) on stream B, with nothing ordering the
 * two streams inside a round. Besides the concurrent_case rules, every hit
 * gathers its own row's bytes and codec byte, every pin is released, and
 * the gather's reads of freshly inserted slots must be ordered by the
 * protocol itself (release: the insert's fence and key store; acquire: the
 * probe's key load and fence), else the emulator reports a race (defect
 * 32 drops the __syncwarp that puts the lanes' bytes before the key). */
static void stream_case(uint64_t cap, int rounds)
{
	const uint32_t nclasses = 2;
	const uint32_t slot_bytes[nclasses] = { 64, 256 };
	const uint64_t nslabs = 8, slab_bytes = 4096, spp = slab_bytes / slot_bytes[0], nslots = nslabs * spp;
	ibp_slab_table_t D;
	OK(ibpi_slab_table_alloc_cuda(&D, cap, nslots, nslabs * slab_bytes, slot_bytes, nclasses));
	D.spp = spp;
	D.slab_bytes = slab_bytes;
	cudaStream_t sa, sb;
	CHECK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking) == cudaSuccess, "stream");
	CHECK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking) == cudaSuccess, "stream");
	std::vector<std::vector<uint64_t>> freeslots(nslabs);
	for (uint64_t s = 0; s < nslabs; s++)
		for (uint64_t b = 0; b < slab_bytes / slot_bytes[s % nclasses]; b++)
			freeslots[s].push_back(b);
	struct Row {
		uint64_t entry;
		uint32_t meta;
		std::vector<uint8_t> bytes;
	};
	std::map<int64_t, Row> live;
	int64_t next_key = 7;
	const uint64_t maxn = 96, stride = 72;
	int64_t *der = dev<int64_t>(maxn, "erased ids"), *dids = dev<int64_t>(maxn, "probed ids");
	uint64_t *dent = dev<uint64_t>(maxn, "entries");
	ibp_slab_insert_op_t *dops = dev<ibp_slab_insert_op_t>(maxn, "insert ops");
	uint8_t *dsrc = dev<uint8_t>(maxn * 64, "source bytes"), *dstage = dev<uint8_t>(maxn * stride, "stage");
	uint32_t *dlen = dev<uint32_t>(maxn, "lengths"), *dmeta = dev<uint32_t>(maxn, "codec bytes");
	unsigned long long *dcount = dev<unsigned long long>(2, "counters");
	uint64_t fresh_hits = 0;
	for (int round = 0; round < rounds; round++) {
		std::vector<int64_t> er, stay;
		for (auto &kv : live)
			(rnd() % 3 == 0 && er.size() < maxn / 3 ? er : stay).push_back(kv.first);
		std::vector<ibp_slab_insert_op_t> ops;
		std::map<int64_t, Row> born;
		const uint64_t want = 1 + rnd() % (maxn / 3);
		for (uint64_t i = 0; i < want && stay.size() + ops.size() < cap / 2; i++) {
			uint64_t s = rnd() % nslabs;
			if (freeslots[s].empty())
				continue;
			const uint64_t b = freeslots[s].back();
			freeslots[s].pop_back();
			const uint32_t cls = (uint32_t)(s % nclasses);
			const uint64_t len = 2 + rnd() % 63, k = ops.size();
			Row row;
			row.entry = IBP_SLAB_ENTRY(IBP_SLAB_READY, cls, len, s, b);
			row.meta = (uint32_t)(rnd() % 65536);
			for (uint64_t x = 0; x < len; x++)
				row.bytes.push_back((uint8_t)rnd());
			memcpy(dsrc + k * 64, row.bytes.data(), len);
			int64_t key = next_key;
			if (i < er.size()) /* chains that start where an erased key was */
				while ((ibp_slab_hash(key) & (cap - 1)) != (ibp_slab_hash(er[i]) & (cap - 1)))
					key++;
			ops.push_back({ key, row.entry, dsrc + k * 64, row.meta });
			born[key] = row;
			next_key = key + 1 + (int64_t)(rnd() % 5);
		}
		std::vector<int64_t> ids;
		const uint64_t n = 16 + rnd() % (maxn - 16);
		for (uint64_t i = 0; i < n; i++) {
			const uint64_t r = rnd() % 8;
			if (r < 3 && !stay.empty())
				ids.push_back(stay[rnd() % stay.size()]);
			else if (r < 4 && !er.empty())
				ids.push_back(er[rnd() % er.size()]);
			else if (r < 7 && !ops.empty())
				ids.push_back(ops[rnd() % ops.size()].key);
			else
				ids.push_back(next_key + 1000 + (int64_t)(rnd() % 50)); /* absent */
		}
		if (!er.empty())
			memcpy(der, er.data(), er.size() * 8);
		memcpy(dids, ids.data(), n * 8);
		if (!ops.empty())
			memcpy(dops, ops.data(), ops.size() * sizeof(ops[0]));
		dcount[0] = dcount[1] = 0;
		memset(dstage, 0xEE, n * stride);
		emu_stall_rate = 4;
		OK(ibpi_slab_erase_cuda(&D, der, er.size(), dcount, sa));
		OK(ibpi_slab_probe_cuda(&D, dids, n, dent, 1, sb));
		OK(ibpi_slab_insert_cuda(&D, dops, ops.size(), dcount + 1, sa));
		OK(ibpi_slab_gather_cuda(&D, dent, n, dstage, stride, dlen, dmeta, 1, sb));
		CHECK_NOW(cudaStreamSynchronize(sb) == cudaSuccess && cudaStreamSynchronize(sa) == cudaSuccess, "sync");
		emu_stall_rate = 0;
		CHECK(dcount[0] == er.size() && dcount[1] == 0, "stream round %d: %llu of %zu erased, full %llu", round,
		      dcount[0], er.size(), dcount[1]);
		for (uint64_t k = 0; k < n; k++) {
			const int64_t id = ids[k];
			const uint64_t e = dent[k];
			const auto lv = live.find(id);
			const auto bn = born.find(id);
			const bool erased = std::find(er.begin(), er.end(), id) != er.end();
			const Row *row = lv != live.end() ? &lv->second : bn != born.end() ? &bn->second : nullptr;
			if (row && !erased && lv != live.end())
				CHECK(e == row->entry, "stream round %d: live id %lld probed %llx", round, (long long)id,
				      (unsigned long long)e);
			else
				CHECK(e == 0 || (row && e == row->entry), "stream round %d: id %lld probed %llx (another row's)",
				      round, (long long)id, (unsigned long long)e);
			if (!e) {
				CHECK(dlen[k] == 0 && dmeta[k] == 0, "stream round %d: a miss gathered something", round);
				continue;
			}
			fresh_hits += bn != born.end();
			CHECK(dlen[k] == row->bytes.size() && dmeta[k] == row->meta &&
				      !memcmp(dstage + k * stride, row->bytes.data(), row->bytes.size()),
			      "stream round %d: id %lld gathered the wrong bytes", round, (long long)id);
		}
		for (uint64_t s = 0; s < nslots; s++)
			CHECK(D.pin[s] == 0, "stream round %d: slot %llu still pinned", round, (unsigned long long)s);
		for (int64_t k : er) {
			const uint64_t e = live[k].entry;
			freeslots[IBP_SLAB_SLAB(e)].push_back(IBP_SLAB_SLOT(e));
			live.erase(k);
		}
		for (auto &kv : born)
			live[kv.first] = kv.second;
	}
	CHECK(fresh_hits > 0, "no probe ever found a key inserted beside it in %d rounds", rounds);
	printf("cache: streams: %llu hits on keys inserted on the other stream\n", (unsigned long long)fresh_hits);
	cudaStreamDestroy(sa);
	cudaStreamDestroy(sb);
	emu_dev_free(der);
	emu_dev_free(dids);
	emu_dev_free(dent);
	emu_dev_free(dops);
	emu_dev_free(dsrc);
	emu_dev_free(dstage);
	emu_dev_free(dlen);
	emu_dev_free(dmeta);
	emu_dev_free(dcount);
	ibpi_slab_table_free_cuda(&D);
}

/* ---------------- the emulator's streams and events themselves ----------------
 * Small kernels and the runtime's calls, each pattern as product code uses
 * it: results right and no report when the order is there; the planted
 * defects (run.sh defects) take one order away and must be reported. */
__global__ void sk_fill(uint32_t *d, uint64_t n, uint32_t v)
{
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		d[i] = v ^ (uint32_t)i;
}
__global__ void sk_add(uint32_t *d, uint64_t n, uint32_t v)
{
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		d[i] += v;
}
__global__ void sk_copy(uint32_t *dst, const uint32_t *src, uint64_t n)
{
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		dst[i] = src[i];
}
template <class K, class... A> static void launch(cudaStream_t s, K k, A... a)
{
	emu_kcall(dim3(2), dim3(64), 0, s).run(k, a...);
}
#define CU(x) CHECK_NOW((x) == cudaSuccess, "%s failed", #x)

static void streams_suite(int rounds)
{
	const uint64_t n = 300;
	cudaStream_t a, b, blk;
	CU(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
	CU(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
	CU(cudaStreamCreate(&blk));
	cudaEvent_t ev, ev2;
	CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	CU(cudaEventCreate(&ev2));
	uint32_t *d, *e, *pin, *stage;
	CU(cudaMalloc((void **)&d, n * 4));
	CU(cudaMalloc((void **)&e, n * 4));
	CU(cudaHostAlloc((void **)&pin, n * 4, cudaHostAllocMapped));
	CU(cudaMallocHost((void **)&stage, n * 4));
	uint64_t notready = 0, wrong = 0;
	for (int r = 0; r < rounds; r++) {
		const uint32_t v = (uint32_t)rnd();
		/* 1. one stream in order: pinned to device, a kernel, device to a pinned stage */
		for (uint64_t i = 0; i < n; i++)
			pin[i] = v + (uint32_t)i;
		CU(cudaMemcpyAsync(d, pin, n * 4, cudaMemcpyHostToDevice, a));
		launch(a, sk_add, d, n, 3u);
		CU(cudaMemcpyAsync(stage, d, n * 4, cudaMemcpyDeviceToHost, a));
		if (emu_defect == 30) /* defect 30: the stage read before its stream is synchronized */
			wrong += stage[n / 2] != v + (uint32_t)(n / 2) + 3;
		CU(cudaStreamSynchronize(a));
		for (uint64_t i = 0; i < n; i++)
			wrong += stage[i] != v + (uint32_t)i + 3;
		/* 2. two streams ordered by an event; the host polls the second */
		launch(a, sk_fill, e, n, v);
		CU(cudaEventRecord(ev, a));
		if (emu_defect != 29) /* defect 29: no wait for the event */
			CU(cudaStreamWaitEvent(b, ev, 0));
		launch(b, sk_copy, d, (const uint32_t *)e, n);
		CU(cudaMemcpyAsync(stage, d, n * 4, cudaMemcpyDeviceToHost, b));
		cudaError_t q;
		while ((q = cudaStreamQuery(b)) == cudaErrorNotReady)
			notready++;
		CU(q);
		for (uint64_t i = 0; i < n; i++)
			wrong += stage[i] != (v ^ (uint32_t)i);
		/* 3. the legacy default stream and a blocking stream order each other;
		 * cudaMemcpy waits */
		launch(nullptr, sk_fill, e, n, v + 1);
		launch(blk, sk_add, e, n, 5u);
		launch(nullptr, sk_copy, d, (const uint32_t *)e, n);
		CU(cudaMemcpy(stage, d, n * 4, cudaMemcpyDeviceToHost));
		for (uint64_t i = 0; i < n; i++)
			wrong += stage[i] != ((v + 1) ^ (uint32_t)i) + 5;
		/* 4. a kernel writes mapped pinned memory; the host polls an event */
		launch(a, sk_fill, pin, n, v + 2);
		CU(cudaEventRecord(ev2, a));
		while ((q = cudaEventQuery(ev2)) == cudaErrorNotReady)
			notready++;
		CU(q);
		for (uint64_t i = 0; i < n; i++)
			wrong += pin[i] != ((v + 2) ^ (uint32_t)i);
		/* 5. a stream-ordered allocation used on two streams, freed after both */
		uint32_t *t = nullptr;
		CU(cudaMallocAsync((void **)&t, n * 4, b));
		launch(b, sk_fill, t, n, v + 3);
		CU(cudaEventRecord(ev, b));
		CU(cudaStreamWaitEvent(a, ev, 0));
		launch(a, sk_copy, d, (const uint32_t *)t, n);
		CU(cudaEventRecord(ev2, a));
		if (emu_defect != 33) /* defect 33: freed while the other stream may still read it */
			CU(cudaStreamWaitEvent(b, ev2, 0));
		CU(cudaFreeAsync(t, b));
		CU(cudaMemcpyAsync(stage, d, n * 4, cudaMemcpyDeviceToHost, a));
		CU(cudaEventSynchronize(ev2));
		CU(cudaStreamSynchronize(a));
		CU(cudaStreamSynchronize(b));
		for (uint64_t i = 0; i < n; i++)
			wrong += stage[i] != ((v + 3) ^ (uint32_t)i);
		/* 6. pinned blocks freed in stream order (src/mem/pinned_cudahost.c): the
		 * block a copy reads is not handed out again before the copy is done
		 * (defect 31: it is, and the host's writes into the new block race
		 * with the copy) */
		uint8_t *p = nullptr, *p2 = nullptr;
		OK(ibp_pinned_alloc(n * 4, 0, 0, (void **)&p));
		CHECK_NOW(ibp_pinned_owns(p), "not pinned memory");
		for (uint64_t i = 0; i < n * 4; i++)
			p[i] = (uint8_t)(v + i);
		CU(cudaMemcpyAsync(d, p, n * 4, cudaMemcpyHostToDevice, a));
		OK(ibp_pinned_free_async(p, a));
		OK(ibp_pinned_alloc(n * 4, 0, 0, (void **)&p2));
		for (uint64_t i = 0; i < n * 4; i++)
			p2[i] = 0xEE;
		CU(cudaMemcpyAsync(stage, d, n * 4, cudaMemcpyDeviceToHost, a));
		CU(cudaStreamSynchronize(a));
		for (uint64_t i = 0; i < n * 4; i++)
			wrong += ((uint8_t *)stage)[i] != (uint8_t)(v + i);
		ibp_pinned_free(p2);
	}
	CHECK_NOW(wrong == 0, "streams: %llu wrong values", (unsigned long long)wrong);
	CHECK_NOW(notready > 0, "streams: the device never ran behind the host in %d rounds", rounds);
	uint64_t reserved = 0, in_use = 1;
	CU(cudaDeviceSynchronize());
	void *x = nullptr;
	OK(ibp_pinned_alloc(64, 0, 0, &x)); /* reclaims the parked blocks */
	ibp_pinned_free(x);
	ibp_pinned_stats(&reserved, &in_use);
	CHECK_NOW(in_use == 0, "pinned: %llu bytes still in use after the streams finished (%llu reserved)",
		  (unsigned long long)in_use, (unsigned long long)reserved);
	/* errors as the runtime gives them */
	CHECK_NOW(cudaEventRecord(nullptr, a) == cudaErrorInvalidResourceHandle, "record on no event");
	CHECK_NOW(cudaStreamCreateWithFlags(&blk, 7u) == cudaErrorInvalidValue, "bad stream flags");
	CHECK_NOW(cudaFreeAsync(pin, a) == cudaErrorInvalidValue, "cudaFreeAsync of pinned memory");
	CHECK_NOW(cudaFreeHost(d) == cudaErrorInvalidValue, "cudaFreeHost of device memory");
	(void)cudaGetLastError();
	cudaEvent_t never;
	CU(cudaEventCreate(&never));
	CHECK_NOW(cudaEventQuery(never) == cudaSuccess, "a never-recorded event is complete");
	CU(cudaStreamWaitEvent(a, never, 0)); /* nothing to wait for */
	CU(cudaEventDestroy(never));
	printf("streams: %d rounds, the host polled %llu times while the device ran behind it, %llu operations\n",
	       rounds, (unsigned long long)notready, (unsigned long long)emu_stat_async_ops);
	CU(cudaFree(d));
	CU(cudaFree(e));
	CU(cudaFreeHost(pin));
	CU(cudaFreeHost(stage));
	CU(cudaEventDestroy(ev));
	CU(cudaEventDestroy(ev2));
	CU(cudaStreamDestroy(a));
	CU(cudaStreamDestroy(b));
}

/* Argument errors, alike on both sides. */
static void errors_case()
{
	ibp_slab_table_t t;
	memset(&t, 0, sizeof(t));
	int64_t id = 1;
	uint64_t e;
	CHECK(ibpi_slab_probe(&t, &id, 1, &e, 0) == IBP_ERR_INVALID_ARG, "twin: a table without index");
	CHECK(ibpi_slab_probe_cuda(&t, &id, 1, &e, 0, nullptr) == IBP_ERR_INVALID_ARG, "device: a table without index");
	CHECK(ibpi_slab_probe_cuda(nullptr, &id, 1, &e, 0, nullptr) == IBP_ERR_INVALID_ARG, "device: NULL table");
	CHECK(ibpi_slab_table_alloc_cuda(&t, 100, 4, 4, nullptr, 1) == IBP_ERR_INVALID_ARG, "alloc: bad sizes");
	uint32_t sb = 16;
	CHECK(ibpi_slab_table_alloc_cuda(&t, 64, 4, 64, &sb, 1) == IBP_OK, "alloc: %s", ibp_last_error());
	CHECK(ibpi_slab_gather_cuda(&t, &e, 1, nullptr, 16, nullptr, nullptr, 1, nullptr) == IBP_ERR_INVALID_ARG,
	      "gather: NULL outputs");
	CHECK(ibpi_slab_probe_cuda(&t, nullptr, 0, nullptr, 0, nullptr) == IBP_OK, "n = 0");
	ibpi_slab_table_free_cuda(&t);
	ibpi_slab_table_free_cuda(&t); /* zeroed: a no-op */
}

int main(int argc, char **argv)
{
	harness_args args;
	if (!harness_parse(argc, argv, "cache|streams", "cache", "[--seed S] [--quick] [--defect N] [--preempt M]", &args))
		return 2;
	const unsigned long long seed = args.seed;
	const int quick = args.quick;
	if (args.suite == "streams") {
		streams_suite(quick ? 12 : 60);
		printf("streams: %s (%d failures, seed %llu)\n", failures ? "FAILED" : "ALL OK", failures, seed);
		return failures != 0;
	}
	errors_case();
	run_case(64, 4, quick ? 6 : 20);     /* a small index: long chains that wrap */
	run_case(1024, 12, quick ? 6 : 30);  /* many slots, short chains */
	concurrent_case(32, quick ? 40 : 300); /* three launches at once on a small index */
	stream_case(32, quick ? 30 : 200);    /* the product's launches on two streams */
	printf("cache: %s (%d failures, seed %llu)\n", failures ? "FAILED" : "ALL OK", failures, seed);
	return failures != 0;
}
