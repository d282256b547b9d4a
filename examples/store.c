/* examples/store.c - the CPU store: random-access gathers of decoded rows
 * from a `.ibp` file, on a pool of worker threads.
 *
 *   cc store.c $(pkg-config --cflags --libs ibp) -o store && ./store [DIR]
 * DIR (default: the current directory) receives the file, removed at the end.
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
	char path[4096];
	snprintf(path, sizeof(path), "%s/example_store.ibp", dir);

	/* Sparse 0/1 float32 rows, like bag-of-words node features. */
	const uint64_t shape[2] = {5000, 300}, R = 300 * sizeof(float);
	float *data = calloc(shape[0] * shape[1], sizeof(float));
	EXPECT(data != NULL);
	uint64_t x = 1;
	for (uint64_t i = 0; i < shape[0] * shape[1]; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		data[i] = x % 50 == 0 ? 1.0f : 0.0f;
	}
	CHECK(ibp_pack(path, data, IBP_DTYPE_F32, 2, shape, NULL, IBP_LAYOUT_PACKED));

	ibp_store_t *s = NULL;
	CHECK(ibp_store_open(path, IBP_OPEN_MMAP, &s));
	EXPECT(ibp_store_nrows(s) == shape[0] && ibp_store_row_bytes(s) == R);
	EXPECT(ibp_store_dtype(s) == IBP_DTYPE_F32 && ibp_store_ndim(s) == 2 && ibp_store_shape(s)[1] == shape[1]);
	EXPECT(ibp_store_codec(s) != NULL && ibp_store_container(s) != NULL);
	printf("%s: %llu rows, up to %d gather threads\n", path, (unsigned long long)ibp_store_nrows(s),
	       ibp_store_max_threads(s));

	/* A mini-batch: 1024 random ids (duplicates allowed), in request order. */
	const uint64_t n = 1024;
	int64_t ids[1024];
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		ids[i] = (int64_t)(x % shape[0]);
	}
	float *batch = malloc(n * R);
	EXPECT(batch != NULL);
	CHECK(ibp_store_gather(s, ids, n, batch, 0));   /* all threads */
	for (uint64_t i = 0; i < n; i++)
		EXPECT(memcmp(batch + i * shape[1], data + (uint64_t)ids[i] * shape[1], R) == 0);
	memset(batch, 0, n * R);
	CHECK(ibp_store_gather(s, ids, n, batch, 1));   /* the calling thread only */
	for (uint64_t i = 0; i < n; i++)
		EXPECT(memcmp(batch + i * shape[1], data + (uint64_t)ids[i] * shape[1], R) == 0);

	/* Ids are checked before any work: a bad one names its position. */
	ids[7] = (int64_t)shape[0];
	EXPECT(ibp_store_gather(s, ids, n, batch, 0) == IBP_ERR_OUT_OF_RANGE);
	printf("bad id: %s\n", ibp_last_error());

	/* Everything, in order, and the payload check. */
	float *all = malloc(shape[0] * R);
	EXPECT(all != NULL);
	CHECK(ibp_store_decode_all(s, all, 0));
	EXPECT(memcmp(all, data, shape[0] * R) == 0);
	CHECK(ibp_store_verify(s, 0));
	ibp_store_close(s);

	free(data), free(batch), free(all);
	EXPECT(remove(path) == 0);
	printf("store example: OK\n");
	return 0;
}
