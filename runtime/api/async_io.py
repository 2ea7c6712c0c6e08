"""Async I/O, as PyFlink 2.x's ``AsyncDataStream`` / ``AsyncFunction``: call an external service
for each record without waiting for one answer before sending the next request.

    class Lookup(AsyncFunction):
        async def async_invoke(self, value):
            return [await client.get(value)]          # a list: zero or more results

        def timeout(self, value):                      # optional: the result when it took too long
            return []

    AsyncDataStream.unordered_wait(stream, Lookup(), Time.seconds(5), capacity=100)
    AsyncDataStream.ordered_wait_with_retry(stream, Lookup(), Time.seconds(5),
        AsyncRetryStrategy.fixed_delay(3, 100, None, lambda e: isinstance(e, ConnectionError)))

The operator (``task/async_wait.py``) is Flink's AsyncWaitOperator: up to ``capacity`` requests per
subtask run on an asyncio loop while the task goes on; ``ordered_wait`` emits results in input order,
``unordered_wait`` as they complete but never across a watermark. Requests in flight are part of
every checkpoint and are sent again on restore, so results are exactly-once like any other operator's
(the service may see a request twice: make it idempotent, as with Flink).
"""

from __future__ import annotations

import inspect
from enum import Enum
from typing import Any, Callable, Optional

from .functions import Function

__all__ = ["AsyncDataStream", "AsyncFunction", "AsyncFunctionDescriptor", "AsyncRetryPredicate",
           "AsyncRetryStrategy"]


class AsyncFunction(Function):
    """``async def async_invoke(self, value)`` returns a list of results for ``value``; ``timeout(value)``
    (plain ``def``) is called instead when ``timeout`` passed first. The default fails the job,
    naming the operator and the record (as Flink's)."""

    async def async_invoke(self, value: Any) -> list:
        raise NotImplementedError

    def timeout(self, value: Any) -> list:
        raise TimeoutError("Async function call has timed out.")


class AsyncRetryPredicate(Function):
    """When a result or an exception of ``async_invoke`` is worth another attempt."""

    def result_predicate(self) -> Optional[Callable[[list], bool]]:
        return None

    def exception_predicate(self) -> Optional[Callable[[Exception], bool]]:
        return None


class RetryPredicate(AsyncRetryPredicate):
    def __init__(self, result_predicate: Optional[Callable[[list], bool]],
                 exception_predicate: Optional[Callable[[Exception], bool]]):
        self._result_predicate = result_predicate
        self._exception_predicate = exception_predicate

    def result_predicate(self) -> Optional[Callable[[list], bool]]:
        return self._result_predicate

    def exception_predicate(self) -> Optional[Callable[[Exception], bool]]:
        return self._exception_predicate


class AsyncRetryStrategy(Function):
    """Whether attempt ``current_attempts`` (1 after the first failed one) may be followed by another,
    after how long, and on which results/exceptions. All attempts share the operator's ``timeout``."""

    def can_retry(self, current_attempts: int) -> bool:
        raise NotImplementedError

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        raise NotImplementedError

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        raise NotImplementedError

    @staticmethod
    def no_retry() -> "AsyncRetryStrategy":
        return NO_RETRY_STRATEGY

    @staticmethod
    def fixed_delay(max_attempts: int, backoff_time_millis: int,
                    result_predicate: Optional[Callable[[list], bool]] = None,
                    exception_predicate: Optional[Callable[[Exception], bool]] = None) -> "AsyncRetryStrategy":
        return FixedDelayRetryStrategy(max_attempts, backoff_time_millis, result_predicate, exception_predicate)

    @staticmethod
    def exponential_backoff(max_attempts: int, initial_delay: int, max_retry_delay: int, multiplier: float,
                            result_predicate: Optional[Callable[[list], bool]] = None,
                            exception_predicate: Optional[Callable[[Exception], bool]] = None) -> "AsyncRetryStrategy":
        return ExponentialBackoffDelayRetryStrategy(max_attempts, initial_delay, max_retry_delay, multiplier,
                                                    result_predicate, exception_predicate)


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a number greater than zero, got {value!r}")


class NoRetryStrategy(AsyncRetryStrategy):
    def can_retry(self, current_attempts: int) -> bool:
        return False

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return -1

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return RetryPredicate(None, None)


class FixedDelayRetryStrategy(AsyncRetryStrategy):
    def __init__(self, max_attempts: int, backoff_time_millis: int,
                 result_predicate: Optional[Callable[[list], bool]] = None,
                 exception_predicate: Optional[Callable[[Exception], bool]] = None):
        _positive("max_attempts", max_attempts)
        _positive("backoff_time_millis", backoff_time_millis)
        self._max_attempts = max_attempts
        self._backoff = backoff_time_millis
        self._predicate = RetryPredicate(result_predicate, exception_predicate)

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self._max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return self._backoff

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return self._predicate


class ExponentialBackoffDelayRetryStrategy(AsyncRetryStrategy):
    def __init__(self, max_attempts: int, initial_delay: int, max_retry_delay: int, multiplier: float,
                 result_predicate: Optional[Callable[[list], bool]] = None,
                 exception_predicate: Optional[Callable[[Exception], bool]] = None):
        for name, value in (("max_attempts", max_attempts), ("initial_delay", initial_delay),
                            ("max_retry_delay", max_retry_delay), ("multiplier", multiplier)):
            _positive(name, value)
        self._max_attempts = max_attempts
        self._initial = initial_delay
        self._max_delay = max_retry_delay
        self._multiplier = multiplier
        self._predicate = RetryPredicate(result_predicate, exception_predicate)

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self._max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        # From the attempt number alone (PyFlink keeps the last delay in the strategy, which requests
        # in flight together would share): initial * multiplier^(n-1), at most max_retry_delay.
        delay = self._initial * self._multiplier ** max(0, current_attempts - 1)
        return int(min(delay, self._max_delay))

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return self._predicate


