"""Await CPU-bound calls in subinterpreters from async code (asyncio or trio).

::

    from interpexec import aio

    total = await aio.run_sync(count_primes, 100_000)            # the default pool
    total = await aio.run_sync(count_primes, 100_000, executor=pool, limiter=limiter)
    value = await aio.run_sync(functools.partial(f, 1, key="x"))  # keyword arguments

:func:`run_sync` has the shape of ``anyio.to_interpreter.run_sync`` and runs under
every backend anyio supports (asyncio and trio), with or without an anyio runner.

* The call goes to a warm :class:`~interpexec.InterpreterPoolExecutor`: ``executor``
  when given, else a default pool per process, built (and its workers started) in
  a worker thread on first use, never on the event-loop thread, then reused by
  every event loop of the process.
* Waiting costs the event loop nothing: no thread is parked per call and nothing
  polls.  The loop watches a small pipe that the worker finishing the call writes
  to (:meth:`InterpreterPoolExecutor.watch`), and collects the result on its own
  thread.  Calls not yet in a worker's hands, or beyond 64 in flight, wake through a
  done-callback instead (``loop.call_soon_threadsafe`` on asyncio,
  ``TrioToken.run_sync_soon`` on trio).
* Cancelling the awaiting task (a cancel scope, ``anyio.fail_after``,
  ``asyncio.timeout``, ``Task.cancel()``...) cancels the call if it has not started
  yet and *interrupts* it if it is running (:meth:`InterpreterPoolExecutor.interrupt`:
  an exception is raised inside the task, so its ``finally`` blocks run).  The
  caller sees its cancellation at once; the worker stops in the background.
  (``loop.run_in_executor(pool, ...)`` does the same only on a pool made with
  ``InterpreterPoolExecutor(interrupt_on_cancel=True)``; otherwise, as with the
  standard executors, cancelling it leaves a running call to finish.)
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import anyio.lowlevel
import anyio.to_thread

from ._executor import InterpreterPoolExecutor

if TYPE_CHECKING:
    from anyio import CapacityLimiter

    from ._waiting import Watch

__all__ = ["current_default_executor", "current_default_interpreter_limiter", "run_sync", "set_default_executor"]


async def run_sync[*PosArgsT, T_Retval](
    func: Callable[[*PosArgsT], T_Retval],
    *args: *PosArgsT,
    limiter: CapacityLimiter | None = None,
    executor: InterpreterPoolExecutor | None = None,
) -> T_Retval:
    """Call ``func(*args)`` in a subinterpreter and return its result.

    :param func: a picklable callable (a module-level function, or a
        ``functools.partial`` of one to pass keyword arguments)
    :param args: its positional arguments (picklable; ``bytes``, ``str``, numbers
        and tuples of them are passed without pickling)
    :param limiter: an anyio ``CapacityLimiter`` held for the duration of the call,
        to bound how many calls run at once.  Without it, the event loop's
        :func:`current_default_interpreter_limiter` once that exists; before,
        none: calls beyond the pool's workers wait in the pool's queue (cheaply,
        and still cancellable).
    :param executor: the pool to run in; by default a per-process pool with one
        worker per CPU (see :func:`current_default_executor`)
    :return: what ``func`` returned
    :raises: what ``func`` raised (with the worker's traceback as ``__cause__``);
        ``concurrent.futures.CancelledError`` if the pool cancelled the call on its
        own (e.g. ``shutdown(cancel_futures=True)``)

    Cancelling the awaiting task cancels the call if it is still queued and
    interrupts it if it is running.
    """
    if executor is None:
        executor = _default
        if executor is None or not executor.usable:
            executor = await current_default_executor()
    if limiter is None and _limiters_made:
        limiter = _default_limiter.get(None)
    if limiter is None:
        return await _call(executor, func, args)
    async with limiter:
        return await _call(executor, func, args)


async def current_default_executor() -> InterpreterPoolExecutor:
    """The pool :func:`run_sync` uses when no ``executor`` is given.

    Created on first use, in a worker thread (construction and starting the
    workers never block the event loop), with one worker per CPU; a new one
    replaces it if it was shut down or broke.  It is shut down at interpreter exit.
    """
    executor = _default
    if executor is not None and executor.usable:
        return executor
    made: InterpreterPoolExecutor = await anyio.to_thread.run_sync(_make_default, abandon_on_cancel=True)
    return made


def current_default_interpreter_limiter() -> CapacityLimiter:
    """The capacity limiter :func:`run_sync` holds for a call given no ``limiter``,
    as ``anyio.to_interpreter``'s: one per event loop, with as many tokens as
    this process may use CPUs (change ``total_tokens`` to bound the calls).

    Unlike anyio's, it exists only once asked for: until then :func:`run_sync`
    holds none, and the pool's own workers bound the calls just as well (those
    beyond them wait in its queue), without a limiter's cost per call."""
    global _limiters_made
    try:
        return _default_limiter.get()
    except LookupError:
        from anyio import CapacityLimiter

        limiter = CapacityLimiter(os.process_cpu_count() or 1)
        _default_limiter.set(limiter)
        _limiters_made = True
        return limiter


