"""The server soak of tests/server/test_soak.py, longer: `spindle serve` on
the tests' tiny Qwen3 (tests/server/make_server_model.py) with CLIENTS
streaming clients for SECONDS, a share hanging up mid-answer; prints the
tally and the RSS trace every 10 s and fails (exit 1) on any 5xx, broken
or wrong answer, anything left running, or RSS growth over --rss-slack-mb
after the warm-up.

  .venv/bin/python bench/server_soak.py [--seconds 600] [--clients 16]
      [--parallel 8] [--spindle build/spindle]
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--hangup-share", type=float, default=0.3)
    ap.add_argument("--rss-slack-mb", type=float, default=24)
    ap.add_argument("--spindle", default=os.path.join(HERE, "..", "build", "spindle"))
    a = ap.parse_args()
    os.environ["SPINDLE_BIN"] = os.path.abspath(a.spindle)
    import server_common as sc   # reads SPINDLE_BIN at import
    from soak_load import rss_kb, run_soak
    model = sc.model_dir()
    ref = sc.load_reference(model)
    s = sc.Server(model, "--alias", sc.ALIAS, "--parallel", a.parallel,
                  "--queue", 4 * a.clients)
    failed = []
    try:
        def progress(t, now):
            print(f"{now:6.0f} s  completed {t.completed}  hung up {t.hung_up}  "
                  f"greedy checked {t.greedy_checked}  failures {len(t.failures())}  "
                  f"RSS {rss_kb(s.proc.pid) // 1024} MiB  load {os.getloadavg()[0]:.1f}",
                  flush=True)
        tally, samples, warm = run_soak(s.port, s.proc.pid, ref, sc.ALIAS,
                                        clients=a.clients, seconds=a.seconds,
                                        hangup_share=a.hangup_share, progress=progress)
        failed += tally.failures()
        deadline = time.monotonic() + 60
        metrics = ""
        while time.monotonic() < deadline:
            metrics = sc.request(s.port, "GET", "/metrics")[2].decode()
            if "\nspindle_requests_running 0\n" in metrics and \
                    "\nspindle_requests_waiting 0\n" in metrics:
                break
            time.sleep(0.2)
        else:
            failed.append("requests still running or waiting after the load")
        fives = [l for l in metrics.splitlines()
                 if l.startswith("spindle_requests_total{") and 'status="5' in l
                 and 'route="/health"' not in l]
        failed += fives
        growth = (rss_kb(s.proc.pid) - warm) / 1024
        print(f"done: {tally.completed} completed, {tally.hung_up} hung up, {tally.cut} cut "
              f"at the end, {tally.greedy_checked} greedy answers checked, "
              f"{tally.tokens} tokens; RSS after warm-up {warm // 1024} MiB, "
              f"growth {growth:.1f} MiB")
        if growth >= a.rss_slack_mb:
            failed.append(f"RSS grew {growth:.1f} MiB")
    finally:
        rc = s.stop()
    if rc != 0:
        failed.append(f"server exit status {rc}")
    for f in failed[:20]:
        print("FAIL:", f)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
