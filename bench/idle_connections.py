"""What an idle connection costs an engine: N connections between two
engines of this process over TCP (or the local transport), none moving
anything, and the process's resident memory before and after (both ends'
cost, so one end's is at most the figure), how long the N took to come up
(one after another), the engines' threads (which must not grow), and the
CPU the process spends over --cpu-seconds while they are idle (both ends,
in % of one core: one end's is at most the figure).

Usage (repository root, after scripts/build.sh):
  PYTHONPATH=build/python python3 bench/idle_connections.py [--transport tcp|local] [N ...]
"""

import argparse
import os
import resource
import time


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def ferry_threads():
    names = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            names.append(f.read().strip())
    return sum(1 for n in names if n.startswith("ferry"))


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(transport, n, window):
    # Admission limits sized for the run, before the engines read them.
    os.environ["FERRY_MAX_CONNECTIONS"] = str(n + 16)
    os.environ["FERRY_MAX_CONNECTIONS_PER_PEER"] = str(n + 16)
    import ferry

    opts = dict(transport=transport, listen="127.0.0.1:0", streams=2)
    target, dialer = ferry.Engine(**opts), ferry.Engine(**opts)
    held = []

    def connect():
        c = dialer.connect(target.address, timeout=10)
        a = target.accept(timeout=10)
        held.append((c, a))

    for _ in range(8):  # the first connections start the workers and warm the allocator
        connect()
    time.sleep(0.5)
    before, threads_before = rss_bytes(), ferry_threads()
    began = time.monotonic()
    for _ in range(n):
        connect()
    setup = time.monotonic() - began
    time.sleep(1.0)
    after, threads_after = rss_bytes(), ferry_threads()
    per = (after - before) / n / 1024
    cpu0, wall0 = cpu_seconds(), time.monotonic()
    time.sleep(window)
    cpu = 100 * (cpu_seconds() - cpu0) / (time.monotonic() - wall0)
    print(f"{transport:5s} {n:6d} {setup:9.2f} {(after - before) / 2**20:10.1f} {per:12.1f} "
          f"{threads_before:8d} {threads_after:8d} {cpu:10.2f}")
    for c, a in held:
        c.close()
        a.close()
    target.close()
    dialer.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--transport", default="tcp", choices=["tcp", "local"])
    p.add_argument("--cpu-seconds", type=float, default=10.0, help="how long the idle CPU is measured")
    p.add_argument("counts", nargs="*", type=int, default=[256, 1024])
    args = p.parse_args()
    print("transport  conns   setup_s   RSS+_MiB  KiB/conn(2 ends)  ferry_threads(before after)  idle_CPU_%(2 ends)")
    for n in args.counts:
        # Each count in a process of its own: memory freed by a run stays mapped.
        pid = os.fork()
        if pid == 0:
            try:
                run(args.transport, n, args.cpu_seconds)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
