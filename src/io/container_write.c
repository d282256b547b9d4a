/* container_write.c - the writer: sections built in memory and written
 * to a temporary file that replaces the target only when complete (safe
 * writes), IBP rows with their index, exponent and FP8 containers. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "ibp/codec.h"
#include "ibp/exp.h"
#include "ibp/fp8.h"
#include "ibp/types.h"
#include "ibp/alloc.h"
#include "ibp/container.h"
#include "util/error.h"
#include "util/opts.h"
#include "bitpack/codec_internal.h"
#include "exp/exp_format.h"
#include "fp8/fp8_impl.h"
#include "util/parallel.h"
#include "io/container_internal.h"
#include "io/container_format.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the container maps little-endian offset tables in place: little-endian hosts only"
#endif


/* ---- writer ------------------------------------------------------------- */

/* Format minor the writers produce: IBP_FORMAT_MINOR, or 1 for tests of
 * the 1.1 reader (io/container_internal.h). */
static atomic_uint write_minor = IBP_FORMAT_MINOR;

void ibpi_container_write_minor_set(unsigned minor)
{
	atomic_store(&write_minor, minor == 1 ? 1u : IBP_FORMAT_MINOR);
}

typedef struct wsec {
	uint32_t id;
	const void *data;
	uint64_t len, off, sum;
} wsec_t;

static ibp_status_t write_all(int fd, const void *buf, uint64_t len, const char *path)
{
	const uint8_t *p = buf;
	while (len > 0) {
		size_t want = (size_t)(len < (1ull << 30) ? len : (1ull << 30));
		ssize_t w = write(fd, p, want);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return ibpi_fail(IBP_ERR_IO, "%s: write failed: %s", path,
					w < 0 ? strerror(errno) : "no progress");
		p += w;
		len -= (uint64_t)w;
	}
	return IBP_OK;
}

static ibp_status_t write_zeros(int fd, uint64_t n, const char *path)
{
	static const uint8_t zero[4096];
	while (n > 0) {
		uint64_t k = n < sizeof(zero) ? n : sizeof(zero);
		IBP_TRY(write_all(fd, zero, k, path));
		n -= k;
	}
	return IBP_OK;
}

/* Best effort: makes the rename itself durable. The file's bytes are
 * already synced and the rename is atomic, so a failure here cannot leave a
 * partial file, and `path` is complete either way: it is not reported. */
static void sync_dir(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return;
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
}

/* Bytes per write() of a large section (see write_file). */
#define WRITE_PIECE (32ull << 20)
/* O_DIRECT needs file offsets, lengths and memory aligned to the device's
 * logical block (512 or 4096 bytes); 4096 covers both. */
#define DIRECT_ALIGN 4096u

/* Sections of at least this many bytes go out with O_DIRECT (the test
 * hook in io/container_internal.h lowers it). */
static _Atomic uint64_t direct_min = 256ull << 20;

void ibpi_container_write_direct_min_set(uint64_t bytes)
{
	atomic_store(&direct_min, bytes ? bytes : 256ull << 20);
}

/* Writes [off, off + len) of the file (the fd's position is at off) from
 * buf, the aligned middle with O_DIRECT where the file system takes it:
 * the bytes go from a reused 4096-aligned bounce buffer to the disk, not
 * through freshly allocated page-cache pages (a kernel copy that took
 * 0.2-2 s for 900 MiB on a VM, against a steady 0.3-0.55 s direct). O_DIRECT
 * is set on fd itself (F_SETFL), not on a second open of the temporary
 * name, which could by then name another file. The unaligned head and
 * tail, and everything after a refusal (EINVAL: no O_DIRECT here), go
 * through the page cache; on return fd's position is off + len. */
