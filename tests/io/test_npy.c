/* test_npy.c - .npy header parsing (valid, unsupported, corrupt), loading and
 * writing: round trips, np.save byte compatibility, error paths. */
#include "tmproot.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "ibp.h"

/* np.save(np.zeros((2, 3), np.float32)) header, byte for byte (NumPy 2.x). */
static const char NUMPY_F32_2x3[] =
	"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
	"                                                          \n";

/* Builds a header around `dict` with format version `ver` (1, 2 or 3). */
static size_t make_header(unsigned char *buf, unsigned ver, const char *dict)
{
	size_t n = strlen(dict), prefix = ver == 1 ? 10 : 12;
	size_t hlen = n + 1;
	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = (unsigned char)ver;
	buf[7] = 0;
	buf[8] = (unsigned char)hlen;
	buf[9] = (unsigned char)(hlen >> 8);
	if (ver != 1) {
		buf[10] = (unsigned char)(hlen >> 16);
		buf[11] = (unsigned char)(hlen >> 24);
	}
	memcpy(buf + prefix, dict, n);
	buf[prefix + n] = '\n';
	return prefix + hlen;
}

static ibp_status_t parse_dict(const char *dict, unsigned flags, ibp_npy_info_t *info)
{
	unsigned char buf[4096];
	size_t n = make_header(buf, 1, dict);
	return ibp_npy_parse_header(buf, n, flags, info);
}

static char tmp_dir[64];

static void make_tmp(void)
{
	snprintf(tmp_dir, sizeof(tmp_dir), "%s/ibp_test_npy_XXXXXX", tu_tmp_root());
	cr_assert_not_null(mkdtemp(tmp_dir));
}

static void rm_tmp(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
	cr_assert_eq(system(cmd), 0);
}

static void tmp_path(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/%s", tmp_dir, name);
}

static void write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(data, 1, n, f), n);
	cr_assert_eq(fclose(f), 0);
}

Test(npy, parses_numpy_header)
{
	ibp_npy_info_t info;
	size_t n = sizeof(NUMPY_F32_2x3) - 1;
	cr_assert_eq(n, 128);
	cr_assert_eq(ibp_npy_parse_header(NUMPY_F32_2x3, n, 0, &info), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(info.dtype, IBP_DTYPE_F32);
	cr_assert_eq(info.ndim, 2);
	cr_assert_eq(info.shape[0], 2);
	cr_assert_eq(info.shape[1], 3);
	cr_assert_eq(info.count, 6);
	cr_assert_eq(info.elem_bytes, 4);
	cr_assert_eq(info.data_bytes, 24);
	cr_assert_eq(info.data_offset, 128);
	cr_assert_eq(info.version, 1);
	cr_assert_str_eq(info.descr, "<f4");
}

Test(npy, formats_like_numpy)
{
	unsigned char buf[IBP_NPY_HEADER_MAX];
	uint64_t len;
	uint64_t shape[2] = {2, 3};
	cr_assert_eq(ibp_npy_format_header(IBP_DTYPE_F32, 2, shape, buf, sizeof(buf), &len), IBP_OK);
	cr_assert_eq(len, 128);
	cr_assert_eq(memcmp(buf, NUMPY_F32_2x3, 128), 0);
}

Test(npy, versions_2_and_3)
{
	for (unsigned v = 2; v <= 3; v++) {
		unsigned char buf[256];
		size_t n = make_header(buf, v, "{'descr': '<i8', 'fortran_order': False, 'shape': (7,), }");
		ibp_npy_info_t info;
		cr_assert_eq(ibp_npy_parse_header(buf, n, 0, &info), IBP_OK, "%s", ibp_last_error());
		cr_assert_eq(info.version, v);
		cr_assert_eq(info.data_offset, n);
		cr_assert_eq(info.dtype, IBP_DTYPE_I64);
		cr_assert_eq(info.count, 7);
	}
	unsigned char buf[256];
	size_t n = make_header(buf, 4, "{'descr': '<i8', 'fortran_order': False, 'shape': (7,), }");
	ibp_npy_info_t info;
	cr_assert_eq(ibp_npy_parse_header(buf, n, 0, &info), IBP_ERR_UNSUPPORTED);
}

Test(npy, every_dtype)
{
	static const struct {
		const char *descr;
		ibp_dtype_t dt;
	} cases[] = {
		{"<f2", IBP_DTYPE_F16}, {"<f4", IBP_DTYPE_F32}, {"<f8", IBP_DTYPE_F64},
		{"|i1", IBP_DTYPE_I8},  {"<i2", IBP_DTYPE_I16}, {"<i4", IBP_DTYPE_I32},
		{"<i8", IBP_DTYPE_I64}, {"|u1", IBP_DTYPE_U8},  {"<u2", IBP_DTYPE_U16},
		{"<u4", IBP_DTYPE_U32}, {"<u8", IBP_DTYPE_U64}, {"|b1", IBP_DTYPE_BOOL},
		{"<u1", IBP_DTYPE_U8},  {">i1", IBP_DTYPE_I8},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char dict[128];
		snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (3, 5), }",
			 cases[i].descr);
		ibp_npy_info_t info;
		cr_assert_eq(parse_dict(dict, 0, &info), IBP_OK, "%s: %s", cases[i].descr, ibp_last_error());
		cr_assert_eq(info.dtype, cases[i].dt, "%s", cases[i].descr);
		cr_assert_eq(info.data_bytes, 15 * ibp_dtype_size(cases[i].dt));
	}
}

