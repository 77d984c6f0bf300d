"""An HTTP server on 127.0.0.1 for the tests: a folder served as it is, or a handler of the test's own."""

from __future__ import annotations

import functools
import http.server
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """A folder over HTTP, without a log line per request in the test output."""

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    """A thread per request. A client that hangs up before the answer is sent (one that refuses a
    download over its cap, or gives up at its deadline) is what the test checks on the client's
    side, so the server says nothing of it; any other error of a handler is printed as usual."""

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipeError, ConnectionResetError
            super().handle_error(request, client_address)


@contextmanager
def serve(root: Path | None = None, handler: Any = None) -> Iterator[str]:
    """Serve ``root`` (with ``handler``, default :class:`QuietHandler`) or run ``handler`` alone;
    yields the base URL, ending in ``/``. The server stops when the block ends."""
    if root is not None:
        handler = functools.partial(handler or QuietHandler, directory=str(root))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