static ibp_status_t write_direct(int fd, const char *tmp, const uint8_t *buf, uint64_t len, uint64_t off)
{
	uint64_t a = (off + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN, done = 0;
	if (a - off >= len)
		return write_all(fd, buf, len, tmp);
	const uint64_t end = a - off + (len - (a - off)) / DIRECT_ALIGN * DIRECT_ALIGN;
	const int fl = fcntl(fd, F_GETFL);
	uint8_t *bounce = end > a - off && fl >= 0 ? aligned_alloc(DIRECT_ALIGN, WRITE_PIECE) : NULL;
	if (bounce) {
		ibp_status_t st = write_all(fd, buf, a - off, tmp);
		done = a - off;
		if (st == IBP_OK && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0) {
			while (done < end) {
				uint64_t k = end - done < WRITE_PIECE ? end - done : WRITE_PIECE;
				memcpy(bounce, buf + done, (size_t)k);
				ssize_t w = pwrite(fd, bounce, (size_t)k, (off_t)(off + done));
				if (w < 0 && errno == EINTR)
					continue;
				if (w > 0)
					done += (uint64_t)w;
				if (w <= 0 || (uint64_t)w % DIRECT_ALIGN) {
					/* EINVAL: refused (alignment); a short odd write: the
					 * rest goes through the page cache */
					if (w < 0 && errno != EINVAL)
						st = ibpi_fail(IBP_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
					else if (w == 0)
						st = ibpi_fail(IBP_ERR_IO, "%s: write failed: no progress", tmp);
					break;
				}
			}
			if (fcntl(fd, F_SETFL, fl) != 0 && st == IBP_OK)
				st = ibpi_fail(IBP_ERR_IO, "%s: cannot clear O_DIRECT: %s", tmp, strerror(errno));
		}
		free(bounce);
		if (st == IBP_OK && lseek(fd, (off_t)(off + done), SEEK_SET) < 0)
			st = ibpi_fail(IBP_ERR_IO, "%s: seek failed: %s", tmp, strerror(errno));
		IBP_TRY(st);
	}
	/* the tail, or all of it without O_DIRECT */
	for (uint64_t d = done; d < len; d += WRITE_PIECE) {
		uint64_t k = len - d < WRITE_PIECE ? len - d : WRITE_PIECE;
		IBP_TRY(write_all(fd, buf + d, k, tmp));
#ifdef SYNC_FILE_RANGE_WRITE
		/* best effort: a failure here shows at the fsync */
		if (len > WRITE_PIECE)
			(void)sync_file_range(fd, (off_t)(off + d), (off_t)k, SYNC_FILE_RANGE_WRITE);
#endif
	}
	return IBP_OK;
}

static ibp_status_t write_file(const char *path, const uint8_t *hdr, const uint8_t *table,
			       uint64_t table_len, const wsec_t *s, unsigned ns)
{
	static atomic_uint counter;
	size_t plen = strlen(path);
	char *tmp = malloc(plen + 64);
	if (!tmp)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory", path);
	int fd = -1;
	for (int tries = 0; fd < 0 && tries < 100; tries++) {
		snprintf(tmp, plen + 64, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&counter, 1));
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0) {
		ibp_status_t st = ibpi_fail(IBP_ERR_IO, "%s: cannot create temporary file %s: %s", path, tmp,
					   strerror(errno));
		free(tmp);
		return st;
	}
	ibp_status_t st = write_all(fd, hdr, HDR_SIZE, tmp);
	if (st == IBP_OK)
		st = write_all(fd, table, table_len, tmp);
	uint64_t at = HDR_SIZE + table_len;
	for (unsigned i = 0; st == IBP_OK && i < ns; i++) {
		st = write_zeros(fd, s[i].off - at, tmp);
		if (st == IBP_OK && s[i].len >= atomic_load(&direct_min))
			st = write_direct(fd, tmp, s[i].data, s[i].len, s[i].off);
		else if (st == IBP_OK)
			st = write_all(fd, s[i].data, s[i].len, tmp);
		at = s[i].off + s[i].len;
	}
	if (st == IBP_OK && fsync(fd) != 0)
		st = ibpi_fail(IBP_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
	if (close(fd) != 0 && st == IBP_OK)
		st = ibpi_fail(IBP_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
	if (st == IBP_OK && rename(tmp, path) != 0)
		st = ibpi_fail(IBP_ERR_IO, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
	if (st != IBP_OK)
		unlink(tmp);
	else
		sync_dir(path);
	free(tmp);
	return st;
}

/* Shape, dtype and layout of a tensor to write; *R gets the row bytes. */
ibp_status_t ibpi_ctr_check_tensor(const char *path, ibp_dtype_t dtype, unsigned ndim, const uint64_t *shape,
				 ibp_layout_t layout, uint64_t *R)
{
	if (!path || !shape)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_write: NULL path or shape");
	if (ndim < 1 || ndim > IBP_MAX_NDIM)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: ndim %u is outside 1..%u", path, ndim, IBP_MAX_NDIM);
	if (ibp_dtype_size(dtype) == 0)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: unknown dtype %d", path, (int)dtype);
	if (layout != IBP_LAYOUT_PACKED && layout != IBP_LAYOUT_INPLACE)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: unknown layout %d", path, (int)layout);
	for (unsigned i = 1; i < ndim; i++)
		if (shape[i] == 0)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: dimension %u is 0", path, i);
	if (!row_bytes_of(dtype, ndim, shape, R) || *R > IBP_MAX_ROW_BYTES)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: rows of the shape and dtype %s are too large", path,
				ibp_dtype_name(dtype));
	return IBP_OK;
}

ibp_status_t ibpi_ctr_check_shape(const char *path, const ibp_codec_t *codec, ibp_dtype_t dtype,
				unsigned ndim, const uint64_t *shape, ibp_layout_t layout, uint64_t *R)
{
	if (!path || !codec || !shape)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_container_write: NULL path, codec or shape");
	IBP_TRY(ibpi_ctr_check_tensor(path, dtype, ndim, shape, layout, R));
	if (*R != ibp_codec_row_bytes(codec))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: shape and dtype %s give rows of %llu bytes, the "
				"codec's are %llu", path, ibp_dtype_name(dtype), (ull)*R,
				(ull)ibp_codec_row_bytes(codec));
	return IBP_OK;
}

/* What the header says besides the section table. */
typedef struct whdr {
	ibp_dtype_t dtype;
	unsigned ndim;
	const uint64_t *shape;
	uint64_t R;
	uint32_t codec, layout, chunk, req;
	uint8_t params[H_CODEC_PARAMS_LEN];
} whdr_t;

/* Lays out the sections `s` (in file order, the payload last), builds the
 * table, the per-block payload checksums and the header, and writes the
 * file. `s` has room for one more entry: the PAYLOAD_SUMS section goes in
 * just before the payload. */
static ibp_status_t write_container(const char *path, const whdr_t *h, wsec_t *s, unsigned ns)
{
	if (ns < 1 || s[ns - 1].id != SEC_PAYLOAD)
		return ibpi_fail(IBP_ERR_INTERNAL, "%s: payload section not last", path);
	const uint8_t *pl = s[ns - 1].data;
	uint64_t plen = s[ns - 1].len, block = BLOCK_DEFAULT;
	uint64_t nsums = plen / block + (plen % block != 0);
	uint8_t *sums = malloc((size_t)(nsums ? 8 * nsums : 1));
	if (!sums)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for checksums", path);
	for (uint64_t i = 0; i < nsums; i++) {
		uint64_t off = i * block, len = plen - off < block ? plen - off : block;
		st64(sums + 8 * i, XXH3_64bits(pl + off, (size_t)len));
	}
	/* one block: the payload's section checksum says it all (1.2) */
	int v11 = atomic_load(&write_minor) == 1;
	if (nsums > 1 || v11) {
		s[ns] = s[ns - 1];
		s[ns - 1] = (wsec_t){ SEC_PAYLOAD_SUMS, sums, 8 * nsums, 0, 0 };
		ns++;
	}

	/* 8-byte sections; a payload of 4 KiB or more on a cache line */
	uint64_t table_len = (uint64_t)ns * SEC_ENTRY, at = HDR_SIZE + table_len;
	uint8_t table[(SEC_KNOWN_MAX + 1) * SEC_ENTRY];
	memset(table, 0, sizeof(table));
	for (unsigned i = 0; i < ns; i++) {
		s[i].off = align_up(at, v11 ? (s[i].id == SEC_PAYLOAD ? 4096u : SEC_ALIGN_11)
					    : s[i].id == SEC_PAYLOAD && s[i].len >= PAYLOAD_ALIGN_MIN ? PAYLOAD_ALIGN
												      : SEC_ALIGN);
		s[i].sum = XXH3_64bits(s[i].data ? s[i].data : "", (size_t)s[i].len);
		at = s[i].off + s[i].len;
		uint8_t *e = table + i * SEC_ENTRY;
		st32(e, s[i].id);
		st32(e + 4, SEC_F_REQUIRED);
		st64(e + 8, s[i].off);
		st64(e + 16, s[i].len);
		st64(e + 24, s[i].sum);
	}

	uint8_t hdr[HDR_SIZE];
	memset(hdr, 0, sizeof(hdr));
	memcpy(hdr + H_MAGIC, MAGIC, sizeof(MAGIC));
	st16(hdr + H_MAJOR, IBP_FORMAT_MAJOR);
	st16(hdr + H_MINOR, v11 ? 1 : IBP_FORMAT_MINOR);
	st32(hdr + H_HDR_SIZE, HDR_SIZE);
	st64(hdr + H_FILE_SIZE, at);
	st32(hdr + H_REQ_FEATURES, h->req | (v11 ? 0 : REQ_V12));
	st32(hdr + H_DTYPE, (uint32_t)h->dtype);
	st32(hdr + H_NDIM, h->ndim);
	for (unsigned i = 0; i < h->ndim; i++)
		st64(hdr + H_DIMS + 8 * i, h->shape[i]);
	st64(hdr + H_ROW_BYTES, h->R);
	st32(hdr + H_CODEC, h->codec);
	st32(hdr + H_LAYOUT, h->layout);
	st32(hdr + H_CHUNK, h->chunk);
	st32(hdr + H_NSECTIONS, ns);
	st64(hdr + H_TABLE_OFF, HDR_SIZE);
	st64(hdr + H_TABLE_SUM, XXH3_64bits(table, (size_t)table_len));
	st64(hdr + H_BLOCK, block);
	memcpy(hdr + H_CODEC_PARAMS, h->params, H_CODEC_PARAMS_LEN);
	st64(hdr + HDR_SIZE - 8, XXH3_64bits(hdr, HDR_SIZE - 8));

	ibp_status_t st = write_file(path, hdr, table, table_len, s, ns);
	free(sums);
	return st;
}

/* Run coding of n words of C bytes (FORMAT.md 2.4.1) into dst, or only
 * its size when dst is NULL. A repeat run pays off from 8 / C + 1 words. */
static uint64_t runs_encode(const uint8_t *w, uint64_t n, unsigned C, uint8_t *dst)
{
	uint64_t size = 0, i = 0, lit = 0, min_rep = 8 / C + 1;
	while (i <= n) {
		uint64_t r = 0;
		if (i < n)
			for (r = 1; i + r < n && r < RUN_MAX && !memcmp(w + (i + r) * C, w + i * C, C); r++)
				;
		if (i == n || r >= min_rep) {
			/* flush the literal words [lit, i) */
			while (lit < i) {
				uint64_t cnt = i - lit < RUN_MAX ? i - lit : RUN_MAX;
				if (dst) {
					st32(dst + size, (uint32_t)cnt | RUN_LITERAL);
					memcpy(dst + size + 4, w + lit * C, (size_t)(cnt * C));
				}
				size += 4 + cnt * C;
				lit += cnt;
			}
			if (i == n)
				break;
			if (dst) {
				st32(dst + size, (uint32_t)r);
				memcpy(dst + size + 4, w + i * C, C);
			}
			size += 4 + C;
			lit = i + r;
		}
		i += r;
	}
	return size;
}

/* The INDEX section (FORMAT.md 2.4.2) of rows given as 1.1 arrays. */
static ibp_status_t build_index(const char *path, ibp_layout_t layout, uint64_t nrows, uint64_t R,
				unsigned k, const uint64_t *offsets, const uint8_t *flags,
				const uint8_t *clusters, uint8_t **out, uint64_t *out_len)
{
	int packed = layout == IBP_LAYOUT_PACKED;
	uint64_t G = 1ull << IDX_GROUP_SHIFT, ng = nrows / G + (nrows % G != 0);
	unsigned cb = bitlen64(k - 1), w = 0;
	uint32_t *refs = packed ? malloc((size_t)(4 * (ng ? ng : 1))) : NULL;
	if (packed && !refs)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for the row index", path);
	/* per group: the shortest coded row is the reference; the widest
	 * difference to it over the file sets the length bits */
	for (uint64_t g = 0; packed && g < ng; g++) {
		uint64_t lo = UINT64_MAX, hi = 0, end = (g + 1) * G < nrows ? (g + 1) * G : nrows;
		for (uint64_t i = g * G; i < end; i++) {
			uint64_t len = offsets[i + 1] - offsets[i];
			if ((flags[i] & IBP_ROW_MODE_MASK) == IBP_ROW_RAW) {
				if (len != R) {
					free(refs);
					return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: row %llu: a raw row is %llu bytes, "
							"not the row size %llu", path, (ull)i, (ull)len, (ull)R);
				}
				continue;
			}
			lo = len < lo ? len : lo;
			hi = len > hi ? len : hi;
		}
		if (lo == UINT64_MAX)
			lo = hi = 0;
		if (lo > UINT32_MAX)
			lo = UINT32_MAX;
		refs[g] = (uint32_t)lo;
		if (bitlen64(hi - lo) > w)
			w = bitlen64(hi - lo);
	}
	unsigned bits = 2 + cb + w;
	uint64_t head = IDX_HDR + (packed ? 8 * (ng + 1) + 4 * ng : 0), ent = (nrows * bits + 7) / 8;
	uint8_t *p = calloc(1, (size_t)(head + ent + 8));
	if (!p) {
		free(refs);
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for the row index", path);
	}
	p[0] = IDX_GROUP_SHIFT;
	p[1] = (uint8_t)cb;
	p[2] = (uint8_t)w;
	for (uint64_t g = 0; packed && g <= ng; g++)
		st64(p + IDX_HDR + 8 * g, offsets[g * G < nrows ? g * G : nrows]);
	for (uint64_t g = 0; packed && g < ng; g++)
		st32(p + IDX_HDR + 8 * (ng + 1) + 4 * g, refs[g]);
	uint8_t *e = p + head;
	for (uint64_t i = 0; i < nrows; i++) {
		uint64_t mode = flags[i] & IBP_ROW_MODE_MASK, v = mode | (uint64_t)(k > 1 ? clusters[i] : 0) << 2;
		if (packed && mode != IBP_ROW_RAW)
			v |= (offsets[i + 1] - offsets[i] - refs[i / G]) << (2 + cb);
		uint64_t bit = i * bits, cur;
		memcpy(&cur, e + bit / 8, 8);
		cur |= v << (bit % 8);
		memcpy(e + bit / 8, &cur, 8);
	}
	free(refs);
	*out = p;
	*out_len = head + ent;
	return IBP_OK;
}

ibp_status_t ibp_container_write(const char *path, const ibp_codec_t *codec, ibp_dtype_t dtype,
				 unsigned ndim, const uint64_t *shape, ibp_layout_t layout,
				 const void *payload, uint64_t payload_len, const uint64_t *offsets,
				 const uint8_t *flags, const uint8_t *clusters)
{
	uint64_t R = 0;
	IBP_TRY(ibpi_ctr_check_shape(path, codec, dtype, ndim, shape, layout, &R));
	uint64_t nrows = shape[0];
	unsigned k = ibp_codec_nclusters(codec), C = ibp_codec_chunk_bytes(codec);
	if (nrows > 0 && (!flags || (k > 1 && !clusters)))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: flags (or cluster ids, %u clusters) missing", path, k);
	if (payload_len > 0 && !payload)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: payload is NULL", path);
	for (uint64_t i = 0; i < nrows; i++) {
		if (flags[i] & ~IBP_ROW_MODE_MASK)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: row %llu: flags 0x%02x has reserved bits",
					path, (ull)i, flags[i]);
		if (k > 1 && clusters[i] >= k)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: row %llu: cluster %u >= %u", path, (ull)i,
					clusters[i], k);
	}
	if (layout == IBP_LAYOUT_PACKED) {
		if (!offsets || offsets[0] != 0 || offsets[nrows] != payload_len)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: packed layout needs offsets from 0 to the "
					"payload length %llu", path, (ull)payload_len);
		for (uint64_t i = 0; i < nrows; i++)
			if (offsets[i + 1] < offsets[i] || offsets[i + 1] - offsets[i] > R)
				return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: row %llu: offsets %llu..%llu decrease or "
						"exceed the row size", path, (ull)i, (ull)offsets[i],
						(ull)offsets[i + 1]);
	} else {
		uint64_t want;
		if (offsets)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: inplace layout takes no offsets", path);
		if (__builtin_mul_overflow(nrows, R, &want) || want != payload_len)
			return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: inplace payload must be %llu x %llu bytes",
					path, (ull)nrows, (ull)R);
	}

	/* metadata section, and the Xvals beside it when the codec uses them;
	 * their tables plain or run-coded, whichever is smaller (FORMAT.md 2.4.1) */
	uint64_t words = ibp_codec_nchunks(codec) * C, table = (uint64_t)k * words, n = table / C;
	int xval = ibp_codec_has_xval(codec);
	uint8_t *plain = malloc((size_t)(3 * table));
	if (!plain)
		return ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for metadata", path);
	for (unsigned i = 0; i < k; i++) {
		memcpy(plain + i * words, ibp_codec_mask(codec, i), (size_t)words);
		memcpy(plain + table + i * words, ibp_codec_bitval(codec, i), (size_t)words);
		memcpy(plain + 2 * table + i * words, ibp_codec_xval(codec, i), (size_t)words);
	}
	uint64_t rm = runs_encode(plain, n, C, NULL), rb = runs_encode(plain + table, n, C, NULL);
	uint64_t rx = xval ? runs_encode(plain + 2 * table, n, C, NULL) : 0;
	uint64_t ntab = xval ? 3 : 2, coded = META_HDR + rm + rb + rx;
	int v11 = atomic_load(&write_minor) == 1;
	int runs = !v11 && rm + rb + rx < ntab * table && ntab * table <= RUNS_EXPAND * coded + RUNS_SLACK;
	uint64_t meta_len = META_HDR + (runs ? rm + rb : 2 * table), xv_len = xval ? (runs ? rx : table) : 0;
	uint8_t *meta = calloc(1, (size_t)meta_len);
	uint8_t *xv = xval ? malloc((size_t)xv_len) : NULL;
	uint8_t *index = NULL;
	uint64_t index_len = 0;
	ibp_status_t st = IBP_OK;
	if (!meta || (xval && !xv)) {
		st = ibpi_fail(IBP_ERR_NOMEM, "%s: out of memory for metadata", path);
		goto out;
	}
	st32(meta, k);
	st32(meta + 4, runs ? META_RUNS : META_PLAIN);
	double thr = ibp_codec_threshold(codec);
	if (!(thr >= 0.0 && thr <= 1.0))
		thr = -1.0;
	uint64_t tbits;
	memcpy(&tbits, &thr, 8);
	st64(meta + 8, tbits);
	if (runs) {
		runs_encode(plain, n, C, meta + META_HDR);
		runs_encode(plain + table, n, C, meta + META_HDR + rm);
		if (xv)
			runs_encode(plain + 2 * table, n, C, xv);
	} else {
		memcpy(meta + META_HDR, plain, (size_t)(2 * table));
		if (xv)
			memcpy(xv, plain + 2 * table, (size_t)table);
	}
	if (!v11) {
		st = build_index(path, layout, nrows, R, k, offsets, flags, clusters, &index, &index_len);
		if (st != IBP_OK)
			goto out;
	}

	/* sections in file order; the payload goes last */
	wsec_t s[SEC_KNOWN_MAX + 1];
	unsigned ns = 0;
	s[ns++] = (wsec_t){ SEC_META, meta, meta_len, 0, 0 };
	if (xv)
		s[ns++] = (wsec_t){ SEC_XVALS, xv, xv_len, 0, 0 };
	if (v11) {
		s[ns++] = (wsec_t){ SEC_FLAGS, flags, nrows, 0, 0 };
		if (k > 1)
			s[ns++] = (wsec_t){ SEC_CLUSTERS, clusters, nrows, 0, 0 };
		if (layout == IBP_LAYOUT_PACKED)
			s[ns++] = (wsec_t){ SEC_OFFSETS, offsets, 8 * (nrows + 1), 0, 0 };
	} else {
		s[ns++] = (wsec_t){ SEC_INDEX, index, index_len, 0, 0 };
	}
	s[ns++] = (wsec_t){ SEC_PAYLOAD, payload, payload_len, 0, 0 };
	whdr_t h = { dtype, ndim, shape, R, IBP_CODEC_IBP, (uint32_t)layout, C, 0, { 0 } };
	st = write_container(path, &h, s, ns);
