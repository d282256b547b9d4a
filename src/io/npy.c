/* npy.c - NumPy .npy header parsing, loading and writing (see ibp/npy.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ibp/types.h"
#include "ibp/npy.h"
#include "ibp/alloc.h"
#include "util/error.h"

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* ---------------------------------------------------------------- parsing */

typedef struct cursor {
	const char *p, *end;
} cursor_t;

static void skip_ws(cursor_t *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

static int eat(cursor_t *c, char ch)
{
	skip_ws(c);
	if (c->p < c->end && *c->p == ch) {
		c->p++;
		return 1;
	}
	return 0;
}

/* Reads a Python string literal ('...' or "...") into out (NUL-terminated,
 * cut to cap - 1 bytes); *full_len gets its real length. No escapes: no
 * valid header needs them. */
static ibp_status_t parse_str(cursor_t *c, char *out, size_t cap, size_t *full_len)
{
	skip_ws(c);
	if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
		return ibpi_fail(IBP_ERR_CORRUPT, "npy header: expected a string");
	char q = *c->p++;
	size_t n = 0;
	while (c->p < c->end && *c->p != q) {
		if (*c->p == '\\' || *c->p == '\n' || *c->p == '\0')
			return ibpi_fail(IBP_ERR_CORRUPT, "npy header: bad character in a string");
		if (n + 1 < cap)
			out[n] = *c->p;
		n++;
		c->p++;
	}
	if (c->p >= c->end)
		return ibpi_fail(IBP_ERR_CORRUPT, "npy header: unterminated string");
	c->p++;
	out[n + 1 < cap ? n : cap - 1] = '\0';
	*full_len = n;
	return IBP_OK;
}

static int eat_word(cursor_t *c, const char *w)
{
	size_t n = strlen(w);
	skip_ws(c);
	if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
		const char *after = c->p + n;
		if (after < c->end && ((*after >= 'a' && *after <= 'z') || (*after >= 'A' && *after <= 'Z') ||
				       (*after >= '0' && *after <= '9') || *after == '_'))
			return 0;
		c->p = after;
		return 1;
	}
	return 0;
}

/* A non-negative decimal integer, with Python 2's optional 'L' suffix. */
static ibp_status_t parse_uint(cursor_t *c, uint64_t *v)
{
	skip_ws(c);
	if (c->p >= c->end || *c->p < '0' || *c->p > '9')
		return ibpi_fail(IBP_ERR_CORRUPT, "npy header: shape entries must be non-negative integers");
	uint64_t x = 0;
	while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
		unsigned d = (unsigned)(*c->p - '0');
		if (x > (UINT64_MAX - d) / 10)
			return ibpi_fail(IBP_ERR_CORRUPT, "npy header: shape entry overflows 64 bits");
		x = x * 10 + d;
		c->p++;
	}
	if (c->p < c->end && (*c->p == 'L' || *c->p == 'l'))
		c->p++;
	*v = x;
	return IBP_OK;
}

static ibp_status_t parse_shape(cursor_t *c, ibp_npy_info_t *info)
{
	if (!eat(c, '('))
		return ibpi_fail(IBP_ERR_CORRUPT, "npy header: 'shape' is not a tuple");
	unsigned n = 0;
	int trailing_comma = 0;
	while (!eat(c, ')')) {
		if (n == IBP_NPY_MAX_DIMS)
			return ibpi_fail(IBP_ERR_CORRUPT, "npy header: more than %d dimensions", IBP_NPY_MAX_DIMS);
		IBP_TRY(parse_uint(c, &info->shape[n]));
		n++;
		trailing_comma = eat(c, ',');
		if (!trailing_comma) {
			if (!eat(c, ')'))
				return ibpi_fail(IBP_ERR_CORRUPT, "npy header: bad 'shape' tuple");
			break;
		}
	}
	/* "(5)" is the integer 5 in Python, not a tuple. */
	if (n == 1 && !trailing_comma)
		return ibpi_fail(IBP_ERR_CORRUPT, "npy header: 'shape' (n) lacks the tuple comma");
	info->ndim = n;
	return IBP_OK;
}

/* Maps a descr string to a dtype; IBP_ERR_UNSUPPORTED with a reason if the
 * library cannot take it. */
