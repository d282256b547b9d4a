/* examples/util.c - version, status codes, error details and element types.
 *
 * Every libibp call that can fail returns an ibp_status_t; on failure the
 * library records a detail (which file, row or field) for the calling
 * thread, read with ibp_last_error(). The library never prints or exits.
 *
 * Build against an installed libibp:
 *   cc util.c $(pkg-config --cflags --libs ibp) -o util && ./util
 */
#include <ibp.h>
#include <stdio.h>
#include <string.h>

#define EXPECT(cond)                                                                   \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
			return 1;                                                      \
		}                                                                      \
	} while (0)

int main(void)
{
	/* The version of the library actually linked, against the header's. */
	char built[32];
	snprintf(built, sizeof(built), "%d.%d.%d", IBP_VERSION_MAJOR, IBP_VERSION_MINOR, IBP_VERSION_PATCH);
	printf("libibp %s (compiled against %s)\n", ibp_version_string(), built);
	EXPECT(strcmp(ibp_version_string(), built) == 0); /* linked statically here */

	/* Element types: size and short name. */
	for (int dt = IBP_DTYPE_BYTES; dt <= IBP_DTYPE_BOOL; dt++)
		printf("  dtype %2d: %-5s %zu byte(s)\n", dt, ibp_dtype_name((ibp_dtype_t)dt),
		       ibp_dtype_size((ibp_dtype_t)dt));
	EXPECT(ibp_dtype_size(IBP_DTYPE_BF16) == 2 && strcmp(ibp_dtype_name(IBP_DTYPE_BF16), "bf16") == 0);
	EXPECT(ibp_dtype_size((ibp_dtype_t)99) == 0 && strcmp(ibp_dtype_name((ibp_dtype_t)99), "unknown") == 0);

	/* Every status has a constant description. */
	for (int s = IBP_OK; s <= IBP_ERR_INTERNAL; s++) {
		const char *text = ibp_status_string((ibp_status_t)s);
		EXPECT(text != NULL && text[0] != '\0');
	}

	/* A failing call: the status says what kind of failure, the detail
	 * says exactly what was wrong. Here: bytes that are not a .npy header. */
	ibp_clear_error();
	EXPECT(ibp_last_error()[0] == '\0');
	static const char junk[] = "not a numpy file";
	ibp_npy_info_t info;
	ibp_status_t s = ibp_npy_parse_header(junk, sizeof(junk), 0, &info);
	printf("parsing junk as .npy: %s (%s)\n", ibp_status_string(s), ibp_last_error());
	EXPECT(s == IBP_ERR_CORRUPT);
	EXPECT(ibp_last_error()[0] != '\0');
	ibp_clear_error();
	EXPECT(ibp_last_error()[0] == '\0');

	printf("util example: OK\n");
	return 0;
}