out:
	free(plain);
	free(meta);
	free(xv);
	free(index);
	return st;
}

/* Tensor checks shared by the exp and fp8 writers: *elems elements in
 * *nblk blocks of chunk_elems. */
static ibp_status_t check_value_tensor(const char *path, const char *cn, ibp_dtype_t dtype, unsigned ndim,
				       const uint64_t *shape, uint64_t chunk_elems, uint64_t *R, uint64_t *elems,
				       uint64_t *nblk)
{
	IBP_TRY(ibpi_ctr_check_tensor(path, dtype, ndim, shape, IBP_LAYOUT_PACKED, R));
	if (!value_dtype(dtype))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: the %s codec takes bf16, f16 or f32, not %s", path, cn,
				ibp_dtype_name(dtype));
	return ibpi_ctr_block_geometry(path, IBP_ERR_INVALID_ARG, shape[0], *R, dtype, chunk_elems, elems, nblk);
}

ibp_status_t ibp_container_write_exp(const char *path, ibp_dtype_t dtype, unsigned ndim,
				     const uint64_t *shape, uint64_t chunk_elems,
				     ibp_exp_table_mode_t table_mode, const void *payload,
				     const uint64_t *offsets)
{
	uint64_t R = 0, elems = 0, nblk = 0;
	IBP_TRY(check_value_tensor(path, "exp", dtype, ndim, shape, chunk_elems, &R, &elems, &nblk));
	if ((unsigned)table_mode > IBP_EXP_TABLE_RANS)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: exp table mode %d is unknown", path, (int)table_mode);
	if (!offsets || (offsets[nblk] > 0 && !payload))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL offsets or payload", path);
	IBP_TRY(ibpi_ctr_check_exp_offsets(path, IBP_ERR_INVALID_ARG, dtype, elems, chunk_elems, nblk, offsets,
				  offsets[nblk]));
	whdr_t h = { dtype, ndim, shape, R, IBP_CODEC_EXP, IBP_LAYOUT_PACKED, 0, 0, { 0 } };
	st32(h.params + P_VERSION, PARAMS_VERSION);
	st32(h.params + P_EXP_TABLE, (uint32_t)table_mode);
	st64(h.params + P_EXP_CHUNK, chunk_elems);
	st64(h.params + P_EXP_NBLOCKS, nblk);
	wsec_t s[SEC_KNOWN_MAX + 1];
	s[0] = (wsec_t){ SEC_OFFSETS, offsets, 8 * (nblk + 1), 0, 0 };
	s[1] = (wsec_t){ SEC_PAYLOAD, payload, offsets[nblk], 0, 0 };
	return write_container(path, &h, s, 2);
}

