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
 * erase, insert and probe launched at the same time (concurrent_case).
 * Usage: harness_cache [--seed S] [--quick] [--defect N] [--preempt M]
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
	if (!harness_parse(argc, argv, "cache", "cache", "[--seed S] [--quick] [--defect N] [--preempt M]", &args))
		return 2;
	const unsigned long long seed = args.seed;
	const int quick = args.quick;
	errors_case();
	run_case(64, 4, quick ? 6 : 20);     /* a small index: long chains that wrap */
	run_case(1024, 12, quick ? 6 : 30);  /* many slots, short chains */
	concurrent_case(32, quick ? 40 : 300); /* three launches at once on a small index */
	printf("cache: %s (%d failures, seed %llu)\n", failures ? "FAILED" : "ALL OK", failures, seed);
	return failures != 0;
}
