# SPDX-License-Identifier: Apache-2.0
"""Real servers on 127.0.0.1 for the remote-model tests: Debian's nginx
(HTTP with Range, a redirect, a location that ignores Range, the Hub's
/{repo}/resolve/{revision}/{path} layout) and moto's S3 server. Each runs
in its own temporary folder and is stopped by the fixture that started it,
also when the test fails."""
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
MOTO_PYTHON = pathlib.Path("/root/.pyenv/versions/3.11.7/bin/python")
HUB_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, up=True, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                if up:
                    return
        except OSError:
            if not up:
                return
        time.sleep(0.05)
    raise TimeoutError(f"port {port} never became {'ready' if up else 'free'}")


def end_process(process):
    """Terminates a server (killed if it will not go within 10 s) and reaps it."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Nginx:
    """nginx serving `root` at http://127.0.0.1:PORT/, logging every request's
    URI, status, Range and bytes sent to access.log."""

    def __init__(self, folder, root):
        self.folder = pathlib.Path(folder)
        self.root = pathlib.Path(root)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.folder / "access.log"
        self.conf = self.folder / "nginx.conf"
        self.process = None
        (self.folder / "logs").mkdir(parents=True, exist_ok=True)
        self.conf.write_text(f"""
daemon off;
master_process off;
worker_processes 1;
error_log {self.folder}/error.log warn;
pid {self.folder}/nginx.pid;
events {{ worker_connections 256; }}
http {{
  log_format sent '$request_uri $status $bytes_sent "$http_range" $msec $request_time $connection';
  access_log {self.log} sent;
  client_body_temp_path {self.folder}/body;
  proxy_temp_path {self.folder}/proxy;
  fastcgi_temp_path {self.folder}/fastcgi;
  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{self.port};
    root {self.root};
    location ~ ^/redirect/(.*)$ {{ return 302 {self.url}/$1; }}
    location /norange/ {{ alias {self.root}/; max_ranges 0; }}
    location /forbidden/ {{ return 403; }}
    location /slow/ {{ alias {self.root}/; limit_rate 100; }}
    # Each connection capped, as object stores and hubs cap theirs.
    location /rated/ {{ alias {self.root}/; limit_rate 4m; }}
    location /capped/ {{ alias {self.root}/; limit_rate 20m; }}
    # A model's header comes at once, a tensor's bytes at 256 KiB a second.
    location /slowdata/ {{ alias {self.root}/; limit_rate_after 300k; limit_rate 256k; }}
    # The Hub: /OWNER/REPO/resolve/REVISION/PATH answers with its commit and
    # a redirect to where the file is stored.
    location ~ ^/hub-owner/([^/]+)/resolve/([^/]+)/(.*)$ {{
      add_header X-Repo-Commit {HUB_COMMIT} always;
      return 302 {self.url}/hubstore/$1/$3;
    }}
  }}
}}
""")
        self.start()

    def start(self):
        self.process = subprocess.Popen([NGINX, "-p", str(self.folder), "-c", str(self.conf)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_for_port(self.port)
        except TimeoutError:
            self.stop()
            raise RuntimeError("nginx did not start: " + (self.folder / "error.log").read_text()
                               if (self.folder / "error.log").exists() else "nginx did not start")

    def stop(self):
        end_process(self.process)
        self.process = None

    def requests(self):
        """[(uri, status, bytes sent, range)] logged so far."""
        return [r[:4] for r in self.timed_requests()]

    def timed_requests(self):
        """[(uri, status, bytes sent, range, start, end, connection)] logged
        so far; start and end in seconds, as nginx timed the request."""
        out = []
        if not self.log.exists():
            return out
        for line in self.log.read_text().splitlines():
            m = re.match(r'(\S+) (\d+) (\d+) "(.*)" ([\d.]+) ([\d.]+) (\d+)$', line)
            if m:
                end, took = float(m.group(5)), float(m.group(6))
                out.append((m.group(1), int(m.group(2)), int(m.group(3)), m.group(4), end - took, end,
                            int(m.group(7))))
        return out

    def bytes_sent(self, prefix=""):
        return sum(sent for uri, _, sent, _ in self.requests() if uri.startswith(prefix))

    def clear_log(self):
        # nginx keeps the file open: emptied in place.
        if self.log.exists():
            with open(self.log, "r+") as f:
                f.truncate(0)


def most_at_once(intervals):
    """The most of the (start, end) intervals that overlap at one moment."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals],
                   key=lambda x: (x[0], x[1]))
    now = best = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


PROXY = pathlib.Path(__file__).resolve().parent / "latency_proxy.py"


class LatencyProxy:
    """A TCP proxy on 127.0.0.1 in front of `upstream_port` that holds each
    HTTP request `delay_ms` before passing it on (a round trip to a distant
    store). It logs each request's hold as "START END FIRST-LINE" to
    `folder`/proxy.log: requests held at once were in flight at once."""

    def __init__(self, folder, upstream_port, delay_ms):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = pathlib.Path(folder) / "proxy.log"
        pathlib.Path(folder).mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, str(PROXY), str(self.port), str(upstream_port), str(delay_ms), str(self.log)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(self.port)
        except TimeoutError:
            self.stop()
            raise

    def held(self, contains=""):
        """[(start, end, request line)] of the requests held so far."""
        out = []
        if self.log.exists():
            for line in self.log.read_text().splitlines():
                start, end, request = line.split(" ", 2)
                if contains in request:
                    out.append((float(start), float(end), request))
        return out

    def stop(self):
        end_process(self.process)
        self.process = None


class Moto:
    """moto's S3 server on 127.0.0.1 (the machine's Python 3.11). With
    INITIAL_NO_AUTH_ACTION_COUNT finite, moto checks every request's SigV4
    signature against the IAM access keys it made: the first three requests
    (making a user, its key and its policy) go unchecked, every later one is."""

    def __init__(self, folder):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3")
        self.process = subprocess.Popen(
            [str(MOTO_PYTHON), "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=open(pathlib.Path(folder) / "moto.log", "w"), stderr=subprocess.STDOUT, env=env)
        try:
            wait_for_port(self.port, timeout=60)
        except TimeoutError:
            self.stop()
            raise

    def stop(self):
        end_process(self.process)