NO_RETRY_STRATEGY: AsyncRetryStrategy = NoRetryStrategy()


class AsyncFunctionDescriptor:
    """What the operator needs of one async stage: the function, timeout (ms; 0: none), capacity,
    retry strategy and output mode. Plain data: it pickles to the tasks with the plan."""

    class OutputMode(Enum):
        ORDERED = 0
        UNORDERED = 1

    def __init__(self, async_function: AsyncFunction, timeout: Any, capacity: int,
                 async_retry_strategy: AsyncRetryStrategy, output_mode: "AsyncFunctionDescriptor.OutputMode"):
        self.async_function = async_function
        self.timeout = timeout
        self.capacity = capacity
        self.async_retry_strategy = async_retry_strategy
        self.output_mode = output_mode

    @property
    def timeout_ms(self) -> int:
        return _timeout_ms(self.timeout)

    @property
    def ordered(self) -> bool:
        return self.output_mode == AsyncFunctionDescriptor.OutputMode.ORDERED


def _timeout_ms(timeout: Any) -> int:
    to_ms = getattr(timeout, "to_milliseconds", None)
    if not callable(to_ms):
        raise TypeError(f"the timeout of an async function is a Time or Duration (Time.seconds(5)), got {timeout!r}")
    return int(to_ms())


class AsyncDataStream:
    """Applies an :class:`AsyncFunction` to a data stream (PyFlink's signatures; ``output_type`` is
    the declared type of the results, as for ``map``)."""

    @staticmethod
    def unordered_wait(data_stream: Any, async_function: AsyncFunction, timeout: Any, capacity: int = 100,
                       output_type: Any = None) -> Any:
        """Results leave as they complete (never across a watermark)."""
        return AsyncDataStream.unordered_wait_with_retry(data_stream, async_function, timeout, NO_RETRY_STRATEGY,
                                                         capacity, output_type)

    @staticmethod
    def unordered_wait_with_retry(data_stream: Any, async_function: AsyncFunction, timeout: Any,
                                  async_retry_strategy: AsyncRetryStrategy, capacity: int = 100,
                                  output_type: Any = None) -> Any:
        return AsyncDataStream._apply(data_stream, async_function, timeout, async_retry_strategy, capacity,
                                      output_type, AsyncFunctionDescriptor.OutputMode.UNORDERED)

    @staticmethod
    def ordered_wait(data_stream: Any, async_function: AsyncFunction, timeout: Any, capacity: int = 100,
                     output_type: Any = None) -> Any:
        """Results leave in the order of their input records."""
        return AsyncDataStream.ordered_wait_with_retry(data_stream, async_function, timeout, NO_RETRY_STRATEGY,
                                                       capacity, output_type)

    @staticmethod
    def ordered_wait_with_retry(data_stream: Any, async_function: AsyncFunction, timeout: Any,
                                async_retry_strategy: AsyncRetryStrategy, capacity: int = 100,
                                output_type: Any = None) -> Any:
        return AsyncDataStream._apply(data_stream, async_function, timeout, async_retry_strategy, capacity,
                                      output_type, AsyncFunctionDescriptor.OutputMode.ORDERED)

    @staticmethod
    def _apply(data_stream: Any, fn: AsyncFunction, timeout: Any, strategy: AsyncRetryStrategy, capacity: int,
               output_type: Any, mode: "AsyncFunctionDescriptor.OutputMode") -> Any:
        from . import transformations as T
        from .datastream import DataStream

        descriptor = _validate(fn, timeout, strategy, capacity, mode)
        stream: DataStream = data_stream
        name = "Async" + ("Ordered" if descriptor.ordered else "Unordered") + f"Wait({type(fn).__name__})"
        return DataStream(stream._env, stream._one_input(T.ASYNC_WAIT, name, descriptor), output_type)


def _validate(fn: Any, timeout: Any, strategy: Any, capacity: Any,
              mode: "AsyncFunctionDescriptor.OutputMode") -> AsyncFunctionDescriptor:
    """The mistakes PyFlink refuses when the job is built, with its messages where it has them."""
    invoke = getattr(fn, "async_invoke", None)
    if not inspect.iscoroutinefunction(invoke):
        raise TypeError(f"Method 'async_invoke' of class '{type(fn).__name__}' should be declared as 'async def'.")
    if inspect.iscoroutinefunction(getattr(fn, "timeout", None)):
        raise TypeError(f"Method 'timeout' of class '{type(fn).__name__}' is a plain 'def' (it returns the "
                        f"results for a record that timed out), not 'async def'")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
        raise ValueError(f"the capacity of an async function is a whole number greater than zero, got {capacity!r}")
    if strategy is None:
        raise ValueError("Async retry strategy should not be None.")
    if not isinstance(strategy, AsyncRetryStrategy):
        raise TypeError(f"the retry strategy is an AsyncRetryStrategy (AsyncRetryStrategy.fixed_delay(...)), "
                        f"got {strategy!r}")
    timeout_ms = _timeout_ms(timeout)
    if strategy is not NO_RETRY_STRATEGY and timeout_ms <= 0:
        raise ValueError("Timeout should be configured when do async with retry.")
    if strategy.get_retry_predicate() is None:
        raise ValueError(f"Retry predicate of the async retry strategy '{type(strategy).__name__}' is None.")
    return AsyncFunctionDescriptor(fn, timeout, capacity, strategy, mode)
