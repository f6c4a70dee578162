# SPDX-License-Identifier: Apache-2.0
"""A TCP proxy on 127.0.0.1 that holds every HTTP request DELAY_MS before
passing it to the upstream port, for the remote tests and bench/: what a
distant object store's round trip does to a client.

    latency_proxy.py PORT UPSTREAM_PORT DELAY_MS LOG

Requests are GETs without bodies (what modelfs, curl and aria2c send): a
request ends at its blank line. Each connection gets one upstream
connection; responses are copied back as they come. LOG gets a line per
request, "START END REQUEST-LINE", the time it was held. Loopback only;
ends on SIGTERM."""
import socket
import sys
import threading
import time

PORT, UPSTREAM, DELAY = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) / 1000
LOG = open(sys.argv[4], "a", buffering=1)
LOG_LOCK = threading.Lock()
MAX_HEAD = 64 << 10


def close(*socks):
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


def requests_in(client, upstream):
    pending = b""
    try:
        while True:
            data = client.recv(65536)
            if not data:
                break
            pending += data
            while b"\r\n\r\n" in pending:
                head, pending = pending.split(b"\r\n\r\n", 1)
                start = time.time()
                time.sleep(DELAY)
                end = time.time()
                line = head.split(b"\r\n", 1)[0].decode("latin-1")
                with LOG_LOCK:
                    LOG.write(f"{start:.6f} {end:.6f} {line}\n")
                upstream.sendall(head + b"\r\n\r\n")
            if len(pending) > MAX_HEAD:
                break
    except OSError:
        pass
    close(client, upstream)


def responses_out(upstream, client):
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    try:
        while True:
            n = upstream.recv_into(buffer)
            if n == 0:
                break
            client.sendall(view[:n])
    except OSError:
        pass
    close(client, upstream)


def main():
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", PORT))
    listener.listen(256)
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection(("127.0.0.1", UPSTREAM))
        except OSError:
            client.close()
            continue
        for target, args in ((requests_in, (client, upstream)), (responses_out, (upstream, client))):
            threading.Thread(target=target, args=args, daemon=True).start()


if __name__ == "__main__":
    main()
