/* examples/container.c - the `.ibp` file: pack a tensor, open it, verify
 * it, read rows back; with the IBP codec and with the exponent codec.
 *
 *   cc container.c $(pkg-config --cflags --libs ibp) -o container && ./container [DIR]
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
	char path[4096], exp_path[4096];
	snprintf(path, sizeof(path), "%s/example.ibp", dir);
	snprintf(exp_path, sizeof(exp_path), "%s/example_exp.ibp", dir);

	/* A [1000, 48] float32 tensor of small multiples of 1/64. */
	const uint64_t shape[2] = {1000, 48}, R = 48 * sizeof(float);
	float *data = malloc(shape[0] * R), *row = malloc(R);
	EXPECT(data && row);
	for (uint64_t i = 0; i < shape[0] * shape[1]; i++)
		data[i] = (float)((i * 2654435761u) % 64) / 64.0f;

	/* Train an IBP codec and write the container in one call. */
	CHECK(ibp_pack(path, data, IBP_DTYPE_F32, 2, shape, NULL, IBP_LAYOUT_PACKED));

	/* Open (validates the structure), verify the payload, read every row. */
	ibp_container_t *c = NULL;
	CHECK(ibp_container_open(path, IBP_OPEN_READ, &c));
	CHECK(ibp_container_verify(c, 0));
	const uint64_t *sh = ibp_container_shape(c);
	printf("%s: format %u.%u, %s [%llu, %llu], codec %d, chunk %u B, %llu B on disk (ratio %.2f)\n",
	       ibp_container_name(c), ibp_container_version_major(c), ibp_container_version_minor(c),
	       ibp_dtype_name(ibp_container_dtype(c)), (unsigned long long)sh[0], (unsigned long long)sh[1],
	       (int)ibp_container_codec_id(c), ibp_container_chunk_bytes(c),
	       (unsigned long long)ibp_container_file_bytes(c),
	       (double)(shape[0] * R) / (double)ibp_container_file_bytes(c));
	EXPECT(ibp_container_nrows(c) == shape[0] && ibp_container_row_bytes(c) == R);
	EXPECT(ibp_container_codec_id(c) == IBP_CODEC_IBP && !ibp_container_lossy(c));
	for (uint64_t i = 0; i < shape[0]; i++) {
		CHECK(ibp_container_decode_row(c, i, row));
		EXPECT(memcmp(row, data + i * shape[1], R) == 0);
	}
	EXPECT(ibp_container_decode_row(c, shape[0], row) == IBP_ERR_OUT_OF_RANGE);
	ibp_container_close(c);

	/* The same tensor with the lossless exponent codec: blocks of rows. */
	CHECK(ibp_pack_exp(exp_path, data, IBP_DTYPE_F32, 2, shape, NULL, 256));
	CHECK(ibp_container_open(exp_path, IBP_OPEN_MMAP, &c));
	CHECK(ibp_container_verify(c, 0));
	uint64_t nblocks = ibp_container_nblocks(c), brows = ibp_container_block_rows(c);
	printf("%s: %llu blocks of %llu rows, %llu B on disk\n", ibp_container_name(c), (unsigned long long)nblocks,
	       (unsigned long long)brows, (unsigned long long)ibp_container_file_bytes(c));
	EXPECT(ibp_container_codec_id(c) == IBP_CODEC_EXP && brows == 256 && nblocks == 4);
	float *blk = malloc(brows * R);
	EXPECT(blk != NULL);
	for (uint64_t b = 0; b < nblocks; b++) {
		uint64_t first = b * brows, n = shape[0] - first < brows ? shape[0] - first : brows;
		CHECK(ibp_container_decode_block(c, b, blk, 0));
		EXPECT(memcmp(blk, data + first * shape[1], n * R) == 0);
	}
	CHECK(ibp_container_decode_row(c, 777, row));
	EXPECT(memcmp(row, data + 777 * shape[1], R) == 0);
	ibp_container_close(c);

	free(data), free(row), free(blk);
	EXPECT(remove(path) == 0 && remove(exp_path) == 0);
	printf("container example: OK\n");
	return 0;
}
