/* libFuzzer: a configuration file loaded as the projector loads it; when it
 * loads, it is printed as --check-config prints it. Seeds: the YAML files
 * of config/ (ops/fuzz.sh). */
#include "fuzz.h"

#include "config.h"

#include <stdio.h>

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    devnull = fopen("/dev/null", "w");
    if (!devnull)
        fuzz_die("/dev/null", "cannot open it");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lb_config *config = NULL;
    char err[512];
    if (lb_config_load_string("fuzz.yaml", (const char *)data, size, &config, err, sizeof(err)) ==
        0) {
        lb_config_print(config, devnull);
        lb_config_free(config);
    }
    return 0;
}
