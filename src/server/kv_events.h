/* `spindle serve --kv-events ENDPOINT`: the prefix index's changes
 * published as vLLM publishes its KV-cache events, for llm-d's KV indexer
 * and other routers that place a request on the replica holding its
 * prompt's blocks. ZeroMQ multipart messages [topic, 8-byte big-endian
 * sequence number, msgpack EventBatch] on a publishing socket; the batch is
 * vLLM's array form [ts, [event, ...], data_parallel_rank] with the events
 * ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
 * lora_id, medium, lora_name], ["BlockRemoved", block_hashes, medium] and
 * ["AllBlocksCleared"].
 *
 * The engine never waits on the socket: the library's hook
 * (spindle_kv_event_fn) only copies an event into a bounded queue, and a
 * publisher thread encodes and sends what it holds. Nothing is sent before
 * the first subscriber joins, so an indexer that connects after start still
 * gets the stream from sequence 0 (its AllBlocksCleared: a new process
 * holds no block); when the queue is full an event is dropped and counted.
 * Thread-safety: the hook and the counters from any thread; start and stop
 * from one. */
#ifndef SP_SERVER_KV_EVENTS_H
#define SP_SERVER_KV_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "spindle.h"

typedef struct sp_kv_events sp_kv_events;

/* Bind `endpoint` when it names a wildcard address (a '*' host, or
 * "::"), an ipc:// or an inproc:// one, else connect to it (vLLM's rule:
 * a replica binds a stable address, or connects to a central indexer's),
 * and start the publisher thread. NULL with a one-line reason in `why`. */
sp_kv_events *sp_kv_events_start(const char *endpoint, const char *topic,
                                 char *why, size_t why_len);
/* The spindle_kv_event_fn to load the model with (user: the publisher). */
void sp_kv_events_hook(const spindle_kv_event *event, void *user);
/* Send what is queued (when a subscriber is there, for at most a second),
 * then close the socket and free. NULL: nothing. */
void sp_kv_events_stop(sp_kv_events *e);
/* The events' series for GET /metrics: sent, dropped, and an info metric
 * with the endpoint, topic and the chain's root (`hash_root`). */
void sp_kv_events_render_metrics(sp_kv_events *e, uint64_t hash_root,
                                 sp_strbuf *out);

#endif
