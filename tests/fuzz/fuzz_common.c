/* What the harnesses share (fuzz_common.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "fuzz_common.h"

/* ASan's defaults for every harness (ASAN_OPTIONS still overrides each): an allocation over
 * 512 MiB returns NULL instead of ending the run, so a size read from the input that the
 * readers pass to malloc tests their out-of-memory path rather than the machine; libFuzzer's
 * -rss_limit_mb (2 GiB by default) still catches an input that makes them use too much. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1:max_allocation_size_mb=512"; }

static void fail(const char *what) {
    perror(what);
    abort();
}

const char *fuzz_file(int slot, const uint8_t *data, size_t size) {
    static int fds[FUZZ_SLOTS] = {-1, -1};
    static char paths[FUZZ_SLOTS][64];
    if (slot < 0 || slot >= FUZZ_SLOTS) fail("fuzz_file: slot");
    if (fds[slot] < 0) {
        fds[slot] = memfd_create("trident-fuzz", 0);
        if (fds[slot] < 0) fail("fuzz_file: memfd_create");
        snprintf(paths[slot], sizeof paths[slot], "/proc/self/fd/%d", fds[slot]);
    }
    if (ftruncate(fds[slot], 0) != 0) fail("fuzz_file: ftruncate");
    for (size_t done = 0; done < size;) {
        ssize_t n = pwrite(fds[slot], data + done, size - done, (off_t)done);
        if (n <= 0) fail("fuzz_file: pwrite");
        done += (size_t)n;
    }
    return paths[slot];
}

char *fuzz_string(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) fail("fuzz_string: malloc");
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

void fuzz_note(const char *what, int rc, const char *msg) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "%s: %s\n", what, rc ? msg : "ok");
}
