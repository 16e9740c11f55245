"""Task functions that log (workers import them).

``logging`` is imported at module level on purpose: interpexec starts forwarding
a worker's records once a task's module has imported ``logging`` (see the
"Output and logging" section of docs/getting-started.md).
"""

from __future__ import annotations

import _interpreters
import logging
import threading


def log_warning(logger_name, x):
    """Log one WARNING with a %-style argument; return this interpreter's id."""
    logging.getLogger(logger_name).warning("msg %s", x)
    return int(_interpreters.get_current()[0])


class Collect(logging.Handler):
    """A handler for the parent's side: keeps every record it handles, and sets
    ``arrived`` when one has ``message``."""

    def __init__(self, message):
        super().__init__(logging.DEBUG)
        self.message = message
        self.records = []
        self.arrived = threading.Event()

    def emit(self, record):
        self.records.append(record)
        if record.getMessage() == self.message:
            self.arrived.set()