Test(npy, bf16_on_request)
{
	ibp_npy_info_t info;
	const char *u2 = "{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }";
	const char *v2 = "{'descr': '|V2', 'fortran_order': False, 'shape': (4,), }";
	cr_assert_eq(parse_dict(u2, 0, &info), IBP_OK);
	cr_assert_eq(info.dtype, IBP_DTYPE_U16);
	cr_assert_eq(parse_dict(u2, IBP_NPY_BF16, &info), IBP_OK);
	cr_assert_eq(info.dtype, IBP_DTYPE_BF16);
	cr_assert_eq(parse_dict(v2, 0, &info), IBP_ERR_UNSUPPORTED);
	cr_assert_eq(parse_dict(v2, IBP_NPY_BF16, &info), IBP_OK);
	cr_assert_eq(info.dtype, IBP_DTYPE_BF16);
	cr_assert_eq(info.data_bytes, 8);
	/* Other types are not reinterpreted. */
	cr_assert_eq(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", IBP_NPY_BF16,
				&info), IBP_OK);
	cr_assert_eq(info.dtype, IBP_DTYPE_F32);
	cr_assert_str_eq(ibp_npy_descr(IBP_DTYPE_BF16), "<u2");
}

Test(npy, accepted_spellings)
{
	ibp_npy_info_t info;
	/* Key order, double quotes, Python 2 longs, no trailing comma, spacing. */
	cr_assert_eq(parse_dict("{\"shape\":(2L,3L),\"fortran_order\":False,\"descr\":\"<f4\"}", 0, &info),
		     IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(info.count, 6);
	cr_assert_eq(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 0, &info), IBP_OK);
	cr_assert_eq(info.ndim, 0);
	cr_assert_eq(info.count, 1);
	cr_assert_eq(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0, 3), }", 0, &info),
		     IBP_OK);
	cr_assert_eq(info.count, 0);
	cr_assert_eq(info.data_bytes, 0);
	/* A zero dimension makes huge others harmless. */
	cr_assert_eq(parse_dict("{'descr': '<f4', 'fortran_order': False, "
				"'shape': (18446744073709551615, 18446744073709551615, 0), }", 0, &info),
		     IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(info.count, 0);
	/* Fortran order is the same as C order with at most one axis > 1. */
	cr_assert_eq(parse_dict("{'descr': '<f4', 'fortran_order': True, 'shape': (9,), }", 0, &info), IBP_OK);
	cr_assert_eq(parse_dict("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 9), }", 0, &info),
		     IBP_OK);
}

Test(npy, unsupported)
{
	static const char *dicts[] = {
		"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
		"{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': '>u2', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': '|f4', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': '<U10', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': '|V16', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': '<f16', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': 'a_very_long_descr_string', 'fortran_order': False, 'shape': (2, 3), }",
		"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }",
	};
	for (size_t i = 0; i < sizeof(dicts) / sizeof(dicts[0]); i++) {
		ibp_npy_info_t info;
		cr_assert_eq(parse_dict(dicts[i], 0, &info), IBP_ERR_UNSUPPORTED, "%s", dicts[i]);
		cr_assert_neq(ibp_last_error()[0], '\0');
	}
	ibp_npy_info_t info;
	parse_dict(dicts[1], 0, &info);
	cr_assert_not_null(strstr(ibp_last_error(), "big-endian"), "%s", ibp_last_error());
	parse_dict(dicts[0], 0, &info);
	cr_assert_not_null(strstr(ibp_last_error(), "Fortran"), "%s", ibp_last_error());
}

