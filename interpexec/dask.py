"""Dask workers that run tasks in subinterpreters.

A Dask worker runs tasks on a ``concurrent.futures`` executor (a thread pool by
default: CPU-bound pure-Python tasks then take turns on the worker's GIL).  This
module installs an :class:`~interpexec.InterpreterPoolExecutor` on a worker,
sized to the worker's thread count, either as its default executor or as a named
one that tasks select with ``dask.annotate(executor="interpreters")``::

    from interpexec.dask import InterpreterWorkerPlugin
    client.register_plugin(InterpreterWorkerPlugin())                           # every task
    client.register_plugin(InterpreterWorkerPlugin(executor="interpreters"))    # annotated tasks

or from the command line, on each machine::

    dask worker tcp://scheduler:8786 --preload interpexec.dask

(``dask_setup``/``dask_teardown`` below; the dask config key ``interpexec.executor``,
e.g. ``DASK_INTERPEXEC__EXECUTOR=interpreters``, picks the named mode).

How a task travels: ``Worker.execute`` sends a task to an executor whose type name
contains "ThreadPoolExecutor" through ``run_in_executor_with_context(e, _run_task,
...)`` (a lambda that also touches thread-local worker state), and to any other
executor through ``loop.run_in_executor(e, _run_task_simple, task, data, delay)``
(``apply_function_simple(function, args, kwargs, delay)`` before distributed
2024.11).  The executor installed here is of the second kind, so the worker calls
``executor.submit(<its task runner>, task, data, delay)``.
:class:`InterpreterTaskExecutor` recognizes that call, turns the task into
``function(*args, **kwargs)`` with its dependencies filled in from ``data`` (in
the worker's main interpreter), submits only that to the pool, and builds the
very result dict the worker's own runner would have returned (result, size,
type, start/stop times, or the error with its traceback).  So a
subinterpreter imports the task's function and data, never ``distributed``
(which needs C extensions, such as psutil, that refuse subinterpreters).

Layout: this module is imported inside worker interpreters too (by the few tasks
that need :func:`_run_plan`), so at import time it loads only the standard
library.  ``distributed`` is imported in the worker's main interpreter, when the
plugin or executor classes are first used (module ``__getattr__``).
"""

from __future__ import annotations

import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distributed import Worker  # type: ignore[import-not-found,import-untyped,unused-ignore]

__all__ = [
    "EXECUTOR_NAME",
    "InterpreterTaskExecutor",
    "InterpreterWorkerPlugin",
    "UnsupportedDistributedError",
    "dask_setup",
    "dask_teardown",
]

#: The executor name that :func:`dask.annotate` selects in the named mode.
EXECUTOR_NAME = "interpreters"

#: Dask config keys read by :func:`dask_setup` (``--preload interpexec.dask``).
CONFIG_EXECUTOR = "interpexec.executor"
CONFIG_MAX_WORKERS = "interpexec.max-workers"


class UnsupportedDistributedError(RuntimeError):
    """The installed ``distributed`` runs tasks in a way this module does not know,
    so it refuses to install rather than run tasks wrongly."""


# =============================================================================
# Worker-interpreter side: a task plan and its evaluator (standard library only)
# =============================================================================
#
# Most tasks reach the pool as ``function(*args, **kwargs)`` itself.  A task whose
# arguments are themselves calls (nested tasks, or a fused subgraph as dask.bag
# builds) travels as a small plan of the nodes below, evaluated by _run_plan.