static ibp_status_t map_descr(const char *d, size_t full_len, unsigned flags, ibp_dtype_t *dt)
{
	if (full_len >= 16 || full_len < 2)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "npy dtype '%s' is not supported", d);
	char order = d[0];
	const char *t = d + 1;
	if (order != '<' && order != '>' && order != '|' && order != '=')
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "npy dtype '%s' is not supported", d);
	static const struct {
		const char *name;
		ibp_dtype_t dt;
	} table[] = {
		{"f2", IBP_DTYPE_F16}, {"f4", IBP_DTYPE_F32}, {"f8", IBP_DTYPE_F64},
		{"i1", IBP_DTYPE_I8},  {"i2", IBP_DTYPE_I16}, {"i4", IBP_DTYPE_I32}, {"i8", IBP_DTYPE_I64},
		{"u1", IBP_DTYPE_U8},  {"u2", IBP_DTYPE_U16}, {"u4", IBP_DTYPE_U32}, {"u8", IBP_DTYPE_U64},
		{"b1", IBP_DTYPE_BOOL},
	};
	int found = -1;
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (strcmp(t, table[i].name) == 0)
			found = (int)i;
	int is_v2 = strcmp(t, "V2") == 0;
	if (found < 0 && !is_v2)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "npy dtype '%s' is not supported", d);
	if (is_v2 && !(flags & IBP_NPY_BF16))
		return ibpi_fail(IBP_ERR_UNSUPPORTED,
				"npy dtype '%s' (opaque 2-byte) is only read as bfloat16, when asked for", d);
	ibp_dtype_t r = is_v2 ? IBP_DTYPE_BF16 : table[found].dt;
	if ((flags & IBP_NPY_BF16) && r == IBP_DTYPE_U16)
		r = IBP_DTYPE_BF16;
	/* Byte order matters only for multi-byte numbers (not for V2 blobs). */
	if (ibp_dtype_size(r) > 1 && !is_v2) {
		if (order == '>')
			return ibpi_fail(IBP_ERR_UNSUPPORTED,
					"npy dtype '%s' is big-endian; convert with arr.astype('<%s')", d, t);
		if (order != '<')
			return ibpi_fail(IBP_ERR_UNSUPPORTED, "npy dtype '%s' has no explicit byte order", d);
	}
	*dt = r;
	return IBP_OK;
}

/* Reads the fixed prefix: version and total header length (magic .. end of
 * the dict). Needs the first 10 or 12 bytes. */
