"""Re-running the parent's script in a worker as ``__mp_main__``, so that the
functions and classes it defines resolve (see :class:`interpexec._worker_env.MainFixup`).

Loaded by a worker the first time a task needs something of ``__main__``.
"""

import os
import sys

#: The note on an exception raised by the caller's script run as ``__mp_main__``.
SCRIPT_RAISED = (
    "interpexec: this was raised by the top level of your script, which workers run (as __mp_main__, without "
    'its `if __name__ == "__main__":` block) to find the functions and classes it defines, as '
    "ProcessPoolExecutor's spawn workers do. Move what workers cannot run (such as an import of a module that "
    "cannot load in a subinterpreter) under that block or into the functions that need it, or define the task's "
    "functions in a module of their own."
)


def run_script(path, name):  # type: (str | None, str | None) -> None
    """Run the parent's main script (or ``-m`` module) as ``__mp_main__`` and
    install it as ``sys.modules["__main__"]`` (nothing to run: nothing done)."""
    import runpy
    import types

    try:
        if name and name != "__main__" and not name.endswith(".__main__"):
            namespace = runpy.run_module(name, run_name="__mp_main__", alter_sys=True)
        elif path and os.path.exists(path):
            namespace = runpy.run_path(path, run_name="__mp_main__")
        else:
            return
    except Exception as exc:  # the script's own failure: say where it comes from
        try:
            if SCRIPT_RAISED not in (getattr(exc, "__notes__", None) or ()):  # (an exception kept: once)
                exc.add_note(SCRIPT_RAISED)
        except Exception:  # (a __notes__ that is not a list: the exception as it is)
            pass
        raise
    module = types.ModuleType("__mp_main__")
    module.__dict__.update(namespace)
    sys.modules["__main__"] = sys.modules["__mp_main__"] = module
