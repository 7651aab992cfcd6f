/* The ISA level a forced test run would get (tests/with_isa.sh): prints the cpu line and
 * exits 0 when the level of TRIDENT_CPU_ISA runs here and differs from the native run,
 * 77 (ctest's "skipped") when this cpu cannot run it or it would repeat the native run,
 * 1 for a value that is not a level. */
#include <stdio.h>
#include "trident/kernels.h"

int main(void) {
    struct tr_cpu_info ci;
    struct tr_error err = {0};
    if (tr_kernels_cpu_info(&ci, &err)) {
        printf("%s\n", err.msg);
        return err.status == TR_ERR_UNSUPPORTED ? 77 : 1;
    }
    /* the same level without AMX to drop is the native run again */
    int same = ci.isa == ci.native && !ci.amx;
    printf("cpu %s: native %s%s, in use %s, oneDNN %s, bf16 GEMM %s%s\n", ci.model, tr_cpu_isa_name(ci.native),
           ci.amx ? " with AMX" : "", tr_cpu_isa_name(ci.isa), ci.onednn_isa,
           ci.bf16_native ? "native" : "converted to f32", same ? " (the native run already covers it)" : "");
    return same ? 77 : 0;
}
