/* libFuzzer: a JSON report through `trident report` (cli/report_cmd.c, tr_cli_report,
 * called in this process): the input against itself, and a valid report of two backends
 * (A) against the input (B), so rows are looked up, compared and printed. The tables go
 * to /dev/null. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "fuzz_common.h"

static const char report_a[] =
    "{\"schema\": 1, \"model\": \"bert\", \"preset\": \"tiny\", \"task\": \"predict\", \"device\": \"cpu\","
    " \"dtype\": \"f32\", \"batch\": 8, \"seq_len\": 128, \"steps\": 4, \"cpu\": {\"model\": \"x\"},"
    " \"backends\": ["
    "{\"backend\": \"torch\", \"ok\": true, \"mean_ms\": 2.5, \"median_ms\": 2.4, \"p90_ms\": 2.9,"
    " \"step_ms\": [2.4, 2.5, 2.3, 2.9], \"noisy\": false},"
    "{\"backend\": \"jax\", \"ok\": true, \"mean_ms\": 3.5, \"median_ms\": 3.4, \"p90_ms\": 3.9}]}";

static const char *path_a;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    if (!freopen("/dev/null", "w", stdout)) {
        perror("fuzz_report: /dev/null");
        abort();
    }
    path_a = fuzz_file(1, (const uint8_t *)report_a, sizeof report_a - 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char pb[64];
    snprintf(pb, sizeof pb, "%s", fuzz_file(0, data, size));
    char *same[2] = {pb, pb}, *against[2] = {(char *)path_a, pb};
    tr_cli_report(2, same);
    tr_cli_report(2, against);
    return 0;
}
