/* Failing the N-th allocation, SQLite's way, for tests/test_alloc_fail.c.
 *
 * The program that links this replaces malloc, calloc, realloc, free, aligned_alloc,
 * memalign, posix_memalign, strdup and strndup for the whole process (a definition in the
 * executable wins over libc's for every shared library, dlopen'd plugins included), and
 * forwards them to libc's (__libc_malloc...) or, under AddressSanitizer, to ASan's own
 * (__interceptor_malloc...), so ASan still checks every byte.
 *
 * While armed, an allocation counts when its caller (__builtin_return_address, told apart
 * by dladdr once per call site) is in trident's code: the executable, or an object whose
 * file name holds "trident" (libtrident.so, the backend plugins). Allocations made inside
 * libc (fopen's buffer, dlopen, qsort), oneDNN, libgomp, libstdc++ or the other libraries
 * are neither counted nor failed: only what our code asks for directly.
 *
 * The allocations we count are also remembered until freed (by anyone), tagged with the
 * run they were made in, so that a run's leftovers are its leaks. */
#ifndef TRIDENT_ALLOCFAIL_H
#define TRIDENT_ALLOCFAIL_H

#include <stddef.h>

/* Arm for run `run` (>= 0): count our allocations from 0 and fail the fail_at-th
 * (1-based; 0: fail none). */
void tr_allocfail_arm(int run, long fail_at);
/* Disarm; returns how many of our allocations the armed run made (the failed one
 * included). *failed: whether the fail_at-th was reached and failed. */
long tr_allocfail_disarm(int *failed);
/* The caller of the allocation that was failed (NULL if none). */
const void *tr_allocfail_failed_caller(void);
/* Its call stack, a frame a line (object+offset, for addr2line). */
void tr_allocfail_failed_stack(char *buf, size_t size);

/* Our allocations made in run `run` that are still live: their count and bytes; the
 * first `n` of them are described in buf ("96 bytes from bert_build+0x1c4
 * (libtrident.so)"), one per line. */
long tr_allocfail_live(int run, size_t *bytes, char *buf, size_t size, int n);

/* "symbol+0xoff (object)" for a code address. */
void tr_allocfail_where(const void *addr, char *buf, size_t size);

#endif
