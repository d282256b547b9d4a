/* examples/cuda.c - the GPU data path: a device store built from a CPU
 * store, and a gather that decodes rows picked by id on the GPU.
 *
 * Runs with and without a GPU. Without one (or in a build without CUDA)
 * every GPU call returns IBP_ERR_NO_DEVICE; a store made with
 * IBP_CUDA_HOST_FALLBACK then lives in host memory and its gathers decode
 * on the CPU, with the same results and the same per-row statuses.
 *
 *   cc cuda.c $(pkg-config --cflags --libs ibp) -o cuda && ./cuda [DIR]
 * DIR (default: the current directory) receives a file, removed at the end.
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
	snprintf(path, sizeof(path), "%s/example_cuda.ibp", dir);

	int count = 0;
	ibp_status_t s = ibp_cuda_device_count(&count);
	int gpu = s == IBP_OK;
	printf("libibp built with CUDA kernels: %s; usable devices: %d\n", ibp_cuda_built() ? "yes" : "no", count);
	if (!gpu) {
		EXPECT(s == IBP_ERR_NO_DEVICE && count == 0);
		printf("no CUDA device (%s): GPU calls return IBP_ERR_NO_DEVICE; gathering on the host fallback\n",
		       ibp_last_error());
		void *d = NULL;
		EXPECT(ibp_cuda_malloc(64, &d) == IBP_ERR_NO_DEVICE && d == NULL);
	}

	/* Rows packed into a container and opened as a CPU store. */
	const uint64_t shape[2] = {4096, 128}, R = 128 * sizeof(float);
	float *data = malloc(shape[0] * R);
	EXPECT(data != NULL);
	for (uint64_t i = 0; i < shape[0] * shape[1]; i++)
		data[i] = (float)((i * 40503u) % 16) * 0.125f;
	CHECK(ibp_pack(path, data, IBP_DTYPE_F32, 2, shape, NULL, IBP_LAYOUT_PACKED));
	ibp_store_t *store = NULL;
	CHECK(ibp_store_open(path, IBP_OPEN_READ, &store));

	/* The device store: codec tables, offsets and flags in device memory,
	 * the payload copied into pinned host memory that the GPU reads over
	 * PCIe. Without a GPU: a host store, and IBP_ERR_NO_DEVICE says so. */
	ibp_cuda_store_t *cs = NULL;
	s = ibp_cuda_store_from_store(store, IBP_CUDA_PAYLOAD_COPY_PINNED, IBP_CUDA_HOST_FALLBACK, NULL, &cs);
	if (gpu) {
		CHECK(s);
		EXPECT(ibp_cuda_store_on_device(cs));
	} else {
		EXPECT(s == IBP_ERR_NO_DEVICE && cs != NULL && !ibp_cuda_store_on_device(cs));
	}
	EXPECT(ibp_cuda_store_nrows(cs) == shape[0] && ibp_cuda_store_row_bytes(cs) == R);

	/* 512 ids, the last one out of range: its status says so and its
	 * output row is zero-filled; the others decode exactly. */
	const uint64_t n = 512;
	int64_t ids[512];
	int32_t status[512];
	for (uint64_t i = 0; i < n; i++)
		ids[i] = (int64_t)((i * 2654435761u) % shape[0]);
	ids[n - 1] = (int64_t)shape[0];
	float *out = malloc(n * R);
	EXPECT(out != NULL);
	if (gpu) {
		void *d_ids = NULL, *d_out = NULL, *d_status = NULL;
		CHECK(ibp_cuda_malloc(n * sizeof(int64_t), &d_ids));
		CHECK(ibp_cuda_malloc(n * R, &d_out));
		CHECK(ibp_cuda_malloc(n * sizeof(int32_t), &d_status));
		CHECK(ibp_cuda_memcpy(d_ids, ids, n * sizeof(int64_t), NULL));
		CHECK(ibp_gather_cuda(cs, d_ids, n, d_out, NULL, d_status, NULL));
		CHECK(ibp_cuda_memcpy(out, d_out, n * R, NULL));
		CHECK(ibp_cuda_memcpy(status, d_status, n * sizeof(int32_t), NULL));
		CHECK(ibp_cuda_sync(NULL));
		ibp_cuda_free(d_ids);
		ibp_cuda_free(d_out);
		ibp_cuda_free(d_status);
	} else {
		CHECK(ibp_gather_cuda(cs, ids, n, out, NULL, status, NULL)); /* host pointers */
	}
	for (uint64_t i = 0; i + 1 < n; i++) {
		EXPECT(status[i] == IBP_OK);
		EXPECT(memcmp(out + i * shape[1], data + (uint64_t)ids[i] * shape[1], R) == 0);
	}
	EXPECT(status[n - 1] == IBP_ERR_OUT_OF_RANGE);
	for (uint64_t j = 0; j < shape[1]; j++)
		EXPECT(out[(n - 1) * shape[1] + j] == 0.0f);
	uint64_t failed = 0;
	CHECK(ibp_cuda_store_errors(cs, &failed, NULL));
	printf("gathered %llu rows %s, %llu refused (out of range)\n", (unsigned long long)(n - 1),
	       gpu ? "on the GPU" : "on the host", (unsigned long long)failed);
	EXPECT(failed == 1);

	ibp_cuda_store_free(cs);
	ibp_store_close(store);
	free(data), free(out);
	EXPECT(remove(path) == 0);
	printf("cuda example: OK\n");
	return 0;
}
