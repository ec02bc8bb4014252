/* What the libFuzzer targets share: reading files of the source tree
 * (LB_SOURCE_DIR, else the current directory) and making the fuzzer read
 * memory the code under test hands back. */
#ifndef LB_FUZZ_H
#define LB_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The file at 'rel' in the source tree, NUL-terminated; exits if unreadable. */
char *fuzz_read_source(const char *rel, size_t *len);
/* Exits: the target cannot be set up. */
void fuzz_die(const char *what, const char *why) __attribute__((noreturn));
/* Reads every byte of 'p' (AddressSanitizer checks each). */
void fuzz_touch(const void *p, size_t len);

#endif