ibp_status_t ibp_container_write_fp8(const char *path, ibp_dtype_t dtype, unsigned ndim,
				     const uint64_t *shape, uint64_t chunk_elems,
				     const ibp_fp8_opts_t *opts, const void *payload,
				     uint64_t payload_len)
{
	uint64_t R = 0, elems = 0, nblk = 0, stride = 0, want = 0;
	IBP_TRY(check_value_tensor(path, "fp8", dtype, ndim, shape, chunk_elems, &R, &elems, &nblk));
	if (!opts || (payload_len > 0 && !payload))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL options or payload", path);
	IBP_TRY(IBPI_OPTS_CHECK(opts, "ibp_container_write_fp8", "ibp_fp8_opts_t"));
	IBP_TRY(ibpi_ctr_fp8_layout(path, IBP_ERR_INVALID_ARG, opts, elems, chunk_elems, nblk, &stride, &want));
	if (payload_len != want)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: fp8 payload is %llu bytes, %llu streams of %llu "
				"elements take %llu", path, (ull)payload_len, (ull)nblk, (ull)chunk_elems, (ull)want);
	whdr_t h = { dtype, ndim, shape, R, IBP_CODEC_FP8, IBP_LAYOUT_PACKED, 0, REQ_LOSSY, { 0 } };
	st32(h.params + P_VERSION, PARAMS_VERSION);
	st32(h.params + P_FP8_FORMAT, (uint32_t)opts->format);
	st32(h.params + P_FP8_BLOCK, opts->block);
	st32(h.params + P_FP8_FLAGS, (opts->hadamard ? FP8_F_HADAMARD : 0) | (opts->adaptive ? FP8_F_ADAPTIVE : 0));
	st64(h.params + P_FP8_CHUNK, chunk_elems);
	st64(h.params + P_FP8_NSTREAMS, nblk);
	wsec_t s[SEC_KNOWN_MAX + 1];
	s[0] = (wsec_t){ SEC_PAYLOAD, payload, payload_len, 0, 0 };
	return write_container(path, &h, s, 1);
}


