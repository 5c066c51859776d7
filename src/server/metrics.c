/* The counters, gauges and time-to-first-token histogram of GET /metrics, in
 * Prometheus' text format (metrics.h). */
#include "server/metrics.h"

#include <string.h>

static const char *const route_names[SP_ROUTE_COUNT] = {
#define SP_ROUTE(name, method, path, also, metric, handler, api_key) [SP_ROUTE_##name] = metric,
#include "server/routes.def"
    [SP_ROUTE_OTHER] = "other",
};

/* Upper bounds of the time-to-first-token buckets, seconds. */
static const double ttft_bounds[SP_METRICS_TTFT_BUCKETS] = {
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 20, 40, 80,
};

const char *sp_route_name(sp_route route) {
    return route >= 0 && route < SP_ROUTE_COUNT ? route_names[route] : "other";
}

void sp_metrics_init(sp_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
}

void sp_metrics_destroy(sp_metrics *m) { pthread_mutex_destroy(&m->lock); }

void sp_metrics_count_request(sp_metrics *m, sp_route route, int status) {
    if (route < 0 || route >= SP_ROUTE_COUNT) route = SP_ROUTE_OTHER;
    pthread_mutex_lock(&m->lock);
    /* The first free slot, or the last one for any further status (a
     * route sees a handful of statuses; the table stays bounded). */
    for (int i = 0; i < SP_METRICS_STATUSES; i++) {
        if (m->requests[route][i].status == status || m->requests[route][i].status == 0 ||
            i == SP_METRICS_STATUSES - 1) {
            if (m->requests[route][i].status == 0) m->requests[route][i].status = status;
            m->requests[route][i].count++;
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
}

void sp_metrics_count_generation(sp_metrics *m, const spindle_request_stats *s,
                                 int n_generated) {
    pthread_mutex_lock(&m->lock);
    m->generations++;
    m->prompt_tokens += (uint64_t)(s->prompt_tokens > 0 ? s->prompt_tokens : 0);
    m->cached_tokens += (uint64_t)(s->cached_tokens > 0 ? s->cached_tokens : 0);
    m->generated_tokens += (uint64_t)(n_generated > 0 ? n_generated : 0);
    m->prefill_seconds += s->prefill_seconds;
    m->decode_seconds += s->decode_seconds;
    m->spec_drafted += (uint64_t)s->spec.drafted;
    m->spec_accepted += (uint64_t)s->spec.accepted;
    if (n_generated > 0) {
        m->ttft_count++;
        m->ttft_sum += s->ttft_seconds;
        for (int i = 0; i < SP_METRICS_TTFT_BUCKETS; i++)
            if (s->ttft_seconds <= ttft_bounds[i]) m->ttft_buckets[i]++;
    }
    pthread_mutex_unlock(&m->lock);
}

static void family(sp_strbuf *out, const char *name, const char *type, const char *help) {
    sp_strbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_requests(const sp_metrics *m, sp_strbuf *out) {
    family(out, "spindle_requests_total", "counter",
           "HTTP requests answered, by route and status code.");
    for (int r = 0; r < SP_ROUTE_COUNT; r++)
        for (int i = 0; i < SP_METRICS_STATUSES && m->requests[r][i].status; i++)
            sp_strbuf_printf(out, "spindle_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                             route_names[r], m->requests[r][i].status,
                             (unsigned long long)m->requests[r][i].count);
}

void sp_metrics_render_requests(sp_metrics *m, sp_strbuf *out) {
    pthread_mutex_lock(&m->lock);
    render_requests(m, out);
    pthread_mutex_unlock(&m->lock);
}

static void render_ttft(const sp_metrics *m, sp_strbuf *out) {
    const char *h = "spindle_time_to_first_token_seconds";
    family(out, h, "histogram", "Time from a request's arrival to its first generated token.");
    for (int i = 0; i < SP_METRICS_TTFT_BUCKETS; i++)
        sp_strbuf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", h, ttft_bounds[i],
                         (unsigned long long)m->ttft_buckets[i]);
    sp_strbuf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", h,
                     (unsigned long long)m->ttft_count, h, m->ttft_sum, h,
                     (unsigned long long)m->ttft_count);
}

static void scalar(sp_strbuf *out, const char *name, const char *type, const char *help,
                   double value) {
    family(out, name, type, help);
    sp_strbuf_printf(out, "%s %.17g\n", name, value);
}

/* The Gateway API Inference Extension's series under vLLM's names. */
static void render_queue_aliases(sp_strbuf *out, int queued, int running) {
    scalar(out, "vllm:num_requests_waiting", "gauge",
           "Alias of spindle_requests_waiting (Gateway API Inference Extension).", queued);
    scalar(out, "vllm:num_requests_running", "gauge",
           "Alias of spindle_requests_running (Gateway API Inference Extension).", running);
}

static void render_kv_aliases(sp_strbuf *out, const spindle_kv_pool_info *kv) {
    const double usage = kv->blocks > 0 ? (double)kv->used / kv->blocks : 0;
    scalar(out, "vllm:kv_cache_usage_perc", "gauge",
           "Alias of spindle_kv_cache_usage_ratio (0-1).", usage);
    scalar(out, "vllm:gpu_cache_usage_perc", "gauge",
           "Alias of spindle_kv_cache_usage_ratio (0-1; the Gateway API "
           "Inference Extension's default name).", usage);
    family(out, "vllm:cache_config_info", "gauge",
           "The KV cache's configuration (value 1): positions per block and "
           "blocks in the pool.");
    sp_strbuf_printf(out, "vllm:cache_config_info{block_size=\"%d\","
                          "num_gpu_blocks=\"%d\"} 1\n",
                     kv->block_tokens, kv->blocks);
}

void sp_metrics_render_kv(const spindle_kv_pool_info *kv, sp_strbuf *out) {
    const double usage = kv->blocks > 0 ? (double)kv->used / kv->blocks : 0;
    scalar(out, "spindle_kv_cache_usage_ratio", "gauge",
           "Share of the KV pool's blocks held by sequences (0-1; cached "
           "prefix blocks count as free).", usage);
    render_kv_aliases(out, kv);
    family(out, "spindle_kv_blocks", "gauge",
           "The KV pool's blocks: held by sequences, cached (unreferenced "
           "prefix blocks, reused or evicted LRU) and free.");
    sp_strbuf_printf(out, "spindle_kv_blocks{state=\"used\"} %d\n"
                          "spindle_kv_blocks{state=\"cached\"} %d\n"
                          "spindle_kv_blocks{state=\"free\"} %d\n",
                     kv->used, kv->cached, kv->free);
    scalar(out, "spindle_kv_prefix_blocks", "gauge",
           "Blocks published in the prefix index (cached, or used and "
           "reusable): the blocks KV events announce.", kv->indexed);
    if (!kv->disk_budget_bytes) return;
    scalar(out, "spindle_prompt_cache_disk_bytes", "gauge",
           "Bytes of the on-disk prompt cache's files (KV blocks, and for "
           "hybrid and sliding-window models boundary states).",
           (double)kv->disk_bytes);
    scalar(out, "spindle_prompt_cache_disk_budget_bytes", "gauge",
           "The on-disk prompt cache's budget.", (double)kv->disk_budget_bytes);
    scalar(out, "spindle_prompt_cache_disk_files", "gauge",
           "Files in the on-disk prompt cache (blocks and boundary states).",
           kv->disk_files);
    family(out, "spindle_prompt_cache_disk_blocks_total", "counter",
           "On-disk prompt cache files (blocks, and a boundary state counts "
           "as one) since the start: loaded back, written, refused (a failed "
           "check), evicted under the budget, dropped (offered while the "
           "writer was too far behind).");
    const struct { const char *event; long long n; } ev[] = {
        {"loaded", kv->disk_loaded},   {"written", kv->disk_written},
        {"refused", kv->disk_refused}, {"evicted", kv->disk_evicted},
        {"dropped", kv->disk_dropped}};
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++)
        sp_strbuf_printf(out, "spindle_prompt_cache_disk_blocks_total{event=\"%s\"} %lld\n",
                         ev[i].event, ev[i].n);
}

