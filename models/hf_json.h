/* Reading Hugging Face config.json files (transformers', diffusers') into model configs:
 * a model's keys are named as the file's, so most of a file applies by name, and what a
 * model does not provide is refused by the key that says it. Errors name the file and
 * the JSON key. */
#ifndef TRIDENT_MODELS_HF_JSON_H
#define TRIDENT_MODELS_HF_JSON_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include "trident/model.h"

/* The file parsed; *root is an object (cJSON_Delete it). */
int tr_hf_json_load(const char *path, cJSON **root, struct tr_error *err);
/* The same for a file of at most max bytes (a tokenizer.json: tens of MB); what names
 * the kind of file in the error for a larger one. */
int tr_hf_json_load_max(const char *path, size_t max, const char *what, cJSON **root, struct tr_error *err);
/* The keys of defaults (a JSON object: a config class's defaults) that obj lacks, added to
 * obj: a file that leaves a key out means the class's default, as transformers' and
 * diffusers' from_pretrained read it, never the preset's value. Present keys, null ones
 * too, stay the file's. */
int tr_hf_json_defaults(cJSON *obj, const char *path, const char *defaults, struct tr_error *err);
/* Every key of keys[0..n) present in obj, into config by its type: INT an integral number
 * within the key's bounds, FLOAT a finite number, BOOL true or false, STRING a string or an
 * array of integers (written "a,b,c"). Absent or null: left as it is. Keys named in skip
 * (NULL-terminated, or NULL) are the caller's. */
int tr_hf_json_apply(const cJSON *obj, const char *path, const struct tr_model_key *keys, int n, void *config,
                     const char *const *skip, struct tr_error *err);
/* obj's `key` is absent, null or the string want, else an error saying what trident provides. */
int tr_hf_json_expect_str(const cJSON *obj, const char *path, const char *key, const char *want,
                          struct tr_error *err);
/* obj's `key` is absent, null or the bool / number want. */
int tr_hf_json_expect_bool(const cJSON *obj, const char *path, const char *key, int want, struct tr_error *err);
int tr_hf_json_expect_num(const cJSON *obj, const char *path, const char *key, double want, struct tr_error *err);
/* obj's `key` is absent or null (a feature trident does not provide otherwise). */
int tr_hf_json_expect_null(const cJSON *obj, const char *path, const char *key, struct tr_error *err);
/* obj's `key`, an array of strings each one of names[0..n_names): idx[i] its index, *count
 * the entries (room for max). Absent: *count = 0. */
int tr_hf_json_names(const cJSON *obj, const char *path, const char *key, const char *const *names, int n_names,
                     int64_t *idx, int max, int *count, struct tr_error *err);

#endif
