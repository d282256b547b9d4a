/* test_train_threshold.c - with several clusters, ibp_codec_threshold
 * reports the T of the cluster with the most rows (ibp/codec.h), checked on
 * two row families whose own best thresholds differ. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ibp.h"
#include "testutil.h"

/* Family A: bytes 0..31 random, 32..63 constant: every T gives the same
 * mask (ties go to the larger T). Family B: bytes 0..31 zero but for a rare
 * random byte, 32..63 random: a T below 1 keeps the nearly invariant bytes. */
static void family(tu_rng_t *r, int b, uint8_t *row)
{
	for (int p = 0; p < 32; p++) {
		uint8_t v = (uint8_t)tu_next(r);
		row[p] = b ? (tu_below(r, 100) < 3 ? v : 0) : v;
		row[32 + p] = b ? (uint8_t)tu_next(r) : 0xC3;
	}
}

static double trained_t(const uint8_t *rows, uint64_t n, unsigned k, unsigned *got_k)
{
	ibp_train_opts_t o;
	ibp_train_opts_default(&o);
	o.chunk_bytes = 1;
	o.clusters = k;
	o.nthreads = 1;
	o.xval = 0;
	ibp_codec_t *c = NULL;
	cr_assert_eq(ibp_codec_train(rows, n, 64, &o, &c), IBP_OK, "%s", ibp_last_error());
	double t = ibp_codec_threshold(c);
	if (got_k)
		*got_k = ibp_codec_nclusters(c);
	ibp_codec_free(c);
	return t;
}

Test(train_threshold, largest_cluster_decides)
{
	const uint64_t n = 3000;
	for (int big = 0; big < 2; big++) {
		tu_rng_t r;
		tu_rng_seed(&r, 91 + (uint64_t)big);
		uint8_t *rows = tu_xcalloc(n * 64), *fa = tu_xcalloc(n * 64), *fb = tu_xcalloc(n * 64);
		uint64_t na = 0, nb = 0;
		for (uint64_t i = 0; i < n; i++) {
			/* family `big` has 70% of the rows */
			int b = (tu_below(&r, 100) < 70) ? big : !big;
			family(&r, b, rows + i * 64);
			memcpy((b ? fb + nb++ * 64 : fa + na++ * 64), rows + i * 64, 64);
		}
		double ta = trained_t(fa, na, 1, NULL), tb = trained_t(fb, nb, 1, NULL);
		cr_assert(ta != tb, "the families must prefer different T (both %g)", ta);
		unsigned k = 0;
		double t = trained_t(rows, n, 2, &k);
		cr_assert_eq(k, 2);
		cr_assert_eq(t, big ? tb : ta, "threshold %g, largest cluster's %g, other's %g", t, big ? tb : ta,
			     big ? ta : tb);
		free(rows);
		free(fa);
		free(fb);
	}
}