static ibp_status_t parse_prefix(const unsigned char *b, uint64_t len, unsigned *version,
				 uint64_t *prefix, uint64_t *total)
{
	if (len < 10)
		return ibpi_fail(IBP_ERR_CORRUPT, "not a .npy file: only %llu bytes", (unsigned long long)len);
	if (memcmp(b, npy_magic, 6) != 0)
		return ibpi_fail(IBP_ERR_CORRUPT, "not a .npy file: bad magic");
	if (b[6] < 1 || b[6] > 3 || b[7] != 0)
		return ibpi_fail(IBP_ERR_UNSUPPORTED, "npy format version %u.%u is not supported", b[6], b[7]);
	uint64_t hlen;
	if (b[6] == 1) {
		hlen = (uint64_t)b[8] | (uint64_t)b[9] << 8;
		*prefix = 10;
	} else {
		if (len < 12)
			return ibpi_fail(IBP_ERR_CORRUPT, "npy header truncated");
		hlen = (uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 | (uint64_t)b[11] << 24;
		*prefix = 12;
	}
	*version = b[6];
	*total = *prefix + hlen;
	if (*total > IBP_NPY_HEADER_MAX)
		return ibpi_fail(IBP_ERR_CORRUPT, "npy header of %llu bytes exceeds the %u-byte limit",
				(unsigned long long)*total, IBP_NPY_HEADER_MAX);
	return IBP_OK;
}

ibp_status_t ibp_npy_parse_header(const void *buf, uint64_t len, unsigned flags, ibp_npy_info_t *info)
{
	if ((!buf && len) || !info)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_npy_parse_header: NULL argument");
	const unsigned char *b = buf;
	ibp_npy_info_t r;
	memset(&r, 0, sizeof(r));
	uint64_t prefix = 0, total = 0; /* gcc 13 cannot see parse_prefix set them */
	IBP_TRY(parse_prefix(b, len, &r.version, &prefix, &total));
	if (len < total)
		return ibpi_fail(IBP_ERR_CORRUPT, "npy header truncated: %llu bytes, header needs %llu",
				(unsigned long long)len, (unsigned long long)total);
	cursor_t c = {(const char *)b + prefix, (const char *)b + total};

	char key[32], descr[16] = "";
	size_t klen, dlen = 0;
	int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0;
	if (!eat(&c, '{'))
		return ibpi_fail(IBP_ERR_CORRUPT, "npy header is not a dict");
	for (;;) {
		if (eat(&c, '}'))
			break;
		IBP_TRY(parse_str(&c, key, sizeof(key), &klen));
		if (!eat(&c, ':'))
			return ibpi_fail(IBP_ERR_CORRUPT, "npy header: expected ':' after '%s'", key);
		if (strcmp(key, "descr") == 0 && klen == 5) {
			if (have_descr++)
				return ibpi_fail(IBP_ERR_CORRUPT, "npy header: duplicate 'descr'");
			skip_ws(&c);
			if (c.p < c.end && *c.p == '[')
				return ibpi_fail(IBP_ERR_UNSUPPORTED, "npy structured dtypes are not supported");
			IBP_TRY(parse_str(&c, descr, sizeof(descr), &dlen));
		} else if (strcmp(key, "fortran_order") == 0 && klen == 13) {
			if (have_fortran++)
				return ibpi_fail(IBP_ERR_CORRUPT, "npy header: duplicate 'fortran_order'");
			if (eat_word(&c, "True"))
				fortran = 1;
			else if (!eat_word(&c, "False"))
				return ibpi_fail(IBP_ERR_CORRUPT, "npy header: 'fortran_order' must be True or False");
		} else if (strcmp(key, "shape") == 0 && klen == 5) {
			if (have_shape++)
				return ibpi_fail(IBP_ERR_CORRUPT, "npy header: duplicate 'shape'");
			IBP_TRY(parse_shape(&c, &r));
		} else {
			return ibpi_fail(IBP_ERR_CORRUPT, "npy header: unexpected key '%s'", key);
		}
		if (eat(&c, ','))
			continue;
		if (eat(&c, '}'))
			break;
		return ibpi_fail(IBP_ERR_CORRUPT, "npy header: expected ',' or '}'");
	}
	skip_ws(&c);
	if (c.p != c.end)
		return ibpi_fail(IBP_ERR_CORRUPT, "npy header: unexpected bytes after the dict");
	if (!have_descr || !have_fortran || !have_shape)
		return ibpi_fail(IBP_ERR_CORRUPT, "npy header lacks '%s'",
				!have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");

	IBP_TRY(map_descr(descr, dlen, flags, &r.dtype));
	memcpy(r.descr, descr, sizeof(r.descr));
	r.elem_bytes = ibp_dtype_size(r.dtype);

	/* Element count; a zero dimension makes it 0 whatever the others are. */
	r.count = 1;
	for (unsigned i = 0; i < r.ndim; i++)
		if (r.shape[i] == 0)
			r.count = 0;
	for (unsigned i = 0; r.count && i < r.ndim; i++)
		if (__builtin_mul_overflow(r.count, r.shape[i], &r.count))
			return ibpi_fail(IBP_ERR_CORRUPT, "npy shape: element count overflows 64 bits");
	if (__builtin_mul_overflow(r.count, r.elem_bytes, &r.data_bytes) ||
	    r.data_bytes > (uint64_t)INT64_MAX - total)
		return ibpi_fail(IBP_ERR_CORRUPT, "npy shape: byte size overflows");
	if (fortran && r.ndim > 1) {
		/* One-dimensional arrays are the same in either order. */
		int trivial = 0;
		for (unsigned i = 0; i < r.ndim; i++)
			trivial += r.shape[i] > 1;
		if (trivial > 1)
			return ibpi_fail(IBP_ERR_UNSUPPORTED,
					"npy array is in Fortran order; save it with np.ascontiguousarray");
	}
	r.data_offset = total;
	*info = r;
	return IBP_OK;
}

/* ---------------------------------------------------------------- reading */

/* pread() until n bytes are in or end of file; *got says how many. */
static ibp_status_t pread_full(int fd, void *buf, uint64_t n, uint64_t off, uint64_t *got)
{
	uint64_t done = 0;
	while (done < n) {
		size_t want = n - done > (1u << 30) ? (1u << 30) : (size_t)(n - done);
		ssize_t r = pread(fd, (char *)buf + done, want, (off_t)(off + done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return ibpi_fail(IBP_ERR_IO, "read failed: %s", strerror(errno));
		}
		if (r == 0)
			break;
		done += (uint64_t)r;
	}
	*got = done;
	return IBP_OK;
}

static ibp_status_t open_and_parse(const char *path, unsigned flags, ibp_npy_info_t *info, int *fd_out)
{
	if (!path || !info)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "npy: NULL argument");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ibpi_fail(IBP_ERR_IO, "cannot open: %s", strerror(errno));
	struct stat st;
	ibp_status_t s = IBP_OK;
	unsigned char *hdr = NULL;
	if (fstat(fd, &st) != 0) {
		s = ibpi_fail(IBP_ERR_IO, "cannot stat: %s", strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		s = ibpi_fail(IBP_ERR_UNSUPPORTED, "not a regular file");
		goto out;
	}
	uint64_t size = (uint64_t)st.st_size, got = 0, prefix = 0, total = 0;
	unsigned char pre[12];
	unsigned version = 0;
	if ((s = pread_full(fd, pre, sizeof(pre), 0, &got)) != IBP_OK)
		goto out;
	if ((s = parse_prefix(pre, got, &version, &prefix, &total)) != IBP_OK)
		goto out;
	if (total > size) {
		s = ibpi_fail(IBP_ERR_CORRUPT, "npy header truncated: file has %llu bytes, header needs %llu",
			     (unsigned long long)size, (unsigned long long)total);
		goto out;
	}
	hdr = malloc(total);
	if (!hdr) {
		s = ibpi_fail(IBP_ERR_NOMEM, "npy: out of memory for the header");
		goto out;
	}
	if ((s = pread_full(fd, hdr, total, 0, &got)) != IBP_OK)
		goto out;
	if ((s = ibp_npy_parse_header(hdr, got, flags, info)) != IBP_OK)
		goto out;
	if (size != info->data_offset + info->data_bytes) {
		s = ibpi_fail(IBP_ERR_CORRUPT, "npy file has %llu bytes, header says %llu (%s)",
			     (unsigned long long)size,
			     (unsigned long long)(info->data_offset + info->data_bytes),
			     size < info->data_offset + info->data_bytes ? "truncated" : "trailing bytes");
		goto out;
	}
out:
	free(hdr);
	if (s != IBP_OK || !fd_out)
		close(fd);
	else
		*fd_out = fd;
	return s;
}

ibp_status_t ibp_npy_read_header(const char *path, unsigned flags, ibp_npy_info_t *info)
{
	return open_and_parse(path, flags, info, NULL);
}

ibp_status_t ibp_npy_load(const char *path, unsigned flags, ibp_npy_info_t *info, void **data)
{
	if (!data)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_npy_load: NULL data");
	*data = NULL;
	int fd = -1;
	IBP_TRY(open_and_parse(path, flags, info, &fd));
	ibp_status_t s = IBP_OK;
	void *buf = NULL;
	if (info->data_bytes) {
		buf = ibp_host_alloc(info->data_bytes, 64);
		if (!buf) {
			close(fd);
			return ibpi_fail(IBP_ERR_NOMEM, "npy: cannot allocate %llu bytes",
					(unsigned long long)info->data_bytes);
		}
		uint64_t got = 0;
		s = pread_full(fd, buf, info->data_bytes, info->data_offset, &got);
		if (s == IBP_OK && got != info->data_bytes)
			s = ibpi_fail(IBP_ERR_CORRUPT, "npy file shrank while being read");
	}
	close(fd);
	if (s != IBP_OK) {
		ibp_host_free(buf);
		return s;
	}
	*data = buf;
	return IBP_OK;
}

void ibp_npy_free(void *data)
{
	ibp_host_free(data);
}

/* ---------------------------------------------------------------- writing */

const char *ibp_npy_descr(ibp_dtype_t dt)
{
	switch (dt) {
	case IBP_DTYPE_BYTES: return "|u1";
	case IBP_DTYPE_I8: return "|i1";
	case IBP_DTYPE_I16: return "<i2";
	case IBP_DTYPE_I32: return "<i4";
	case IBP_DTYPE_I64: return "<i8";
	case IBP_DTYPE_U8: return "|u1";
	case IBP_DTYPE_U16: return "<u2";
	case IBP_DTYPE_U32: return "<u4";
	case IBP_DTYPE_U64: return "<u8";
	case IBP_DTYPE_F16: return "<f2";
	case IBP_DTYPE_BF16: return "<u2"; /* NumPy has no bfloat16 */
	case IBP_DTYPE_F32: return "<f4";
	case IBP_DTYPE_F64: return "<f8";
	case IBP_DTYPE_BOOL: return "|b1";
	}
	return NULL;
}

/* Byte size of the array, checking the dtype, ndim and overflow. */
static ibp_status_t array_bytes(ibp_dtype_t dt, unsigned ndim, const uint64_t *shape, uint64_t *bytes)
{
	if (!ibp_npy_descr(dt))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "npy: unknown dtype %d", (int)dt);
	if (ndim > IBP_NPY_MAX_DIMS || (ndim && !shape))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "npy: bad ndim %u", ndim);
	uint64_t n = 1;
	for (unsigned i = 0; i < ndim; i++)
		if (shape[i] == 0)
			n = 0;
	for (unsigned i = 0; n && i < ndim; i++)
		if (__builtin_mul_overflow(n, shape[i], &n))
			return ibpi_fail(IBP_ERR_INVALID_ARG, "npy: shape overflows 64 bits");
	if (__builtin_mul_overflow(n, (uint64_t)ibp_dtype_size(dt), bytes) || *bytes > INT64_MAX / 2)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "npy: array byte size overflows");
	return IBP_OK;
}

