/* bench_gather.c - the C baseline of python/bench/bench_gather.py: times
 * ibp_store_gather of the ids in IDS (raw int64, native order) from the
 * container FILE into one preallocated buffer, `reps` calls after `warm`
 * warm-up calls, and prints one line per call time in nanoseconds.
 * Usage: bench_gather FILE IDS NTHREADS REPS WARM
 * Built by bench_gather.py against the headers and libibp.so of the
 * installed ibp package, so both sides run the same library. */
#include <ibp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: %s FILE IDS NTHREADS REPS WARM\n", argv[0]);
		return 2;
	}
	int nthreads = atoi(argv[3]), reps = atoi(argv[4]), warm = atoi(argv[5]);
	FILE *f = fopen(argv[2], "rb");
	if (!f) {
		perror(argv[2]);
		return 1;
	}
	fseek(f, 0, SEEK_END);
	long bytes = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint64_t n = (uint64_t)bytes / sizeof(int64_t);
	int64_t *ids = malloc(n ? n * sizeof(int64_t) : 1);
	if (!ids || fread(ids, sizeof(int64_t), n, f) != n) {
		fprintf(stderr, "cannot read %s\n", argv[2]);
		return 1;
	}
	fclose(f);
	ibp_store_t *s;
	if (ibp_store_open(argv[1], IBP_OPEN_READ, &s) != IBP_OK) {
		fprintf(stderr, "open: %s\n", ibp_last_error());
		return 1;
	}
	void *out = malloc(n ? n * ibp_store_row_bytes(s) : 1);
	for (int r = -warm; r < reps; r++) {
		long long t = now_ns();
		if (ibp_store_gather(s, ids, n, out, nthreads) != IBP_OK) {
			fprintf(stderr, "gather: %s\n", ibp_last_error());
			return 1;
		}
		t = now_ns() - t;
		if (r >= 0)
			printf("%lld\n", t);
	}
	ibp_store_close(s);
	free(out);
	free(ids);
	return 0;
}
