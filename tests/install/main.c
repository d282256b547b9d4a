/* A program outside the tree that uses an installed libibp (tests/install/test_install.sh). */
#include <ibp.h>
#include <stdio.h>
int main(void) {
	unsigned char rows[64 * 16];
	for (int i = 0; i < 64 * 16; i++) rows[i] = (unsigned char)(i % 16 == 3 ? i : 0);
	ibp_codec_t *c;
	if (ibp_codec_train(rows, 64, 16, NULL, &c) != IBP_OK) { printf("train: %s\n", ibp_last_error()); return 1; }
	printf("ibp %s chunk %u\n", ibp_version_string(), ibp_codec_chunk_bytes(c));
	ibp_codec_free(c);
	return 0;
}
