"""nginx (Debian's, auth_request) with the shipped examples/nginx config in front of a
small Python upstream: limited requests reach the client as a real 429 with Retry-After
and RateLimit headers, and never reach the upstream; admitted ones carry RateLimit."""
import http.server
import os
import shutil
import subprocess
import tempfile
import threading

import requests

from conftest import SRC, free_port, wait_port


class Upstream(http.server.BaseHTTPRequestHandler):
    hits = []

    def do_GET(self):
        Upstream.hits.append((self.path, self.headers.get("X-Api-Key")))
        body = b"hello from upstream\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *a):
        pass


def start_nginx(sluice_port, up_port):
    d = tempfile.mkdtemp(prefix="sluice-nginx-")
    for f in ("sluice-auth.conf", "sluice-protect.conf"):
        shutil.copy(os.path.join(SRC, "examples", "nginx", f), d)
    port = free_port()
    conf = """
worker_processes 1;
error_log %(d)s/error.log warn;
pid %(d)s/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %(d)s/body;
    proxy_temp_path %(d)s/proxy;
    fastcgi_temp_path %(d)s/fastcgi;
    uwsgi_temp_path %(d)s/uwsgi;
    scgi_temp_path %(d)s/scgi;
    upstream sluice_auth { server 127.0.0.1:%(s)d; keepalive 8; }
    upstream app { server 127.0.0.1:%(u)d; }
    server {
        listen 127.0.0.1:%(p)d;
        include %(d)s/sluice-auth.conf;
        location / {
            include %(d)s/sluice-protect.conf;
            proxy_pass http://app;
        }
    }
}
""" % {"d": d, "s": sluice_port, "u": up_port, "p": port}
    path = os.path.join(d, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    proc = subprocess.Popen(["nginx", "-p", d, "-c", path, "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_port(port)
    return proc, port, d


def test_nginx_auth_request(server):
    Upstream.hits = []
    up_port = free_port()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", up_port), Upstream)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    proc, port, d = start_nginx(server.http_port, up_port)
    try:
        url = "http://127.0.0.1:%d/app/x" % port
        s = requests.Session()
        for i in range(20):
            r = s.get(url, headers={"X-Api-Key": "via-nginx"}, timeout=5)
            assert r.status_code == 200, (i, r.status_code, r.text)
            assert r.text == "hello from upstream\n"
            assert r.headers["RateLimit"] == '"api";r=%d;t=1' % (19 - i) or r.headers["RateLimit"].startswith('"api";r=%d;' % (19 - i))
            assert r.headers["RateLimit-Policy"] == '"api";q=20;w=2'
        assert len(Upstream.hits) == 20
        for _ in range(5):
            r = s.get(url, headers={"X-Api-Key": "via-nginx"}, timeout=5)
            assert r.status_code == 429
            assert r.headers["Retry-After"] == "1"
            assert r.headers["RateLimit"].startswith('"api";r=0')
            assert r.headers["RateLimit-Policy"] == '"api";q=20;w=2'
            assert r.headers["Content-Type"] == "application/problem+json"
            assert r.json()["status"] == 429
        assert len(Upstream.hits) == 20  # rejected requests never reached the upstream
        # another key is not affected; after the refill the first key gets through again
        assert s.get(url, headers={"X-Api-Key": "other"}, timeout=5).status_code == 200
        server.clock_advance(100)
        assert s.get(url, headers={"X-Api-Key": "via-nginx"}, timeout=5).status_code == 200
        assert len(Upstream.hits) == 22
    finally:
        proc.terminate()
        proc.wait(10)
        httpd.shutdown()
        shutil.rmtree(d, ignore_errors=True)
