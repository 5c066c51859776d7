"""Spindle replicas behind vLLM's router: a prefix-aware policy against
round robin on the same multi-tenant, multi-turn chat workload, side by
side in one run.

For each policy, fresh replicas (`spindle serve`, cold prefix caches) and
a fresh router start, every conversation runs in its own thread through
the openai SDK pointed at the router (streamed, greedy), and then:

  hit rate   prompt tokens whose KV blocks came from a replica's prefix
             index / all prompt tokens (spindle_prompt_cached_tokens_total
             over spindle_prompt_tokens_total, summed over the replicas'
             /metrics)
  TTFT       p50 / p99 of the time to the first streamed token, as the
             client sees it (through the router)
  tok/s      completion tokens of all requests / the workload's wall time

  .venv/bin/python bench/router_compare.py [--model DIR] [--replicas 3]
      [--threads 1] [--tenants 12] [--conversations 2] [--turns 4]
      [--sentences 40] [--max-tokens 32] [--policies cache_aware,round_robin]
      [--replica-args "--ctx 2048"]

The model defaults to the server tests' tiny Qwen3 (tests/.work/server,
built by the test suite). Not part of the test suite."""

import argparse
import concurrent.futures
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "server"))

from router_cluster import (Router, chat_turn, free_port, prompt_cache_counts,  # noqa: E402
                            start_replica, workload)
from server_common import model_dir  # noqa: E402

ALIAS = "bench"


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def run_policy(args, model, policy, logdir):
    replicas, router = [], None
    try:
        for _ in range(args.replicas):
            replicas.append(start_replica(model, free_port(), ALIAS, *args.replica_args.split(),
                                          threads=args.threads))
        router = Router([r.base_url for r in replicas], policy,
                        Path(logdir) / f"router-{policy}.log", "--log-level", "warning")
        import openai
        convs = workload(args.tenants, args.conversations, args.turns, args.sentences)
        with openai.OpenAI(base_url=router.base_url + "/v1", api_key="unused", timeout=600,
                           max_retries=0) as client:
            def converse(conv):
                return [chat_turn(client, ALIAS, conv, t, args.max_tokens, stream=True)
                        for t in range(args.turns)]
            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(len(convs)) as pool:
                turns = [t for f in [pool.submit(converse, c) for c in convs]
                         for t in f.result(timeout=3600)]
            wall = time.monotonic() - t0
        counts = [prompt_cache_counts(r.port) for r in replicas]
        prompt = sum(c[0] for c in counts)
        cached = sum(c[1] for c in counts)
        ttfts = [t[1] for t in turns if t[1] is not None]
        return {"policy": policy, "requests": len(turns), "prompt_tokens": int(prompt),
                "hit_rate": cached / prompt if prompt else 0.0,
                "per_replica": [int(c[0]) for c in counts],
                "ttft_p50": percentile(ttfts, 0.5), "ttft_p99": percentile(ttfts, 0.99),
                "tok_s": sum(t[2] for t in turns) / wall, "wall": wall}
    finally:
        if router:
            router.stop()
        for r in replicas:
            r.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="default: the server tests' tiny Qwen3")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="per replica")
    ap.add_argument("--tenants", type=int, default=12)
    ap.add_argument("--conversations", type=int, default=2, help="per tenant")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--sentences", type=int, default=40,
                    help="of each tenant's system prompt (~20 tokens each)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--policies", default="cache_aware,round_robin")
    ap.add_argument("--replica-args", default="--ctx 2048",
                    help="more `spindle serve` flags; the default pool (--parallel 4 x --ctx "
                         "2048 tokens) holds fewer tenants' prompts than the workload has, "
                         "as a replica's memory does in production")
    args = ap.parse_args()
    model = Path(args.model) if args.model else model_dir()
    print(f"model {model}; {args.replicas} replicas x {args.threads} thread(s) "
          f"({args.replica_args}); "
          f"{args.tenants} tenants x {args.conversations} conversations x {args.turns} turns; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="router-bench-") as logdir:
        for policy in args.policies.split(","):
            rows.append(run_policy(args, model, policy, logdir))
            r = rows[-1]
            print(f"  {policy}: done in {r['wall']:.1f} s (prompt tokens per replica "
                  f"{r['per_replica']})", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}\n")
    print("| policy | requests | prompt tokens | prefix-cache hit rate | TTFT p50 s | "
          "TTFT p99 s | aggregate tok/s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| `{r['policy']}` | {r['requests']} | {r['prompt_tokens']} | "
              f"{r['hit_rate']:.1%} | {r['ttft_p50']:.3f} | {r['ttft_p99']:.3f} | "
              f"{r['tok_s']:.1f} |")


if __name__ == "__main__":
    main()
