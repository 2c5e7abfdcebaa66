"""A fake Prometheus whose answers depend on the query (its range: the window's, the month to
date's, a day's), to mark some readings' answers partial or empty: for the tests of what each
reading of ``allsmi export`` and ``allsmi report`` says."""

from __future__ import annotations

import contextlib
import http.server
import json
import urllib.parse
from typing import Any, Callable, Iterator

from ..conftest import loopback_server

#: The window (SINCE to UNTIL, an hour of 2026-03-02) and its month to date (from 2026-03-01).
WINDOW_RANGE, MONTH_RANGE = "[3600s]", "[90000s]"
WARNING = "partial response: store 10.0.0.7:10901 unavailable"
NODE = {"uuid": "GPU-a", "instance": "node-a:9494", "resource_group": "training",
        "vendor": "nvidia", "model": "H100"}
#: A budget the month to date overruns (2 EUR an hour): a budget note besides.
CONFIG = """\
[groups.training]
price_per_device_hour = 2.0
currency = "EUR"
budget_per_month = 10
"""


class PartialServer(http.server.BaseHTTPRequestHandler):
    """Answers every query with one device of node-a, held all the time; ``partial_in``: the
    substrings of a query (decoded) whose answer is marked partial (``WARNING``); ``empty``:
    a predicate on the query for an empty answer."""

    protocol_version = "HTTP/1.1"
    partial_in: tuple[str, ...] = ()
    empty: Callable[[str], bool] = staticmethod(lambda query: False)

    def do_GET(self) -> None:  # noqa: N802
        query = urllib.parse.unquote_plus(self.path)
        value = "1" if "share_ratio" in query else "3600"
        result = [] if type(self).empty(query) else [{"metric": NODE, "value": [0, value]}]
        doc: dict[str, Any] = {"status": "success",
                               "data": {"resultType": "vector", "result": result}}
        if any(needle in query for needle in self.partial_in):
            doc["warnings"] = [WARNING]
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def running_store() -> Iterator[tuple[type[PartialServer], str]]:
    """A :class:`PartialServer` of the test's own: ``(handler class, URL)``."""
    handler = type("Handler", (PartialServer,), {"partial_in": ()})
    with loopback_server(handler) as url:
        yield handler, url
