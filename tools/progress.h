/* progress.h - a one-line progress display on stderr, only when stderr is a
 * terminal (nothing at all otherwise, so logs and pipes stay clean). */
#ifndef IBP_PROGRESS_H
#define IBP_PROGRESS_H

#include <stdint.h>

typedef struct progress progress_t;

/* Starts a display titled `label`; total 0 means no known end (the line
 * then shows elapsed time only). Returns NULL (a valid no-op handle) when
 * stderr is not a terminal or memory is short. */
progress_t *progress_start(const char *label, uint64_t total);

/* Reports `done` units of `total`; redraws at most ~10 times a second. */
void progress_update(progress_t *p, uint64_t done);

/* Replaces the label text shown after the title (e.g. the current step). */
void progress_step(progress_t *p, const char *step);

/* Starts a background thread that redraws the line (elapsed time) every
 * 0.2 s while a long call that reports nothing runs; progress_end stops it. */
void progress_tick(progress_t *p);

/* Erases the line and frees `p`; NULL is a no-op. */
void progress_end(progress_t *p);

#endif /* IBP_PROGRESS_H */
