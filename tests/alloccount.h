/* Counting the allocations a piece of code makes, for the tests that promise "nothing is
 * allocated per step". While counting, every malloc/calloc/realloc/aligned_alloc/
 * memalign/posix_memalign of the process records its caller; at the end the callers are
 * told apart (dladdr) by the object they are in, so that trident's code can be held to
 * zero while oneDNN's or libgomp's own allocations are only reported.
 *
 * Not under AddressSanitizer, which owns malloc itself: there TR_TEST_COUNT_ALLOCS is 0
 * and a test skips its counting with a message saying why. */
#ifndef TRIDENT_ALLOCCOUNT_H
#define TRIDENT_ALLOCCOUNT_H

#include <stddef.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TR_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TR_TEST_ASAN 1
#endif
#ifdef TR_TEST_ASAN
#define TR_TEST_COUNT_ALLOCS 0
#else
#define TR_TEST_COUNT_ALLOCS 1
#endif

void tr_test_allocs_start(void);
/* Stop counting. Returns the allocations made from code in the objects (executable or
 * shared library) that contain the n addresses in `ours`; an allocation beyond what
 * could be recorded counts as ours, so nothing slips through. *theirs (if not NULL)
 * gets the rest, and `others` (if not NULL) names them: "libdnnl.so.2: 5, libgomp.so.1: 3". */
long tr_test_allocs_stop(const void *const *ours, int n, long *theirs, char *others, size_t size);

#endif
