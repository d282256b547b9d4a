/* progress.c - see progress.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "progress.h"

struct progress {
	char label[64];
	char step[96];
	uint64_t total, done;
	double start, last;
	int ticking, stop;
	pthread_t thread;
	pthread_mutex_t mu;
};

static void draw(progress_t *p)
{
	double t = cli_now() - p->start;
	char line[256];
	if (p->total)
		snprintf(line, sizeof(line), "%s: %s%s%5.1f%%  %.1f s", p->label, p->step, p->step[0] ? "  " : "",
			 100.0 * (double)p->done / (double)p->total, t);
	else
		snprintf(line, sizeof(line), "%s: %s%s%.1f s", p->label, p->step, p->step[0] ? "  " : "", t);
	/* \r then clear to end of line: the new text may be shorter. */
	fprintf(stderr, "\r%s\033[K", line);
	fflush(stderr);
	p->last = cli_now();
}

progress_t *progress_start(const char *label, uint64_t total)
{
	if (!isatty(STDERR_FILENO))
		return NULL;
	progress_t *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	snprintf(p->label, sizeof(p->label), "%s", label);
	p->total = total;
	p->start = cli_now();
	pthread_mutex_init(&p->mu, NULL);
	draw(p);
	return p;
}

void progress_update(progress_t *p, uint64_t done)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->done = done > p->total ? p->total : done;
	if (cli_now() - p->last >= 0.1)
		draw(p);
	pthread_mutex_unlock(&p->mu);
}

void progress_step(progress_t *p, const char *step)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	snprintf(p->step, sizeof(p->step), "%s", step);
	draw(p);
	pthread_mutex_unlock(&p->mu);
}

static void *tick_main(void *arg)
{
	progress_t *p = arg;
	for (;;) {
		usleep(200000);
		pthread_mutex_lock(&p->mu);
		int stop = p->stop;
		if (!stop)
			draw(p);
		pthread_mutex_unlock(&p->mu);
		if (stop)
			return NULL;
	}
}

void progress_tick(progress_t *p)
{
	if (!p || p->ticking)
		return;
	if (pthread_create(&p->thread, NULL, tick_main, p) == 0)
		p->ticking = 1;
}

void progress_end(progress_t *p)
{
	if (!p)
		return;
	if (p->ticking) {
		pthread_mutex_lock(&p->mu);
		p->stop = 1;
		pthread_mutex_unlock(&p->mu);
		pthread_join(p->thread, NULL);
	}
	fprintf(stderr, "\r\033[K");
	fflush(stderr);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
