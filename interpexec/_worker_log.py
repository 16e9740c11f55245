"""Log forwarding inside a worker: the handler that sends ``logging`` records
to the caller, installed when a task first imports ``logging`` (see
:class:`interpexec._worker_env.LogForwarder`).  Loaded only then.
"""

from . import _compat
from ._protocol import EV_LOG, EVENT

TYPE_CHECKING = False  # typing is not imported: this module loads in workers (signatures are type comments)
if TYPE_CHECKING:
    from typing import Any  # noqa: F401 (names used only in type comments)

    from ._transport import Channel  # noqa: F401


def install_handler(results, index, level):  # type: (Channel, int, int) -> None
    """Forward this worker's ``logging`` records to the caller: a handler on the
    root logger, at ``level``."""
    import logging

    interp = _compat.current_interpreter_id()

    class ForwardHandler(logging.Handler):
        def emit(self, record):  # type: (logging.LogRecord) -> None
            try:
                exc_text = record.exc_text
                if record.exc_info and not exc_text:
                    exc_text = logging.Formatter().formatException(record.exc_info)
                fields = (
                    str(record.name),
                    int(record.levelno),
                    str(record.pathname),
                    int(record.lineno or 0),
                    record.getMessage(),
                    exc_text,
                    str(record.funcName),
                    float(record.created),
                    str(record.threadName),
                    interp,
                )
                results.put((-1, EVENT, index, EV_LOG, fields))
            except Exception:  # logging's own contract: a handler reports, never raises
                self.handleError(record)

    root = logging.getLogger()
    root.addHandler(ForwardHandler())
    root.setLevel(level)


def find_spec_then(fullname, then):  # type: (str, Any) -> Any
    """The spec of module ``fullname``, its loader wrapped to call ``then()`` once
    the module has been executed."""
    from importlib.util import find_spec

    spec = find_spec(fullname)
    if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
        spec.loader = ThenLoader(spec.loader, then)  # type: ignore[assignment]
    return spec


class ThenLoader:
    """A loader that calls ``then()`` right after its module has been executed."""

    def __init__(self, loader, then):  # type: (Any, Any) -> None
        self.loader = loader
        self.then = then

    def create_module(self, spec):  # type: (Any) -> Any
        return self.loader.create_module(spec)

    def exec_module(self, module):  # type: (Any) -> None
        self.loader.exec_module(module)
        self.then()

    def __getattr__(self, name):  # type: (str) -> Any
        return getattr(self.loader, name)
