/* The engine and an embedder running forward passes over one model at once,
 * through the public API only, as `spindle serve` does when a generation
 * and an embeddings request arrive together. Built under ThreadSanitizer
 * (scripts/test.sh, build-tsan), so a write to model-owned data during a
 * pass (per-pass scratch kept in the model instead of the pass) is
 * reported as a data race.
 *
 * Usage: engine_embed_race MODEL_DIR
 * MODEL_DIR is a decoder checkpoint (the hybrid parity models: both kinds
 * of mixer); it is linked file by file into a temporary directory beside
 * sentence-transformers' files (last-token pooling), so the same model
 * also serves as an embedding model. Exit 0 when every request and every
 * embedding succeeded. */
#include "spindle.h"

#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { N_REQUESTS = 6, N_EMBED_ROUNDS = 6, PROMPT_MAX = 48 };

typedef struct shared {
    pthread_mutex_t lock;
    pthread_cond_t done;
    int finished, failed;
} shared;

static void on_finish(spindle_request_id id, const spindle_request_result *r,
                      void *user) {
    shared *s = user;
    pthread_mutex_lock(&s->lock);
    if (r->status) {
        fprintf(stderr, "request %llu: %s\n", (unsigned long long)id, r->error);
        s->failed++;
    }
    s->finished++;
    pthread_cond_signal(&s->done);
    pthread_mutex_unlock(&s->lock);
}

typedef struct embed_job {
    spindle_embedder *embedder;
    int failed;
} embed_job;

/* Inputs of growing length, so that each pass needs more rows than the
 * last (the scratch grows while the engine's passes use theirs). */
static void *embed_thread(void *p) {
    embed_job *job = p;
    int32_t tokens[3][PROMPT_MAX];
    const int lengths[3] = {5, 23, PROMPT_MAX};
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < PROMPT_MAX; t++) tokens[i][t] = (37 * t + 11 * i) % 200 + 1;
    const int dim = spindle_embedder_dim(job->embedder);
    float *out = malloc(3 * (size_t)dim * sizeof *out);
    for (int round = 0; round < N_EMBED_ROUNDS && out; round++) {
        spindle_embed_input in[3];
        const int n = round % 3 + 1;
        for (int i = 0; i < n; i++)
            in[i] = (spindle_embed_input){.tokens = tokens[i],
                                          .n_tokens = lengths[(i + round) % 3]};
        spindle_embed_request req = {.inputs = in, .n_inputs = n};
        spindle_error err = {0};
        if (spindle_embed(job->embedder, &req, out, NULL, &err)) {
            fprintf(stderr, "embed: %s\n", err.message);
            job->failed++;
        }
    }
    if (!out) job->failed++;
    free(out);
    return NULL;
}

static int write_file(const char *dir, const char *name, const char *text) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* tmp gets a link to every file of src, then the sentence-transformers
 * files. */
static int make_embedding_dir(const char *dir, const char *tmp, int hidden) {
    char src[PATH_MAX];
    if (!realpath(dir, src)) return -1;
    DIR *d = opendir(src);
    if (!d) return -1;
    char from[2 * PATH_MAX], to[2 * PATH_MAX];
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(from, sizeof from, "%s/%s", src, e->d_name);
        snprintf(to, sizeof to, "%s/%s", tmp, e->d_name);
        if (symlink(from, to)) { closedir(d); return -1; }
    }
    closedir(d);
    char pooling[256];
    snprintf(pooling, sizeof pooling,
             "{\"word_embedding_dimension\": %d, "
             "\"pooling_mode_lasttoken\": true}", hidden);
    snprintf(to, sizeof to, "%s/1_Pooling", tmp);
    if (mkdir(to, 0700)) return -1;
    return write_file(tmp, "modules.json",
                      "[{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": "
                      "\"sentence_transformers.models.Transformer\"}, "
                      "{\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", "
                      "\"type\": \"sentence_transformers.models.Pooling\"}]") ||
           write_file(tmp, "1_Pooling/config.json", pooling);
}

/* Undo make_embedding_dir (links and files only; nothing is followed). */
static void remove_dir(const char *dir) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/1_Pooling", dir);
    rmdir(path);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static int hidden_size(const char *dir) {
    spindle_model *m = NULL;
    spindle_error err = {0};
    const spindle_load_options o = {.n_threads = 1};
    if (spindle_model_load(dir, &o, &m, &err)) {
        fprintf(stderr, "%s: %s\n", dir, err.message);
        return 0;
    }
    int d = spindle_model_hidden_size(m);
    spindle_model_free(m);
    return d;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: engine_embed_race MODEL_DIR\n");
        return 2;
    }
    char tmp[] = "/tmp/engine_embed_race.XXXXXX";
    const int hidden = hidden_size(argv[1]);
    if (!hidden || !mkdtemp(tmp)) return 1;
    if (make_embedding_dir(argv[1], tmp, hidden)) {
        fprintf(stderr, "cannot prepare %s\n", tmp);
        remove_dir(tmp);
        return 1;
    }
    spindle_error err = {0};
    spindle_model *m = NULL;
    const spindle_load_options lo = {.n_threads = 2};
    spindle_embedder *emb = NULL;
    spindle_engine *eng = NULL;
    spindle_engine_options eo = spindle_engine_defaults();
    eo.background = true;
    if (spindle_model_load(tmp, &lo, &m, &err) ||
        spindle_embedder_new(m, &(spindle_embedder_options){.n_threads = 2},
                             &emb, &err) ||
        spindle_engine_new(m, &eo, &eng, &err)) {
        fprintf(stderr, "%s: %s\n", tmp, err.message);
        remove_dir(tmp);
        return 1;
    }
    shared s = {.lock = PTHREAD_MUTEX_INITIALIZER,
                .done = PTHREAD_COND_INITIALIZER};
    embed_job job = {.embedder = emb};
    pthread_t th;
    if (pthread_create(&th, NULL, embed_thread, &job)) return 1;
    spindle_gen_params gp = spindle_gen_defaults();
    gp.max_tokens = 6;
    int32_t prompt[PROMPT_MAX];
    int submitted = 0;
    for (int i = 0; i < N_REQUESTS; i++) {
        const int n = 4 + (i * 9) % (PROMPT_MAX - 4);
        for (int t = 0; t < n; t++) prompt[t] = (13 * t + 7 * i) % 200 + 1;
        spindle_request r = {.prompt = prompt, .n_prompt = n, .params = &gp,
                             .on_finish = on_finish, .user = &s};
        if (spindle_engine_submit(eng, &r, NULL, &err))
            fprintf(stderr, "submit: %s\n", err.message);
        else
            submitted++;
    }
    pthread_join(th, NULL);
    pthread_mutex_lock(&s.lock);
    while (s.finished < submitted) pthread_cond_wait(&s.done, &s.lock);
    pthread_mutex_unlock(&s.lock);
    spindle_engine_free(eng);
    spindle_embedder_free(emb);
    spindle_model_free(m);
    remove_dir(tmp);
    const int bad = s.failed + job.failed + (N_REQUESTS - submitted);
    printf("%d requests, %d embedding rounds, %d failed\n", N_REQUESTS,
           N_EMBED_ROUNDS, bad);
    return bad ? 1 : 0;
}