ibp_status_t ibp_npy_format_header(ibp_dtype_t dt, unsigned ndim, const uint64_t *shape, void *buf,
				   uint64_t cap, uint64_t *len)
{
	uint64_t bytes;
	IBP_TRY(array_bytes(dt, ndim, shape, &bytes));
	if (!buf || !len)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_npy_format_header: NULL argument");
	/* 64 dims of 20 digits fit easily in this. */
	char dict[64 * 24 + 128];
	int n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (",
			 ibp_npy_descr(dt));
	for (unsigned i = 0; i < ndim; i++)
		n += snprintf(dict + n, sizeof(dict) - (size_t)n, "%s%llu", i ? ", " : "",
			      (unsigned long long)shape[i]);
	n += snprintf(dict + n, sizeof(dict) - (size_t)n, "%s), }", ndim == 1 ? "," : "");
	/* Byte-for-byte what np.save writes: room for the first axis to grow to
	 * 21 digits, then spaces up to the 64-byte boundary (a full 64 when
	 * already aligned), then '\n'. */
	if (ndim > 0) {
		int digits = snprintf(NULL, 0, "%llu", (unsigned long long)shape[0]);
		n += snprintf(dict + n, sizeof(dict) - (size_t)n, "%*s", 21 - digits, "");
	}
	uint64_t prefix = 10;
	uint64_t hl = (uint64_t)n + 1;
	uint64_t total = prefix + hl + (64 - (prefix + hl) % 64);
	if (total - prefix > 65535) {
		prefix = 12;
		total = prefix + hl + (64 - (prefix + hl) % 64);
	}
	if (cap < total)
		return ibpi_fail(IBP_ERR_BUFFER_TOO_SMALL, "npy header needs %llu bytes", (unsigned long long)total);
	unsigned char *b = buf;
	uint64_t hlen = total - prefix;
	memcpy(b, npy_magic, 6);
	b[6] = prefix == 10 ? 1 : 2;
	b[7] = 0;
	b[8] = (unsigned char)hlen;
	b[9] = (unsigned char)(hlen >> 8);
	if (prefix == 12) {
		b[10] = (unsigned char)(hlen >> 16);
		b[11] = (unsigned char)(hlen >> 24);
	}
	memcpy(b + prefix, dict, (size_t)n);
	memset(b + prefix + n, ' ', (size_t)(total - prefix - (uint64_t)n - 1));
	b[total - 1] = '\n';
	*len = total;
	return IBP_OK;
}

