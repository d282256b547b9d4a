/* codec_internal.h - the codec's private structures and bit-level helpers.
 *
 * Shared by src/bitpack/codec.c (portable kernels, public API) and src/bitpack/codec_bmi2.c
 * (pext/pdep kernels). Other library files (train.c, the container, the
 * store) may include it to read a codec's precomputed tables.
 *
 * The second half of this file (after the include guard) is a kernel
 * template: a .c file that defines IBP_CODEC_KERNEL_BODY, the suffix macro
 * IBP_K(name) and the four inline primitives ibp_k_dep_nm / ibp_k_dep_m /
 * ibp_k_ext_nm / ibp_k_ext_m, then includes this header again, gets the row
 * kernels for its instruction set.
 */
#ifndef IBP_CODEC_INTERNAL_H
#define IBP_CODEC_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "bitpack/row_mode.h"
#include "ibp/codec.h"

/* Declared for users in ibp/unstable.h (the library does not include it). */
#ifdef __cplusplus
extern "C" {
#endif
ibp_status_t ibp_codec_set_impl(ibp_codec_t *c, ibp_impl_t impl);
uint64_t ibp_paper_layout_size(const ibp_codec_t *c, const void *rows, uint64_t nrows);
#ifdef __cplusplus
}
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "libibp's codec assumes a little-endian host"
#endif

#define IBP_INLINE static inline __attribute__((always_inline))

/* One contiguous run of set bits of a chunk word: bits [pos, pos+len) of the
 * word correspond to bits [src, src+len) of the packed (extracted) value;
 * mask = lowmask(len) << pos. */
typedef struct ibp_run {
	uint64_t mask;
	uint8_t pos;
	uint8_t src;
} ibp_run_t;

/* The first two runs of a chunk word inline, for the portable path's
 * common case (most trained masks leave one or two runs of static bits):
 * deposit(v) = ((v << p0) & m0) | (((v >> s1) << p1) & m1) when !more
 * (m1 = 0 for a single run, m0 = m1 = 0 for none). */
typedef struct ibp_run2 {
	uint64_t m0, m1;
	uint8_t p0, p1, s1, more;
} ibp_run2_t;

/* Per-cluster tables, each indexed by chunk position j in [0, D). */
typedef struct ibp_cluster {
	const uint64_t *m;     /* Mask, widened */
	const uint64_t *b;     /* Bitval, widened (b ⊆ m) */
	const uint64_t *nm;    /* ~m within W bits: the static bit positions */
	const uint64_t *soff;  /* D + 1 entries: static bit offset of chunk j; soff[D] = S */
	const uint8_t *sw;     /* static width s_j = W - popc(m_j) */
	const uint8_t *ew;     /* exception width e_j = popc(m_j) */
	const uint64_t *nrun;  /* D + 1 entries: runs of nm_j are runs[nrun[j], nrun[j+1]) */
	const uint64_t *mrun;  /* D + 1 entries: runs of m_j are runs[mrun[j], mrun[j+1]) */
	const ibp_run_t *runs;
	const ibp_run2_t *nr2; /* the runs of nm_j, first two inline */
	uint64_t S;            /* static bits of a non-raw row */
	uint64_t nclean;       /* CLEAN row size in bytes: ceil(S / 8) */
	/* Exception values x̂ (FORMAT.md §1.1, Xval): x[j] ⊆ m[j], widened,
	 * equal to b[j] where disabled; xen[j] = 1 iff enabled (x[j] != b[j]).
	 * has_x = 0 (no chunk enabled) keeps every kernel on the plain paths. */
	const uint64_t *x;
	const uint8_t *xen;
	unsigned has_x;
	/* With has_x (else NULL): xen as D bits, and x ^ b narrowed to C bytes
	 * a chunk (D C bytes), the patch of every hit (the AVX-512 run walk,
	 * which XORs a row's hits in by masked vector ops). */
	const uint64_t *xenb;
	const uint8_t *xbc;
	/* SIMD static-part tables (built only when the CPU can use them, else
	 * nvg = 0): chunks [0, nvg * G) in nvg groups of G lanes (G = 16 for
	 * C <= 2, 8 for C = 4; none for C = 8), vbase[g] the byte of the body
	 * where group g's window starts. Chunks whose ~m_j has more than two
	 * runs are decoded wrong by the lanes and listed in vfix[0, nvfix). */
	const struct ibp_vgroup *vg;
	const uint64_t *vbase;
	uint64_t nvg;
	const uint64_t *vfix;
	uint64_t nvfix;
	/* SIMD exception-walk tables (built with the static ones, for clusters
	 * without Xvals and C <= 4, else nxg = 0): chunks in nxg groups of G
	 * lanes as above (the last group may be partial: lanes past D are 0);
	 * xfix, D bits, marks the chunks whose m_j has more than two runs
	 * (deposited with pdep after the lanes; NULL when none). */
	const struct ibp_xgroup *xg;
	uint64_t nxg;
	const uint64_t *xfix;
	/* S = 0 (no static field: rows of zeros and exceptions, as sparse
	 * bag-of-words rows): the static part of every row is the same R
	 * bytes (b_j narrowed), kept here so the SIMD paths copy it instead of
	 * rebuilding it chunk by chunk; NULL otherwise. The portable kernel
	 * (the reference) builds it, and always decodes without it. */
	const uint8_t *base_row;
	/* SIMD static part for C = 4 in groups of 16 lanes of 32 bits (the
	 * ibp_vgroup_t layout with LB = 4, as for C <= 2): built when every
	 * lane's field fits its lane (field bit + s_j <= 32) and its bytes the
	 * window, else nvg16 = 0 and the 8-lane tables above serve. Half the
	 * groups of those, with the same work per group. */
	const struct ibp_vgroup *vg16;
	const uint64_t *vbase16;
	uint64_t nvg16;
	const uint64_t *vfix16;
	uint64_t nvfix16;
	/* The AVX-512 VBMI tables (ibp_vbmi_t), NULL when none was built:
	 * behind a pointer, since kernels copy this struct per row. */
	const struct ibp_vbmi *vbmi;
	/* The AVX2 qword-pair static tables for C = 4 (ibp_q2_t), NULL when
	 * none was built. */
	const struct ibp_q2 *q2;
	/* The AVX2 two-window static tables for C = 4 (ibp_w2_t), NULL when
	 * none was built; the kernel prefers them to q2. */
	const struct ibp_w2 *w2;
} ibp_cluster_t;

/* AVX2 static part for C = 4 clusters without vg16 (fields too wide for
 * 32-bit lanes at every offset, as f32 PCA and f16 KV rows): groups of 8
 * chunks in 4 qword lanes of 2 chunks. Lane k loads the 8 bytes at body
 * byte qo[k] (its first chunk's field byte), and each run i of ~m_j of
 * its two chunks (at most three each, the second chunk's in bits 32..63)
 * is ((w >> sr[i]) << sl[i]) & m[i]; the lane is b | the runs. Chunks
 * with more runs are patched after (fix). Only full groups (the last
 * chunk's when it is whole); a group runs when its last qword is
 * readable. */
typedef struct ibp_q2group {
	uint64_t qo[4];
	uint64_t sr[6][4];
	uint64_t sl[6][4];
	uint64_t m[6][4];
	uint64_t b[4];
} ibp_q2group_t;

typedef struct ibp_q2 {
	const ibp_q2group_t *g;
	uint64_t ng;
	const uint64_t *fix; /* ascending */
	uint64_t nfix;
	int three; /* some chunk has a third run */
} ibp_q2_t;

/* AVX2 static part for C = 4 clusters without vg16 whose ~m_j have runs
 * of a few bits (f16 pairs: ~m_j = 0x83FF83FF, three runs of a 26-bit
 * field, which fits no 32-bit lane at every bit offset): groups of 8
 * chunks in 8 lanes of 32 bits. Lane l holds two windows of its field:
 * A, the 4 bytes at its field's byte (field bits from sh), and B, the 4
 * bytes one byte on (A's bits 8..39). Run slot 0 takes A, slots 1 and 2
 * take B: ((src >> sr) << sl) & m each, OR b. A run fits slot 0 when it
 * ends by bit 32 of A, slots 1, 2 when it starts at bit 8 or later (it
 * ends by bit 39); chunks whose runs do not fit (or more than three) are
 * patched after (fix, ascending). Lanes 0-3 (4-7) take their bytes from
 * the 16 bytes at body byte lo[0] (lo[1]) by a byte shuffle (idx; 4
 * fields of <= 32 bits from bit <= 7 span 13 bytes), B from those one
 * byte on with the same shuffle. Only full groups of whole chunks. */