def set_default_executor(executor: InterpreterPoolExecutor | None) -> None:
    """Make ``executor`` the pool :func:`run_sync` uses by default (``None``: create
    a fresh default pool on next use).  The previous default is not shut down."""
    global _default
    if executor is not None and not isinstance(executor, InterpreterPoolExecutor):
        raise TypeError(f"expected an InterpreterPoolExecutor or None, got {type(executor).__name__}")
    with _default_lock:
        _default = executor


# ------------------------------------------------------------------ default pool

_default_limiter: anyio.lowlevel.RunVar[CapacityLimiter] = anyio.lowlevel.RunVar("interpexec_default_limiter")
_limiters_made = False  # (run_sync looks for one only once some event loop made it)

_default: InterpreterPoolExecutor | None = None
_default_lock = threading.Lock()


def _make_default() -> InterpreterPoolExecutor:
    """Runs in a worker thread: build and warm the default pool (once)."""
    global _default
    with _default_lock:
        executor = _default
        if executor is None or not executor.usable:
            executor = InterpreterPoolExecutor()
            try:
                executor.prestart(wait=True)
            except BaseException:
                executor.shutdown(wait=False)
                raise
            _default = executor
        return executor


# ------------------------------------------------------------------ one call


async def _call[T](executor: InterpreterPoolExecutor, func: Callable[..., T], args: tuple[Any, ...]) -> T:
    # A call made from an already cancelled scope is never submitted.
    await anyio.lowlevel.checkpoint_if_cancelled()
    if _running_trio():
        return await _call_trio(executor, func, args)
    return await _call_asyncio(executor, func, args)


def _running_trio() -> bool:
    # trio cannot be running unless it was imported; asyncio-only programs never
    # pay for the check.
    if "trio" not in sys.modules:
        return False
    import sniffio  # a dependency of trio

    try:
        library: str = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return False
    return library == "trio"


async def _call_asyncio[T](executor: InterpreterPoolExecutor, func: Callable[..., T], args: tuple[Any, ...]) -> T:
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    fut = executor.submit(func, *args)
    watch = executor.watch(fut)
    if watch is not None:
        return await _await_watch_asyncio(loop, executor, fut, watch, waiter)
    # Not in a worker's hands yet (all busy), or too many calls in flight: a
    # done-callback, run by the thread that completes ``fut``, wakes the loop.
    loop_thread = threading.get_ident()

    def on_done(_: Future[Any]) -> None:
        # Runs in the thread that completed ``fut``: usually the pool's resolver,
        # sometimes the loop's own thread (a submit that collected results).
        if threading.get_ident() == loop_thread:
            _wake_asyncio(waiter)
            return
        try:
            loop.call_soon_threadsafe(_wake_asyncio, waiter)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    fut.add_done_callback(on_done)
    try:
        await waiter
    except BaseException:  # cancelled (or interrupted by KeyboardInterrupt...)
        executor.interrupt(fut)
        raise
    return fut.result()


async def _await_watch_asyncio[T](
    loop: asyncio.AbstractEventLoop,
    executor: InterpreterPoolExecutor,
    fut: Future[T],
    watch: Watch,
    waiter: asyncio.Future[None],
) -> T:
    """The worker that finishes the call writes to the watch's pipe, which the
    loop watches: the loop itself collects the result, with no other thread in
    between."""

    def on_readable() -> None:
        if watch.check() and not waiter.done():
            waiter.set_result(None)

    with watch:
        try:
            if not watch.check():  # (the result may have been queued before the watch was set)
                loop.add_reader(watch.fd, on_readable)
                try:
                    await waiter
                finally:
                    loop.remove_reader(watch.fd)
        except BaseException:  # cancelled (or interrupted by KeyboardInterrupt...)
            executor.interrupt(fut)
            raise
    return fut.result()


def _wake_asyncio(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _call_trio[T](executor: InterpreterPoolExecutor, func: Callable[..., T], args: tuple[Any, ...]) -> T:
    import trio

    fut = executor.submit(func, *args)
    watch = executor.watch(fut)
    if watch is None:  # not in a worker's hands yet, or very many calls in flight
        return await _call_trio_token(executor, fut)
    # trio's I/O wait on the watch's pipe wakes this task itself, one scheduler
    # pass sooner than a TrioToken.run_sync_soon callback could.
    with watch:
        try:
            while not watch.check():
                await trio.lowlevel.wait_readable(watch.fd)
        except BaseException:  # cancelled
            executor.interrupt(fut)
            raise
    return fut.result()


async def _call_trio_token[T](executor: InterpreterPoolExecutor, fut: Future[T]) -> T:
    import trio

    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()
    waiting = [True]  # read and written only on the trio thread

    def wake() -> None:
        if waiting[0]:
            waiting[0] = False
            trio.lowlevel.reschedule(task)

    def on_done(_: Future[Any]) -> None:
        # Any thread.  Even when called right away (``fut`` already done), the
        # wake-up runs only after this task has gone to sleep below.
        try:
            token.run_sync_soon(wake)
        except trio.RunFinishedError:
            pass

    def abort(_: Any) -> trio.lowlevel.Abort:
        waiting[0] = False
        executor.interrupt(fut)
        return trio.lowlevel.Abort.SUCCEEDED

    fut.add_done_callback(on_done)
    await trio.lowlevel.wait_task_rescheduled(abort)
    return fut.result()
