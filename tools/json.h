/* json.h - a small streaming JSON writer for `--json` output: one object,
 * commas and escaping handled here. Non-finite numbers are written as null. */
#ifndef IBP_JSON_H
#define IBP_JSON_H

#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

typedef struct json {
	FILE *f;
	int depth;
	int count[JSON_MAX_DEPTH]; /* values written at each level (for commas) */
	int after_key;
} json_t;

void json_init(json_t *j, FILE *f);
void json_begin_object(json_t *j);
void json_end_object(json_t *j); /* the outermost also writes '\n' */
void json_begin_array(json_t *j);
void json_end_array(json_t *j);
void json_key(json_t *j, const char *k);
void json_string(json_t *j, const char *s);
void json_uint(json_t *j, uint64_t v);
void json_int(json_t *j, int64_t v);
void json_double(json_t *j, double v);
void json_bool(json_t *j, int v);
void json_null(json_t *j);

/* key + value shorthands */
void json_kv_string(json_t *j, const char *k, const char *s);
void json_kv_uint(json_t *j, const char *k, uint64_t v);
/* "k": [shape[0], ..., shape[ndim-1]] */
void json_kv_shape(json_t *j, const char *k, const uint64_t *shape, unsigned ndim);
void json_kv_double(json_t *j, const char *k, double v);
void json_kv_bool(json_t *j, const char *k, int v);

#endif /* IBP_JSON_H */