ibp_status_t ibpi_ctr_write_exp_rows(const char *path, const ibpi_exprows_t *x, unsigned ndim,
				     const uint64_t *shape, const uint8_t *payload, uint64_t payload_len)
{
	uint64_t R = 0;
	IBP_TRY(ibpi_ctr_check_tensor(path, x->dt, ndim, shape, IBP_LAYOUT_PACKED, &R));
	if (R != x->d * x->esize)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: rows of %llu bytes, the row form's are %llu", path, (ull)R,
				(ull)(x->d * x->esize));
	if (x->slot != x->fixed + x->K || x->K < 8)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: the row form's slot is not set", path);
	uint64_t ovf_len;
	IBP_TRY(ibpi_ctr_check_exprows_slots(path, IBP_ERR_INVALID_ARG, x, shape[0], payload_len, &ovf_len));
	if (payload_len > 0 && !payload)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "%s: NULL payload", path);
	whdr_t h = { x->dt, ndim, shape, R, IBP_CODEC_EXP_ROWS, IBP_LAYOUT_PACKED, 0, 0, { 0 } };
	st32(h.params + P_VERSION, PARAMS_VERSION);
	memcpy(h.params + P_EXPR_TABLE, x->table, EXPR_NCODES);
	st64(h.params + P_EXPR_SLOT, x->K);
	wsec_t s[SEC_KNOWN_MAX + 1];
	s[0] = (wsec_t){ SEC_PAYLOAD, payload, payload_len, 0, 0 };
	return write_container(path, &h, s, 1);
}