typedef struct ibp_w2group {
	uint8_t idx[32];
	uint32_t sr[3][8];
	uint32_t sl[3][8];
	uint32_t m[3][8];
	uint32_t b[8];
	uint64_t lo[2];
	uint8_t pad[16]; /* 32-byte multiple: the lanes load aligned */
} ibp_w2group_t;

typedef struct ibp_w2 {
	const ibp_w2group_t *g;
	uint64_t ng;
	const uint64_t *fix; /* ascending */
	uint64_t nfix;
	int three; /* some chunk uses slot 2 */
} ibp_w2_t;

/* A cluster's AVX-512 VBMI tables (codec.c builds them). */
typedef struct ibp_vbmi {
	/* AVX-512 VBMI static part for C <= 2 in groups of 64 / C chunks (a
	 * full 64-byte vector of output, ibp_msgroup_t): built when the CPU
	 * has VBMI and every qword's fields fit it (below), else nvgm = 0 and
	 * the cluster's vg / vg16 tables serve. Chunks whose ~m_j has more than two runs are
	 * listed in vfixm, as for vg. */
	const struct ibp_msgroup *vgm;
	const uint64_t *vbasem;
	uint64_t nvgm;
	const uint64_t *vfixm;
	uint64_t nvfixm;
	/* AVX-512 VBMI exception walk for C = 2 in groups of 32 lanes of 16
	 * bits (ibp_xgroup2_t; chunks past D are 0): built with xg, when every
	 * group's fields fit (below), else nxg2 = 0 and the cluster's xg
	 * serves. The chunks of its xfix are patched after, as for xg. */
	const struct ibp_xgroup2 *xg2;
	uint64_t nxg2;
	/* AVX-512 exception walk for C = 4 in groups of 16 lanes of 32 bits
	 * (ibp_xgroup_t with 4-byte lanes; chunks past D are 0): built with
	 * xg when every lane's width is <= 25 (a field at bit <= 7 of the 4
	 * bytes at its byte fits the lane) and every group's first 15 widths
	 * sum to <= 473 (the last lane's 4 bytes within the 64-byte window),
	 * else nxg4 = 0 and the 8-lane xg serves. The chunks of xfix are
	 * patched after, as for xg. */
	const struct ibp_xgroup *xg4;
	uint64_t nxg4;
	/* AVX-512 row decode for C = 2 and 4 with the static part and the
	 * exception walk fused, in groups of 64 / C lanes of C bytes
	 * (ibp_f2group_t, ibp_f4group_t), the partial last group included:
	 * no scalar rest, no second pass over the row. Built with xg2 / xg4,
	 * when every qword's static fields fit it (as for vgm) and at most D
	 * / 4 chunks have ~m_j of more than three runs (listed in ffix,
	 * patched after); else nfg = 0. Group g's static window starts at
	 * byte fbase[g] of the body; fthree: some chunk has a third run. */
	const void *fg;
	const uint64_t *fbase;
	uint64_t nfg;
	const uint64_t *ffix;
	uint64_t nffix;
	int fthree;
	/* C = 4, on CPUs with VPOPCNTDQ: in every fused group the chunks below
	 * D share one exception width w (the group's w[0]), so a lane's field
	 * offset is w times its rank among the group's exceptions instead of
	 * a prefix sum of the widths. */
	int funi;
} ibp_vbmi_t;

/* The static lanes of a fused group (ibp_f2group_t, ibp_f4group_t):
 * lane l (C bytes) holds chunk (64 / C)g + l's as in ibp_msgroup_t (qword
 * k gets window bytes idx[8k, 8k+8); multishift controls c0, c1, c2 and
 * masks sm0, sm1, sm2 for up to three runs of ~m_j; no Bitval: static =
 * the runs only) and b_j. A chunk is static | (exception ? deposit(field,
 * m_j) : b_j); lanes past D are 0. */
typedef struct ibp_fstatic {
	uint8_t idx[64];
	uint8_t c0[64];
	uint8_t c1[64];
	uint8_t c2[64];
	uint8_t sm0[64];
	uint8_t sm1[64];
	uint8_t sm2[64];
	uint8_t b[64];
} ibp_fstatic_t;

/* A fused C = 4 group: the static lanes and the exception lanes as in
 * ibp_xgroup_t with 4-byte lanes (w, m0, m1, p0, s1, p1). */
typedef struct ibp_f4group {
	ibp_fstatic_t s;
	uint8_t w[64];
	uint8_t xm0[64];
	uint8_t xm1[64];
	uint8_t xp0[64];
	uint8_t xs1[64];
	uint8_t xp1[64];
} ibp_f4group_t;

/* A fused C = 2 group: the static lanes and the exception lanes as in
 * ibp_xgroup2_t (w, m0, m1, c0, c1). */
typedef struct ibp_f2group {
	ibp_fstatic_t s;
	uint8_t w[64];
	uint8_t xm0[64];
	uint8_t xm1[64];
	uint8_t xc0[64];
	uint8_t xc1[64];
} ibp_f2group_t;

/* One group of the 32-lane exception walk: lane l holds chunk j's
 * exception width w = e_j, m_j's two runs (masks m0, m1) and b_j. Each
 * qword of 4 lanes gets 8 bytes from the byte of its first lane's field
 * (a byte permute of the group's window); a lane's field is at bit f of
 * its qword, and the multishift controls f + c0, f + c1 (per byte, mod
 * 64; c0 = -p0 + 8t, c1 = s1 - p1 + 8t for byte t) put the runs in
 * place. Built only when every 4 lanes' widths sum to <= 57 (7 + 57 bits
 * fit the qword) and the first 28 lanes' to <= 441 (every qword within
 * the 64-byte window). */
typedef struct ibp_xgroup2 {
	uint8_t w[64];
	uint8_t m0[64];
	uint8_t m1[64];
	uint8_t b[64];
	uint8_t c0[64];
	uint8_t c1[64];
} ibp_xgroup2_t;

/* One group of the multishift static part: qword k of the output (8 / C
 * chunks) gets bytes idx[8k, 8k+8) of the 64-byte window at vbasem (a
 * byte permute), which hold all its chunks' fields; then a chunk is
 * (ms(c0) & m0) | (ms(c1) & m1) | b, where ms(c) is vpmultishiftqb with
 * the lane's control bytes c: each output byte takes the 8 bits at bit c
 * of its qword. c0 = field bit - p0 (+ 8 per byte) puts the field's first
 * run at p0; c1 = field bit + s1 - p1 its second. Mod 64: the rotated-in
 * bits fall outside the run masks. */
typedef struct ibp_msgroup {
	uint8_t idx[64];
	uint8_t c0[64];
	uint8_t c1[64];
	uint8_t m0[64];
	uint8_t m1[64];
	uint8_t b[64];
} ibp_msgroup_t;

/* One SIMD group of the exception walk: lane l (LB bytes, as in
 * ibp_vgroup_t) holds chunk j's exception width w = e_j, and the two runs
 * of m_j: deposit(v) = ((v << p0) & m0) | (((v >> s1) << p1) & m1); the
 * lane's delta to the matched chunk is deposit(v) ^ b. */
typedef struct ibp_xgroup {
	uint8_t w[64];
	uint8_t m0[64];
	uint8_t m1[64];
	uint8_t b[64];
	uint8_t p0[64];
	uint8_t s1[64];
	uint8_t p1[64];
	uint8_t pad[64];
} ibp_xgroup_t;

/* One SIMD group of the static part: lane l (LB = 4 bytes for C <= 2, 8
 * for C = 4) gets bytes idx[l*LB, l*LB+LB) of the 64-byte window at vbase,
 * then chunk = (((w >> sh) << p0) & m0) | (((w >> q1) << p1) & m1) | b,
 * the two runs of ~m_j (q1 = sh + bits of the first run). Masks and Bitval
 * are LB-byte little-endian lanes, and so are the shift counts. */
typedef struct ibp_vgroup {
	uint8_t idx[64];
	uint8_t m0[64];
	uint8_t m1[64];
	uint8_t b[64];
	uint8_t sh[64];
	uint8_t p0[64];
	uint8_t q1[64];
	uint8_t p1[64];
} ibp_vgroup_t;

struct ibp_codec;
struct ibp_tiny_run;

/* Row kernels of one implementation. Headers are validated before these are
 * called; `avail` is the number of readable bytes from `body` on (the
 * encoded body lies within them). */