Test(npy, corrupt_dicts)
{
	static const char *dicts[] = {
		"",
		"[]",
		"{'descr': '<f4', 'fortran_order': False}",
		"{'descr': '<f4', 'shape': (2,)}",
		"{'fortran_order': False, 'shape': (2,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
		"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3}",
		"{'descr': '<f4', 'fortran_order': Flase, 'shape': (2,)}",
		"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,)}",
		"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}",
		"{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}",
		"{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}}",
		"{'descr': '<\\x66\\x34', 'fortran_order': False, 'shape': (2,)}",
		/* A dimension past 2^64, and a product past 2^64. */
		"{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551616,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
		/* Count fits, byte size does not. */
		"{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,)}",
	};
	for (size_t i = 0; i < sizeof(dicts) / sizeof(dicts[0]); i++) {
		ibp_npy_info_t info;
		cr_assert_eq(parse_dict(dicts[i], 0, &info), IBP_ERR_CORRUPT, "%s -> %s", dicts[i],
			     ibp_last_error());
	}
}

Test(npy, too_many_dims)
{
	char dict[1024] = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
	for (int i = 0; i < IBP_NPY_MAX_DIMS; i++)
		strcat(dict, "1, ");
	strcat(dict, "), }");
	ibp_npy_info_t info;
	cr_assert_eq(parse_dict(dict, 0, &info), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(info.ndim, IBP_NPY_MAX_DIMS);
	dict[strlen(dict) - 4] = '\0';
	strcat(dict, "1, ), }");
	cr_assert_eq(parse_dict(dict, 0, &info), IBP_ERR_CORRUPT);
}

Test(npy, bad_prefix_and_truncation)
{
	ibp_npy_info_t info;
	unsigned char buf[256];
	size_t n = sizeof(NUMPY_F32_2x3) - 1;
	memcpy(buf, NUMPY_F32_2x3, n);
	/* Every strict prefix of a valid header is rejected, reading nothing past it. */
	for (size_t len = 0; len < n; len++) {
		unsigned char *copy = malloc(len ? len : 1);
		memcpy(copy, buf, len);
		cr_assert_eq(ibp_npy_parse_header(copy, len, 0, &info), IBP_ERR_CORRUPT, "len %zu", len);
		free(copy);
	}
	buf[0] = 0x92;
	cr_assert_eq(ibp_npy_parse_header(buf, n, 0, &info), IBP_ERR_CORRUPT);
	buf[0] = 0x93;
	buf[7] = 1; /* version 1.1 */
	cr_assert_eq(ibp_npy_parse_header(buf, n, 0, &info), IBP_ERR_UNSUPPORTED);
	buf[7] = 0;
	buf[6] = 0;
	cr_assert_eq(ibp_npy_parse_header(buf, n, 0, &info), IBP_ERR_UNSUPPORTED);
	/* Header longer than the cap (v2 length field of 16 MiB). */
	size_t m = make_header(buf, 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }");
	buf[10] = 0;
	buf[11] = 1;
	cr_assert_eq(ibp_npy_parse_header(buf, m, 0, &info), IBP_ERR_CORRUPT);
	/* NUL bytes inside the dict. */
	m = make_header(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }");
	buf[20] = '\0';
	cr_assert_eq(ibp_npy_parse_header(buf, m, 0, &info), IBP_ERR_CORRUPT);
}

/* Random byte flips of a valid header: any status but a crash (run under ASan). */
Test(npy, mutations_never_crash)
{
	unsigned char base[256];
	size_t n = make_header(base, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (12, 3, 4), }");
	uint64_t x = 0x9E3779B97F4A7C15ull;
	for (int iter = 0; iter < 20000; iter++) {
		unsigned char *b = malloc(n);
		memcpy(b, base, n);
		int flips = 1 + iter % 4;
		for (int f = 0; f < flips; f++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			b[(x >> 8) % n] = (unsigned char)x;
		}
		size_t len = (iter % 7 == 0) ? (size_t)((x >> 20) % (n + 1)) : n;
		ibp_npy_info_t info;
		ibp_status_t s = ibp_npy_parse_header(b, len, IBP_NPY_BF16, &info);
		cr_assert(s == IBP_OK || s == IBP_ERR_CORRUPT || s == IBP_ERR_UNSUPPORTED, "status %d", s);
		if (s == IBP_OK)
			cr_assert_leq(info.data_offset, len);
		free(b);
	}
}

Test(npy, roundtrip_every_dtype_and_shape, .init = make_tmp, .fini = rm_tmp)
{
	static const ibp_dtype_t dts[] = {
		IBP_DTYPE_I8,  IBP_DTYPE_I16, IBP_DTYPE_I32, IBP_DTYPE_I64, IBP_DTYPE_U8,
		IBP_DTYPE_U16, IBP_DTYPE_U32, IBP_DTYPE_U64, IBP_DTYPE_F16, IBP_DTYPE_BF16,
		IBP_DTYPE_F32, IBP_DTYPE_F64, IBP_DTYPE_BOOL,
	};
	static const struct {
		unsigned ndim;
		uint64_t shape[4];
	} shapes[] = {{0, {0}}, {1, {17}}, {2, {5, 7}}, {3, {3, 1, 9}}, {2, {0, 4}}, {4, {2, 3, 2, 5}}};
	char path[256];
	tmp_path(path, sizeof(path), "a.npy");
	for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			uint64_t count = 1;
			for (unsigned i = 0; i < shapes[s].ndim; i++)
				count *= shapes[s].shape[i];
			size_t bytes = count * ibp_dtype_size(dts[d]);
			unsigned char *data = malloc(bytes + 1);
			for (size_t i = 0; i < bytes; i++)
				data[i] = (unsigned char)(i * 131 + d * 7 + 1);
			if (dts[d] == IBP_DTYPE_BOOL)
				for (size_t i = 0; i < bytes; i++)
					data[i] &= 1;
			cr_assert_eq(ibp_npy_write(path, dts[d], shapes[s].ndim, shapes[s].shape, data), IBP_OK,
				     "%s", ibp_last_error());
			struct stat st;
			cr_assert_eq(stat(path, &st), 0);
			ibp_npy_info_t info;
			void *back;
			unsigned flags = dts[d] == IBP_DTYPE_BF16 ? IBP_NPY_BF16 : 0;
			cr_assert_eq(ibp_npy_load(path, flags, &info, &back), IBP_OK, "%s", ibp_last_error());
			cr_assert_eq(info.data_offset % 64, 0);
			cr_assert_eq((uint64_t)st.st_size, info.data_offset + bytes);
			/* bytes are written as u8 and read back as such */
			cr_assert_eq(info.dtype, dts[d]);
			cr_assert_eq(info.ndim, shapes[s].ndim);
			for (unsigned i = 0; i < info.ndim; i++)
				cr_assert_eq(info.shape[i], shapes[s].shape[i]);
			cr_assert_eq(info.data_bytes, bytes);
			if (bytes)
				cr_assert_eq(memcmp(back, data, bytes), 0);
			ibp_npy_free(back);
			free(data);
		}
	}
}

