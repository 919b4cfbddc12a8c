"""The /metrics endpoint: prometheus_client's HTTP server in a thread of the operator process."""

import logging

from prometheus_client import start_http_server

log = logging.getLogger(__name__)
DEFAULT_PORT = 9090


def serve_metrics(port: int, address: str = "0.0.0.0") -> None:
    """Serve every registered metric on http://address:port/metrics (any path answers the same)."""
    start_http_server(port, addr=address)
    log.info("metrics on http://%s:%d/metrics", address, port)