void sp_metrics_render_vision(const spindle_vision_stats *v, sp_strbuf *out) {
    scalar(out, "spindle_image_encodes_total", "counter",
           "Images run through the vision encoder.", (double)v->encodes);
    scalar(out, "spindle_image_cache_hits_total", "counter",
           "Images whose rows came from the encoded-image cache instead of the "
           "encoder.", (double)v->cache_hits);
    scalar(out, "spindle_image_cache_evictions_total", "counter",
           "Images dropped from the encoded-image cache for its budget.",
           (double)v->cache_evictions);
    scalar(out, "spindle_image_cache_bytes", "gauge",
           "Bytes of image rows the encoded-image cache holds.", (double)v->cache_bytes);
}

void sp_metrics_render(sp_metrics *m, int queued, int running, sp_strbuf *out) {
    pthread_mutex_lock(&m->lock);
    render_requests(m, out);
    scalar(out, "spindle_prompt_tokens_total", "counter",
           "Prompt tokens of finished generations (cached ones included).",
           (double)m->prompt_tokens);
    scalar(out, "spindle_prompt_cached_tokens_total", "counter",
           "Prompt tokens whose KV blocks came from the prefix cache (memory "
           "or disk) instead of being computed.", (double)m->cached_tokens);
    scalar(out, "spindle_generation_tokens_total", "counter", "Tokens generated.",
           (double)m->generated_tokens);
    scalar(out, "spindle_generations_total", "counter", "Generation requests finished.",
           (double)m->generations);
    scalar(out, "spindle_prefill_seconds_total", "counter",
           "Seconds spent prefilling prompts, summed over requests "
           "(prompt tokens / this: prefill throughput).", m->prefill_seconds);
    scalar(out, "spindle_decode_seconds_total", "counter",
           "Seconds spent decoding, summed over requests.", m->decode_seconds);
    scalar(out, "spindle_spec_draft_tokens_total", "counter",
           "Draft tokens verified by speculative decoding.", (double)m->spec_drafted);
    scalar(out, "spindle_spec_accepted_tokens_total", "counter",
           "Draft tokens accepted (acceptance rate: this / the drafted).",
           (double)m->spec_accepted);
    render_ttft(m, out);
    pthread_mutex_unlock(&m->lock);
    scalar(out, "spindle_requests_waiting", "gauge",
           "Generation requests queued, not yet running.", queued);
    scalar(out, "spindle_requests_running", "gauge", "Sequences running in the engine.",
           running);
    render_queue_aliases(out, queued, running);
}

