/* examples/npy.c - NumPy .npy files: write, read the header, load, stream,
 * and bfloat16 (stored as '<u2', as NumPy has no bf16 type).
 *
 *   cc npy.c $(pkg-config --cflags --libs ibp) -o npy && ./npy [DIR]
 * DIR (default: the current directory) receives the files, removed at the end.
 */
#include <ibp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT(cond)                                                                   \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
			return 1;                                                      \
		}                                                                      \
	} while (0)
#define CHECK(call)                                                                          \
	do {                                                                                 \
		ibp_status_t s_ = (call);                                                    \
		if (s_ != IBP_OK) {                                                          \
			fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,    \
				ibp_status_string(s_), ibp_last_error());                    \
			return 1;                                                            \
		}                                                                            \
	} while (0)

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : ".";
	char a_path[4096], b_path[4096], c_path[4096];
	snprintf(a_path, sizeof(a_path), "%s/example_a.npy", dir);
	snprintf(b_path, sizeof(b_path), "%s/example_b.npy", dir);
	snprintf(c_path, sizeof(c_path), "%s/example_c.npy", dir);

	/* A 3-D float32 array, written in one call. */
	const uint64_t shape[3] = {4, 5, 6};
	float data[4 * 5 * 6];
	for (int i = 0; i < 4 * 5 * 6; i++)
		data[i] = (float)i * 0.25f;
	CHECK(ibp_npy_write(a_path, IBP_DTYPE_F32, 3, shape, data));

	/* Its header, then the whole array. */
	ibp_npy_info_t info;
	CHECK(ibp_npy_read_header(a_path, 0, &info));
	printf("%s: descr %s, version %u, %u dims, %llu elements, data at byte %llu\n", a_path, info.descr,
	       info.version, info.ndim, (unsigned long long)info.count, (unsigned long long)info.data_offset);
	EXPECT(info.dtype == IBP_DTYPE_F32 && info.ndim == 3 && info.shape[2] == 6);
	void *loaded = NULL;
	CHECK(ibp_npy_load(a_path, 0, &info, &loaded));
	EXPECT(info.data_bytes == sizeof(data) && memcmp(loaded, data, sizeof(data)) == 0);
	ibp_npy_free(loaded);

	/* A bf16 array streamed in two pieces. */
	const uint64_t shape2[2] = {3, 8};
	uint16_t bf[3 * 8];
	for (int i = 0; i < 3 * 8; i++)
		bf[i] = (uint16_t)(0x3F80 + i); /* 1.0, 1.0078125, ... */
	ibp_npy_writer_t *w = NULL;
	CHECK(ibp_npy_create(b_path, IBP_DTYPE_BF16, 2, shape2, &w));
	CHECK(ibp_npy_append(w, bf, 10 * sizeof(uint16_t)));
	CHECK(ibp_npy_append(w, bf + 10, 14 * sizeof(uint16_t)));
	CHECK(ibp_npy_finish(w));
	EXPECT(strcmp(ibp_npy_descr(IBP_DTYPE_BF16), "<u2") == 0);
	/* Read back as bf16 only when asked; else it is what NumPy sees: u16. */
	CHECK(ibp_npy_load(b_path, IBP_NPY_BF16, &info, &loaded));
	EXPECT(info.dtype == IBP_DTYPE_BF16 && memcmp(loaded, bf, sizeof(bf)) == 0);
	ibp_npy_free(loaded);
	CHECK(ibp_npy_read_header(b_path, 0, &info));
	EXPECT(info.dtype == IBP_DTYPE_U16);

	/* An aborted writer leaves no file behind. */
	CHECK(ibp_npy_create(c_path, IBP_DTYPE_U8, 1, shape, &w));
	CHECK(ibp_npy_append(w, "ab", 2));
	ibp_npy_abort(w);
	EXPECT(ibp_npy_read_header(c_path, 0, &info) == IBP_ERR_IO);

	/* Headers in memory: format, then parse what was formatted. */
	char hdr[256];
	uint64_t len = 0;
	CHECK(ibp_npy_format_header(IBP_DTYPE_I64, 2, shape2, hdr, sizeof(hdr), &len));
	CHECK(ibp_npy_parse_header(hdr, len, 0, &info));
	EXPECT(info.dtype == IBP_DTYPE_I64 && info.data_offset == len && len % 64 == 0);
	EXPECT(info.count == 24 && info.data_bytes == 24 * 8);

	EXPECT(remove(a_path) == 0 && remove(b_path) == 0);
	printf("npy example: OK\n");
	return 0;
}
