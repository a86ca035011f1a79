"""rlvr-report --serve: the report page served on localhost and refreshed while the run goes on.

    server = make_server(["results/run"], host="127.0.0.1", port=8765, interval_s=5, **page_options)
    server.serve_forever()

GET / is the same page as the static file (rlvr.report.render), rebuilt when a file it reads has
changed (rlvr.report_timeline.stamp) and cached otherwise; GET /stamp answers that stamp, which the
page asks for every `interval_s` seconds and reloads itself when it differs. Plain HTTP on one
port, standard library only: over ssh, `ssh -L 8765:127.0.0.1:8765 host` and open
http://127.0.0.1:8765/ here.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    server: "ReportServer"

    def do_GET(self):  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        try:
            if path == "/stamp":
                body, ctype = self.server.stamp().encode(), "text/plain; charset=utf-8"
            elif path in ("/", "/index.html"):
                body, ctype = self.server.page(), "text/html; charset=utf-8"
            else:
                self.send_error(404)
                return
        except Exception as e:  # noqa: BLE001 - a half-written run folder shows as an error, the server stays
            body, ctype = f"rlvr-report: {type(e).__name__}: {e}".encode(), "text/plain; charset=utf-8"
            self.send_response(500)
        else:
            self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):   # quiet: the terminal shows the URL, not every request
        pass


class ReportServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr, run_dirs: list[str], interval_s: float, options: dict):
        super().__init__(addr, _Handler)
        self.run_dirs = list(run_dirs)
        self.interval_s = interval_s
        self.options = options
        self.lock = threading.Lock()
        self.cached: tuple[str, bytes] | None = None

    def stamp(self) -> str:
        from rlvr.report_timeline import stamp

        return stamp(self.run_dirs)

    def page(self) -> bytes:
        from rlvr.report import page_bytes

        with self.lock:
            st = self.stamp()
            if self.cached is None or self.cached[0] != st:
                self.cached = (st, page_bytes(self.run_dirs, live={"interval_s": self.interval_s, "stamp": st},
                                              **self.options))
            return self.cached[1]

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


def make_server(run_dirs: list[str], host: str = "127.0.0.1", port: int = 8765, interval_s: float = 5.0,
                **options) -> ReportServer:
    """A server for run_dirs on host:port (port 0: a free one; see .url); options go to the page
    (labels, title, max_points, evals, steps, max_spans). The run folders are read once here, so
    a wrong folder fails before the server starts."""
    from rlvr.report import page_bytes

    page_bytes(run_dirs, **options)
    return ReportServer((host, port), run_dirs, interval_s, options)
