"""What a program pays at start-up: the modules ``import interpexec``, a pool and
its first results import, in the parent and in the workers.  Each check runs in a
fresh process (or a fresh worker) and looks at ``sys.modules``; the times
themselves are measured by the benchmark (``cold start including import``).

``BrokenInterpreterPool`` subclasses ``concurrent.futures.process.BrokenProcessPool``
(a drop-in for ProcessPoolExecutor), whose module imports multiprocessing; the
class is therefore created only when it is first needed, and these tests check
that it is the same class, with the real bases, whichever the user imports first."""

from __future__ import annotations

import ast
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

import interpexec
from interpexec import _compat
from tests import helpers, import_helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_fresh(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (this checkout's interpexec) and return
    the JSON object it prints last."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(90)
def test_import_pool_and_first_results_import_no_multiprocessing():
    found = run_fresh(
        """
        import json, sys
        before = set(sys.modules)
        import interpexec
        from interpexec import InterpreterPoolExecutor
        ex = InterpreterPoolExecutor(2)
        results = [f.result() for f in [ex.submit(abs, -i) for i in range(4)]]
        new = sorted(set(sys.modules) - before)
        ex.shutdown()
        print(json.dumps({"results": results, "new": new}))
        """
    )
    assert found["results"] == [0, 1, 2, 3]
    new = set(found["new"])
    assert "interpexec._executor" in new  # (the pool's modules were imported here)
    unwanted = {
        "multiprocessing",
        "concurrent.futures.process",
        "concurrent.futures.interpreter",
        "typing",
        "pickle",
        "_pickle",  # abs goes by reference, and its arguments and results natively
        "signal",  # (_signal suffices)
    }
    assert sorted(new & unwanted) == []
    assert "interpexec._broken" not in new  # created only when asked for (below)


ORDERS = {
    # The user's module imports the base class first.
    "base first": """
        import concurrent.futures.process as cfp
        import interpexec
        pool = interpexec.InterpreterPoolExecutor(1, initializer=int, initargs=("not a number",))
        caught = None
        try:
            pool.submit(abs, -1).result()
        except cfp.BrokenProcessPool as exc:
            caught = exc
        mp_before_break = True
        """,
    # interpexec alone until the pool breaks; the base is imported only afterwards.
    "base after the break": """
        import sys
        import interpexec
        pool = interpexec.InterpreterPoolExecutor(1, initializer=int, initargs=("not a number",))
        first = None
        try:
            pool.submit(abs, -1).result()
        except Exception as exc:
            first = exc
        mp_before_break = "multiprocessing" in sys.modules
        import concurrent.futures.process as cfp
        caught = None
        try:
            raise first
        except cfp.BrokenProcessPool as exc:
            caught = exc
        """,
    # The class asked for by name before anything breaks.
    "class first": """
        from interpexec import BrokenInterpreterPool
        import interpexec
        pool = interpexec.InterpreterPoolExecutor(1, initializer=int, initargs=("not a number",))
        caught = None
        try:
            pool.submit(abs, -1).result()
        except BrokenInterpreterPool as exc:
            caught = exc
        import concurrent.futures.process as cfp
        mp_before_break = True
        """,
}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("order", list(ORDERS))
def test_broken_pool_is_a_broken_process_pool_whatever_the_import_order(order):
    found = run_fresh(
        ORDERS[order]
        + """
        import json, sys
        import concurrent.futures as cf
        import interpexec._broken
        std = None
        if sys.version_info >= (3, 14):
            from concurrent.futures.interpreter import BrokenInterpreterPool as Std
            std = isinstance(caught, Std)
        pool.shutdown()
        print(json.dumps({
            "caught": type(caught).__module__ + "." + type(caught).__qualname__ if caught is not None else None,
            "same_class": type(caught) is interpexec.BrokenInterpreterPool is interpexec._broken.BrokenInterpreterPool,
            "process": isinstance(caught, cfp.BrokenProcessPool),
            "executor": isinstance(caught, cf.BrokenExecutor),
            "std": std,
            "cause": type(caught.__cause__).__name__ if caught is not None else None,
            "mp_before_break": mp_before_break,
        }))
        """
    )
    assert found["caught"] == "interpexec._broken.BrokenInterpreterPool"
    assert found["same_class"] and found["process"] and found["executor"]
    assert found["std"] is (True if sys.version_info >= (3, 14) else None)
    assert found["cause"] == "ValueError"  # the initializer's own error
    if order == "base after the break":
        # Raising it is what imported the base class's module, not the import.
        assert found["mp_before_break"] is True


@pytest.mark.timeout(60)
def test_an_empty_queue_imports_no_stdlib_wrapper():
    """The C queue module imports its stdlib wrapper (with unittest on 3.13) the
    first time a get finds a queue empty; interpexec never asks an empty queue."""
    found = run_fresh(
        """
        import json, sys
        from interpexec import _compat
        before = set(sys.modules)
        qid = _compat.queue_create()
        empty = _compat.queue_get(qid, "empty")
        _compat.queue_put(qid, 1)
        one = _compat.queue_get(qid, "empty")
        again = _compat.queue_get(qid, "empty")
        _compat.queue_destroy(qid)
        print(json.dumps({"got": [empty, one, again], "new": sorted(set(sys.modules) - before)}))
        """
    )
    assert found["got"] == ["empty", 1, "empty"]
    assert [m for m in found["new"] if "interpreters" in m or m in ("unittest", "traceback")] == []


@pytest.mark.timeout(60)
def test_workers_import_traceback_only_to_report_an_error():
    with interpexec.InterpreterPoolExecutor(1) as pool:
        names = ("traceback", "unittest", "test.support.interpreters", "concurrent.interpreters")
        first = pool.submit(helpers.loaded_modules, names).result()
        # A few tasks, with the worker going idle in between (it has then found
        # the task queue empty at least once).
        for _ in range(3):
            assert pool.submit(helpers.loaded_modules, names).result() == first
        assert first == {name: False for name in names}
        error = pool.submit(helpers.raise_exc, ValueError, "reported").exception()
        assert isinstance(error, ValueError) and "Traceback" in str(error.__cause__)
        after = pool.submit(helpers.loaded_modules, names).result()
    assert after["traceback"] is True  # formatting the error imported it


@pytest.mark.timeout(60)
def test_workers_import_pickle_only_for_a_value_that_needs_it():
    """Module-level functions travel as a (module, qualname) reference and native
    arguments and results as they are: a worker loads pickle (0.6-0.7 MB and 2 ms
    per interpreter), and interpexec's pickling code, only for the first value
    that needs it."""
    names = ("_pickle", "pickle", "interpexec._pickled")
    with interpexec.InterpreterPoolExecutor(1) as pool:
        for _ in range(3):
            assert pool.submit(helpers.loaded_flags, names).result() == (False, False, False)
        assert list(pool.map(helpers.loaded_flags, [names] * 3)) == [(False, False, False)] * 3
        assert pool.submit(helpers.identity, {"a": {1, 2}}).result() == {"a": {1, 2}}  # a dict: pickled
        loaded = pool.submit(helpers.loaded_flags, names).result()
        assert loaded[0] is True and loaded[2] is True


#: Loaded by the main interpreter's side of interpexec only (signals, taking
#: results, error unpacking, lent buffers): a worker that needs none of it does
#: not pay for it (itertools alone costs a subinterpreter 60 KiB).
MAIN_SIDE = ("interpexec._errors", "interpexec._shared", "_signal", "itertools", "_operator", "_collections")


@pytest.mark.timeout(60)
def test_workers_load_error_reporting_and_main_side_modules_only_when_needed():
    with interpexec.InterpreterPoolExecutor(1) as pool:
        for _ in range(3):
            assert pool.submit(import_helpers.loaded, MAIN_SIDE).result() == (False,) * len(MAIN_SIDE)
        error = pool.submit(import_helpers.fail, "reported").exception()
        assert type(error) is ValueError and error.args == ("reported",)
        assert "Traceback" in str(error.__cause__) and "import_helpers.py" in str(error.__cause__)
        assert pool.submit(import_helpers.loaded, MAIN_SIDE).result()[0] is True  # the first failure loaded it
        # A lent buffer loads _shared, and it comes back as the very buffer.
        data = bytearray(b"lent")
        view = pool.submit(helpers.identity, interpexec.share(data, writable=True)).result()
        view[0] = ord("L")
        assert data == b"Lent"
        assert pool.submit(import_helpers.loaded, ("interpexec._shared",)).result() == (True,)


@pytest.mark.timeout(60)
def test_workers_skip_the_pool_side_of_compat_until_a_task_reaches_it():
    """A worker does not define ``_compat``'s pool side (about 20 KiB of code per
    worker); a task that reaches any of it gets all of it, working, bound to
    ``_compat``'s own state."""
    with interpexec.InterpreterPoolExecutor(1) as pool:
        assert pool.submit(import_helpers.pool_side_defined).result() == []
        assert pool.submit(import_helpers.use_pool_side).result() == {
            "missing": [],
            "foreign": [],
            "state": [True, True, 1, False],
            "tracing": False,
            "outer": 0,
            "exc": "T",
        }
        assert pool.submit(import_helpers.pool_side_defined).result() == list(_compat._POOL_SIDE_NAMES)
    with interpexec.InterpreterPoolExecutor(1) as pool:  # (a fresh worker: its first use is an import)
        assert pool.submit(import_helpers.import_the_executor).result() == "InterpreterPoolExecutor"
        assert pool.submit(import_helpers.pool_side_defined).result() == list(_compat._POOL_SIDE_NAMES)
        assert pool.submit(abs, -5).result() == 5


@pytest.mark.timeout(120)
def test_threads_that_reach_the_pool_side_at_once_get_one_definition():
    """Each defining it in turn left functions that were no longer
    ``_compat``'s own: pickling one by reference failed."""
    for _ in range(12):  # (fresh workers: each races once)
        with interpexec.InterpreterPoolExecutor(1) as pool:
            assert pool.submit(import_helpers.race_to_the_pool_side, 8).result(timeout=60) == (1, True, True)


def test_the_pool_side_list_names_what_the_pool_side_defines():
    """``_POOL_SIDE_NAMES`` is what ``if _POOL_SIDE:`` binds: a name missing from
    it would be undefined in a worker for good, an extra one a KeyError there."""
    tree = ast.parse(open(_compat.__file__).read())
    bound = set()
    for node in tree.body:
        if not isinstance(node, ast.If) or "_POOL_SIDE" not in ast.unparse(node.test):
            continue
        # Exactly ``if _POOL_SIDE:``, binding plain names only: the list is
        # checked against what these shapes bind, and nothing else may hide there.
        assert isinstance(node.test, ast.Name) and node.test.id == "_POOL_SIDE" and not node.orelse, ast.unparse(
            node.test
        )
        for each in node.body:
            if isinstance(each, (ast.FunctionDef, ast.ClassDef)):
                bound.add(each.name)
            elif isinstance(each, ast.Assign) and all(isinstance(t, ast.Name) for t in each.targets):
                bound.update(t.id for t in each.targets if isinstance(t, ast.Name))
            elif isinstance(each, ast.AnnAssign) and isinstance(each.target, ast.Name):
                bound.add(each.target.id)
            else:
                raise AssertionError(f"line {each.lineno}: only def, class and NAME = ... under if _POOL_SIDE:")
    assert bound and sorted(bound) == sorted(_compat._POOL_SIDE_NAMES)
    assert len(set(_compat._POOL_SIDE_NAMES)) == len(_compat._POOL_SIDE_NAMES)


@pytest.mark.timeout(60)
def test_worker_modules_carry_no_annotations():
    """What every worker imports has its signatures in type comments: on 3.14+
    an annotated function carries an ``__annotate__`` function (about 0.6 KiB in
    every worker, about 100 KiB for interpexec's worker modules), and
    ``from __future__ import annotations`` loads ``__future__`` (8-20 KiB)."""
    with interpexec.InterpreterPoolExecutor(1) as pool:
        assert pool.submit(import_helpers.annotated).result() == []
        # Not a check that finds nothing: the same look in this interpreter,
        # at a module with annotations, finds them.
        found = import_helpers.annotated()
        assert "interpexec._executor.InterpreterPoolExecutor.submit" in found


@pytest.mark.timeout(60)
def test_worker_modules_carry_no_docstrings():
    """What every worker imports for a plain task explains itself in comments:
    a docstring stays in every worker's memory (the worker modules carried
    about 27 KiB of them); the package's own and ``Interrupted``'s stay, for
    ``help()``."""
    with interpexec.InterpreterPoolExecutor(1) as pool:
        assert pool.submit(import_helpers.documented).result() == []
        # Not a check that finds nothing: here, with the pool's modules loaded,
        # it finds their docstrings.
        found = import_helpers.documented()
        assert "interpexec._executor" in found and "interpexec._compat.create_interpreter" in found


@pytest.mark.timeout(60)
def test_workers_load_log_forwarding_only_once_a_task_imports_logging():
    """The forwarding handler's module loads with ``logging``, and the records
    still come back from the first task that logs."""
    from tests import log_helpers

    names = ("logging", "interpexec._worker_log", "interpexec._worker_script")
    handler = log_helpers.Collect("msg 7")
    logger = logging.getLogger("interpexec-test-lazy-log")
    logger.addHandler(handler)
    try:
        with interpexec.InterpreterPoolExecutor(1) as pool:
            for _ in range(3):
                assert pool.submit(import_helpers.loaded, names).result() == (False, False, False)
            pool.submit(log_helpers.log_warning, logger.name, 7).result()
            assert handler.arrived.wait(30)
            assert pool.submit(import_helpers.loaded, names).result() == (True, True, False)
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in handler.records] == ["msg 7"]


@pytest.mark.timeout(60)
def test_a_failure_is_reported_even_where_error_reporting_cannot_load():
    """The task broke imports before it raised: its type and message still come
    back (as a RemoteError, there being no pickle of it), and the worker goes on."""
    with interpexec.InterpreterPoolExecutor(1) as pool:
        error = pool.submit(import_helpers.fail_where_error_reporting_cannot_load, "still said").exception()
        assert isinstance(error, interpexec.RemoteError)
        assert (error.type_name, error.message) == ("ValueError", "still said")
        assert pool.submit(helpers.identity, 7).result() == 7
        error = pool.submit(import_helpers.fail, "again").exception()
        assert isinstance(error, interpexec.RemoteError) and error.message == "again"


@pytest.mark.timeout(90)
def test_a_program_that_imports_the_worker_loop_is_not_a_worker():
    """Documentation tools and import-everything checks import every module;
    the worker loop among them must not make the main interpreter take itself
    for a worker (pools refused, names of the pool's side left unbound)."""
    found = run_fresh(
        """
        import json
        import interpexec._worker_main
        import interpexec
        from interpexec import _compat, _shared
        with interpexec.InterpreterPoolExecutor(1) as pool:
            value = pool.submit(abs, -3).result(timeout=30)
            mapped = list(pool.map(abs, [-1, -2], timeout=30))
        print(json.dumps({"value": value, "mapped": mapped, "in_worker": _shared.in_worker(),
                          "bound": _compat._first is not None}))
        """
    )
    assert found == {"value": 3, "mapped": [1, 2], "in_worker": False, "bound": True}


@pytest.mark.timeout(90)
def test_a_pool_in_an_isolated_subinterpreter_is_refused_at_once():
    """An isolated subinterpreter allows no daemon threads, which the pool needs:
    a clear error when the pool is made (not at the first submit, from CPython)."""
    found = run_fresh(
        """
        import json, sys
        from interpexec import _compat
        interp = _compat.create_interpreter()
        failure = _compat.run_string(interp, "import sys; sys.path[:] = " + repr(sys.path) + "\\n"
                                     "import interpexec\\ninterpexec.InterpreterPoolExecutor(1)")
        _compat.destroy_interpreter(interp)
        print(json.dumps({"type": failure and failure.type_name, "message": failure and failure.message}))
        """
    )
    assert found["type"] == "RuntimeError", found
    assert "allows no daemon threads" in found["message"] and "main interpreter" in found["message"], found
