"""A Dask task, as the worker hands it to its executor, turned into a plan.

The worker calls its executor with its own task runner and the runner's
arguments (see :mod:`._detect`).  :func:`plan_of` turns them into what the pool
runs: ``function(*args, **kwargs)`` with dependencies filled in from the worker's
``data``, a plan of :mod:`._plan` nodes when arguments are calls themselves, or
a plain value when the task calls nothing (an alias, literal data).  It runs in
the worker's main interpreter and follows dask's own semantics: task spec
(``dask._task_spec``, distributed >= 2024.11) or legacy task tuples.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import distributed.worker  # type: ignore[import-not-found,import-untyped,unused-ignore]
from dask.utils import apply as dask_apply  # type: ignore[import-not-found,import-untyped,unused-ignore]

from ._common import UnsupportedDistributedError
from ._detect import Runner
from ._plan import Apply, Build, Graph, Local, apply_stand_in, build, is_plain

try:
    from dask import _task_spec as ts  # type: ignore[import-not-found,import-untyped,unused-ignore]
except ImportError:  # dask < 2024.11 has legacy task tuples only (shape "legacy")
    ts = None  # type: ignore[assignment,unused-ignore]

#: The function of a fused subgraph task (``dask._task_spec._execute_subgraph``).
_EXECUTE_SUBGRAPH = getattr(ts, "_execute_subgraph", None)
#: The legacy runner's nested-task evaluator (``distributed.worker.execute_task``).
_LEGACY_EXECUTE_TASK = getattr(distributed.worker, "execute_task", None)

Resolve = Callable[[Any], Any]


class Unsupported(Exception):
    """The task holds something the translation does not know (the message says what)."""


def plan_of(runner: Runner, fn: Any, args: tuple[Any, ...]) -> Any:
    """The call ``fn(*args)`` the worker submitted (``fn`` is ``runner.function``),
    as a plan node or a plain value (a task that calls nothing, such as an alias
    or literal data)."""
    if len(args) != len(runner.params):
        raise UnsupportedDistributedError(
            f"distributed {runner.version} called {getattr(fn, '__name__', fn)} with {len(args)} arguments, "
            f"expected {len(runner.params)} {runner.params}"
        )
    if runner.shape == "task-spec":
        task, data = args[0], args[1]
        if not isinstance(task, ts.GraphNode):
            raise UnsupportedDistributedError(
                f"distributed {runner.version} submitted a task of type {type(task).__name__}, not a dask GraphNode"
            )
        return _convert(task, data.__getitem__)
    function, fargs, fkwargs = args[0], args[1], args[2]
    if _LEGACY_EXECUTE_TASK is not None and function is _LEGACY_EXECUTE_TASK:
        return _convert_legacy(fargs[0])
    return _make_apply(function, tuple(fargs), dict(fkwargs or {}))


def _container_kind(node: Any) -> str:
    if isinstance(node, ts.Dict):
        return "dict"
    klass = getattr(type(node), "klass", None)
    if klass is list:
        return "list"
    if klass is tuple:
        return "tuple"
    if klass is set:
        return "set"
    raise Unsupported(f"a task argument of type {type(node).__name__} (dask {getattr(ts, '__name__', '')})")


def _convert(obj: Any, resolve: Resolve) -> Any:
    """A dask task-spec node as a plan (or a plain value), with the semantics of
    ``GraphNode.__call__``: only GraphNode/TaskRef arguments are evaluated."""
    if isinstance(obj, ts.TaskRef):  # includes distributed.Future
        return resolve(obj.key)
    if not isinstance(obj, ts.GraphNode):
        return obj
    if isinstance(obj, ts.Alias):
        return resolve(obj.target)
    if isinstance(obj, ts.DataNode):
        return obj.value
    if isinstance(obj, ts.NestedContainer):
        kind = _container_kind(obj)
        items = tuple(_convert(a, resolve) for a in obj.args)
        if all(map(is_plain, items)):
            return build(kind, items)
        return Build(kind, items)
    if isinstance(obj, ts.Task):
        if _EXECUTE_SUBGRAPH is not None and obj.func is _EXECUTE_SUBGRAPH:
            return _convert_subgraph(obj, resolve)
        args = tuple(_convert(a, resolve) for a in obj.args)
        kwargs = {k: _convert(v, resolve) for k, v in obj.kwargs.items()}
        return _make_apply(obj.func, args, kwargs)
    raise Unsupported(f"a task node of type {type(obj).__name__}")


def _make_apply(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Apply:
    if func is dask_apply and not kwargs and 2 <= len(args) <= 3:
        # dask.utils.apply(f, args, kwargs): call f directly when its argument
        # lists are known here; otherwise a stand-in that does not import dask.
        fn, fargs = args[0], args[1]
        fkw = args[2] if len(args) == 3 else None
        if is_plain(fn) and type(fargs) in (list, tuple) and (fkw is None or type(fkw) is dict):
            return Apply(fn, tuple(fargs), dict(fkw or {}))
        return Apply(apply_stand_in, args, {})
    return Apply(func, args, kwargs)


def _convert_subgraph(task: Any, resolve: Resolve) -> Any:
    """``Task(key, _execute_subgraph, inner_dsk, outkey, inkeys, *deps)``."""
    if len(task.args) < 3 or task.kwargs or not isinstance(task.args[0], dict):
        raise Unsupported("a fused subgraph task of an unknown layout")
    inner, outkey, inkeys = task.args[0], task.args[1], tuple(task.args[2])
    inputs = tuple(_convert(a, resolve) for a in task.args[3:])
    if len(inputs) != len(inkeys) or outkey not in inner:
        raise Unsupported("a fused subgraph task of an unknown layout")
    local = set(inner) | set(inkeys)

    def inner_resolve(key: Any) -> Any:
        if key in local:
            return Local(key)
        raise Unsupported(f"a fused subgraph that refers to {key!r} outside itself")

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
    return Graph(inkeys, inputs, steps, tuple(tuple(d) for d in drops), outkey)


def _convert_legacy(task: Any) -> Any:
    """distributed's legacy ``execute_task``: tuples ``(callable, *args)`` and lists."""
    if type(task) is tuple and task and callable(task[0]):
        args = tuple(_convert_legacy(a) for a in task[1:])
        return _make_apply(task[0], args, {})
    if type(task) is list:
        items = tuple(_convert_legacy(a) for a in task)
        return list(items) if all(map(is_plain, items)) else Build("list", items)
    return task
