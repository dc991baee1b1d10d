"""Raw Jupyter kernel round trip, measured from inside the sandbox.

Usage: python3 rawkernel.py CONNECTION_FILE COUNT CODE

Connects straight to a running kernel's shell and iopub sockets (ZeroMQ, Jupyter
messaging protocol v5.3, signed with the connection file's key) and runs CODE
COUNT times. One round trip = send execute_request until both its execute_reply
(shell) and its status "idle" (iopub) have arrived, which is the same completion
rule the Cubby agent uses. Prints one JSON object:
{"ms": [round trip per run in ms], "results": [text/plain of each execute_result]}.
The bench uses it as the floor that runCode through the full stack is compared to.
"""

import json
import sys
import time

import zmq
from jupyter_client.session import Session


def endpoint(cf, port):
    if cf.get("transport", "tcp") == "ipc":
        return "ipc://%s-%d" % (cf["ip"], port)
    return "tcp://%s:%d" % (cf["ip"], port)


def wait_for(sess, shell, iopub, msg_id, timeout_s):
    """Waits for the shell reply and the iopub idle status of msg_id."""
    poller = zmq.Poller()
    poller.register(shell, zmq.POLLIN)
    poller.register(iopub, zmq.POLLIN)
    replied, idle, result = False, False, None
    deadline = time.monotonic() + timeout_s
    while not (replied and idle):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no reply to %s within %ss" % (msg_id, timeout_s))
        for sock, _ in poller.poll(left * 1000):
            _, msg = sess.recv(sock, mode=zmq.NOBLOCK)
            if msg is None or msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if sock is shell:
                replied = True
                if msg["content"].get("status") != "ok":
                    raise RuntimeError("execute failed: %s" % msg["content"])
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
            elif kind == "execute_result":
                result = msg["content"]["data"].get("text/plain")
    return result


def main():
    path, count, code = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(path) as f:
        cf = json.load(f)
    sess = Session(key=cf["key"].encode(), signature_scheme=cf["signature_scheme"])
    ctx = zmq.Context()
    shell = ctx.socket(zmq.DEALER)
    shell.connect(endpoint(cf, cf["shell_port"]))
    iopub = ctx.socket(zmq.SUB)
    iopub.setsockopt(zmq.SUBSCRIBE, b"")
    iopub.connect(endpoint(cf, cf["iopub_port"]))
    # PUB/SUB drops messages until the subscription has propagated: repeat a
    # kernel_info_request until its busy/idle status is seen on iopub.
    for attempt in range(100):
        msg = sess.send(shell, "kernel_info_request", {})
        try:
            wait_for(sess, shell, iopub, msg["header"]["msg_id"], 0.2)
            break
        except TimeoutError:
            continue
    else:
        raise SystemExit("iopub never delivered the kernel's status")
    ms, results = [], []
    content = {"code": code, "silent": False, "store_history": True,
               "user_expressions": {}, "allow_stdin": False, "stop_on_error": False}
    for _ in range(count):
        t0 = time.perf_counter()
        msg = sess.send(shell, "execute_request", content)
        results.append(wait_for(sess, shell, iopub, msg["header"]["msg_id"], 60))
        ms.append((time.perf_counter() - t0) * 1000)
    print(json.dumps({"ms": ms, "results": results}))
    shell.close(0)
    iopub.close(0)
    ctx.term()


if __name__ == "__main__":
    main()
