/* Block coverage of a sanitized extension, for libFuzzer (benchmarks.fuzz).
 *
 * gcc has no -fsanitize=fuzzer: its -fsanitize-coverage=trace-pc calls
 * __sanitizer_cov_trace_pc() at every basic block. This file, compiled into each sanitized
 * extension, defines it (hidden: the calls bind to this copy, never to the ASan runtime's or
 * another module's) as a hit count per block in an 8-bit counter array, the form libFuzzer
 * reads as "inline 8-bit counters". The harness registers the array with the libFuzzer inside
 * atheris (`__sanitizer_cov_8bit_counters_init`, with a PC table of the same length as
 * libFuzzer requires), so a mutation reaching a new block of the C code is kept in the corpus.
 */
#include <stdint.h>

#define COUNTERS (1 << 16)

__attribute__((visibility("hidden"))) uint8_t rowbus_fuzz_counter_array[COUNTERS];
/* Pairs (pc, flags) as libFuzzer's PC tables hold them: made-up PCs, no function entries. */
__attribute__((visibility("hidden"))) uintptr_t rowbus_fuzz_pc_table[2 * COUNTERS];

__attribute__((visibility("hidden"), no_sanitize_address, no_sanitize_undefined)) void
__sanitizer_cov_trace_pc(void) {
    uintptr_t pc = (uintptr_t)__builtin_return_address(0);
    /* Blocks of one module lie within a few hundred KB: the low bits, folded, tell them apart. */
    uint32_t slot = (uint32_t)(pc ^ (pc >> 16)) & (COUNTERS - 1);
    uint8_t n = rowbus_fuzz_counter_array[slot];
    rowbus_fuzz_counter_array[slot] = (uint8_t)(n + (n != 255));
}

/* Where the arrays are: read once by the harness through ctypes. */
__attribute__((visibility("default"))) void rowbus_fuzz_counters(uint8_t **counters,
                                                                 uintptr_t **pcs, int *n) {
    for (int i = 0; i < COUNTERS; i++) rowbus_fuzz_pc_table[2 * i] = (uintptr_t)(i + 1);
    *counters = rowbus_fuzz_counter_array;
    *pcs = rowbus_fuzz_pc_table;
    *n = COUNTERS;
}
