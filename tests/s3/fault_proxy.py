#!/usr/bin/env python3
"""HTTP fault proxy for the S3 tests: forwards each request to --upstream and
injects faults by rule. A rule is "METHOD PATH_REGEX NTH ACTION":
METHOD (or *) and a regex searched in the request path+query select
requests; NTH (1-based, or *) says which of the matching requests the rule
hits; ACTION is one of
  status:CODE    answer CODE (e.g. 503, 500) with an S3 error body, not forwarded
  reset_mid      read half of the request body, then reset the connection (RST)
  delay_ms:N     wait N ms before forwarding (a slow answer)
  drop_response  forward, then reset instead of answering (the server did it)
Each connection serves one request (Connection: close). Threaded; stdlib only.
"""
import argparse
import re
import socket
import struct
import threading
import time

lock = threading.Lock()


class Rule:
    def __init__(self, text):
        self.method, path, nth, self.action = text.split(" ", 3)
        self.path = re.compile(path)
        self.nth = None if nth == "*" else int(nth)
        self.seen = 0

    def hit(self, method, path):
        if self.method not in ("*", method) or not self.path.search(path):
            return False
        with lock:
            self.seen += 1
            return self.nth is None or self.seen == self.nth


def read_head(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    return head.decode("latin-1"), rest


def content_length(head):
    m = re.search(r"(?im)^content-length:\s*(\d+)", head)
    return int(m.group(1)) if m else 0


def recv_exact(conn, rest, n):
    while len(rest) < n:
        chunk = conn.recv(min(1 << 20, n - len(rest)))
        if not chunk:
            break
        rest += chunk
    return rest


def reset(conn):
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def forward(upstream, head, body):
    host, port = upstream
    up = socket.create_connection((host, port), timeout=60)
    lines = head.split("\r\n")
    lines = [l for l in lines if not l.lower().startswith("connection:")] + ["Connection: close"]
    up.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    out = b""
    while True:
        chunk = up.recv(1 << 20)
        if not chunk:
            break
        out += chunk
    up.close()
    return out


def serve(conn, upstream, rules):
    try:
        head, rest = read_head(conn)
        if head is None:
            conn.close()
            return
        method, path = head.split(" ", 2)[:2]
        n = content_length(head)
        if re.search(r"(?im)^expect:\s*100-continue", head):
            # Answer the client's Expect ourselves; the upstream gets the body at once.
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            head = "\r\n".join(l for l in head.split("\r\n") if not l.lower().startswith("expect:"))
        # Every rule counts every request it matches; the first that fires acts.
        fired = [r.action for r in rules if r.hit(method, path)]
        action = fired[0] if fired else None
        if action == "reset_mid":
            recv_exact(conn, rest, n // 2)
            reset(conn)
            return
        body = recv_exact(conn, rest, n)
        if action and action.startswith("status:"):
            code = int(action.split(":")[1])
            xml = b"<Error><Code>InjectedFault</Code><Message>fault_proxy</Message></Error>"
            conn.sendall(b"HTTP/1.1 %d Injected\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (code, len(xml)) + xml)
            conn.close()
            return
        if action and action.startswith("delay_ms:"):
            time.sleep(int(action.split(":")[1]) / 1000.0)
        answer = forward(upstream, head, body)
        if action == "drop_response":
            reset(conn)
            return
        conn.sendall(answer)
        conn.close()
    except OSError:
        conn.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True, help="http://host:port")
    ap.add_argument("--rule", action="append", default=[])
    a = ap.parse_args()
    m = re.match(r"http://([^:/]+):(\d+)", a.upstream)
    upstream = (m.group(1), int(m.group(2)))
    rules = [Rule(r) for r in a.rule]
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", a.port))
    srv.listen(64)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, upstream, rules), daemon=True).start()


if __name__ == "__main__":
    main()