void sp_metrics_render_gaie(int queued, int running, const spindle_kv_pool_info *kv,
                            sp_strbuf *out) {
    render_queue_aliases(out, queued, running);
    if (kv) render_kv_aliases(out, kv);
}

/* The sample lines of `text` from `at` up to the next "# HELP", each with
 * model_name="label" as its first label (label NULL: as they are). */
static void copy_samples(const char *at, const char *label, sp_strbuf *out) {
    while (*at && strncmp(at, "# HELP ", 7)) {
        const char *eol = strchr(at, '\n');
        size_t n = eol ? (size_t)(eol - at) + 1 : strlen(at);
        if (*at == '#' || !label) {
            sp_strbuf_add(out, at, n);
            at += n;
            continue;
        }
        size_t name = strcspn(at, "{ ");
        sp_strbuf_add(out, at, name);
        sp_strbuf_add(out, "{model_name=\"", 13);
        for (const char *p = label; *p; p++)   /* Prometheus' label escapes */
            if (*p == '"' || *p == '\\') sp_strbuf_printf(out, "\\%c", *p);
            else if (*p == '\n') sp_strbuf_add(out, "\\n", 2);
            else sp_strbuf_add(out, p, 1);
        const bool more = at[name] == '{';   /* the line's own labels follow */
        sp_strbuf_add(out, more ? "\"," : "\"}", 2);
        const size_t rest = name + (more ? 1 : 0);
        sp_strbuf_add(out, at + rest, n - rest);
        at += n;
    }
}

/* Where the family `name` starts in `text` ("# HELP name "), or NULL. */
static const char *find_family(const char *text, const char *name, size_t len) {
    for (const char *at = strstr(text, "# HELP "); at; at = strstr(at + 7, "# HELP "))
        if (!strncmp(at + 7, name, len) && at[7 + len] == ' ') return at;
    return NULL;
}

void sp_metrics_merge(const char *const *texts, const char *const *labels, int n,
                      const char *skip_prefix, sp_strbuf *out) {
    for (int i = 0; i < n; i++)
        for (const char *at = strstr(texts[i], "# HELP "); at; at = strstr(at + 7, "# HELP ")) {
            const char *name = at + 7;
            size_t len = strcspn(name, " \n");
            if (skip_prefix && !strncmp(name, skip_prefix, strlen(skip_prefix))) continue;
            bool seen = false;   /* written with an earlier text's */
            for (int k = 0; k < i && !seen; k++) seen = find_family(texts[k], name, len);
            if (seen) continue;
            /* the header: the HELP and TYPE lines */
            const char *body = strchr(at, '\n');
            body = body ? strchr(body + 1, '\n') : NULL;
            if (!body) break;
            sp_strbuf_add(out, at, (size_t)(body + 1 - at));
            for (int k = i; k < n; k++) {
                const char *f = find_family(texts[k], name, len);
                const char *first = f ? strchr(f, '\n') : NULL;
                first = first ? strchr(first + 1, '\n') : NULL;
                if (first) copy_samples(first + 1, labels[k], out);
            }
        }
}
