/* spindle_spec_check_draft: whether a draft model's tokenizer is the
 * target's (`spindle run/chat --spec draft` and `spindle serve` both ask). */
#include <stdio.h>
#include <string.h>

#include "spindle.h"

spindle_status spindle_spec_check_draft(const spindle_model *target,
                                        const spindle_model *draft,
                                        spindle_error *err) {
    static const char probe[] =
        "def rename(old_name):\n    return {\"x\": old_name + 1}  # caf\xc3\xa9, 42";
    spindle_tokenizer *tt = NULL, *dt = NULL;
    bool have_t = !spindle_tokenizer_load(spindle_model_dir(target), &tt, err);
    bool have_d = !spindle_tokenizer_load(spindle_model_dir(draft), &dt, err);
    spindle_status st = SPINDLE_OK;
    if (have_t != have_d) {
        st = SPINDLE_ERR_ARGUMENT;
        snprintf(err->message, sizeof err->message,
                 "only one of the target and the draft model has a tokenizer");
    } else if (have_t) {
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        st = spindle_tokenizer_encode(tt, probe, sizeof probe - 1, false, &a, &na, err);
        if (!st) st = spindle_tokenizer_encode(dt, probe, sizeof probe - 1, false, &b, &nb, err);
        if (!st && (na != nb || memcmp(a, b, na * sizeof *a))) {
            st = SPINDLE_ERR_ARGUMENT;
            snprintf(err->message, sizeof err->message,
                     "the draft model's tokenizer is not the target's "
                     "(they encode a probe text differently)");
        }
        spindle_free(a);
        spindle_free(b);
    }
    if (!st) err->message[0] = '\0';
    spindle_tokenizer_free(tt);
    spindle_tokenizer_free(dt);
    return st;
}