#define WRITER_BUF (1u << 20)

struct ibp_npy_writer {
	int fd;
	int failed;
	uint64_t expect, written, buffered;
	char *path;
	unsigned char *buf;
};

static ibp_status_t write_full(int fd, const void *p, uint64_t n)
{
	const char *c = p;
	while (n) {
		size_t want = n > (1u << 30) ? (1u << 30) : (size_t)n;
		ssize_t r = write(fd, c, want);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return ibpi_fail(IBP_ERR_IO, "write failed: %s", strerror(errno));
		}
		c += r;
		n -= (uint64_t)r;
	}
	return IBP_OK;
}

static ibp_status_t writer_flush(ibp_npy_writer_t *w)
{
	ibp_status_t s = write_full(w->fd, w->buf, w->buffered);
	w->buffered = 0;
	if (s != IBP_OK)
		w->failed = 1;
	return s;
}

ibp_status_t ibp_npy_create(const char *path, ibp_dtype_t dt, unsigned ndim, const uint64_t *shape,
			    ibp_npy_writer_t **out)
{
	if (!path || !out)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_npy_create: NULL argument");
	*out = NULL;
	uint64_t bytes, hlen;
	IBP_TRY(array_bytes(dt, ndim, shape, &bytes));
	ibp_npy_writer_t *w = calloc(1, sizeof(*w));
	if (!w || !(w->buf = malloc(WRITER_BUF)) || !(w->path = strdup(path))) {
		if (w)
			free(w->buf);
		free(w);
		return ibpi_fail(IBP_ERR_NOMEM, "npy: out of memory");
	}
	ibp_status_t s = ibp_npy_format_header(dt, ndim, shape, w->buf, WRITER_BUF, &hlen);
	if (s != IBP_OK) {
		free(w->path);
		free(w->buf);
		free(w);
		return s;
	}
	w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		s = ibpi_fail(IBP_ERR_IO, "cannot create: %s", strerror(errno));
		free(w->path);
		free(w->buf);
		free(w);
		return s;
	}
	w->buffered = hlen;
	w->expect = bytes;
	*out = w;
	return IBP_OK;
}