Test(npy, streaming_writer, .init = make_tmp, .fini = rm_tmp)
{
	char path[256];
	tmp_path(path, sizeof(path), "s.npy");
	uint64_t shape[2] = {1000, 777};
	size_t bytes = 1000 * 777 * 4;
	unsigned char *data = malloc(bytes);
	for (size_t i = 0; i < bytes; i++)
		data[i] = (unsigned char)(i ^ (i >> 9));
	ibp_npy_writer_t *w;
	cr_assert_eq(ibp_npy_create(path, IBP_DTYPE_F32, 2, shape, &w), IBP_OK);
	/* Uneven pieces, some larger than the internal buffer. */
	size_t off = 0, step = 1;
	while (off < bytes) {
		size_t k = step < bytes - off ? step : bytes - off;
		cr_assert_eq(ibp_npy_append(w, data + off, k), IBP_OK);
		off += k;
		step = step * 3 + 1;
	}
	cr_assert_eq(ibp_npy_finish(w), IBP_OK, "%s", ibp_last_error());
	ibp_npy_info_t info;
	void *back;
	cr_assert_eq(ibp_npy_load(path, 0, &info, &back), IBP_OK);
	cr_assert_eq(memcmp(back, data, bytes), 0);
	ibp_npy_free(back);

	/* Too many bytes, then too few: both fail and leave no file behind. */
	cr_assert_eq(ibp_npy_create(path, IBP_DTYPE_F32, 2, shape, &w), IBP_OK);
	cr_assert_eq(ibp_npy_append(w, data, bytes), IBP_OK);
	cr_assert_eq(ibp_npy_append(w, data, 1), IBP_ERR_INVALID_ARG);
	cr_assert_neq(ibp_npy_finish(w), IBP_OK);
	cr_assert_neq(access(path, F_OK), 0);
	cr_assert_eq(ibp_npy_create(path, IBP_DTYPE_F32, 2, shape, &w), IBP_OK);
	cr_assert_eq(ibp_npy_append(w, data, 100), IBP_OK);
	cr_assert_eq(ibp_npy_finish(w), IBP_ERR_INVALID_ARG);
	cr_assert_neq(access(path, F_OK), 0);
	cr_assert_eq(ibp_npy_create(path, IBP_DTYPE_F32, 2, shape, &w), IBP_OK);
	ibp_npy_abort(w);
	cr_assert_neq(access(path, F_OK), 0);
	free(data);
}

