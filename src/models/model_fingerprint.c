/* spindle_model_fingerprint: the files' identity (artifacts/fingerprint.c),
 * computed once per model. */
#include "models/model.h"
#include "artifacts/fingerprint.h"
#include "base/error.h"

#include <pthread.h>
#include <string.h>

/* One lock for all models: the value is computed once per model and the
 * lock is held only around the copy and the first computation. */
static pthread_mutex_t fingerprint_lock = PTHREAD_MUTEX_INITIALIZER;

spindle_status spindle_model_fingerprint(spindle_model *model,
                                         char out[SPINDLE_FINGERPRINT_LEN + 1],
                                         spindle_error *err) {
    if (!model || !out) return sp_fail(err, SPINDLE_ERR_ARGUMENT, "NULL argument");
    pthread_mutex_lock(&fingerprint_lock);
    spindle_status st = SPINDLE_OK;
    if (!model->fingerprint[0])
        st = sp_fingerprint_path(model->dir, model->fingerprint, err);
    memcpy(out, model->fingerprint, SPINDLE_FINGERPRINT_LEN + 1);
    pthread_mutex_unlock(&fingerprint_lock);
    return st;
}
