/* gpu_main.h - the main() of a GPU test binary (include it once, in that
 * binary's test file, and write IBP_GPU_TEST_MAIN() at file scope).
 *
 * It runs the selected tests as Criterion's own main does; then, when no
 * tests failed and no CUDA device is usable, it exits 77 instead of 0, so
 * ctest (SKIP_RETURN_CODE 77) reports the binary as skipped rather than
 * passed: its GPU tests skipped themselves. The tests that run without a
 * device still ran, and their results are in Criterion's reports.
 *
 * The device probe runs in a forked child: CUDA must not be initialised in
 * the parent, from which Criterion forks the test processes. */
#ifndef IBP_TEST_GPU_MAIN_H
#define IBP_TEST_GPU_MAIN_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ibp.h"

#define IBP_TEST_SKIP_CODE 77

/* 1 when ibp_cuda_device_count finds a device (asked in a child process). */
static inline int ibp_test_gpu_present(void)
{
	pid_t pid = fork();
	if (pid < 0)
		return 0;
	if (pid == 0) {
		int n = 0;
		_exit(ibp_cuda_device_count(&n) == IBP_OK && n > 0 ? 0 : 1);
	}
	int st = 0;
	if (waitpid(pid, &st, 0) != pid)
		return 0;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

#define IBP_GPU_TEST_MAIN()                                                                \
	int main(int argc, char *argv[])                                                   \
	{                                                                                  \
		struct criterion_test_set *tests_ = criterion_initialize();                \
		int rc_ = 0, run_ = criterion_handle_args(argc, argv, true);               \
		if (run_) {                                                                \
			rc_ = !criterion_run_all_tests(tests_);                            \
			if (rc_ == 0 && !ibp_test_gpu_present())                           \
				rc_ = IBP_TEST_SKIP_CODE;                                  \
		}                                                                          \
		criterion_finalize(tests_);                                                \
		return rc_;                                                                \
	}

#endif /* IBP_TEST_GPU_MAIN_H */