typedef struct ibp_kernels {
	ibp_impl_t impl;
	/* Writes header (for `mode` BITMAP/LIST) and body of a non-raw row with
	 * n exceptions into dst (exactly the row's size, already checked). */
	void (*encode)(const struct ibp_codec *c, const ibp_cluster_t *cl, const uint8_t *row,
		       unsigned mode, uint64_t n, uint8_t *dst);
	/* Decodes the static part: dst chunk j = deposit(static_j, ~m_j) | b_j. */
	void (*decode_static)(const struct ibp_codec *c, const ibp_cluster_t *cl,
			      const uint8_t *body, uint64_t avail, uint8_t *dst);
	/* Applies the n exceptions named by header `hdr` (BITMAP: hdr_len bytes
	 * of bitmap, bits >= D already checked clear; LIST: the list stream of
	 * n entries) whose bits start at body bit S, and returns the bit where
	 * they end. The walk checks each field against avail (with Xvals their
	 * widths depend on the hit bits) and each LIST index (< D, strictly
	 * increasing), and returns UINT64_MAX (dst then partly written) on a
	 * corrupt row. */
	uint64_t (*decode_exc)(const struct ibp_codec *c, const ibp_cluster_t *cl, unsigned mode,
			       const uint8_t *hdr, uint64_t hdr_len, uint64_t n, const uint8_t *body,
			       uint64_t avail, uint8_t *dst);
	/* ibpi_row_stats (the encoder's sizing pass); must give the same n, E. */
	void (*row_stats)(const struct ibp_codec *c, const ibp_cluster_t *cl, const uint8_t *row,
			  uint64_t *n, uint64_t *E);
	/* Optional (NULL: decode_static then decode_exc): decodes a row with
	 * exceptions whole, as those two would, for a cluster without
	 * base_row; same arguments, result and checks as decode_exc. */
	uint64_t (*decode_row)(const struct ibp_codec *c, const ibp_cluster_t *cl, unsigned mode,
			       const uint8_t *hdr, uint64_t hdr_len, uint64_t n, const uint8_t *body,
			       uint64_t avail, uint8_t *dst);
	/* Optional (NULL: the paths above): a whole row of a codec with tiny
	 * tables (ibp_codec_t.tiny), CLEAN (n = 0) or, for a cluster without
	 * Xvals, BITMAP / LIST; same arguments, result and checks as
	 * decode_row (returns the end bit, S for CLEAN). */
	uint64_t (*decode_tiny)(const struct ibp_codec *c, const ibp_cluster_t *cl, unsigned mode,
				const uint8_t *hdr, uint64_t hdr_len, uint64_t n, const uint8_t *body,
				uint64_t avail, uint8_t *dst);
	/* Optional (NULL: rows one by one), with decode_tiny: consecutive
	 * rows of tiny tables from the store's row map records
	 * (ibp_tiny_run_t), row i into dst + i R as decode_tiny writes it;
	 * returns the rows decoded, stopping before the first row it does not
	 * take (ibp_tiny_run_t says which: CLEAN and some BITMAP rows). */
	uint64_t (*decode_tiny_run)(const struct ibp_codec *c, const struct ibp_tiny_run *run, uint64_t n,
				    uint8_t *dst);
} ibp_kernels_t;

/* n consecutive rows described by n + 1 records (the row map's, FORMAT.md
 * "In-memory row map"): row i starts at base + (rec[i] >> sh), ends at
 * base + (rec[i + 1] >> sh), its mode is rec[i] & 3 and its cluster
 * (rec[i] >> 2) & cmask. The records were validated when built: the rows
 * lie in the payload, which is readable up to `end`. decode_tiny_run
 * takes a row when it is CLEAN or, for a cluster without Xvals, BITMAP,
 * its cluster < K, it passes decode_row_ext's checks, its length is its
 * extent (exact, else at least it) and 18 bytes from its start are
 * readable (its bits past the row are not used); the caller decodes the
 * row it stops at by the checked path. */
typedef struct ibp_tiny_run {
	const uint8_t *base;
	const uint32_t *rec;
	const uint8_t *end;
	unsigned sh;
	uint32_t cmask;
	int exact;
} ibp_tiny_run_t;

/* Rows of at most 16 bytes (D C <= 16: one or two 64-bit words, every
 * field of a row within its first 16 body bytes) are too short for the
 * SIMD groups, and chunk by chunk their decode was mostly loop overhead
 * (an int64 edge list, C = 2: 8 chunks a row). A cluster's tables per
 * 64-bit word k of the row instead: one pdep of the static bits (the
 * fields of a word's chunks are consecutive in the stream, as the
 * encoder's wide pext packs them) and one of its exception fields. */
#define IBP_TINY_MAX_BYTES 16u
typedef struct ibp_tiny {
	uint64_t nm[2]; /* ~Mask of the word's chunks (bytes past D C clear) */
	uint64_t m[2];  /* Mask */
	uint64_t b[2];  /* Bitval */
	uint8_t so[2];  /* stream bit of the word's first static field (<= 128) */
	uint8_t nclean; /* the cluster's CLEAN row size, (S + 7) / 8 */
	uint8_t xv;     /* the cluster has Xvals (has_x) */
} ibp_tiny_t;

struct ibp_codec {
	uint64_t R;          /* row bytes */
	uint64_t D;          /* chunks per row */
	unsigned C;          /* chunk bytes */
	unsigned W;          /* chunk bits */
	unsigned K;          /* clusters */
	unsigned L;          /* LIST field width: max(1, bitlen(D - 1)) */
	uint64_t last_bytes; /* bytes of the last chunk that belong to the row */
	uint64_t full;       /* W low bits set */
	uint64_t bitmap_bytes; /* ceil(D / 8) */
	double threshold;    /* -1 unless set by training */
	ibp_impl_t impl;     /* PORTABLE, BMI2, AVX2 or AVX512 */
	const ibp_kernels_t *k;
	uint8_t *mask_bytes;   /* K * D * C, as given */
	uint8_t *bitval_bytes; /* K * D * C, as given */
	uint8_t *xval_bytes;   /* K * D * C, as given (the Bitvals when none) */
	int has_xval;          /* some cluster has an enabled chunk */
	ibp_cluster_t *cl;     /* K entries */
	const ibp_tiny_t *tiny; /* K entries when D C <= IBP_TINY_MAX_BYTES, else NULL */
	int tiny_s64;           /* with tiny: every cluster's S <= 64 */
	void *mem[20];         /* allocations owned by the codec */
};

/* The kernels; ibpi_kernels_bmi2 exists on x86-64 builds only. */
extern const ibp_kernels_t ibpi_kernels_portable;
#if defined(__x86_64__) || defined(_M_X64)
#define IBP_HAVE_BMI2_KERNELS 1
extern const ibp_kernels_t ibpi_kernels_bmi2;
/* AVX-512 (F, BW, VL, VBMI) static part, BMI2 for the rest. */
extern const ibp_kernels_t ibpi_kernels_avx512;
/* AVX2 static part (the same group tables, byte shuffles), BMI2 for the rest. */
extern const ibp_kernels_t ibpi_kernels_avx2;
#endif

/* For training (src/bitpack/train.c): records the threshold a codec was trained with. */
void ibpi_codec_set_threshold(ibp_codec_t *c, double threshold);

/* Builds the AVX2 two-window static tables (ibp_cluster_t.w2, see
 * ibp_w2group_t) of every C = 4 cluster without vg16 whose runs fit them
 * (at most D / 4 chunks patched after, none where q2 serves) when avx2_ok
 * (the AVX2 kernels can run), after the q2 tables; returns 0 on no
 * memory (its block is c->mem[17]). w2_tables.c. */
int ibpi_build_w2(ibp_codec_t *c, int avx2_ok);

/* Builds ibp_cluster_t.base_row (S = 0 clusters, by the portable
 * kernels) and ibp_codec_t.tiny (rows of D C <= IBP_TINY_MAX_BYTES);
 * each returns 0 on no memory. row_tables.c. */
int ibpi_build_base_rows(ibp_codec_t *c, const ibp_kernels_t *portable);
int ibpi_build_tiny(ibp_codec_t *c);

/* Exceptions (n) and the bits of the exception part (E, FORMAT.md §1.3,
 * Xval hit bits counted) of `row` under `cl`. */
void ibpi_row_stats(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *row,
		   uint64_t *n, uint64_t *E);

/* The same with the Xval hit bits counted (xv = 1) or not (xv = 0: every
 * exception costs its full width, as in the paper's layout). row_stats.c. */
void ibpi_row_stats_xv(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *row,
		       uint64_t *n, uint64_t *E, int xv);

/* Mode and exact encoded size of a row with n exceptions of total width E
 * (the FORMAT.md mode choice rule). */
