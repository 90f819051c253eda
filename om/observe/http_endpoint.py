"""The HTTP endpoint of one node's metrics: ``GET /prom`` (Ozone's path; ``/metrics``
too, Prometheus' default), served by prometheus_client's threaded WSGI server.

It runs on threads of its own, so a slow scraper never delays a request; a scrape
reads counters the event loop writes, without a lock: each value is one Python
int or float, read atomically under the GIL. Any other path is 404.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

PATHS = ("/prom", "/metrics")
StartResponse = Callable[..., Any]


class _QuietHandler(WSGIRequestHandler):
    """Leaves one log line per scrape out of the node's log."""

    def log_message(self, format: str, *args: Any) -> None:
        return None


class MetricsEndpoint:
    """Serves ``registry`` on ``host:port`` until ``close``."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        metrics = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            if environ.get("PATH_INFO") in PATHS:
                result: Iterable[bytes] = metrics(environ, start_response)
                return result
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [f"not found: metrics are at {' or '.join(PATHS)}\n".encode()]

        try:
            self._server = make_server(host, port, app, ThreadingWSGIServer,
                                       handler_class=_QuietHandler)
        except OSError as error:
            raise OSError(error.errno, f"cannot serve metrics on {host}:{port}: "
                                       f"{error.strerror}") from None
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="metrics-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stops serving and releases the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
