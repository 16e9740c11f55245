"""How large immutable values come back: an argument returned unchanged is the
caller's own object again (no copy back); anything else is a faithful copy."""

from __future__ import annotations

import copyreg
import pickle

import pytest

from interpexec import InterpreterPoolExecutor

from . import transfer_helpers as th

BIG = 1 << 20  # above the 64 KiB threshold


@pytest.fixture(scope="module")
def pool():
    with InterpreterPoolExecutor(2) as ex:
        yield ex


@pytest.mark.timeout(30)
@pytest.mark.parametrize("value", [bytes(range(256)) * (BIG // 256), "ü" * BIG], ids=["bytes", "str"])
def test_a_large_argument_returned_unchanged_is_the_callers_own_object(pool, value):
    assert pool.submit(th.identity, value).result(timeout=20) is value
    other = type(value)(value[:1])
    assert pool.submit(th.second, other, value).result(timeout=20) is value


@pytest.mark.timeout(30)
@pytest.mark.parametrize("value", [b"x" * BIG, "x" * BIG], ids=["bytes", "str"])
def test_new_results_are_copied_back_faithfully(pool, value):
    grown = pool.submit(th.appended, value).result(timeout=20)
    assert type(grown) is type(value) and grown == value + value[:1]
    same_value = pool.submit(th.fresh_copy, value).result(timeout=20)
    assert type(same_value) is type(value) and same_value == value


@pytest.mark.timeout(30)
def test_small_values_round_trip(pool):
    assert pool.submit(th.identity, b"abc").result(timeout=20) == b"abc"
    assert pool.submit(th.identity, "abc").result(timeout=20) == "abc"


class Blob:
    """Pickles as a plain bytes object: the worker sees bytes, not a Blob."""

    def __init__(self, data: bytes) -> None:
        self.data = data


copyreg.pickle(Blob, lambda b: (bytes, (b.data,)))


@pytest.mark.timeout(30)
def test_an_argument_rebuilt_by_a_reducer_comes_back_as_what_the_task_returned(pool):
    blob = Blob(b"y" * BIG)
    assert type(pickle.loads(pickle.dumps(blob))) is bytes
    got = pool.submit(th.identity, blob).result(timeout=20)
    assert type(got) is bytes and got == blob.data  # not the caller's Blob
    assert pool.submit(th.kind_and_size, blob).result(timeout=20) == ("bytes", BIG)


@pytest.mark.timeout(30)
def test_functions_travel_by_a_name_only_when_it_names_them(pool):
    """Plain functions and modules' C functions go by (module, qualname); one
    whose name in its module now names something else must not run as that
    other function: it goes the way pickle sends it (by value through
    cloudpickle, which the test extra installs)."""
    import math
    import operator

    assert pool.submit(th.identity, 5).result() == 5
    assert pool.submit(abs, -3).result() == 3
    assert list(pool.map(math.sqrt, [4.0, 9.0])) == [2.0, 3.0]
    assert pool.submit(operator.add, 2, 3).result() == 5
    assert th.first_shadowed is not th.shadowed and th.first_shadowed.__qualname__ == "shadowed"
    assert pool.submit(th.first_shadowed).result() == "the function submitted"
    assert pool.submit(th.shadowed).result() == "another function of the same name"
    # A builtin bound to an object, not a module: pickled as before.
    assert pool.submit([1, 2].__len__).result() == 2


@pytest.mark.timeout(30)
@pytest.mark.parametrize("where", ["module", "class"])
def test_a_function_the_worker_cannot_find_fails_as_pickle_says(pool, where):
    """A function found by its name in the caller but not in the worker (set in
    the caller only) fails its call with the AttributeError pickle would raise,
    word for word (the wording changed in 3.14)."""
    import types

    owner, qualname = (th, "only_in_caller") if where == "module" else (th.Holder, "Holder.only_in_caller")
    fn = types.FunctionType(th.identity.__code__, th.__dict__, "only_in_caller")
    fn.__qualname__, fn.__module__ = qualname, th.__name__
    owner.only_in_caller = fn
    try:
        blob = pickle.dumps(fn)
        error = pool.submit(fn, 1).exception(timeout=20)
    finally:
        delattr(owner, "only_in_caller")
    with pytest.raises(AttributeError) as expected:
        pickle.loads(blob)
    assert type(error) is AttributeError and str(error) == str(expected.value)


_CALLS = {
    # (args, kwargs): the flat form (a function by name, a few native positional
    # arguments) and every way a call leaves it
    "no arguments": ((), {}, True),
    "native scalars": ((None, True, 1.5, -0.0, "s", b"b", 2**63 - 1, -(2**63)), {}, True),
    "a native tuple": (((1, ("x", b"y")), None), {}, True),
    "nine arguments": (tuple(range(9)), {}, False),
    "an int beyond 64 bits": ((2**63,), {}, False),
    "a list": (([1, 2],), {}, False),
    "an int subclass": ((True, th.Flag.ON), {}, False),
    "keywords": ((1,), {"b": (2, "x")}, False),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("call", list(_CALLS), ids=list(_CALLS))
def test_every_call_form_delivers_the_arguments_and_the_result_exactly(pool, call):
    """A call takes the flat NAMED message (and its native result the flat VALUE
    one) only when it is a function by name with a few native positional
    arguments; whichever way a call travels, the worker sees exactly what was
    passed, and the caller gets exactly what the task returned, types included."""
    from interpexec._executor import _encode_call
    from interpexec._protocol import CALL, NAMED

    from . import helpers as h

    args, kwargs, flat = _CALLS[call]
    assert _encode_call(7, h.echo, args, kwargs, None)[1] == (NAMED if flat else CALL)
    assert pool.submit(h.typed_remote, args).result(timeout=30) == h.typed(args)
    got = pool.submit(h.echo, *args, **kwargs).result(timeout=30)
    assert h.typed(got) == h.typed((args, kwargs))
    # results of every kind come back as they were, flat or not
    for value in [*args, args, [args], {"k": args}]:
        assert h.typed(pool.submit(h.identity, value).result(timeout=30)) == h.typed(value)


@pytest.mark.timeout(30)
def test_a_flat_call_to_a_function_that_cannot_be_found_fails_with_its_name(pool):
    """A function sent by name that the worker cannot import fails the future
    with an error naming it (the flat message goes through the same loader)."""
    import types

    from interpexec._executor import _encode_call
    from interpexec._protocol import NAMED

    module = types.ModuleType("interpexec_test_nowhere")
    exec("def gone(x):\n    return x\n", module.__dict__)
    import sys

    sys.modules[module.__name__] = module
    try:
        assert _encode_call(1, module.gone, (1,), {}, None)[1] == NAMED
        with pytest.raises(BaseException, match="interpexec_test_nowhere") as info:
            pool.submit(module.gone, 1).result(timeout=20)
        assert not isinstance(info.value, (KeyboardInterrupt, SystemExit))
    finally:
        del sys.modules[module.__name__]