IBP_INLINE void ibp_choose_mode(const ibp_codec_t *c, const ibp_cluster_t *cl, uint64_t n,
				uint64_t E, unsigned *mode, uint64_t *size)
{
	/* the rule itself is shared with the CUDA encoder (row_mode.h) */
	ibp_row_mode(c->R, c->bitmap_bytes, c->L, cl->S, n, E, mode, size);
}

/* Internal encode/decode used by the public functions and the batch paths.
 * ibpi_decode_row_ext also returns the row's extent (bytes it occupies). */
ibp_status_t ibpi_decode_row_ext(const ibp_codec_t *c, const uint8_t *src, uint64_t src_len,
				uint8_t flags, unsigned cluster, uint8_t *dst, uint64_t *extent);

/* ibpi_decode_row_ext with a CLEAN row of tiny tables (ibp_tiny_t) taken
 * inline, for the per-row callers (store, batches): such a row passes
 * every header check, and the call and checks cost as much as its decode. */
static inline ibp_status_t ibpi_decode_row_ext_i(const ibp_codec_t *c, const uint8_t *src, uint64_t src_len,
						 uint8_t flags, unsigned cluster, uint8_t *dst, uint64_t *extent)
{
	if (flags == IBP_ROW_CLEAN && c->tiny && cluster < c->K && c->k->decode_tiny &&
	    c->cl[cluster].nclean <= src_len) { /* a CLEAN tiny row: the checks pass */
		(void)c->k->decode_tiny(c, &c->cl[cluster], IBP_ROW_CLEAN, src, 0, 0, src, src_len, dst);
		*extent = c->cl[cluster].nclean;
		return IBP_OK;
	}
	return ibpi_decode_row_ext(c, src, src_len, flags, cluster, dst, extent);
}

/* ---- bit helpers ---- */

IBP_INLINE uint64_t ibp_lowmask(unsigned n)
{
	return n >= 64 ? ~0ull : ((1ull << n) - 1);
}

IBP_INLINE uint64_t ibp_load64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

IBP_INLINE void ibp_store64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* Loads a full chunk of C bytes (little-endian). */
IBP_INLINE uint64_t ibp_ld_chunk(const uint8_t *p, unsigned C)
{
	switch (C) {
	case 1:
		return p[0];
	case 2: {
		uint16_t v;
		memcpy(&v, p, 2);
		return v;
	}
	case 4: {
		uint32_t v;
		memcpy(&v, p, 4);
		return v;
	}
	default:
		return ibp_load64(p);
	}
}

IBP_INLINE void ibp_st_chunk(uint8_t *p, uint64_t x, unsigned C)
{
	switch (C) {
	case 1:
		p[0] = (uint8_t)x;
		break;
	case 2: {
		uint16_t v = (uint16_t)x;
		memcpy(p, &v, 2);
		break;
	}
	case 4: {
		uint32_t v = (uint32_t)x;
		memcpy(p, &v, 4);
		break;
	}
	default:
		ibp_store64(p, x);
	}
}

