/* trident — logging. Messages at or below the level set go to stderr, prefixed
 * "trident: ". The level comes from TRIDENT_LOG (error, warn, info, debug) or
 * tr_log_set_level; the default is warn. */
#ifndef TRIDENT_LOG_H
#define TRIDENT_LOG_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void tr_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tr_log_set_level(int level);

#ifdef __cplusplus
}
#endif
#endif