ibp_status_t ibp_npy_append(ibp_npy_writer_t *w, const void *data, uint64_t n)
{
	if (!w || (!data && n))
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_npy_append: NULL argument");
	if (w->failed)
		return ibpi_fail(IBP_ERR_IO, "npy writer: an earlier write failed");
	if (n > w->expect - w->written) {
		w->failed = 1;
		return ibpi_fail(IBP_ERR_INVALID_ARG, "npy writer: %llu bytes more than the array holds",
				(unsigned long long)(n - (w->expect - w->written)));
	}
	w->written += n;
	if (w->buffered + n <= WRITER_BUF) {
		memcpy(w->buf + w->buffered, data, (size_t)n);
		w->buffered += n;
		return IBP_OK;
	}
	IBP_TRY(writer_flush(w));
	if (n >= WRITER_BUF / 2) {
		ibp_status_t s = write_full(w->fd, data, n);
		if (s != IBP_OK)
			w->failed = 1;
		return s;
	}
	memcpy(w->buf, data, (size_t)n);
	w->buffered = n;
	return IBP_OK;
}

static void writer_free(ibp_npy_writer_t *w, int remove)
{
	if (w->fd >= 0)
		close(w->fd);
	if (remove)
		unlink(w->path);
	free(w->path);
	free(w->buf);
	free(w);
}

ibp_status_t ibp_npy_finish(ibp_npy_writer_t *w)
{
	if (!w)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_npy_finish: NULL writer");
	ibp_status_t s = IBP_OK;
	if (w->failed)
		s = ibpi_fail(IBP_ERR_IO, "npy writer: an earlier write failed");
	else if (w->written != w->expect)
		s = ibpi_fail(IBP_ERR_INVALID_ARG, "npy writer: %llu of %llu data bytes written",
			     (unsigned long long)w->written, (unsigned long long)w->expect);
	if (s == IBP_OK)
		s = writer_flush(w);
	if (s == IBP_OK) {
		int fd = w->fd;
		w->fd = -1;
		if (close(fd) != 0)
			s = ibpi_fail(IBP_ERR_IO, "close failed: %s", strerror(errno));
	}
	writer_free(w, s != IBP_OK);
	return s;
}

void ibp_npy_abort(ibp_npy_writer_t *w)
{
	if (w)
		writer_free(w, 1);
}

ibp_status_t ibp_npy_write(const char *path, ibp_dtype_t dt, unsigned ndim, const uint64_t *shape,
			   const void *data)
{
	uint64_t bytes;
	IBP_TRY(array_bytes(dt, ndim, shape, &bytes));
	if (!data && bytes)
		return ibpi_fail(IBP_ERR_INVALID_ARG, "ibp_npy_write: NULL data");
	ibp_npy_writer_t *w;
	IBP_TRY(ibp_npy_create(path, dt, ndim, shape, &w));
	ibp_status_t s = ibp_npy_append(w, data, bytes);
	if (s != IBP_OK) {
		ibp_npy_abort(w);
		return s;
	}
	return ibp_npy_finish(w);
}
