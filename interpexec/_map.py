"""``map()``'s iterator and how a chunk of items travels as one task."""

from __future__ import annotations

import collections
import itertools
import time
import weakref

from ._compat import RLock, lock_level, outer_level, release_if_owned

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from concurrent.futures import Future
    from typing import Any, Protocol

    class Submitter(Protocol):
        """What the iterator needs of its executor."""

        def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]: ...

        def interrupt(self, future: Future[Any]) -> bool: ...


class MapIterator:
    """The iterator ``map`` returns.  Unlike a bare generator it cancels the
    futures not yet consumed when it is closed or garbage-collected even before
    the first ``next()``."""

    def __init__(
        self,
        executor: Submitter,
        fs: collections.deque[Future[Any]],
        args_iter: Iterator[Any],
        call: Callable[..., Any],
        buffersize: int | None,
        end_time: float | None,
        interrupt_on_timeout: bool,
        chunked: bool,
    ) -> None:
        self._executor_ref = weakref.ref(executor)
        self._fs = fs
        self._args_iter = args_iter
        self._call = call
        self._buffersize = buffersize
        self._end_time = end_time
        self._interrupt_on_timeout = interrupt_on_timeout
        self._chunk: Iterator[Any] | None = iter(()) if chunked else None
        # Several threads may share one iterator: each value goes to one of them.
        # (Re-entrant so that one a Ctrl-C leaked can be released, see __next__.)
        self._lock = RLock()  # (the C one: see _compat.lock_level)

    def __iter__(self) -> MapIterator:
        return self

    def __next__(self) -> Any:
        chunk = self._chunk
        if chunk is not None:
            # The common case, lock-free: the next value of the current chunk
            # (next() on a tuple iterator is atomic, so threads sharing the
            # iterator still get each value once).
            for value in chunk:
                return value
        level = lock_level(self._lock)  # (not 0 in a signal handler run inside _next_locked)
        try:
            return self._next_locked()
        except BaseException:
            release_if_owned(self._lock, outer_level(level))  # a Ctrl-C must not leave it held
            raise

    def _next_locked(self) -> Any:
        with self._lock:
            try:
                if self._chunk is None:
                    return self._next_result()
                while True:
                    for value in self._chunk:
                        return value
                    self._chunk = iter(self._next_result())
            except StopIteration as exc:
                if exc.args and exc.args[0] is _EXHAUSTED:
                    raise StopIteration from None
                # A task raised StopIteration: an error, not the end of the
                # results (as the standard executors' map generators say, PEP 479).
                raise RuntimeError("a task of map() raised StopIteration") from exc

    def _next_result(self) -> Any:
        fs = self._fs
        if not fs:
            raise StopIteration(_EXHAUSTED)
        if self._buffersize and (ex := self._executor_ref()) is not None:
            try:
                args = next(self._args_iter, None)
                if args is not None:
                    fs.append(ex.submit(self._call, *args))
            except BaseException:
                # The input raised (or the pool refused the call): the map
                # ends here, as the standard executors' generator does, and
                # what it submitted is cancelled.
                self.close()
                raise
            finally:
                del ex
        # The future stays in fs until it has a result, so close() covers it.
        fut = fs[0]
        try:
            if self._end_time is None:
                value = fut.result()
            else:
                value = fut.result(self._end_time - time.monotonic())
        except TimeoutError:
            if self._interrupt_on_timeout and (ex := self._executor_ref()) is not None:
                for f in fs:
                    ex.interrupt(f)
            self.close()
            raise
        except KeyboardInterrupt:
            # Ctrl-C while waiting: the rest of the results are unreachable now;
            # stop the tasks still running rather than let them run out.
            if (ex := self._executor_ref()) is not None:
                for f in fs:
                    ex.interrupt(f)
            self.close()
            raise
        except BaseException:
            self.close()
            raise
        fs.popleft()
        return value

    def close(self) -> None:
        """Cancel the futures not consumed yet."""
        fs = getattr(self, "_fs", ())  # (none if a Ctrl-C cut __init__ short)
        while fs:
            fs.pop().cancel()

    def __del__(self) -> None:
        self.close()


_EXHAUSTED = object()


class ChunkCall:
    """Marks a map chunk: the worker runs ``fn`` over every args tuple of the chunk
    in one task (one round trip per chunk)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, chunk: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...]:
        return tuple([self.fn(*args) for args in chunk])


def chunks(it: Iterator[tuple[Any, ...]], size: int) -> Iterator[tuple[tuple[Any, ...], ...]]:
    while chunk := tuple(itertools.islice(it, size)):
        yield chunk
