"""The other NIXL agent of test_nixl_python.py, in its own process: the
side that holds KV blocks (a prefill worker) in a numpy array registered
with the FERRY backend. One JSON command per stdin line, one JSON answer per
stdout line:

  {"op": "hello"}                      {"md": b64, "base": addr, "bytes": n}
  {"op": "load", "md": b64}            {"agent": name}
  {"op": "fill", "seed": s}            {}
  {"op": "digest"}                     {"digest": sha256 hex of the array}
  {"op": "notifs", "count": n, "ms": t}
      {"notifs": [[agent, b64 message, digest of the array when it came]...]}
  {"op": "send_notif", "agent": a, "msg": b64}   {}
"""

import base64
import hashlib
import json
import os
import sys
import time

# Answers keep the real stdout; NIXL's own log lines (which it prints to
# stdout) go to stderr.
ANSWERS = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

import numpy as np  # noqa: E402
from nixl_cu12._api import nixl_agent, nixl_agent_config  # noqa: E402


def main():
    name, nbytes = sys.argv[1], int(sys.argv[2])
    agent = nixl_agent(name, nixl_agent_config(backends=["FERRY"]))
    array = np.zeros(nbytes, dtype=np.uint8)
    agent.register_memory([(array.ctypes.data, array.nbytes, 0, "")], "DRAM", backends=["FERRY"])

    def digest():
        return hashlib.sha256(array.tobytes()).hexdigest()

    for line in sys.stdin:
        cmd = json.loads(line)
        op, out = cmd["op"], {}
        if op == "hello":
            out = {"md": base64.b64encode(agent.get_agent_metadata()).decode(),
                   "base": array.ctypes.data, "bytes": array.nbytes}
        elif op == "load":
            out = {"agent": agent.add_remote_agent(base64.b64decode(cmd["md"])).decode()}
        elif op == "fill":
            array[:] = np.random.default_rng(cmd["seed"]).integers(0, 256, array.nbytes, dtype=np.uint8)
        elif op == "digest":
            out = {"digest": digest()}
        elif op == "notifs":
            seen, deadline = [], time.monotonic() + cmd["ms"] / 1000
            while len(seen) < cmd["count"] and time.monotonic() < deadline:
                got = agent.get_new_notifs()
                at = digest() if got else None
                for sender, messages in got.items():
                    seen += [[sender, base64.b64encode(m).decode(), at] for m in messages]
                if not got:
                    time.sleep(0.001)
            out = {"notifs": seen}
        elif op == "send_notif":
            agent.send_notif(cmd["agent"], base64.b64decode(cmd["msg"]))
        else:
            out = {"error": "unknown op " + op}
        print(json.dumps(out), file=ANSWERS, flush=True)


if __name__ == "__main__":
    main()