class _Apply:
    """``func(*args, **kwargs)``; args and kwarg values may be plan nodes."""

    __slots__ = ("args", "func", "kwargs")

    def __init__(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.func = func
        self.args = args
        self.kwargs = kwargs

    def __reduce__(self) -> Any:
        # The function goes the way interpexec sends task functions (by reference,
        # or by value through cloudpickle), not by plain pickle.
        from ._pickling import dumps_callable

        return (_load_apply, (dumps_callable(self.func), self.args, self.kwargs))


def _load_apply(blob: bytes, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Apply:
    from ._compat import loads

    return _Apply(loads(blob), args, kwargs)


class _Build:
    """A list, tuple, set or dict (``items`` flat key, value pairs) of plan nodes."""

    __slots__ = ("items", "kind")

    def __init__(self, kind: str, items: tuple[Any, ...]) -> None:
        self.kind = kind
        self.items = items

    def __reduce__(self) -> Any:
        return (_Build, (self.kind, self.items))


class _Local:
    """The value of another task of the same fused subgraph."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __reduce__(self) -> Any:
        return (_Local, (self.key,))


class _Graph:
    """A fused subgraph: ``inputs`` (evaluated in the enclosing scope) bound to
    ``inkeys``, then ``steps`` in dependency order; ``drops[i]`` are the keys no
    longer needed after step ``i``."""

    __slots__ = ("drops", "inkeys", "inputs", "outkey", "steps")

    def __init__(
        self,
        inkeys: tuple[Any, ...],
        inputs: tuple[Any, ...],
        steps: tuple[tuple[Any, Any], ...],
        drops: tuple[tuple[Any, ...], ...],
        outkey: Any,
    ) -> None:
        self.inkeys = inkeys
        self.inputs = inputs
        self.steps = steps
        self.drops = drops
        self.outkey = outkey

    def __reduce__(self) -> Any:
        return (_Graph, (self.inkeys, self.inputs, self.steps, self.drops, self.outkey))


_NODES = frozenset((_Apply, _Build, _Local, _Graph))


def _build(kind: str, items: Any) -> Any:
    if kind == "list":
        return list(items)
    if kind == "tuple":
        return tuple(items)
    if kind == "set":
        return set(items)
    it = iter(items)
    return dict(zip(it, it, strict=True))


def _eval(node: Any, scope: dict[Any, Any] | None) -> Any:
    tp = type(node)
    if tp is _Apply:
        args = [_eval(a, scope) if type(a) in _NODES else a for a in node.args]
        if node.kwargs:
            kwargs = {k: _eval(v, scope) if type(v) in _NODES else v for k, v in node.kwargs.items()}
            return node.func(*args, **kwargs)
        return node.func(*args)
    if tp is _Build:
        return _build(node.kind, [_eval(a, scope) if type(a) in _NODES else a for a in node.items])
    if tp is _Local:
        assert scope is not None
        return scope[node.key]
    if tp is _Graph:
        inner = {
            k: (_eval(v, scope) if type(v) in _NODES else v) for k, v in zip(node.inkeys, node.inputs, strict=True)
        }
        for (key, step), drop in zip(node.steps, node.drops, strict=True):
            inner[key] = _eval(step, inner) if type(step) in _NODES else step
            for k in drop:
                del inner[k]
        return inner[node.outkey]
    return node


def _run_plan(plan: Any) -> Any:
    """What the pool runs for a task whose arguments are calls themselves."""
    return _eval(plan, None)


def _apply(func: Any, args: Any, kwargs: Any = None) -> Any:
    """Stand-in for ``dask.utils.apply`` (which would import dask in the worker)."""
    if kwargs:
        return func(*args, **kwargs)
    return func(*args)


# =============================================================================
# Worker main-interpreter side: distributed, loaded on first use
# =============================================================================


class _D:
    """The parts of dask/distributed this module uses, loaded once (see _load)."""

    loaded = False
    version = ""
    shape = ""  # "task-spec" (distributed >= 2024.11) or "legacy"
    runner: Any = None  # the worker's own runner that it submits to executors
    runner_params: tuple[str, ...] = ()
    error_message: Any = None
    sizeof: Any = None
    Reschedule: Any = None
    apply: Any = None
    ts: Any = None  # dask._task_spec
    execute_subgraph: Any = None
    legacy_execute_task: Any = None
    tblib_traceback: Any = None
    exception_key = "actual_exception"
    holding_profile_lock = False


_load_lock = threading.Lock()

_TASK_SPEC_PARAMS = ("task", "data", "time_delay")
_LEGACY_PARAMS = ("function", "args", "kwargs", "time_delay")


def _code_strings(fn: Any) -> set[str]:
    """The string constants of a function's code (tuples and nested code included)."""
    out: set[str] = set()
    stack: list[Any] = [getattr(fn, "__code__", None)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.add(item)
        elif isinstance(item, tuple):
            stack.extend(item)
        elif hasattr(item, "co_consts"):
            stack.extend(item.co_consts)
    return out


#: What the worker's runner puts in its result dict (besides the error fields of
#: ``distributed.core.error_message``, which this module calls itself).
_RESULT_KEYS = frozenset(("op", "status", "result", "nbytes", "type", "start", "stop", "thread"))
_EXCEPTION_KEYS = ("actual_exception", "actual-exception")  # distributed >= 2024.11, older


def _detect_shape(worker_module: Any, version: str) -> tuple[str, Any, str]:
    """How ``worker_module.Worker.execute`` hands a task to an executor that is not
    a thread pool: ``("task-spec", _run_task_simple, key)`` (distributed >= 2024.11)
    or ``("legacy", apply_function_simple, key)`` (older), where ``key`` is the
    result-dict key of a failed task's exception; anything else is refused."""
    import inspect

    execute = inspect.unwrap(worker_module.Worker.execute)
    names = set(getattr(getattr(execute, "__code__", None), "co_names", ()))

    def params(fn: Any) -> tuple[str, ...]:
        try:
            return tuple(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            return ()

    found: tuple[str, Any] | None = None
    runner = getattr(worker_module, "_run_task_simple", None)
    legacy = getattr(worker_module, "apply_function_simple", None)
    if runner is not None and "_run_task_simple" in names and params(runner) == _TASK_SPEC_PARAMS:
        found = ("task-spec", runner)
    elif legacy is not None and "apply_function_simple" in names and params(legacy) == _LEGACY_PARAMS:
        found = ("legacy", legacy)
    problem = ""
    if found is None:
        problem = (
            "its Worker.execute does not hand tasks to a custom executor as _run_task_simple(task, data, "
            "time_delay) (distributed >= 2024.11) nor as apply_function_simple(function, args, kwargs, "
            "time_delay) (older)"
        )
    else:
        written = _code_strings(found[1])
        read = _code_strings(execute)
        exc_keys = [k for k in _EXCEPTION_KEYS if k in written and k in read]
        missing = sorted(_RESULT_KEYS - written)
        if missing or len(exc_keys) != 1:
            problem = (
                f"its task runner {found[1].__name__}() returns a result dict this module does not know "
                f"(missing keys {missing}, exception keys {exc_keys})"
            )
        else:
            return found[0], found[1], exc_keys[0]
    raise UnsupportedDistributedError(
        f"interpexec.dask does not support distributed {version}: {problem}. Tasks would not run in "
        "subinterpreters correctly, so interpexec.dask refuses to install; please report this "
        "distributed version to interpexec."
    )


def _load() -> type[_D]:
    """Import distributed and work out how its workers call their executor.

    Raises :class:`UnsupportedDistributedError` when ``Worker.execute`` does not
    hand tasks to a non-thread-pool executor the way this module understands.
    """
    if _D.loaded:
        return _D
    with _load_lock:
        if _D.loaded:
            return _D
        import distributed  # type: ignore[import-not-found,import-untyped,unused-ignore]
        import distributed.worker as dw  # type: ignore[import-not-found,import-untyped,unused-ignore]
        from dask.sizeof import sizeof  # type: ignore[import-not-found,import-untyped,unused-ignore]
        from distributed.core import error_message  # type: ignore[import-not-found,import-untyped,unused-ignore]

        version = getattr(distributed, "__version__", "?")
        shape, runner, _D.exception_key = _detect_shape(dw, version)
        if shape == "task-spec":
            from dask import _task_spec as ts  # type: ignore[import-not-found,import-untyped,unused-ignore]

            _D.shape, _D.runner, _D.runner_params, _D.ts = shape, runner, _TASK_SPEC_PARAMS, ts
            _D.execute_subgraph = getattr(ts, "_execute_subgraph", None)
        else:
            _D.shape, _D.runner, _D.runner_params = shape, runner, _LEGACY_PARAMS
            _D.legacy_execute_task = getattr(dw, "execute_task", None)
        try:
            from distributed.exceptions import Reschedule  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError:  # older distributed
            from distributed.worker import Reschedule  # type: ignore[attr-defined,no-redef,unused-ignore]
        import dask.utils as dask_utils  # type: ignore[import-not-found,import-untyped,unused-ignore]

        try:
            from tblib import Traceback as TblibTraceback  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError:  # pragma: no cover - tblib is a dependency of distributed
            TblibTraceback = None
        _D.version = version
        _D.error_message = error_message
        _D.sizeof = sizeof
        _D.Reschedule = Reschedule
        _D.apply = getattr(dask_utils, "apply", None)
        _D.tblib_traceback = TblibTraceback
        _D.loaded = True
    return _D


class _Unsupported(Exception):
    pass


def _plain(x: Any) -> bool:
    return type(x) not in _NODES


def _container_kind(node: Any, ts: Any) -> str:
    if isinstance(node, ts.Dict):
        return "dict"
    klass = getattr(type(node), "klass", None)
    if klass is list:
        return "list"
    if klass is tuple:
        return "tuple"
    if klass is set:
        return "set"
    raise _Unsupported(f"a task argument of type {type(node).__name__} (dask {getattr(ts, '__name__', '')})")


def _convert(obj: Any, resolve: Any) -> Any:
    """A dask task-spec node as a plan (or a plain value), with the semantics of
    ``GraphNode.__call__``: only GraphNode/TaskRef arguments are evaluated."""
    ts = _D.ts
    if isinstance(obj, ts.TaskRef):  # includes distributed.Future
        return resolve(obj.key)
    if not isinstance(obj, ts.GraphNode):
        return obj
    if isinstance(obj, ts.Alias):
        return resolve(obj.target)
    if isinstance(obj, ts.DataNode):
        return obj.value
    if isinstance(obj, ts.NestedContainer):
        kind = _container_kind(obj, ts)
        items = tuple(_convert(a, resolve) for a in obj.args)
        if all(map(_plain, items)):
            return _build(kind, items)
        return _Build(kind, items)
    if isinstance(obj, ts.Task):
        if _D.execute_subgraph is not None and obj.func is _D.execute_subgraph:
            return _convert_subgraph(obj, resolve)
        args = tuple(_convert(a, resolve) for a in obj.args)
        kwargs = {k: _convert(v, resolve) for k, v in obj.kwargs.items()}
        return _make_apply(obj.func, args, kwargs)
    raise _Unsupported(f"a task node of type {type(obj).__name__}")


def _make_apply(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Apply:
    if _D.apply is not None and func is _D.apply and not kwargs and 2 <= len(args) <= 3:
        # dask.utils.apply(f, args, kwargs): call f directly when its argument
        # lists are known here; otherwise a stand-in that does not import dask.
        fn, fargs = args[0], args[1]
        fkw = args[2] if len(args) == 3 else None
        if _plain(fn) and type(fargs) in (list, tuple) and (fkw is None or type(fkw) is dict):
            return _Apply(fn, tuple(fargs), dict(fkw or {}))
        return _Apply(_apply, args, {})
    return _Apply(func, args, kwargs)


def _convert_subgraph(task: Any, resolve: Any) -> Any:
    """``Task(key, _execute_subgraph, inner_dsk, outkey, inkeys, *deps)``."""
    if len(task.args) < 3 or task.kwargs or not isinstance(task.args[0], dict):
        raise _Unsupported("a fused subgraph task of an unknown layout")
    inner, outkey, inkeys = task.args[0], task.args[1], tuple(task.args[2])
    inputs = tuple(_convert(a, resolve) for a in task.args[3:])
    if len(inputs) != len(inkeys) or outkey not in inner:
        raise _Unsupported("a fused subgraph task of an unknown layout")
    local = set(inner) | set(inkeys)

    def inner_resolve(key: Any) -> Any:
        if key in local:
            return _Local(key)
        raise _Unsupported(f"a fused subgraph that refers to {key!r} outside itself")

    # Dependency order of the keys that outkey needs (iterative: fused chains can be long).
    order: list[Any] = []
    seen: set[Any] = set()
    stack: list[tuple[Any, bool]] = [(outkey, False)]
    while stack:
        key, expanded = stack.pop()
        if expanded:
            order.append(key)
            continue
        if key in seen:
            continue
        seen.add(key)
        stack.append((key, True))
        node = inner[key]
        deps = getattr(node, "dependencies", ())
        stack.extend((d, False) for d in deps if d in inner and d not in seen)
    steps = tuple((key, _convert(inner[key], inner_resolve)) for key in order)
    last_use: dict[Any, int] = {}
    for i, key in enumerate(order):
        for d in getattr(inner[key], "dependencies", ()):
            if d in local:
                last_use[d] = i
    drops: list[list[Any]] = [[] for _ in order]
    for key, i in last_use.items():
        if key != outkey:
            drops[i].append(key)
    return _Graph(inkeys, inputs, steps, tuple(tuple(d) for d in drops), outkey)


def _convert_legacy(task: Any) -> Any:
    """distributed's legacy ``execute_task``: tuples ``(callable, *args)`` and lists."""
    if type(task) is tuple and task and callable(task[0]):
        args = tuple(_convert_legacy(a) for a in task[1:])
        return _make_apply(task[0], args, {})
    if type(task) is list:
        items = tuple(_convert_legacy(a) for a in task)
        return list(items) if all(map(_plain, items)) else _Build("list", items)
    return task


def _plan(fn: Any, args: tuple[Any, ...]) -> Any:
    """The call the worker submitted, as a plan node or a plain value (a task that
    calls nothing, such as an alias or literal data)."""
    if len(args) != len(_D.runner_params):
        raise UnsupportedDistributedError(
            f"distributed {_D.version} called {getattr(fn, '__name__', fn)} with {len(args)} arguments, "
            f"expected {len(_D.runner_params)} {_D.runner_params}"
        )
    if _D.shape == "task-spec":
        task, data = args[0], args[1]
        if not isinstance(task, _D.ts.GraphNode):
            raise UnsupportedDistributedError(
                f"distributed {_D.version} submitted a task of type {type(task).__name__}, not a dask GraphNode"
            )
        return _convert(task, data.__getitem__)
    function, fargs, fkwargs = args[0], args[1], args[2]
    if _D.legacy_execute_task is not None and function is _D.legacy_execute_task:
        return _convert_legacy(fargs[0])
    return _make_apply(function, tuple(fargs), dict(fkwargs or {}))


# ------------------------------------------------------------- error reporting

_INTERPEXEC_DIR = __file__.rsplit("/", 1)[0] + "/" if "/" in __file__ else ""


def _remote_frames(exc: BaseException) -> list[tuple[str, int, str]] | None:
    """The frames of the task's final traceback, from interpexec's RemoteTraceback
    text, without interpexec's own leading frames."""
    from ._errors import RemoteTraceback

    remote = exc.__cause__
    if not isinstance(remote, RemoteTraceback):
        return None
    text = remote.tb
    start = text.rfind("Traceback (most recent call last):")
    if start < 0:
        return None
    import re

    frame_re = re.compile(r'^  File "(?P<file>.+)", line (?P<line>\d+), in (?P<name>.+)$')
    frames: list[tuple[str, int, str]] = []
    for line in text[start:].splitlines()[1:]:
        m = frame_re.match(line)
        if m:
            frames.append((m["file"], int(m["line"]), m["name"]))
        elif not line.startswith("  "):
            break
    while frames and _INTERPEXEC_DIR and frames[0][0].startswith(_INTERPEXEC_DIR):
        frames.pop(0)
    return frames or None


def _rebuild_traceback(frames: list[tuple[str, int, str]]) -> Any:
    """A real traceback object with the task's frames (as tblib does for Dask)."""
    if _D.tblib_traceback is None:
        return None
    node: dict[str, Any] | None = None
    for filename, lineno, name in reversed(frames):
        node = {
            "tb_frame": {
                "f_code": {"co_filename": filename, "co_name": name},
                "f_globals": {"__file__": filename, "__name__": "?"},
                "f_lineno": lineno,
            },
            "tb_lineno": lineno,
            "tb_next": node,
        }
    try:
        return _D.tblib_traceback.from_dict(node).as_traceback()
    except Exception:
        return None


def _failure_msg(exc: BaseException, start: float, stop: float, delay: float) -> dict[str, Any]:
    """``_run_task_simple``'s failure dict for ``exc`` (raised in a subinterpreter
    or while preparing the task)."""
    from ._errors import RemoteTraceback

    remote = isinstance(exc.__cause__, RemoteTraceback)
    frames = _remote_frames(exc) if remote else None
    tb = _rebuild_traceback(frames) if frames else None
    if tb is not None:
        # The task's own frames stand in for interpexec's RemoteTraceback text, so
        # the client sees the exception as if the task had run in a thread.
        exc.__cause__ = exc.__cause__.__cause__  # type: ignore[union-attr]
    elif not remote:
        tb = exc.__traceback__  # raised here, in the main interpreter
    try:
        raise exc
    except BaseException as e:  # error_message() reads sys.exc_info()
        e.__traceback__ = tb  # not this frame; None keeps the RemoteTraceback text as the cause
        msg: dict[str, Any] = _D.error_message(e)
    msg["op"] = "task-erred"
    msg[_D.exception_key] = exc
    msg["start"] = start + delay
    msg["stop"] = stop + delay
    msg["thread"] = threading.get_ident()
    return msg


def _success_msg(result: Any, start: float, stop: float, delay: float) -> dict[str, Any]:
    return {
        "op": "task-finished",
        "status": "OK",
        "result": result,
        "nbytes": _D.sizeof(result),
        "type": type(result) if result is not None else None,
        "start": start + delay,
        "stop": stop + delay,
        "thread": threading.get_ident(),
    }


# ------------------------------------------------------------- the executor


class _TaskExecutorImpl:
    """Body of :class:`InterpreterTaskExecutor` (composed with
    ``concurrent.futures.Executor`` on first use; see :func:`_classes`)."""

    def __init__(
        self,
        max_workers: int,
        *,
        fallback: Any = None,
        thread_name_prefix: str = "Dask-Interpreter",
        **pool_kwargs: Any,
    ) -> None:
        """``max_workers`` subinterpreters run the worker's tasks.  Calls that are
        not tasks (the worker's disk and memory benchmarks, or code that submits
        its own functions to ``worker.executor``) run on ``fallback``, an executor
        in the worker's main interpreter (a private one-thread pool if None).
        ``pool_kwargs`` go to :class:`~interpexec.InterpreterPoolExecutor`."""
        from ._executor import InterpreterPoolExecutor

        _load()
        self._pool_args = dict(max_workers=max_workers, thread_name_prefix=thread_name_prefix, **pool_kwargs)
        self.pool = InterpreterPoolExecutor(**self._pool_args)
        self._fallback = fallback
        self._own_fallback: Any = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def max_workers(self) -> int:
        return int(self._pool_args["max_workers"])

    def prestart(self) -> None:
        """Start every subinterpreter now (blocking until they are ready)."""
        self.pool.prestart(wait=True)

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        if fn is _D.runner and not kwargs:
            return self._submit_task(fn, args)
        return self._submit_other(fn, args, kwargs)

    def _submit_other(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        module = getattr(fn, "__module__", "") or ""
        name = getattr(fn, "__name__", "") or ""
        if module == "distributed.worker" and ("run_task" in name or "apply_function" in name):
            raise UnsupportedDistributedError(
                f"distributed {_D.version} submitted its task runner {name}() to a custom executor; interpexec.dask "
                f"expected {getattr(_D.runner, '__name__', '?')}(). This distributed version is not supported."
            )
        fallback = self._fallback
        if fallback is None:
            with self._lock:
                if self._own_fallback is None:
                    from concurrent.futures import ThreadPoolExecutor

                    self._own_fallback = ThreadPoolExecutor(1, thread_name_prefix="Dask-Interpreter-Fallback")
                fallback = self._own_fallback
        return fallback.submit(fn, *args, **kwargs)

    def _submit_task(self, fn: Any, args: tuple[Any, ...]) -> Any:
        from concurrent.futures import Future

        delay = args[-1] if args and isinstance(args[-1], (int, float)) else 0.0
        outer: Future[Any] = Future()
        outer.set_running_or_notify_cancel()
        start = time.time()
        try:
            plan = _plan(fn, args)
        except _Unsupported as exc:
            err = UnsupportedDistributedError(
                f"interpexec.dask cannot run this task in a subinterpreter: it contains {exc} "
                f"(distributed {_D.version}). Run it on the worker's thread pool: install the plugin with "
                f"executor={EXECUTOR_NAME!r} and leave such tasks unannotated."
            )
            outer.set_result(_failure_msg(err, start, time.time(), delay))
            return outer
        except UnsupportedDistributedError as exc:
            outer.set_result(_failure_msg(exc, start, time.time(), delay))
            return outer
        except Exception as exc:  # e.g. a missing dependency in data
            outer.set_result(_failure_msg(exc, start, time.time(), delay))
            return outer
        if type(plan) not in _NODES:
            # Nothing to call (an alias, literal data): no trip to a worker.
            outer.set_result(_success_msg(plan, start, time.time(), delay))
            return outer
        if type(plan) is _Apply and all(map(_plain, plan.args)) and all(map(_plain, plan.kwargs.values())):
            fn_, fargs, fkwargs = plan.func, plan.args, plan.kwargs  # the common case: f(*args, **kwargs)
        else:
            fn_, fargs, fkwargs = _run_plan, (plan,), {}
        try:
            inner = self._pool_submit(fn_, fargs, fkwargs)
        except RuntimeError as exc:  # the pool is shut down: the plugin is being removed
            outer.set_result(_failure_msg(_reschedule(exc), start, time.time(), delay))
            return outer
        except Exception as exc:
            outer.set_result(_failure_msg(exc, start, time.time(), delay))
            return outer
        inner.add_done_callback(lambda f: _finish(f, outer, start, delay))
        return outer

    def _pool_submit(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        from ._pool import BrokenInterpreterPool

        try:
            return self.pool.submit(fn, *args, **kwargs)
        except BrokenInterpreterPool:
            # A worker loop died: replace the pool once, so one bad task does not
            # fail every later task on this Dask worker.
            with self._lock:
                if self._closed:
                    raise
                broken = self.pool
                from ._executor import InterpreterPoolExecutor

                self.pool = InterpreterPoolExecutor(**self._pool_args)
            broken.shutdown(wait=False, cancel_futures=True)
            return self.pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False, interrupt_running: bool = False) -> None:
        with self._lock:
            self._closed = True
            own = self._own_fallback
        self.pool.shutdown(wait=wait, cancel_futures=cancel_futures, interrupt_running=interrupt_running)
        if own is not None:
            own.shutdown(wait=wait)

    def __repr__(self) -> str:
        return f"<InterpreterTaskExecutor max_workers={self.max_workers}>"


def _reschedule(cause: BaseException) -> BaseException:
    exc: BaseException = _D.Reschedule()
    exc.__cause__ = cause
    return exc


def _finish(inner: Any, outer: Any, start: float, delay: float) -> None:
    """Turn the pool's future into the worker's result dict (runs in whichever
    thread completes ``inner``; must never raise)."""
    stop = time.time()
    try:
        if inner.cancelled():
            # Stopped by shutdown(interrupt_running=True): the worker is closing;
            # let the scheduler run the task elsewhere.
            msg = _failure_msg(_reschedule(RuntimeError("task stopped: the worker is closing")), start, stop, delay)
        else:
            exc = inner.exception()
            if exc is None:
                msg = _success_msg(inner.result(), start, stop, delay)
            elif isinstance(exc, (SystemExit, KeyboardInterrupt)):
                outer.set_exception(exc)  # as the worker's own runner: these pass through
                return
            else:
                msg = _failure_msg(exc, start, stop, delay)
    except BaseException as exc:  # building the message failed: still end the task
        try:
            msg = _failure_msg(exc, start, stop, delay)
        except BaseException:
            outer.set_exception(exc)
            return
    outer.set_result(msg)


# ------------------------------------------------------------- profiler guard
#
# sys._current_frames() must not run while subinterpreter threads exist (on some
# CPython builds, 3.13.0 among them, it corrupts the heap).  distributed calls it
# from three places in a worker process:
#   * the "Profile" thread that every Server starts when
#     distributed.worker.profile.enabled is true (it samples the event loop
#     thread), before any plugin or preload runs.  It calls sys._current_frames()
#     while holding distributed.profile.lock, so holding that lock keeps it out;
#   * Worker.trigger_profile (periodic callback "profile"), for tasks on threads;
#   * Worker.get_call_stack (Client.call_stack()).

_guard_lock = threading.Lock()
_guard_count = 0


def _acquire_profile_lock() -> None:
    global _guard_count
    import distributed.profile as dprofile  # type: ignore[import-not-found,import-untyped,unused-ignore]

    with _guard_lock:
        if _guard_count:
            _guard_count += 1
            return
        lock = getattr(dprofile, "lock", None)
        watch = getattr(dprofile, "_watch", None)
        uses_lock = lock is not None and "lock" in getattr(getattr(watch, "__code__", None), "co_names", ())
        if uses_lock:
            assert lock is not None
            if not lock.acquire(timeout=30):
                raise RuntimeError("interpexec.dask: timed out waiting for distributed's profiler to pause")
        elif any(t.name == "Profile" and t.is_alive() for t in threading.enumerate()):
            raise UnsupportedDistributedError(
                f"distributed {_D.version}'s profiler thread samples sys._current_frames(), which crashes "
                "CPython while subinterpreters run in this process. Start the worker with the dask config "
                "distributed.worker.profile.enabled: False (e.g. DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False)."
            )
        _guard_count = 1
        _D.holding_profile_lock = uses_lock


def _release_profile_lock() -> None:
    global _guard_count
    with _guard_lock:
        if not _guard_count:
            return
        _guard_count -= 1
        if _guard_count == 0 and _D.holding_profile_lock:
            import distributed.profile as dprofile  # type: ignore[import-not-found,import-untyped,unused-ignore]

            _D.holding_profile_lock = False
            dprofile.lock.release()


def _quiet_worker_profiler(worker: Any) -> None:
    """Stop the worker's own sampling and call-stack handler (see above)."""
    for name in ("profile", "profile-cycle"):
        pc = worker.periodic_callbacks.pop(name, None)
        if pc is not None:
            pc.stop()

    def get_call_stack(keys: Any = None) -> dict[Any, Any]:
        return {}  # would need sys._current_frames()

    worker.get_call_stack = get_call_stack
    handlers = getattr(worker, "handlers", None)
    if isinstance(handlers, dict) and "call_stack" in handlers:
        handlers["call_stack"] = get_call_stack


# ------------------------------------------------------------- the plugin


class _PluginImpl:
    """Body of :class:`InterpreterWorkerPlugin` (composed with distributed's
    ``WorkerPlugin`` on first use; see :func:`_classes`)."""

    def __init__(
        self,
        executor: str = "default",
        *,
        max_workers: int | None = None,
        prestart: bool = True,
        **pool_kwargs: Any,
    ) -> None:
        """Install an interpreter pool on every worker.

        ``executor``: ``"default"`` runs every task of the worker in
        subinterpreters; any other name (conventionally ``"interpreters"``)
        adds a named executor that only tasks annotated with
        ``dask.annotate(executor=name)`` use, the rest staying on the worker's
        thread pool.  ``max_workers``: subinterpreters per worker (default: the
        worker's thread count).  ``prestart``: start them at setup rather than
        on the first task.  Other keywords (``task_timeout``, ``idle_timeout``,
        ``max_tasks_per_child``, ``initializer``, ``initargs``,
        ``interrupt_grace``) go to :class:`~interpexec.InterpreterPoolExecutor`.
        """
        if not isinstance(executor, str) or not executor:
            raise TypeError("executor must be a non-empty string")
        if executor in ("offload", "actor"):
            raise ValueError(f"the worker's {executor!r} executor runs distributed's own work; choose another name")
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ValueError("max_workers must be None or an integer >= 1")
        self.executor = executor
        self.max_workers = max_workers
        self.prestart = prestart
        self.pool_kwargs = pool_kwargs
        self.name = "interpexec" if executor == "default" else f"interpexec-{executor}"
        self._installed: Any = None
        self._previous: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_installed"] = state["_previous"] = None  # worker-local
        return state

    async def setup(self, worker: Worker) -> None:
        import asyncio

        _load()
        if not hasattr(worker, "executors"):
            raise TypeError(
                f"interpexec.dask installs on a Dask Worker, not on a {type(worker).__name__} "
                "(use --preload, not --preload-nanny)"
            )
        state = getattr(worker, "state", worker)
        nthreads = self.max_workers or int(getattr(state, "nthreads", 0) or getattr(worker, "nthreads", 1))
        fallback = worker.executors.get("default")
        _acquire_profile_lock()
        try:
            _quiet_worker_profiler(worker)
            name = getattr(worker, "name", None)
            prefix = "Dask-Interpreter" if name is None else f"{name}-Dask-Interpreter"
            ex = InterpreterTaskExecutor(nthreads, fallback=fallback, thread_name_prefix=prefix, **self.pool_kwargs)
            try:
                if self.prestart:
                    await asyncio.get_running_loop().run_in_executor(None, ex.prestart)
            except BaseException:
                ex.shutdown(wait=False, cancel_futures=True)
                raise
        except BaseException:
            _release_profile_lock()
            raise
        self._previous = worker.executors.get(self.executor)
        worker.executors[self.executor] = ex
        self._installed = ex

    async def teardown(self, worker: Worker) -> None:
        import asyncio

        ex, self._installed = self._installed, None
        if ex is None:
            return
        if worker.executors.get(self.executor) is ex:
            if self._previous is not None:
                worker.executors[self.executor] = self._previous
            else:
                del worker.executors[self.executor]
        self._previous = None
        # Unregistered from a running worker: let running tasks finish.  Worker
        # closing (restart, scale down): stop them; they are rescheduled.
        running = str(getattr(getattr(worker, "status", None), "name", "running")) == "running"
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: ex.shutdown(wait=True, cancel_futures=not running, interrupt_running=not running)
            )
        finally:
            _release_profile_lock()

    def __repr__(self) -> str:
        return f"InterpreterWorkerPlugin(executor={self.executor!r}, max_workers={self.max_workers!r})"


_classes_lock = threading.Lock()


def _classes() -> None:
    """Define InterpreterTaskExecutor and InterpreterWorkerPlugin (their bases come
    from concurrent.futures and distributed, which worker interpreters never load)."""
    with _classes_lock:
        if "InterpreterWorkerPlugin" in globals():
            return
        from concurrent.futures import Executor

        from distributed.diagnostics.plugin import WorkerPlugin  # type: ignore[import-not-found,import-untyped,unused-ignore]

        g = globals()
        for name, impl, base in (
            ("InterpreterTaskExecutor", _TaskExecutorImpl, Executor),
            ("InterpreterWorkerPlugin", _PluginImpl, WorkerPlugin),
        ):
            doc = impl.__doc__
            cls = type(name, (impl, base), {"__module__": __name__, "__qualname__": name, "__doc__": doc})
            g[name] = cls
        g["InterpreterTaskExecutor"].__doc__ = (
            "The executor a Dask worker sees: runs the worker's tasks in an "
            ":class:`~interpexec.InterpreterPoolExecutor` (its ``pool``) and returns what "
            "the worker's own task runner would."
        )
        g["InterpreterWorkerPlugin"].__doc__ = (
            "A Dask ``WorkerPlugin`` that runs tasks in subinterpreters: see "
            "``InterpreterWorkerPlugin.__init__`` and :mod:`interpexec.dask`."
        )


def __getattr__(name: str) -> Any:
    if name in ("InterpreterTaskExecutor", "InterpreterWorkerPlugin"):
        _classes()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# ------------------------------------------------------------- preload hooks


async def dask_setup(worker: Worker) -> None:
    """``dask worker SCHEDULER --preload interpexec.dask``: install the plugin.

    Dask config (or environment): ``interpexec.executor`` (``default``, or a name
    such as ``interpreters`` for the named mode; ``DASK_INTERPEXEC__EXECUTOR``),
    ``interpexec.max-workers`` (default: the worker's thread count;
    ``DASK_INTERPEXEC__MAX_WORKERS``).
    """
    import inspect

    import dask  # type: ignore[import-not-found,import-untyped,unused-ignore]

    executor = dask.config.get(CONFIG_EXECUTOR, default="default") or "default"
    max_workers = dask.config.get(CONFIG_MAX_WORKERS, default=None)
    if max_workers is not None:
        max_workers = int(max_workers)
    _classes()
    plugin = InterpreterWorkerPlugin(executor=str(executor), max_workers=max_workers)
    if not hasattr(worker, "plugin_add"):
        raise TypeError(
            f"interpexec.dask is a worker preload; got a {type(worker).__name__} (use --preload, not --preload-nanny)"
        )
    kwargs: dict[str, Any] = {"plugin": plugin, "name": plugin.name}
    if "catch_errors" in inspect.signature(worker.plugin_add).parameters:
        kwargs["catch_errors"] = False
    await worker.plugin_add(**kwargs)


async def dask_teardown(worker: Worker) -> None:
    """Counterpart of :func:`dask_setup` (the worker also removes plugins itself
    when it closes)."""
    plugins = getattr(worker, "plugins", {})
    for name, plugin in list(plugins.items()):
        if isinstance(plugin, _PluginImpl) and getattr(plugin, "_installed", None) is not None:
            await worker.plugin_remove(name=name)


if TYPE_CHECKING:
    from concurrent.futures import Executor

    from distributed.diagnostics.plugin import WorkerPlugin  # type: ignore[import-not-found,import-untyped,unused-ignore]

    class InterpreterTaskExecutor(_TaskExecutorImpl, Executor): ...

    class InterpreterWorkerPlugin(_PluginImpl, WorkerPlugin): ...  # type: ignore[misc,unused-ignore]