Test(npy, file_errors, .init = make_tmp, .fini = rm_tmp)
{
	char path[256];
	ibp_npy_info_t info;
	void *data;
	tmp_path(path, sizeof(path), "missing.npy");
	cr_assert_eq(ibp_npy_load(path, 0, &info, &data), IBP_ERR_IO);
	cr_assert_eq(ibp_npy_read_header(tmp_dir, 0, &info), IBP_ERR_UNSUPPORTED);

	/* Header says 24 bytes of data: give 23, 24 and 25. */
	unsigned char buf[256];
	memcpy(buf, NUMPY_F32_2x3, 128);
	memset(buf + 128, 0xAB, 25);
	tmp_path(path, sizeof(path), "t.npy");
	write_file(path, buf, 128 + 23);
	cr_assert_eq(ibp_npy_load(path, 0, &info, &data), IBP_ERR_CORRUPT);
	cr_assert_not_null(strstr(ibp_last_error(), "truncated"), "%s", ibp_last_error());
	write_file(path, buf, 128 + 25);
	cr_assert_eq(ibp_npy_load(path, 0, &info, &data), IBP_ERR_CORRUPT);
	write_file(path, buf, 128 + 24);
	cr_assert_eq(ibp_npy_load(path, 0, &info, &data), IBP_OK);
	ibp_npy_free(data);
	/* Header cut short. */
	write_file(path, buf, 60);
	cr_assert_eq(ibp_npy_read_header(path, 0, &info), IBP_ERR_CORRUPT);
	write_file(path, buf, 5);
	cr_assert_eq(ibp_npy_read_header(path, 0, &info), IBP_ERR_CORRUPT);
	write_file(path, "", 0);
	cr_assert_eq(ibp_npy_read_header(path, 0, &info), IBP_ERR_CORRUPT);
	/* Writing where no file can be created. */
	tmp_path(path, sizeof(path), "no/such/dir.npy");
	uint64_t shape[1] = {3};
	cr_assert_eq(ibp_npy_write(path, IBP_DTYPE_U8, 1, shape, "abc"), IBP_ERR_IO);
}

Test(npy, writer_argument_checks)
{
	unsigned char buf[IBP_NPY_HEADER_MAX];
	uint64_t len;
	uint64_t big[2] = {UINT64_MAX / 2, 3};
	cr_assert_eq(ibp_npy_format_header(IBP_DTYPE_F32, 2, big, buf, sizeof(buf), &len), IBP_ERR_INVALID_ARG);
	uint64_t shape[1] = {3};
	cr_assert_eq(ibp_npy_format_header((ibp_dtype_t)99, 1, shape, buf, sizeof(buf), &len),
		     IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_npy_format_header(IBP_DTYPE_F32, IBP_NPY_MAX_DIMS + 1, shape, buf, sizeof(buf), &len),
		     IBP_ERR_INVALID_ARG);
	cr_assert_eq(ibp_npy_format_header(IBP_DTYPE_F32, 1, shape, buf, 64, &len), IBP_ERR_BUFFER_TOO_SMALL);
	/* 64 dimensions of 20 digits format and parse back. */
	uint64_t many[IBP_NPY_MAX_DIMS];
	for (int i = 0; i < IBP_NPY_MAX_DIMS; i++)
		many[i] = i == 5 ? 0 : 18446744073709551615ull;
	cr_assert_eq(ibp_npy_format_header(IBP_DTYPE_U8, IBP_NPY_MAX_DIMS, many, buf, sizeof(buf), &len), IBP_OK);
	ibp_npy_info_t info;
	cr_assert_eq(ibp_npy_parse_header(buf, len, 0, &info), IBP_OK, "%s", ibp_last_error());
	cr_assert_eq(info.ndim, IBP_NPY_MAX_DIMS);
	cr_assert_eq(info.shape[63], 18446744073709551615ull);
	cr_assert_eq(info.count, 0);
	cr_assert_eq(len % 64, 0);
}
