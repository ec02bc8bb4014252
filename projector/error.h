/* What a constructor's failure means to its caller. */
#ifndef LB_ERROR_H
#define LB_ERROR_H

/* Why a constructor failed: its input was wrong (an operator fixes the
 * configuration; the daemon exits with its configuration status) or the
 * world was (a broker, memory, the system). */
enum lb_error_class {
    LB_ERROR_NONE = 0,
    LB_ERROR_CONFIG,
    LB_ERROR_RUNTIME,
};

#endif
