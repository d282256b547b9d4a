/* tmproot.h - where the suites make their temporary directories: $TMPDIR
 * when it is set and short (the suites' path buffers are sized for short
 * roots), else /tmp. tools/mutate.sh points TMPDIR at a directory of its own
 * per mutant, so a mutant that crashes a suite leaves nothing behind. */
#ifndef IBP_TMPROOT_H
#define IBP_TMPROOT_H

#include <stdlib.h>
#include <string.h>

static inline const char *tu_tmp_root(void)
{
	const char *t = getenv("TMPDIR");
	return (t && t[0] == '/' && strlen(t) <= 32) ? t : "/tmp";
}

#endif
