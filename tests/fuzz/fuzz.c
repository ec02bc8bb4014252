/* See fuzz.h. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>

char *fuzz_read_source(const char *rel, size_t *len)
{
    char path[1024];
    const char *root = getenv("LB_SOURCE_DIR");
    snprintf(path, sizeof(path), "%s/%s", root ? root : ".", rel);
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long size;
    if (!f || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        !(text = malloc((size_t)size + 1)) || fread(text, 1, (size_t)size, f) != (size_t)size)
        fuzz_die(path, "cannot read it (set LB_SOURCE_DIR to the source tree)");
    fclose(f);
    text[size] = '\0';
    *len = (size_t)size;
    return text;
}

void fuzz_die(const char *what, const char *why)
{
    fprintf(stderr, "fuzz: %s: %s\n", what, why);
    exit(2);
}

void fuzz_touch(const void *p, size_t len)
{
    volatile unsigned char sum = 0;
    for (size_t i = 0; i < len; i++)
        sum ^= ((const unsigned char *)p)[i];
    (void)sum;
}
