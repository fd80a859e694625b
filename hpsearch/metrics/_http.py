"""The HTTP server of a study's metrics endpoint (:mod:`hpsearch.metrics`).

``prometheus_client``'s exposition as a WSGI app (its ``make_wsgi_app``) on the standard
library's threading WSGI server, as ``prometheus_client.start_http_server`` serves it, with one
addition: each request that Prometheus (or a scraper of its kind) makes is told to
``on_scrape`` before the figures are read. Those scrapers send the header
``X-Prometheus-Scrape-Timeout-Seconds``; ``hpsearch status`` and a browser do not. So the
endpoint knows how often it is scraped, and a study that ended can wait for the scrape that
records its end.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

#: The WSGI environ key of the header every Prometheus scrape carries.
SCRAPE_HEADER = "HTTP_X_PROMETHEUS_SCRAPE_TIMEOUT_SECONDS"


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(registry: Any, host: str, port: int, on_scrape: Callable[[], None]) -> WSGIServer:
    """Serve ``registry`` on ``host:port`` (port 0: a free one) from a daemon thread; the
    server (``server_port``, ``shutdown()``, ``server_close()``). Raises OSError when the
    address cannot be bound."""
    from prometheus_client import make_wsgi_app

    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if SCRAPE_HEADER in environ:
            on_scrape()
        return metrics_app(environ, start_response)  # type: ignore[no-any-return]

    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    server_class = type("_Server", (_Server,), {"address_family": family})
    server: WSGIServer = make_server(str(address[0]), port, app, server_class, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="hpsearch-metrics-http", daemon=True).start()
    return server
