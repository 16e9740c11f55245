# What the package's main-interpreter names are inside a worker.
#
# A worker runs tasks; it never makes a pool (the executor refuses to be
# created there).  Yet a worker imports those names whenever the module of its
# task does: above all the caller's script, which a worker re-runs as
# ``__mp_main__`` for a task defined there, and whose first lines are
# ``from interpexec import InterpreterPoolExecutor`` and the like.  The real
# classes load the pool's modules, ``concurrent.futures`` and ``logging``
# with them: 2.5 to 3.2 MB in every worker (``BrokenInterpreterPool`` also
# imports ``multiprocessing``).  So in a worker the package gives these
# stand-ins instead (``interpexec.__getattr__``):
#
# * ``InterpreterPoolExecutor`` and ``Watch``: classes that refuse to be made,
#   with the message the real executor gives in a worker.  A class attribute
#   looked up on one (``InterpreterPoolExecutor.submit``) is the real class's,
#   loaded then.  Subclassing one at a module's top level works.
# * ``get_reusable_executor``: refuses the same way.
# * ``BrokenInterpreterPool``: a RuntimeError (as the real one is, through
#   ``concurrent.futures.BrokenExecutor``) that pickles by reference as
#   ``interpexec.BrokenInterpreterPool``, so one a task raises reaches the
#   caller as the real class.  Nothing in a worker raises it.
#
# Imported in a worker only, and only when a task's module asks for one of
# these names: standard library only, no docstrings beyond the classes' own.

TYPE_CHECKING = False  # typing is not imported: this module loads in workers
if TYPE_CHECKING:
    from typing import Any, NoReturn  # noqa: F401 (names used only in type comments)

#: Where each stand-in's real object lives.
REAL = {
    "BrokenInterpreterPool": "._broken",
    "InterpreterPoolExecutor": "._executor",
    "Watch": "._waiting",
    "get_reusable_executor": "._reusable",
}

#: What the real executor says when made in a worker, after what was refused.
REFUSAL = (
    "{} inside an interpexec worker: create pools in the main program only "
    '(guard module-level pools with `if __name__ == "__main__":`)'
)


def _real(name):  # type: (str) -> Any
    import importlib

    return getattr(importlib.import_module(REAL[name], __package__), name)


class _StandInType(type):
    # A stand-in class's missing attributes are its real class's (loaded then);
    # dunder names are not, so that Python's own protocol lookups on the
    # stand-in never load the pool.

    def __getattr__(cls, name):  # type: (str) -> Any
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        for klass in cls.__mro__:
            if klass.__name__ in REAL and klass.__module__ == "interpexec":
                return getattr(_real(klass.__name__), name)
        raise AttributeError(name)


class InterpreterPoolExecutor(metaclass=_StandInType):
    """interpexec's executor, as a worker sees it: creating one is refused
    (pools are made in the main program only)."""

    __slots__ = ()

    def __init__(self, *args, **kwargs):  # type: (*Any, **Any) -> None
        raise RuntimeError(REFUSAL.format("an InterpreterPoolExecutor cannot be created"))


class Watch(metaclass=_StandInType):
    """``InterpreterPoolExecutor.watch()``'s handle, as a worker sees it: refused."""

    __slots__ = ()

    def __init__(self, *args, **kwargs):  # type: (*Any, **Any) -> None
        raise RuntimeError(REFUSAL.format("a Watch cannot be made"))


def get_reusable_executor(*args, **kwargs):  # type: (*Any, **Any) -> NoReturn
    """interpexec's ``get_reusable_executor``, as a worker sees it: refused."""
    raise RuntimeError(REFUSAL.format("get_reusable_executor() cannot make a pool"))


class BrokenInterpreterPool(RuntimeError):
    """interpexec's broken-pool error, as a worker sees it (nothing raises it
    there); it pickles as, and reaches the caller as, the real class."""


for _each in (InterpreterPoolExecutor, Watch, get_reusable_executor, BrokenInterpreterPool):
    _each.__module__ = "interpexec"  # (pickled by reference as the package's name)
del _each
