// cuemu's scheduler: a launch runs its blocks one after another; a block's threads are
// fibers on the calling thread (a six-register switch on x86-64, ucontext elsewhere:
// ucontext's signal-mask system calls made it five times slower), each run until it
// reaches a barrier or returns. When every thread of the block waits or has returned, the warps whose live lanes all
// wait at a warp barrier are released, else the block barrier is, else it is a deadlock.
// Fibers switch only there, so shared-memory races show as results that depend on the
// order threads run in: TR_CUEMU_ORDER=reverse runs threads and blocks last first.
#include "cuemu.h"
#include "cuemu_rt.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <vector>

namespace tr_cuemu {

env_t env;

namespace {

// NEW: not started; a fiber whose thread returns goes on with the next NEW thread (in the
// order the scheduler takes them) on its own stack, so a block without barriers costs one
// switch, not one per thread.
enum { NEW, READY, WAIT_BLOCK, WAIT_WARP, DONE };
constexpr size_t STACK = 256 * 1024;

#if defined(__x86_64__)
// swap(save, load): pushes the callee-saved registers, stores rsp in *save, loads rsp
// from load, pops and returns into the other context (System V: the rest are the caller's).
extern "C" void tr_cuemu_swap(void **save, void *load);
asm(R"(
    .text
    .globl tr_cuemu_swap
    .type tr_cuemu_swap,@function
tr_cuemu_swap:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size tr_cuemu_swap, .-tr_cuemu_swap
    .section .note.GNU-stack,"",@progbits
    .text
)");
struct context {
    void *sp;
};
#else
struct context {
    ucontext_t uc;
};
#endif

struct fiber {
    context ctx;
    char *stack;
    int state;
    int pred;
    int mma_seq;  // mma_sync calls since the block began
};

struct product {
    int seq; // the warp's mma_sync call it holds (0: none)
    float v[256];
};

struct block_state {
    std::vector<fiber> f;
    context sched;
    int cur = -1;
    int n = 0;
    int cursor = 0; // the next thread to start
    int block_or = 0;
    uint64_t slot[2][1024];
    int warp_gen[32];
    product prod[32];
    body_fn body;
    void *arg;
    const void *kernel;
} B;

const char *kernel_name(const void *k) {
    static char buf[512];
    Dl_info info;
    if (k && dladdr(k, &info) && info.dli_sname) {
        int st = 0;
        char *d = abi::__cxa_demangle(info.dli_sname, NULL, NULL, &st);
        snprintf(buf, sizeof buf, "%s", st == 0 && d ? d : info.dli_sname);
        free(d);
        return buf;
    }
    snprintf(buf, sizeof buf, "%p", k);
    return buf;
}

bool reverse_order() {
    static int r = -1;
    if (r < 0) {
        const char *e = getenv("TR_CUEMU_ORDER");
        r = e && strcmp(e, "reverse") == 0;
    }
    return r == 1;
}

void ctx_switch(context *save, context *load) {
#if defined(__x86_64__)
    tr_cuemu_swap(&save->sp, load->sp);
#else
    swapcontext(&save->uc, &load->uc);
#endif
}

void set_tid(int t) {
    env.tid.x = (unsigned)t % env.block.x;
    env.tid.y = ((unsigned)t / env.block.x) % env.block.y;
    env.tid.z = (unsigned)t / (env.block.x * env.block.y);
}

// Threads start in the scheduler's order, so the NEW ones are those from the cursor on.
int take_new() {
    if (B.cursor < 0 || B.cursor >= B.n) return -1;
    const int t = B.cursor;
    B.cursor += reverse_order() ? -1 : 1;
    return t;
}

void entry() {
    for (;;) {
        B.body(B.arg);
        B.f[B.cur].state = DONE;
        const int nx = take_new();
        if (nx < 0) break;
        B.cur = nx;
        set_tid(nx);
        B.f[nx].state = READY;
    }
#if defined(__x86_64__)
    ctx_switch(&B.f[B.cur].ctx, &B.sched); // never resumed
    __builtin_unreachable();
#endif // ucontext: uc_link returns to the scheduler
}

void ctx_init(fiber &fb) {
#if defined(__x86_64__)
    // the frame tr_cuemu_swap pops: six registers, then entry as the return address, with
    // rsp at entry 8 below a 16-byte boundary, as after a call
    uintptr_t top = ((uintptr_t)fb.stack + STACK) & ~(uintptr_t)15;
    void **sp = (void **)(top - 64);
    for (int i = 0; i < 6; i++) sp[i] = nullptr;
    sp[6] = (void *)entry;
    sp[7] = nullptr;
    fb.ctx.sp = sp;
#else
    getcontext(&fb.ctx.uc);
    fb.ctx.uc.uc_stack.ss_sp = fb.stack;
    fb.ctx.uc.uc_stack.ss_size = STACK;
    fb.ctx.uc.uc_link = &B.sched.uc;
    makecontext(&fb.ctx.uc, entry, 0);
#endif
}

// The lane after t in its warp, in the scheduler's order, that can run (-1: none).
int next_in_warp(int t) {
    const int lo = t / 32 * 32, hi = lo + 32 < B.n ? lo + 32 : B.n;
    if (reverse_order()) {
        for (int u = t - 1; u >= lo; u--)
            if (B.f[u].state == NEW || B.f[u].state == READY) return u;
    } else {
        for (int u = t + 1; u < hi; u++)
            if (B.f[u].state == NEW || B.f[u].state == READY) return u;
    }
    return -1;
}

// From context `from` to thread t (NEW or READY), starting it on its own stack if NEW.
void run_thread(context *from, int t) {
    if (B.f[t].state == NEW) {
        if (take_new() != t) fail("threads started out of order");
        ctx_init(B.f[t]);
    }
    B.f[t].state = READY;
    B.cur = t;
    set_tid(t);
    ctx_switch(from, &B.f[t].ctx);
}

// A thread that waits hands over to the next lane of its warp that can run, as the
// scheduler would pick it, without the round trip through the scheduler (half the
// switches of a shuffle); the last one goes back to the scheduler.
void yield_as(int state) {
    fiber &me = B.f[B.cur];
    me.state = state;
    const int nx = next_in_warp(B.cur);
    if (nx < 0) ctx_switch(&me.ctx, &B.sched);
    else run_thread(&me.ctx, nx);
}

char *new_stack() {
    long pg = sysconf(_SC_PAGESIZE);
    char *p = (char *)mmap(NULL, STACK + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("mmap of a fiber stack failed");
    mprotect(p, pg, PROT_NONE); // an overflow faults
    return p + pg;
}

// Dynamic shared memory whose end is a page that faults: a read or write past what the
// launch asked for (rounded up to 128 bytes) stops the run.
struct smem_area {
    unsigned char *base = nullptr;
    size_t len = 0;
} S;

unsigned char *smem_for(size_t bytes) {
    long pg = sysconf(_SC_PAGESIZE);
    size_t want = (bytes + 127) / 128 * 128, body = (want + pg - 1) / pg * pg;
    if (body + pg > S.len) {
        if (S.base) munmap(S.base, S.len);
        S.len = body + pg;
        S.base = (unsigned char *)mmap(NULL, S.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (S.base == MAP_FAILED) fail("mmap of shared memory failed");
        mprotect(S.base + body, pg, PROT_NONE);
    }
    size_t body_now = S.len - pg;
    return S.base + body_now - want;
}

void run_block() {
    const int n = B.n;
    for (int t = 0; t < n; t++) B.f[t].state = NEW;
    B.cursor = reverse_order() ? n - 1 : 0;
    for (int w = 0; w < 32; w++) B.warp_gen[w] = B.prod[w].seq = 0;
    for (int t = 0; t < n; t++) B.f[t].mma_seq = 0;
    if (env.dyn_bytes) memset(env.dyn_smem, 0xff, env.dyn_bytes); // what a GPU leaves: not zeros
    const bool rev = reverse_order();
    const int nw = (n + 31) / 32;
    for (;;) {
        // Each warp in turn, its lanes run until none is ready; a warp whose live lanes
        // all wait at a warp op is released and run again at once (a shuffle's round
        // trip stays within its 32 lanes).
        for (int k = 0; k < nw; k++) {
            const int w = rev ? nw - 1 - k : k, lo = w * 32, hi = lo + 32 < n ? lo + 32 : n;
            for (;;) {
                for (int j = 0; j < hi - lo; j++) {
                    const int t = rev ? hi - 1 - j : lo + j;
                    if (B.f[t].state == NEW || B.f[t].state == READY) run_thread(&B.sched, t);
                }
                int at_warp = 0, gone = 0;
                for (int t = lo; t < hi; t++) {
                    at_warp += B.f[t].state == WAIT_WARP;
                    gone += B.f[t].state == DONE;
                }
                if (!at_warp) break;
                if (gone)
                    fail("kernel %s, block (%u,%u,%u): warp %d waits at a full-mask warp op (__syncwarp or a "
                         "shuffle) while %d of its lanes have returned",
                         kernel_name(B.kernel), env.bid.x, env.bid.y, env.bid.z, w, gone);
                if (at_warp != hi - lo)
                    fail("kernel %s, block (%u,%u,%u): warp %d has lanes at a warp op and lanes at __syncthreads",
                         kernel_name(B.kernel), env.bid.x, env.bid.y, env.bid.z, w);
                for (int t = lo; t < hi; t++) B.f[t].state = READY;
                B.warp_gen[w]++;
            }
        }
        int done = 0, at_block = 0;
        for (int t = 0; t < n; t++) {
            done += B.f[t].state == DONE;
            at_block += B.f[t].state == WAIT_BLOCK;
        }
        if (done == n) return;
        if (at_block + done != n)
            fail("kernel %s, block (%u,%u,%u): no thread can go on", kernel_name(B.kernel), env.bid.x, env.bid.y,
                 env.bid.z);
        if (done)
            fail("kernel %s, block (%u,%u,%u): __syncthreads reached by %d threads while %d have returned",
                 kernel_name(B.kernel), env.bid.x, env.bid.y, env.bid.z, at_block, done);
        int any = 0;
        for (int t = 0; t < n; t++) any |= B.f[t].pred != 0;
        B.block_or = any;
        for (int t = 0; t < n; t++) B.f[t].state = READY;
    }
}

} // namespace

void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuemu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(NULL);
    abort();
}

void syncthreads() {
    B.f[B.cur].pred = 0;
    yield_as(WAIT_BLOCK);
}

int syncthreads_or(int pred) {
    B.f[B.cur].pred = pred != 0;
    yield_as(WAIT_BLOCK);
    return B.block_or;
}

static void check_full_warp(unsigned mask, const char *what) {
    if (mask != 0xffffffffu)
        fail("kernel %s: %s with mask %#x: cuemu knows full masks only", kernel_name(B.kernel), what, mask);
    int w = B.cur / 32, lanes = B.n - w * 32 < 32 ? B.n - w * 32 : 32;
    if (lanes < 32)
        fail("kernel %s: %s with a full mask in warp %d of %d threads (block of %d)", kernel_name(B.kernel), what, w,
             lanes, B.n);
}

void syncwarp(unsigned mask) {
    check_full_warp(mask, "__syncwarp");
    yield_as(WAIT_WARP);
}

uint64_t shfl(unsigned mask, uint64_t bits, int src) {
    check_full_warp(mask, "a shuffle");
    const int w = B.cur / 32, gen = B.warp_gen[w] & 1;
    B.slot[gen][B.cur] = bits;
    yield_as(WAIT_WARP);
    return B.slot[gen][w * 32 + (src & 31)];
}

bool warp_product_get(float *out, size_t bytes) {
    fiber &me = B.f[B.cur];
    product &p = B.prod[B.cur / 32];
    me.mma_seq++;
    if (bytes > sizeof p.v) fail("kernel %s: a WMMA tile of %zu bytes", kernel_name(B.kernel), bytes);
    if (p.seq != me.mma_seq) return false;
    memcpy(out, p.v, bytes);
    return true;
}

void warp_product_put(const float *out, size_t bytes) {
    product &p = B.prod[B.cur / 32];
    p.seq = B.f[B.cur].mma_seq;
    memcpy(p.v, out, bytes);
}

int launch_now(const cfg_t &c, const void *kernel, body_fn body, void *arg) {
    const unsigned nt = c.block.x * c.block.y * c.block.z;
    if (nt == 0 || nt > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
        c.grid.y > 65535 || c.grid.z > 65535 || c.grid.x > 2147483647u) {
        fprintf(stderr, "cuemu: kernel %s: bad launch: grid (%u,%u,%u), block (%u,%u,%u)\n", kernel_name(kernel),
                c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z);
        return cudaErrorInvalidConfiguration;
    }
    if (c.smem > 48 * 1024 && (size_t)rt_max_dynamic_smem(kernel) < c.smem) {
        fprintf(stderr, "cuemu: kernel %s: %zu bytes of dynamic shared memory without "
                        "cudaFuncAttributeMaxDynamicSharedMemorySize >= that (it is %d)\n",
                kernel_name(kernel), c.smem, rt_max_dynamic_smem(kernel));
        return cudaErrorInvalidValue;
    }
    if (c.smem > RT_SMEM_OPTIN) {
        fprintf(stderr, "cuemu: kernel %s: %zu bytes of dynamic shared memory, past the device's %d\n",
                kernel_name(kernel), c.smem, RT_SMEM_OPTIN);
        return cudaErrorInvalidValue;
    }
    if ((int)B.f.size() < (int)nt) {
        size_t old = B.f.size();
        B.f.resize(nt);
        for (size_t i = old; i < nt; i++) B.f[i].stack = new_stack();
    }
    B.n = (int)nt;
    B.body = body;
    B.arg = arg;
    B.kernel = kernel;
    env.grid = c.grid;
    env.block = c.block;
    env.dyn_bytes = c.smem;
    env.dyn_smem = c.smem ? smem_for(c.smem) : nullptr;
    const bool rev = reverse_order();
    const uint64_t nb = (uint64_t)c.grid.x * c.grid.y * c.grid.z;
    for (uint64_t k = 0; k < nb; k++) {
        uint64_t b = rev ? nb - 1 - k : k;
        env.bid.x = (unsigned)(b % c.grid.x);
        env.bid.y = (unsigned)((b / c.grid.x) % c.grid.y);
        env.bid.z = (unsigned)(b / ((uint64_t)c.grid.x * c.grid.y));
        run_block();
    }
    return cudaSuccess;
}

} // namespace tr_cuemu
