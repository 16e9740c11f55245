"""interpexec: run CPU-bound Python in parallel on a warm pool of subinterpreters.

``InterpreterPoolExecutor`` is a ``concurrent.futures`` executor (a drop-in for
``ProcessPoolExecutor``) whose workers are isolated subinterpreters, each with its
own GIL on its own OS thread (PEP 684, PEP 734).

How a call travels (modules named in brackets)::

    submit()/map()                          [_executor]  public API
      -> encode fn + args                   [_transport] shareable values as-is, else pickle 5 [_pickled]
      -> pending deque -> dispatch          [_dispatch]  the window of tasks in flight
      -> task Channel: queue + pipe         [_transport] over _interpqueues [_compat]
      -> serve() loop inside a worker       [_worker_main], entered once per interpreter
                                            by a worker thread [_worker, _lifecycle]
      -> result Channel -> resolver         [_resolver]  settles the PoolFuture [_future,
                                                         _condition]
    pool state; stats(); map()'s iterator   [_state, _pool, _map]; callables by reference [_pickling]
    messages between interpreters           [_protocol]  named kinds, settings as data
    errors: remote traceback as __cause__   [_errors]; BrokenInterpreterPool [_broken]
    blocking and waking: pipes, poll(), one free list                        [_wakeup]
    result() / event loops wait on a pipe of their own (a shortcut)          [_waiting]
    deadlines, interrupt(): a watchdog thread inside each worker interpreter [_watchdog]
    shutdown, terminate, exit, Ctrl-C, os.fork()                 [_stopping, _sigint]
    inside a worker: __main__ fixup, log forwarding, threads left [_worker_env;
                                     loaded when first used: _worker_script, _worker_log]

Around the core: ``aio`` (async), ``dask/`` (a package: the worker-side plan
evaluator, translation of distributed's tasks, the plugin), ``joblib/`` (the
joblib backend, and what its workers run), ``_queue`` (``interpexec.Queue``),
``_shared`` (``share()``), ``_reusable`` (``get_reusable_executor()``),
``_doctor*``/``_demo``/``_bench`` (the command line, ``__main__``).

See docs/architecture.md for the full diagram.

The package imports lazily: worker interpreters import only what they use.
"""

TYPE_CHECKING = False  # typing is not imported: the package loads in every worker

__version__ = "0.1.0"

__all__ = [
    "BrokenInterpreterPool",
    "IncompatibleModuleError",
    "InterpreterPoolExecutor",
    "Queue",
    "RemoteError",
    "RemoteTraceback",
    "Shared",
    "Watch",
    "__version__",
    "get_reusable_executor",
    "share",
]

if TYPE_CHECKING:
    from ._broken import BrokenInterpreterPool
    from ._errors import IncompatibleModuleError, RemoteError, RemoteTraceback
    from ._executor import InterpreterPoolExecutor
    from ._queue import Queue
    from ._reusable import get_reusable_executor
    from ._shared import Shared, share
    from ._waiting import Watch

_LAZY = {
    "BrokenInterpreterPool": "._broken",
    "InterpreterPoolExecutor": "._executor",
    "Queue": "._queue",
    "IncompatibleModuleError": "._errors",
    "RemoteError": "._errors",
    "RemoteTraceback": "._errors",
    "get_reusable_executor": "._reusable",
    "Shared": "._shared",
    "share": "._shared",
    "Watch": "._waiting",
}


def __getattr__(name):  # type: (str) -> object
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'interpexec' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():  # type: () -> list[str]
    return sorted(set(globals()) | set(__all__))
