/* json.c - see json.h. */
#include <inttypes.h>
#include <math.h>

#include "json.h"

void json_init(json_t *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->count[0] = 0;
	j->after_key = 0;
}

/* Separator before a value (or a key) at the current level. */
static void sep(json_t *j)
{
	if (j->after_key) {
		j->after_key = 0;
		return;
	}
	if (j->count[j->depth]++)
		fputc(',', j->f);
}

static void open_(json_t *j, char c)
{
	sep(j);
	fputc(c, j->f);
	if (j->depth + 1 < JSON_MAX_DEPTH)
		j->depth++;
	j->count[j->depth] = 0;
}

static void close_(json_t *j, char c)
{
	fputc(c, j->f);
	if (j->depth > 0)
		j->depth--;
	if (j->depth == 0 && c == '}')
		fputc('\n', j->f);
}

void json_begin_object(json_t *j) { open_(j, '{'); }
void json_end_object(json_t *j) { close_(j, '}'); }
void json_begin_array(json_t *j) { open_(j, '['); }
void json_end_array(json_t *j) { close_(j, ']'); }

static void str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

void json_key(json_t *j, const char *k)
{
	sep(j);
	str(j->f, k);
	fputc(':', j->f);
	j->after_key = 1;
}

void json_string(json_t *j, const char *s)
{
	sep(j);
	str(j->f, s ? s : "");
}

void json_uint(json_t *j, uint64_t v)
{
	sep(j);
	fprintf(j->f, "%" PRIu64, v);
}

void json_int(json_t *j, int64_t v)
{
	sep(j);
	fprintf(j->f, "%" PRId64, v);
}

void json_double(json_t *j, double v)
{
	sep(j);
	if (isfinite(v))
		fprintf(j->f, "%.10g", v);
	else
		fputs("null", j->f);
}

void json_bool(json_t *j, int v)
{
	sep(j);
	fputs(v ? "true" : "false", j->f);
}

void json_null(json_t *j)
{
	sep(j);
	fputs("null", j->f);
}

void json_kv_string(json_t *j, const char *k, const char *s) { json_key(j, k); json_string(j, s); }
void json_kv_uint(json_t *j, const char *k, uint64_t v) { json_key(j, k); json_uint(j, v); }
void json_kv_double(json_t *j, const char *k, double v) { json_key(j, k); json_double(j, v); }
void json_kv_bool(json_t *j, const char *k, int v) { json_key(j, k); json_bool(j, v); }

void json_kv_shape(json_t *j, const char *k, const uint64_t *shape, unsigned ndim)
{
	json_key(j, k);
	json_begin_array(j);
	for (unsigned i = 0; i < ndim; i++)
		json_uint(j, shape[i]);
	json_end_array(j);
}
