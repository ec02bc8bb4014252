/* lb_plan_add for tests that do not inject failures: out of memory fails the
 * test; returns what became of the event. Include after cmocka.h. */
#ifndef LB_TEST_PLAN_EVENT_H
#define LB_TEST_PLAN_EVENT_H

#include "planner.h"

static inline enum lb_reject plan_event(struct lb_plan *plan, const struct lb_event *ev,
                                        const struct lb_position *pos, int64_t now_ms,
                                        uint32_t *txn)
{
    enum lb_reject reason = LB_REJECT__COUNT;
    assert_int_equal(lb_plan_add(plan, ev, pos, now_ms, txn, &reason), 0);
    return reason;
}

#endif
