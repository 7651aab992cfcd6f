/* free() on each pointer of a list, in order: a program's per-node arrays released in
 * one statement, so that a new array is one more name here rather than one more line
 * in every backend's program_free. */
#ifndef TRIDENT_PLUGIN_MEM_H
#define TRIDENT_PLUGIN_MEM_H

#include <stddef.h>
#include <stdlib.h>

#define TR_FREE_EACH(...)                                                                                        \
    do {                                                                                                         \
        void *tr_free_each_[] = {__VA_ARGS__};                                                                   \
        for (size_t tr_i_ = 0; tr_i_ < sizeof tr_free_each_ / sizeof tr_free_each_[0]; tr_i_++)                  \
            free(tr_free_each_[tr_i_]);                                                                          \
    } while (0)

#endif
