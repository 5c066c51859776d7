/* What GET /metrics reports, in Prometheus' text format: HTTP requests by
 * route and status, prompt and generated tokens, the engine's queue and
 * running counts, time to first token, prefill/decode time. The gauges of
 * the Kubernetes Gateway API Inference Extension's model-server protocol are
 * also given under vLLM's names (vllm:num_requests_waiting/running), which
 * its endpoint picker reads by default. Thread-safe (one lock). */
#ifndef SP_SERVER_METRICS_H
#define SP_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "spindle.h"

/* One per row of routes.def, in its order, then OTHER (unknown paths). */
typedef enum sp_route {
#define SP_ROUTE(name, method, path, also, metric, handler, api_key) SP_ROUTE_##name,
#include "server/routes.def"
    SP_ROUTE_OTHER,
    SP_ROUTE_COUNT
} sp_route;

/* A route's metric label (routes.def: "/v1/chat/completions"; "other"). */
const char *sp_route_name(sp_route route);

#define SP_METRICS_STATUSES 12   /* distinct statuses kept per route */
#define SP_METRICS_TTFT_BUCKETS 14

typedef struct sp_metrics {
    pthread_mutex_t lock;
    struct {
        int status;
        uint64_t count;
    } requests[SP_ROUTE_COUNT][SP_METRICS_STATUSES];
    uint64_t prompt_tokens, generated_tokens, generations;
    uint64_t cached_tokens;   /* of prompt_tokens, mapped from the prefix index */
    uint64_t spec_drafted, spec_accepted;   /* speculative decoding's tokens */
    double prefill_seconds, decode_seconds;
    uint64_t ttft_buckets[SP_METRICS_TTFT_BUCKETS];
    uint64_t ttft_count;
    double ttft_sum;
} sp_metrics;

void sp_metrics_init(sp_metrics *m);
void sp_metrics_destroy(sp_metrics *m);
void sp_metrics_count_request(sp_metrics *m, sp_route route, int status);
/* A finished generation: its token counts and timings. */
void sp_metrics_count_generation(sp_metrics *m, const spindle_request_stats *s,
                                 int n_generated);
/* The exposition text into `out`; queued/running from the engine. */
void sp_metrics_render(sp_metrics *m, int queued, int running, sp_strbuf *out);
/* The vision encoder's counters: images encoded, answered from the
 * encoded-image cache, evicted from it, and its bytes. */
void sp_metrics_render_vision(const spindle_vision_stats *v, sp_strbuf *out);
/* Only spindle_requests_total (the front of a server of several models,
 * which runs no generation). */
void sp_metrics_render_requests(sp_metrics *m, sp_strbuf *out);
/* The KV block pool's gauges: the share of blocks in use (0-1) and the
 * cache config info metric, under Spindle's names and vLLM's (the series
 * the Gateway API Inference Extension's endpoint picker reads); the blocks
 * by state; with an on-disk prompt cache, its size, budget and files, and
 * its blocks loaded, written, refused, evicted and dropped. */
void sp_metrics_render_kv(const spindle_kv_pool_info *kv, sp_strbuf *out);
/* Only the Gateway API Inference Extension's vllm: series (kv NULL: the
 * queue's alone), for a server of several models that sums them. */
void sp_metrics_render_gaie(int queued, int running, const spindle_kv_pool_info *kv,
                            sp_strbuf *out);
/* Several expositions as one: each family's HELP and TYPE once, then the
 * samples of every text that has it, each given model_name="labels[i]" as
 * its first label (labels[i] NULL: unchanged); families whose name starts
 * with skip_prefix (NULL: none) are left out. */
void sp_metrics_merge(const char *const *texts, const char *const *labels, int n,
                      const char *skip_prefix, sp_strbuf *out);

#endif