/* Loads the first `nb` (1..8) bytes of a chunk, zero-padded. */
IBP_INLINE uint64_t ibp_ld_partial(const uint8_t *p, uint64_t nb)
{
	uint64_t v = 0;
	for (uint64_t i = 0; i < nb; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

IBP_INLINE void ibp_st_partial(uint8_t *p, uint64_t x, uint64_t nb)
{
	for (uint64_t i = 0; i < nb; i++)
		p[i] = (uint8_t)(x >> (8 * i));
}

/* Reads the stream field of nbits (0..64) at bit `off` of p, where p has
 * `avail` readable bytes and the field lies within them. Bits above nbits
 * of the result are unspecified (mask them when they matter). Never reads
 * outside p[0, avail). */
IBP_INLINE uint64_t ibp_peek_bits(const uint8_t *p, uint64_t avail, uint64_t off, unsigned nbits)
{
	uint64_t byte = off >> 3;
	unsigned sh = (unsigned)(off & 7);
	uint64_t w;
	if (avail >= 8 && byte <= avail - 8) {
		w = ibp_load64(p + byte) >> sh;
		if (sh + nbits > 64)
			w |= (uint64_t)p[byte + 8] << (64 - sh);
		return w;
	}
	/* tail: the field needs at most 8 bytes here */
	uint64_t end = (off + nbits + 7) >> 3;
	w = 0;
	for (uint64_t i = byte; i < end; i++)
		w |= (uint64_t)p[i] << (8 * (i - byte));
	return w >> sh;
}

IBP_INLINE uint64_t ibp_read_bits(const uint8_t *p, uint64_t avail, uint64_t off, unsigned nbits)
{
	return ibp_peek_bits(p, avail, off, nbits) & ibp_lowmask(nbits);
}

/* Entry k of a LIST row's header (L bits an entry after the count; lm =
 * ibp_lowmask(L)): a byte for L = 8 (D in 129..256, as bf16 rows of 256
 * chunks: hdr_len = n + 1), else one load where 8 bytes are readable (rd
 * = ibp_hdr_readable), as ibp_exc_bitmap does. */
IBP_INLINE uint64_t ibp_list_entry(const uint8_t *hdr, uint64_t hdr_len, uint64_t rd, uint64_t k, unsigned L,
				   uint64_t lm)
{
	if (L == 8)
		return hdr[k + 1];
	const uint64_t bit = (uint64_t)L * (k + 1);
	return ((bit >> 3) + 8 <= rd ? ibp_load64(hdr + (bit >> 3)) >> (bit & 7)
				     : ibp_peek_bits(hdr, hdr_len, bit, L)) & lm;
}

/* LSB-first bit writer. Stores whole 64-bit words as they fill, so it only
 * writes bytes that belong to the stream; ibp_bw_flush writes the rest. */
typedef struct ibp_bw {
	uint8_t *p;
	uint64_t acc;
	unsigned fill; /* < 64 */
} ibp_bw_t;

/* Starts a writer at stream bit `bit` of `base`; the bits below `bit` in
 * its byte are kept (they were written by a previous writer). */
IBP_INLINE void ibp_bw_init(ibp_bw_t *w, uint8_t *base, uint64_t bit)
{
	w->p = base + (bit >> 3);
	w->fill = (unsigned)(bit & 7);
	w->acc = w->fill ? (w->p[0] & ibp_lowmask(w->fill)) : 0;
}

/* Appends the n (0..64) low bits of v; v must have no bits above n. */
IBP_INLINE void ibp_bw_put(ibp_bw_t *w, uint64_t v, unsigned n)
{
	w->acc |= v << w->fill;
	unsigned f = w->fill + n;
	if (f >= 64) {
		ibp_store64(w->p, w->acc);
		w->p += 8;
		f -= 64;
		w->acc = f ? v >> (n - f) : 0;
	}
	w->fill = f;
}

IBP_INLINE void ibp_bw_flush(ibp_bw_t *w)
{
	unsigned nb = (w->fill + 7) >> 3;
	for (unsigned i = 0; i < nb; i++)
		w->p[i] = (uint8_t)(w->acc >> (8 * i));
}

/* The high bit of every C-byte lane of a 64-bit word (C = 1, 2 or 4). */
IBP_INLINE uint64_t ibp_lane_high(unsigned C)
{
	return C == 1 ? 0x8080808080808080ull : C == 2 ? 0x8000800080008000ull : 0x8000000080000000ull;
}

/* Number of chunks j (from 0) whose static field can be read with one
 * unaligned 8-byte load: soff[j]/8 + 8 <= avail. soff is non-decreasing. */
IBP_INLINE uint64_t ibp_fast_chunks(const ibp_cluster_t *cl, uint64_t D, uint64_t avail)
{
	if (avail < 8)
		return 0;
	uint64_t lim = avail - 8; /* need soff[j] >> 3 <= lim */
	uint64_t lo = 0, hi = D;  /* answer in [lo, hi] */
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if ((cl->soff[mid] >> 3) <= lim)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Chunks (D) up to which the SIMD exception walks take a row: they
 * expand a LIST header into a bitmap of D bits on the stack. */
#define IBP_XWALK_MAXD 8192u
/* Exceptions per SIMD group (16 chunks for C <= 2, 8 for C = 4) from
 * which a row takes the AVX-512 SIMD walk, and the AVX2 one. */
#define IBP_XWALK_PER_GROUP 2u
#define IBP_XWALK_PER_GROUP_AVX2 8u

/* Set bits of a BITMAP header of len bytes. */
IBP_INLINE uint64_t ibp_bitmap_count(const uint8_t *hdr, uint64_t len)
{
	uint64_t n = 0, i = 0;
	for (; i + 8 <= len; i += 8)
		n += (uint64_t)__builtin_popcountll(ibp_load64(hdr + i));
	if (i < len)
		n += (uint64_t)__builtin_popcountll(ibp_ld_partial(hdr + i, len - i));
	return n;
}

/* Bytes readable from a row's header on: the body follows it in the
 * row (decode_row_ext), so its avail bytes too. */
IBP_INLINE uint64_t ibp_hdr_readable(const uint8_t *hdr, uint64_t hdr_len, const uint8_t *body, uint64_t avail)
{
	return body == hdr + hdr_len ? hdr_len + avail : hdr_len;
}

/* The exceptions of a BITMAP or LIST row as a bitmap of D bits in
 * bm[0, ceil(D / 64)], one word more than needed (a half group past D
 * reads it; bits >= D clear). LIST entries are checked (< D,
 * strictly increasing) as the scalar walk checks them; returns 0 on a bad
 * one. BITMAP headers were checked by the caller (bits >= D clear).
 * hdr_rd >= hdr_len bytes from hdr are readable (ibp_hdr_readable).
 * bm holds IBP_XWALK_MAXD / 64 + 1 words (D <= IBP_XWALK_MAXD). */
IBP_INLINE int ibp_exc_bitmap(const ibp_codec_t *c, unsigned mode, const uint8_t *hdr, uint64_t hdr_len,
			      uint64_t hdr_rd, uint64_t n, uint64_t *bm)
{
	const uint64_t D = c->D, nw = (D + 63) / 64;
	bm[nw - 1] = bm[nw] = 0;
	if (mode == IBP_ROW_BITMAP) {
		/* hdr_len = ceil(D / 8) <= 8 nw. Whole words stored: the walk's
		 * 8-byte loads of bm are forwarded from them (not from a copy's
		 * narrower stores, which held up every BITMAP row of D <= 32) */
		for (uint64_t i = 0; 8 * i < hdr_len; i++) {
			const uint64_t left = hdr_len - 8 * i;
			bm[i] = left >= 8 ? ibp_load64(hdr + 8 * i)
			      : 8 * i + 8 <= hdr_rd ? ibp_load64(hdr + 8 * i) & ibp_lowmask(8 * (unsigned)left)
						    : ibp_ld_partial(hdr + 8 * i, left);
		}
		return 1;
	}
	if (nw <= 8) { /* a fixed size (bm has IBP_XWALK_MAXD / 64 + 1 words): no call */
		for (unsigned i = 0; i < 8; i++)
			bm[i] = 0;
	} else {
		memset(bm, 0, 8 * nw);
	}
	const unsigned L = c->L;
	const uint64_t lm = ibp_lowmask(L);
	/* Entries are read with one unaligned load where 8 bytes from theirs
	 * are readable: hdr_rd bytes from hdr are (the body follows the list
	 * in the row), and the L bits taken lie within the list. */
	uint64_t prev = 0, cur = 0, cw = 0;
	if (L == 8) {
		/* a byte an entry (128 < D <= 256), and the words without a
		 * branch: cur, the word's bits so far, is stored at every entry
		 * (the branch on a change of word mispredicted up to three times
		 * a row: bf16 rows of 256 chunks 7% slower; with D <= 128, one
		 * change at most, the branch is as fast). p: the least valid
		 * entry, the previous one + 1. */
		uint64_t p = 0;
		for (uint64_t k = 0; k < n; k++) {
			const uint64_t j = hdr[k + 1];
			if (j - p >= D - p) /* j < p or j >= D */
				return 0;
			p = j + 1;
			cur = (cur & (0 - (uint64_t)((j >> 6) == cw))) | 1ull << (j & 63);
			cw = j >> 6;
			bm[cw] = cur;
		}
		return 1;
	}
	for (uint64_t k = 0; k < n; k++) {
		const uint64_t bit = (uint64_t)L * (k + 1);
		const uint64_t j = ((bit >> 3) + 8 <= hdr_rd ? ibp_load64(hdr + (bit >> 3)) >> (bit & 7)
							      : ibp_peek_bits(hdr, hdr_len, bit, L)) & lm;
		if (j >= D || (k && j <= prev))
			return 0;
		prev = j;
		if ((j >> 6) != cw) {
			bm[cw] = cur;
			cw = j >> 6;
			cur = 0;
		}
		cur |= 1ull << (j & 63);
	}
	bm[cw] |= cur;
	return 1;
}

#endif /* IBP_CODEC_INTERNAL_H */

/* ===================================================================== */
/* Kernel template (see the top of this file).                           */
/* ===================================================================== */
#ifdef IBP_CODEC_KERNEL_BODY
#undef IBP_CODEC_KERNEL_BODY

/* Writes exception j (chunk value x, a miss) of a BITMAP/LIST row. */
IBP_INLINE void IBP_K(encode_exc1)(const ibp_codec_t *c, const ibp_cluster_t *cl, uint64_t j,
				   uint64_t x, unsigned mode, uint8_t *dst, ibp_bw_t *bw, ibp_bw_t *hw)
{
	/* Xval: a hit bit, and the e_j bits only on a miss */
	unsigned hit = 0;
	if (cl->xen[j]) {
		hit = (x & cl->m[j]) == cl->x[j];
		ibp_bw_put(bw, hit, 1);
	}
	if (!hit)
		ibp_bw_put(bw, ibp_k_ext_m(cl, j, x), cl->ew[j]);
	if (mode == IBP_ROW_BITMAP)
		dst[j >> 3] |= (uint8_t)(1u << (j & 7));
	else
		ibp_bw_put(hw, j, c->L);
}

#ifdef IBP_K_WIDE_PEXT
#ifndef IBP_K_XBLOCK
/* The misses among chunks [0, 64) of row (mask bytes mk, Bitval bytes
 * bk, all full) as a 64-bit mask, and in mm[0, 8 C) each word's mask
 * bytes kept for its missed chunks only. Scalar: 64-bit lanes of C bytes. */
IBP_INLINE uint64_t IBP_K(xblock)(const uint8_t *row, const uint8_t *mk, const uint8_t *bk,
				  uint64_t *mm, const unsigned C)
{
	const uint64_t hi = ibp_lane_high(C), lo = ~hi;
	uint64_t miss = 0;
	for (unsigned w = 0; w < 8 * C; w++) {
		const uint64_t mw = ibp_load64(mk + 8 * w);
		const uint64_t d = (ibp_load64(row + 8 * w) & mw) ^ ibp_load64(bk + 8 * w);
		/* a lane's high bit of nz is set iff (x & m) != b there */
		const uint64_t nz = (((d & lo) + lo) | d) & hi;
		mm[w] = mw & ((nz - (nz >> (8 * C - 1))) | nz);
		miss |= _pext_u64(nz, hi) << (w * 8 / C);
	}
	return miss;
}
#define IBP_K_XBLOCK(row, mk, bk, mm, C) IBP_K(xblock)(row, mk, bk, mm, C)
#endif

/* One word (8 / C full chunks from j) of encode_1pass. */
IBP_INLINE void IBP_K(enc_word)(const ibp_codec_t *c, const uint8_t *row, const uint8_t *mk,
				const uint8_t *bk, uint64_t j, const unsigned mode, uint8_t *dst,
				ibp_bw_t *bw, ibp_bw_t *ew, ibp_bw_t *hw, uint64_t *bm, const unsigned C)
{
	const uint64_t hi = ibp_lane_high(C), lo = ~hi;
	const uint64_t x = ibp_load64(row + j * C), mw = ibp_load64(mk + j * C);
	ibp_bw_put(bw, _pext_u64(x, ~mw), (unsigned)__builtin_popcountll(~mw));
	/* a lane's high bit of nz is set iff (x & m) != b there */
	const uint64_t d = (x & mw) ^ ibp_load64(bk + j * C);
	const uint64_t nz = (((d & lo) + lo) | d) & hi;
	const uint64_t mm = mw & ((nz - (nz >> (8 * C - 1))) | nz);
	const uint64_t v = _pext_u64(x, mm);
	const unsigned nb = (unsigned)__builtin_popcountll(mm);
	ibp_bw_put(ew, v, nb);
	const unsigned miss = (unsigned)_pext_u64(nz, hi);
	if (mode == IBP_ROW_BITMAP) {
		*bm |= (uint64_t)miss << (j & 63);
		if (((j + 8 / C) & 63) == 0) { /* chunks of the word all < D */
			ibp_store64(dst + ((j >> 3) & ~(uint64_t)7), *bm);
			*bm = 0;
		}
	} else {
		for (unsigned q = miss; q; q &= q - 1)
			ibp_bw_put(hw, j + (uint64_t)__builtin_ctz(q), c->L);
	}
}

/* encode_c for C < 8, n > 0, no Xvals: one pass over the row, 8 / C full
 * chunks per step. The static fields of a word are pext(word, ~mask
 * word), and the exception fields are pext(word, M), M = m_j of its
 * missed chunks only: two puts per word, none per exception (dense
 * tables miss ~40% of chunks, and a put each was most of the encode). */
IBP_INLINE void IBP_K(encode_1pass)(const ibp_codec_t *c, const ibp_cluster_t *clp,
				    const uint8_t *row, const unsigned mode, uint64_t n, uint8_t *dst,
				    const unsigned C)
{
	const ibp_cluster_t clv = *clp, *cl = &clv;
	const uint64_t D = c->D, S = cl->S;
	uint8_t *body = dst;
	ibp_bw_t hw = { dst, 0, 0 };
	if (mode == IBP_ROW_BITMAP) {
		memset(dst, 0, c->bitmap_bytes);
		body = dst + c->bitmap_bytes;
	} else {
		body = dst + (((uint64_t)c->L * (n + 1) + 7) >> 3);
		ibp_bw_put(&hw, n - 1, c->L);
	}
	/* the exception writer starts at bit S with the bits below it zero:
	 * the static writer writes that byte last and ORs them back */
	ibp_bw_t bw = { body, 0, 0 }, ew = { body + (S >> 3), 0, (unsigned)(S & 7) };
	const uint64_t off = (uint64_t)(clp - c->cl) * D * C;
	const uint8_t *mk = c->mask_bytes + off, *bk = c->bitval_bytes + off;
	uint64_t j = 0, bm = 0; /* BITMAP bits of chunks [j & ~63, j), stored per 64 */
	/* blocks of 64 chunks, all in the row (the last chunk too when full):
	 * the misses and the words' exception masks first (SIMD where the
	 * ISA has it), then two pext and two puts per word */
	for (; (j + 64) * C <= c->R; j += 64) {
		uint64_t mm[32];
		const uint8_t *x = row + j * C, *m = mk + j * C;
		const uint64_t miss = IBP_K_XBLOCK(x, m, bk + j * C, mm, C);
		for (unsigned w = 0; w < 8 * C; w++) {
			const uint64_t xw = ibp_load64(x + 8 * w), nmw = ~ibp_load64(m + 8 * w);
			ibp_bw_put(&bw, _pext_u64(xw, nmw), (unsigned)__builtin_popcountll(nmw));
			ibp_bw_put(&ew, _pext_u64(xw, mm[w]), (unsigned)__builtin_popcountll(mm[w]));
		}
		if (mode == IBP_ROW_BITMAP)
			ibp_store64(dst + (j >> 3), miss);
		else
			for (uint64_t q = miss; q; q &= q - 1)
				ibp_bw_put(&hw, j + (uint64_t)__builtin_ctzll(q), c->L);
	}
	for (; j + 8 / C < D; j += 8 / C)
		IBP_K(enc_word)(c, row, mk, bk, j, mode, dst, &bw, &ew, &hw, &bm, C);
	if (mode == IBP_ROW_BITMAP && (j & 63))
		ibp_st_partial(dst + ((j >> 3) & ~(uint64_t)7), bm, ((j & 63) + 7) >> 3);
	for (; j < D; j++) {
		const uint64_t x = j + 1 < D ? ibp_ld_chunk(row + j * C, C)
					     : ibp_ld_partial(row + j * C, c->last_bytes);
		ibp_bw_put(&bw, ibp_k_ext_nm(cl, j, x), cl->sw[j]);
		if ((x & cl->m[j]) != cl->b[j])
			IBP_K(encode_exc1)(c, cl, j, x, mode, dst, &ew, &hw);
	}
	/* n > 0 and no Xvals: E > 0, so ew wrote byte S / 8 */
	ibp_bw_flush(&ew);
	const uint8_t eb = body[S >> 3];
	ibp_bw_flush(&bw);
	if (S & 7)
		body[S >> 3] |= eb;
	if (mode == IBP_ROW_LIST)
		ibp_bw_flush(&hw);
}
#endif

IBP_INLINE void IBP_K(encode_c)(const ibp_codec_t *c, const ibp_cluster_t *clp, const uint8_t *row,
				unsigned mode, uint64_t n, uint8_t *dst, const unsigned C)
{
#ifdef IBP_K_WIDE_PEXT
	if (C < 8 && n && !clp->has_x) {
		/* a loop per mode: the BITMAP one keeps its bits in a register */
		if (mode == IBP_ROW_BITMAP)
			IBP_K(encode_1pass)(c, clp, row, IBP_ROW_BITMAP, n, dst, C);
		else
			IBP_K(encode_1pass)(c, clp, row, IBP_ROW_LIST, n, dst, C);
		return;
	}
#endif
	/* a local copy: the compiler then knows stores to dst leave it alone */
	const ibp_cluster_t clv = *clp, *cl = &clv;
	const uint64_t D = c->D;
	uint8_t *body = dst;
	ibp_bw_t hw = { dst, 0, 0 };
	if (mode == IBP_ROW_BITMAP) {
		memset(dst, 0, c->bitmap_bytes);
		body = dst + c->bitmap_bytes;
	} else if (mode == IBP_ROW_LIST) {
		body = dst + (((uint64_t)c->L * (n + 1) + 7) >> 3);
		ibp_bw_init(&hw, dst, 0);
		ibp_bw_put(&hw, n - 1, c->L);
	}
	/* static part */
	ibp_bw_t bw;
	ibp_bw_init(&bw, body, 0);
	const uint8_t *sw = cl->sw;
	uint64_t j = 0;
#ifdef IBP_K_WIDE_PEXT
	if (C < 8) {
		/* 8 / C full chunks per pext: pext packs their static fields in
		 * stream order, so one put replaces 8 / C. The Mask bytes as given
		 * are the m_j of full chunks back to back. */
		const uint8_t *mk = c->mask_bytes + (uint64_t)(clp - c->cl) * D * C;
		for (; j + 8 / C < D; j += 8 / C) {
			uint64_t nmw = ~ibp_load64(mk + j * C);
			ibp_bw_put(&bw, _pext_u64(ibp_load64(row + j * C), nmw),
				   (unsigned)__builtin_popcountll(nmw));
		}
	}
#endif
	for (; j + 1 < D; j++) {
		uint64_t x = ibp_ld_chunk(row + j * C, C);
		ibp_bw_put(&bw, ibp_k_ext_nm(cl, j, x), sw[j]);
	}
	uint64_t xl = ibp_ld_partial(row + j * C, c->last_bytes);
	ibp_bw_put(&bw, ibp_k_ext_nm(cl, j, xl), sw[j]);
	ibp_bw_flush(&bw);
	if (n == 0)
		return;
	/* exception part, from bit S */
	ibp_bw_init(&bw, body, cl->S);
	j = 0;
#ifdef IBP_K_MISS8
	/* the exceptions of 8 full chunks as a bit mask: no branch per chunk */
	for (; j + 8 < D; j += 8) {
		for (unsigned mm = IBP_K_MISS8(cl, row, j, C); mm; mm &= mm - 1) {
			const uint64_t i = j + (uint64_t)__builtin_ctz(mm);
			IBP_K(encode_exc1)(c, cl, i, ibp_ld_chunk(row + i * C, C), mode, dst, &bw, &hw);
		}
	}
#endif
	for (; j < D; j++) {
		uint64_t x = j + 1 < D ? ibp_ld_chunk(row + j * C, C) : xl;
		if ((x & cl->m[j]) != cl->b[j])
			IBP_K(encode_exc1)(c, cl, j, x, mode, dst, &bw, &hw);
	}
	ibp_bw_flush(&bw);
	if (mode == IBP_ROW_LIST)
		ibp_bw_flush(&hw);
}

static void IBP_K(encode)(const ibp_codec_t *c, const ibp_cluster_t *cl, const uint8_t *row,
			  unsigned mode, uint64_t n, uint8_t *dst)
{
	switch (c->C) {
	case 1: IBP_K(encode_c)(c, cl, row, mode, n, dst, 1); break;
	case 2: IBP_K(encode_c)(c, cl, row, mode, n, dst, 2); break;
	case 4: IBP_K(encode_c)(c, cl, row, mode, n, dst, 4); break;
	default: IBP_K(encode_c)(c, cl, row, mode, n, dst, 8); break;
	}
}

/* Decodes the static fields of chunks [j0, D). */
IBP_INLINE void IBP_K(decode_static_c)(const ibp_codec_t *c, const ibp_cluster_t *clp,
				       const uint8_t *body, uint64_t avail, uint8_t *dst,
				       uint64_t j0, const unsigned C)
{
	const ibp_cluster_t clv = *clp, *cl = &clv;
	const uint64_t D = c->D;
	if (j0 >= D) /* the SIMD groups covered the row */
		return;
	const uint64_t *soff = cl->soff, *b = cl->b;
	const uint8_t *sw = cl->sw;
	uint64_t jf = ibp_fast_chunks(cl, D, avail);
	if (jf > D - 1)
		jf = D - 1;
	uint64_t j = j0;
	for (; j < jf; j++) {
		uint64_t o = soff[j];
		unsigned sh = (unsigned)(o & 7);
		uint64_t w = ibp_load64(body + (o >> 3)) >> sh;
		if (C == 8 && sh + sw[j] > 64)
			w |= (uint64_t)body[(o >> 3) + 8] << (64 - sh);
		ibp_st_chunk(dst + j * C, ibp_k_dep_nm(cl, j, w) | b[j], C);
	}
	/* The rest start in the last 8 bytes (all of them in a short body, as
	 * Xval hits make): read those from a zero-padded copy of those bytes,
	 * with the same loads. Fields lie within avail, so the padding only
	 * fills unused bits. (The last chunk, always here, may start earlier.) */
	const uint64_t t0 = avail > 8 ? avail - 8 : 0;
	uint8_t tail[24] = { 0 };
	memcpy(tail, body + t0, avail - t0);
	for (; j < D; j++) {
		const uint8_t *p = tail;
		uint64_t o = soff[j] - 8 * t0;
		if (soff[j] < 8 * t0) {
			p = body;
			o = soff[j];
		}
		unsigned sh = (unsigned)(o & 7);
		uint64_t w = ibp_load64(p + (o >> 3)) >> sh;
		if (C == 8 && sh + sw[j] > 64)
			w |= (uint64_t)p[(o >> 3) + 8] << (64 - sh);
		w = ibp_k_dep_nm(cl, j, w) | b[j];
		if (j + 1 < D)
			ibp_st_chunk(dst + j * C, w, C);
		else
			ibp_st_partial(dst + j * C, w, c->last_bytes);
	}
}

static __attribute__((unused)) void IBP_K(decode_static_from)(const ibp_codec_t *c,
								 const ibp_cluster_t *cl,
								 const uint8_t *body, uint64_t avail,
								 uint8_t *dst, uint64_t j0)
{
	switch (c->C) {
	case 1: IBP_K(decode_static_c)(c, cl, body, avail, dst, j0, 1); break;
	case 2: IBP_K(decode_static_c)(c, cl, body, avail, dst, j0, 2); break;
	case 4: IBP_K(decode_static_c)(c, cl, body, avail, dst, j0, 4); break;
	default: IBP_K(decode_static_c)(c, cl, body, avail, dst, j0, 8); break;
	}
}

static __attribute__((unused)) void IBP_K(decode_static)(const ibp_codec_t *c, const ibp_cluster_t *cl,
				 const uint8_t *body, uint64_t avail, uint8_t *dst)
{
	IBP_K(decode_static_from)(c, cl, body, avail, dst, 0);
}

/* Chunk j was decoded as matched (invariant bits b_j); XORs in delta to
 * give it its exception's invariant bits. */
IBP_INLINE void IBP_K(patch_delta)(const ibp_codec_t *c, uint64_t j, uint64_t delta, uint8_t *dst,
				   const unsigned C)
{
	uint8_t *p = dst + j * C;
	if (__builtin_expect(j + 1 < c->D, 1)) {
		ibp_st_chunk(p, ibp_ld_chunk(p, C) ^ delta, C);
	} else {
		uint64_t nb = c->last_bytes;
		ibp_st_partial(p, ibp_ld_partial(p, nb) ^ delta, nb);
	}
}

/* Reads exception j's field at body bit *e (advancing *e) and patches
 * chunk j. With xv (the cluster has Xvals), an enabled chunk starts with
 * its hit bit: 1 means the invariant bits are x̂_j and nothing follows.
 * Every field is checked against lim = 8 * avail bits first (returns 0
 * when one would pass it); *e <= lim holds throughout. */
IBP_INLINE int IBP_K(exc_one)(const ibp_codec_t *c, const ibp_cluster_t *cl, uint64_t j,
			      uint64_t *e, const uint8_t *body, uint64_t avail, uint64_t lim,
			      uint8_t *dst, const int xv, const unsigned C)
{
	const unsigned w = cl->ew[j];
	/* A branch on the hit bit: measured faster than computing both
	 * outcomes, which chains each field's position on the previous load. */
	if (xv && cl->xen[j]) {
		if (*e >= lim)
			return 0;
		uint64_t h = (body[*e >> 3] >> (*e & 7)) & 1;
		*e += 1;
		if (h) {
			IBP_K(patch_delta)(c, j, cl->x[j] ^ cl->b[j], dst, C);
			return 1;
		}
	}
	if (w > lim - *e)
		return 0;
	const uint64_t byte = *e >> 3;
	const unsigned sh = (unsigned)(*e & 7);
	uint64_t v;
	if (__builtin_expect(byte + 8 <= avail, 1)) {
		v = ibp_load64(body + byte) >> sh;
		if (C == 8 && sh + w > 64)
			v |= (uint64_t)body[byte + 8] << (64 - sh);
	} else {
		v = ibp_peek_bits(body, avail, *e, w);
	}
	*e += w;
	IBP_K(patch_delta)(c, j, ibp_k_dep_m(cl, j, v) ^ cl->b[j], dst, C);
	return 1;
}

/* Walks the exception part. Checks every field against avail and, for
 * LIST, every index (< D, strictly increasing); returns UINT64_MAX when
 * the row is corrupt (dst then partly written), else the end bit. */
IBP_INLINE uint64_t IBP_K(decode_exc_x)(const ibp_codec_t *cp, const ibp_cluster_t *clp,
					unsigned mode, const uint8_t *hdr, uint64_t hdr_len,
					uint64_t n, const uint8_t *body, uint64_t avail,
					uint8_t *dst, const int xv, const unsigned C)
{
	const ibp_codec_t cv = *cp, *c = &cv;
	const ibp_cluster_t clv = *clp, *cl = &clv;
	const uint64_t lim = avail > (UINT64_MAX >> 3) ? UINT64_MAX : 8 * avail;
	uint64_t e = cl->S;
	if (e > lim)
		return UINT64_MAX;
	if (mode == IBP_ROW_BITMAP) {
		/* bits >= D were checked to be clear */
		for (uint64_t i = 0; i < hdr_len; i += 8) {
			uint64_t left = hdr_len - i;
			uint64_t w = left >= 8 ? ibp_load64(hdr + i) : ibp_ld_partial(hdr + i, left);
			while (w) {
				uint64_t j = i * 8 + (uint64_t)__builtin_ctzll(w);
				w &= w - 1;
				if (!IBP_K(exc_one)(c, cl, j, &e, body, avail, lim, dst, xv, C))
					return UINT64_MAX;
			}
		}
	} else {
		const unsigned L = c->L;
		const uint64_t D = c->D, lm = ibp_lowmask(L), rd = ibp_hdr_readable(hdr, hdr_len, body, avail);
		uint64_t prev = 0;
		for (uint64_t k = 0; k < n; k++) {
			const uint64_t j = ibp_list_entry(hdr, hdr_len, rd, k, L, lm);
			if (j >= D || (k && j <= prev))
				return UINT64_MAX;
			prev = j;
			if (!IBP_K(exc_one)(c, cl, j, &e, body, avail, lim, dst, xv, C))
				return UINT64_MAX;
		}
	}
	return e;
}

static uint64_t IBP_K(decode_exc)(const ibp_codec_t *c, const ibp_cluster_t *cl, unsigned mode,
				  const uint8_t *hdr, uint64_t hdr_len, uint64_t n,
				  const uint8_t *body, uint64_t avail, uint8_t *dst)
{
	/* two copies per chunk size: clusters without Xvals keep the plain loop */
#define IBP_EXC_C(CC)                                                                          \
	return cl->has_x ? IBP_K(decode_exc_x)(c, cl, mode, hdr, hdr_len, n, body, avail, dst, 1, CC) \
			 : IBP_K(decode_exc_x)(c, cl, mode, hdr, hdr_len, n, body, avail, dst, 0, CC)
	switch (c->C) {
	case 1: IBP_EXC_C(1);
	case 2: IBP_EXC_C(2);
	case 4: IBP_EXC_C(4);
	default: IBP_EXC_C(8);
	}
#undef IBP_EXC_C
}

#ifdef IBP_K_WIDE_PEXT
/* Chunk j ^= d (a partial last chunk's bytes when !whole and j >= jp). */
IBP_INLINE void IBP_K(xpatch)(uint64_t j, uint64_t d, uint64_t jp, uint64_t last, uint8_t *dst, const int whole,
				const unsigned C)
{
	uint8_t *q = dst + j * C;
	if (whole || __builtin_expect(j < jp, 1))
		ibp_st_chunk(q, ibp_ld_chunk(q, C) ^ d, C);
	else
		ibp_st_partial(q, ibp_ld_partial(q, last) ^ d, last);
}

/* Exception j's delta at body bit e: the field from its 8 bytes, or,
 * within the body's last 8 (byte >= t0), from tail, their zero-padded
 * copy (no byte loop); then chunk j ^= deposit ^ b_j. whole: the last
 * chunk is whole (else chunk jp = D - 1 is partial, of `last` bytes). */
IBP_INLINE void IBP_K(xone)(const uint64_t *m, const uint64_t *b, uint64_t j, uint64_t e, const uint8_t *body,
			      const uint8_t *tail, uint64_t t0, uint64_t jp, uint64_t last, uint8_t *dst,
			      const int whole, const unsigned C)
{
	const uint64_t byte = e >> 3;
	const uint8_t *p = byte < t0 ? body + byte : tail + (byte - t0);
	IBP_K(xpatch)(j, _pdep_u64(ibp_load64(p) >> (e & 7), m[j]) ^ b[j], jp, last, dst, whole, C);
}

/* A field whose byte is below t0 (8 bytes before the body's end), in a
 * whole chunk: its 8 bytes are readable and its <= 32 bits end within
 * avail, so it needs neither the check against lim nor the tail copy. */
IBP_INLINE void IBP_K(xfast)(const uint64_t *m, const uint64_t *b, uint64_t j, uint64_t e, const uint8_t *body,
			       uint8_t *dst, const unsigned C)
{
	uint8_t *q = dst + j * C;
	ibp_st_chunk(q, ibp_ld_chunk(q, C) ^ _pdep_u64(ibp_load64(body + (e >> 3)) >> (e & 7), m[j]) ^ b[j], C);
}

/* A copy of the body's last 8 bytes (all of a shorter body) followed by
 * zeros, for the fields from byte t0 on; returns t0. A field's byte is
 * < avail, so its load reads tail[0, 16) at most. */
IBP_INLINE uint64_t IBP_K(xtail)(const uint8_t *body, uint64_t avail, uint8_t tail[24])
{
	if (avail >= 8) {
		memcpy(tail, body + avail - 8, 8);
		return avail - 8;
	}
	memcpy(tail, body, avail);
	return 0;
}

/* The scalar exception walk of a cluster without Xvals (C <= 4; the AVX2
 * and AVX-512 kernels, rows too sparse for their SIMD walks): as
 * decode_exc (same checks, same result). Fields below t0 in
 * whole chunks take xfast (about 18 operations an exception, against 28
 * with the checks and the copy's pointer select, and fewer live values:
 * no reloads from the stack); in BITMAP rows the first field past t0 or
 * in the partial last chunk finishes the row in the checked loop (xone),
 * the fields after it being past t0 too. */
IBP_INLINE uint64_t IBP_K(xscalar)(const ibp_codec_t *c, const ibp_cluster_t *cl, const unsigned mode,
				     const uint8_t *hdr, uint64_t hdr_len, uint64_t n, const uint8_t *body,
				     uint64_t avail, uint8_t *dst, const int whole, const unsigned C)
{
	const uint64_t D = c->D, lim = avail > (UINT64_MAX >> 3) ? UINT64_MAX : 8 * avail;
	uint64_t e = cl->S;
	if (e > lim)
		return UINT64_MAX;
	uint8_t tail[24] = { 0 };
	const uint64_t t0 = IBP_K(xtail)(body, avail, tail);
	const uint64_t last = c->last_bytes, jp = whole ? D : D - 1;
	/* the tables in locals: stores to dst would make cl->m, cl->b reloads */
	const uint8_t *ew = cl->ew;
	const uint64_t *m = cl->m, *b = cl->b;
	if (mode == IBP_ROW_BITMAP) {
		/* bits >= D were checked to be clear */
		uint64_t i = 0, w = 0;
		for (; i < hdr_len; i += 8) {
			const uint64_t left = hdr_len - i;
			for (w = left >= 8 ? ibp_load64(hdr + i) : ibp_ld_partial(hdr + i, left); w; w &= w - 1) {
				const uint64_t j = i * 8 + (uint64_t)__builtin_ctzll(w);
				if ((e >> 3) >= t0 || (!whole && j >= jp))
					goto checked;
				IBP_K(xfast)(m, b, j, e, body, dst, C); /* BITMAP */
				e += ew[j];
			}
		}
		return e;
	checked: /* from exception j = 8 i + ctz(w) on */
		for (;;) {
			for (; w; w &= w - 1) {
				const uint64_t j = i * 8 + (uint64_t)__builtin_ctzll(w);
				if (ew[j] > lim - e)
					return UINT64_MAX;
				IBP_K(xone)(m, b, j, e, body, tail, t0, jp, last, dst, whole, C);
				e += ew[j];
			}
			i += 8;
			if (i >= hdr_len)
				return e;
			const uint64_t left = hdr_len - i;
			w = left >= 8 ? ibp_load64(hdr + i) : ibp_ld_partial(hdr + i, left);
		}
	}
	const unsigned L = c->L;
	const uint64_t lm = ibp_lowmask(L), rd = ibp_hdr_readable(hdr, hdr_len, body, avail);
	uint64_t prev = 0;
	for (uint64_t k = 0; k < n; k++) {
		const uint64_t j = ibp_list_entry(hdr, hdr_len, rd, k, L, lm);
		if (j >= D || (k && j <= prev)) /* entries in range, ascending */
			return UINT64_MAX;
		prev = j;
		if ((e >> 3) < t0 && (whole || j < jp)) {
			IBP_K(xfast)(m, b, j, e, body, dst, C);
		} else if (ew[j] > lim - e) {
			return UINT64_MAX;
		} else {
			IBP_K(xone)(m, b, j, e, body, tail, t0, jp, last, dst, whole, C);
		}
		e += ew[j];
	}
	return e;
}

/* The scalar walks of a row too sparse for the SIMD walks (C <= 4; not a
 * LIST row with Xvals, which the kernels give decode_exc_x): xscalar by
 * chunk size, with a copy for rows whose last chunk is whole (no test of
 * the chunk index); BITMAP rows with Xvals the run walk does not take,
 * decode_exc_x. */
IBP_INLINE uint64_t IBP_K(xscalar_v)(const ibp_codec_t *c, const ibp_cluster_t *cl, const unsigned mode,
				       const uint8_t *hdr, uint64_t hdr_len, uint64_t n, const uint8_t *body,
				       uint64_t avail, uint8_t *dst)
{
	const int whole = c->last_bytes == c->C;
	if (cl->has_x) { /* BITMAP rows the run walk does not take (more than 65,536 chunks) */
		switch (c->C) {
		case 1: return IBP_K(decode_exc_x)(c, cl, IBP_ROW_BITMAP, hdr, hdr_len, n, body, avail, dst, 1, 1);
		case 2: return IBP_K(decode_exc_x)(c, cl, IBP_ROW_BITMAP, hdr, hdr_len, n, body, avail, dst, 1, 2);
		default: return IBP_K(decode_exc_x)(c, cl, IBP_ROW_BITMAP, hdr, hdr_len, n, body, avail, dst, 1, 4);
		}
	}
#define IBP_XS(CC, WH)                                                                                \
	return mode == IBP_ROW_BITMAP                                                                   \
		       ? IBP_K(xscalar)(c, cl, IBP_ROW_BITMAP, hdr, hdr_len, n, body, avail, dst, WH, CC) \
		       : IBP_K(xscalar)(c, cl, IBP_ROW_LIST, hdr, hdr_len, n, body, avail, dst, WH, CC)
	switch (c->C) {
	case 1: IBP_XS(1, 1); /* C = 1: the last chunk is whole */
	case 2:
		if (whole)
			IBP_XS(2, 1);
		IBP_XS(2, 0);
	default:
		if (whole)
			IBP_XS(4, 1);
		IBP_XS(4, 0);
	}
#undef IBP_XS
}

#include "bitpack/codec_tiny_k.h" /* decode_tiny */
#include "bitpack/codec_xruns_k.h" /* xscalar_x_from, the run walk xruns */
#endif /* IBP_K_WIDE_PEXT */

#endif /* IBP_CODEC_KERNEL_BODY */
