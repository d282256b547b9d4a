/* fork.c - counting forks with pthread_atfork (util/fork.h). */
#include <pthread.h>
#include <stdatomic.h>

#include "util/fork.h"
#include "util/error.h"

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static int fork_watching;
static atomic_uint_fast64_t fork_gen;
static pthread_mutex_t fork_mu = PTHREAD_MUTEX_INITIALIZER;

/* fork() holds the lock across the copy: no rebuild is half done in the child */
static void fork_prepare(void)
{
	pthread_mutex_lock(&fork_mu);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&fork_mu);
}

static void fork_child(void)
{
	atomic_fetch_add(&fork_gen, 1);
	pthread_mutex_unlock(&fork_mu);
}

static void fork_install(void)
{
	fork_watching = pthread_atfork(fork_prepare, fork_parent, fork_child) == 0;
}

ibp_status_t ibpi_fork_watch(void)
{
	pthread_once(&fork_once, fork_install);
	if (!fork_watching)
		return ibpi_fail(IBP_ERR_NOMEM, "pthread_atfork: cannot register the fork handlers");
	return IBP_OK;
}

uint64_t ibpi_fork_generation(void)
{
	return atomic_load_explicit(&fork_gen, memory_order_acquire);
}

void ibpi_fork_lock(void)
{
	pthread_mutex_lock(&fork_mu);
}

void ibpi_fork_unlock(void)
{
	pthread_mutex_unlock(&fork_mu);
}
