"""A stand-in for a vLLM server's /metrics in unit tests: a real HTTP server on 127.0.0.1
whose every GET answers what ``body()`` returns at that moment."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable


def serve(body: Callable[[], bytes]) -> http.server.ThreadingHTTPServer:
    """Started in a daemon thread; the caller shuts it down."""

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            text = body()
            self.send_response(200)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
