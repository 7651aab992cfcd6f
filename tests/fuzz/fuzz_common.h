/* tests/fuzz: what the libFuzzer harnesses share (README.md says how they are run).
 *
 * Each harness is one LLVMFuzzerTestOneInput over one public reader of trident's. The
 * readers take paths, so the input is handed over as a file: a memfd, made once per slot
 * and rewritten for every input, named by its /proc/self/fd path (a regular file, as
 * tr_fopen_regular demands). */
#ifndef TRIDENT_FUZZ_COMMON_H
#define TRIDENT_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define FUZZ_SLOTS 2

/* data[0..size) as the whole content of file `slot` (0 .. FUZZ_SLOTS-1); its path, valid
 * for the process's life. Aborts when the memfd cannot be made or written: the harness
 * cannot test anything without it. */
const char *fuzz_file(int slot, const uint8_t *data, size_t size);

/* data[0..size) as a NUL-terminated string (an embedded NUL ends it early); malloc'd, the
 * caller frees. Aborts when out of memory. */
char *fuzz_string(const uint8_t *data, size_t size);

/* FUZZ_VERBOSE=1 (environment): each harness prints to stderr why an input was refused
 * (what a reader said), to see how deep the seeds go. what: the call; msg: its error. */
void fuzz_note(const char *what, int rc, const char *msg);

#endif
