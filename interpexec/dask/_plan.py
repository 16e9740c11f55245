"""A task plan and its evaluator: the part of interpexec.dask that worker interpreters load.

Most Dask tasks reach the pool as ``function(*args, **kwargs)`` itself.  A task
whose arguments are themselves calls (nested tasks, or a fused subgraph as
``dask.bag`` builds) travels as a small tree of the nodes below, and the pool runs
:func:`run_plan` on it.  Workers unpickle these nodes by reference to this
module, so it loads only what a worker interpreter has loaded already
(``interpexec._compat``): never ``distributed``, ``dask``, ``typing`` or
``threading``.  The main interpreter builds plans in :mod:`._translate`.
"""

from __future__ import annotations

from .._transport import load_callable

TYPE_CHECKING = False  # typing is not imported: this module loads in worker interpreters
if TYPE_CHECKING:
    from typing import Any


class Apply:
    """``func(*args, **kwargs)``; args and kwarg values may be plan nodes."""

    __slots__ = ("args", "func", "kwargs")

    def __init__(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.func = func
        self.args = args
        self.kwargs = kwargs

    def __reduce__(self) -> Any:
        # The function goes the way interpexec sends task functions (by reference,
        # or by value through cloudpickle), not by plain pickle.  Plans are only
        # pickled in the main interpreter: importing _pickling here, not at the
        # top, keeps it (and pickle, weakref, typing) out of worker interpreters.
        from .._pickling import encode_callable

        return (load_apply, (encode_callable(self.func), self.args, self.kwargs))


def load_apply(fn: bytes | tuple[str, str], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Apply:
    """Unpickle an :class:`Apply` (in the worker interpreter)."""
    return Apply(load_callable(fn), args, kwargs)


class Build:
    """A list, tuple, set or dict (``items`` flat key, value pairs) of plan nodes."""

    __slots__ = ("items", "kind")

    def __init__(self, kind: str, items: tuple[Any, ...]) -> None:
        self.kind = kind
        self.items = items

    def __reduce__(self) -> Any:
        return (Build, (self.kind, self.items))


class Local:
    """The value of another task of the same fused subgraph."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __reduce__(self) -> Any:
        return (Local, (self.key,))


class Graph:
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
        return (Graph, (self.inkeys, self.inputs, self.steps, self.drops, self.outkey))


#: The node types; anything else in a plan is a plain value.
NODES = frozenset((Apply, Build, Local, Graph))


def is_plain(x: Any) -> bool:
    """Whether ``x`` is a plain value rather than a plan node."""
    return type(x) not in NODES


def build(kind: str, items: Any) -> Any:
    """The container of :class:`Build` ``kind`` holding ``items``."""
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
    if tp is Apply:
        args = [_eval(a, scope) if type(a) in NODES else a for a in node.args]
        if node.kwargs:
            kwargs = {k: _eval(v, scope) if type(v) in NODES else v for k, v in node.kwargs.items()}
            return node.func(*args, **kwargs)
        return node.func(*args)
    if tp is Build:
        return build(node.kind, [_eval(a, scope) if type(a) in NODES else a for a in node.items])
    if tp is Local:
        assert scope is not None
        return scope[node.key]
    if tp is Graph:
        inner = {k: (_eval(v, scope) if type(v) in NODES else v) for k, v in zip(node.inkeys, node.inputs, strict=True)}
        for (key, step), drop in zip(node.steps, node.drops, strict=True):
            inner[key] = _eval(step, inner) if type(step) in NODES else step
            for k in drop:
                del inner[k]
        return inner[node.outkey]
    return node


def run_plan(plan: Any) -> Any:
    """What the pool runs for a task whose arguments are calls themselves."""
    return _eval(plan, None)


def apply_stand_in(func: Any, args: Any, kwargs: Any = None) -> Any:
    """Stand-in for ``dask.utils.apply`` (which would import dask in the worker)."""
    if kwargs:
        return func(*args, **kwargs)
    return func(*args)
