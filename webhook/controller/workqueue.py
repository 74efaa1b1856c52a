"""A work queue of gang keys with per-key rate-limited retries, in the shape of client-go's
``workqueue`` (``k8s.io/client-go/util/workqueue``: ``Type``, ``DelayingQueue``,
``RateLimitingQueue``, ``ItemExponentialFailureRateLimiter``), which controller-runtime and
Kueue's TopologyUngater reconcile from.

Guarantees, as client-go's queue gives them:

* **Dedup**: a key added while it waits in the queue is queued once.
* **One worker per key**: a key being processed (between :meth:`WorkQueue.get` and
  :meth:`WorkQueue.done`) is not handed to another worker; added meanwhile, it is queued again
  when ``done`` is called, so the change that came during processing is seen.
* **First in line** (not client-go's): :meth:`WorkQueue.add` with ``first=True`` puts the key
  ahead of every key added without it, or moves it there when it waits already; the keys added
  first are handed out in the order they came (the advisory controller's new pending gangs go
  before the opinions it keeps current as the capacity moves, the earliest refused first: in a
  burst of refusals the first refused no longer waits for all that came after it, issue 36). A
  key added first while it is processed is queued first again when it is done.
* **Delays**: :meth:`WorkQueue.add_after` queues a key after a delay (the earliest of several
  delays of one key wins).
* **Rate-limited retries**: :meth:`WorkQueue.add_rate_limited` delays a key by
  ``min(maximum, base * 2**failures)`` seconds, ``failures`` counting the key's earlier
  rate-limited adds; :meth:`WorkQueue.forget` resets the key (after a success).
* **One back-off ledger**: the queue's :class:`ExponentialRateLimiter` is also where a key's
  back-off deadline is kept (:meth:`ExponentialRateLimiter.defer`, :meth:`~ExponentialRateLimiter.not_before`):
  the controller's gangs that wait for capacity are queued, on a change, no earlier than that
  (:mod:`webhook.controller.runner`); one ``forget`` resets both.

Pure Python (threading only), no kubernetes import (tests/unit/project/test_layout.py).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable


class ExponentialRateLimiter:
    """Per-key exponential back-off, client-go's ``ItemExponentialFailureRateLimiter``, and the
    controller's one back-off ledger: ``when(key)`` returns ``min(maximum, base * 2**n)`` seconds
    for the key's n-th call (n from 0) and counts it; ``defer(key)`` does the same and records
    ``clock() + that`` as the key's :meth:`not_before` time; ``forget(key)`` resets both;
    ``failures(key)`` is n. ``base`` and ``maximum`` in seconds; ``clock``: monotonic seconds
    (tests pass a fake one); ``ValueError`` unless ``0 < base <= maximum``."""

    def __init__(self, base: float, maximum: float, clock: Callable[[], float] = time.monotonic):
        if not 0 < base <= maximum:
            raise ValueError(f"ExponentialRateLimiter(base={base}, maximum={maximum}): need 0 < base <= maximum")
        self.base, self.maximum = base, maximum
        self._clock = clock
        self._failures: dict[Hashable, int] = {}
        self._not_before: dict[Hashable, float] = {}
        self._lock = threading.Lock()

    def when(self, key: Hashable) -> float:
        """Delay in seconds before ``key``'s next attempt (and one more failure counted)."""
        with self._lock:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        return min(self.maximum, self.base * 2.0 ** min(n, 64))

    def defer(self, key: Hashable) -> float:
        """:meth:`when`, and the key is not to be attempted before ``clock()`` plus that delay
        (:meth:`not_before`); returns the delay in seconds."""
        delay = self.when(key)
        with self._lock:
            self._not_before[key] = self._clock() + delay
        return delay

    def not_before(self, key: Hashable) -> float | None:
        """The ``clock()`` time before which ``key`` is not attempted (its last :meth:`defer`),
        None when it was not deferred since it was last forgotten."""
        with self._lock:
            return self._not_before.get(key)

    def failures(self, key: Hashable) -> int:
        """How many times ``key`` was rate limited since it was last forgotten."""
        with self._lock:
            return self._failures.get(key, 0)

    def forget(self, key: Hashable) -> None:
        """Reset ``key``'s back-off and forget its :meth:`not_before` time."""
        with self._lock:
            self._failures.pop(key, None)
            self._not_before.pop(key, None)


class ShutDown(Exception):
    """Raised by :meth:`WorkQueue.get` once the queue is shut down."""


class WorkQueue:
    """The queue (module docstring). ``rate_limiter``: an :class:`ExponentialRateLimiter`;
    ``clock``: seconds, monotonic (tests pass a fake one). Thread-safe."""

    def __init__(self, rate_limiter: ExponentialRateLimiter, clock: Callable[[], float] = time.monotonic):
        self.rate_limiter = rate_limiter
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: deque[Hashable] = deque()
        self._first: deque[Hashable] = deque()  # keys added first, handed out before _queue's
        self._urgent: set[Hashable] = set()  # keys added first while processed
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._waiting: list[tuple[float, int, Hashable]] = []  # heap of (ready at, seq, key)
        self._ready_at: dict[Hashable, float] = {}
        self._seq = itertools.count()
        self._shut_down = False

    def add(self, key: Hashable, first: bool = False) -> None:
        """Queue ``key`` now (once, however often it is added before a worker takes it); with
        ``first``, behind the keys added first before it and ahead of all others (moved there when
        it waits among the others already)."""
        with self._cond:
            if first and key in self._dirty and not self._shut_down:
                if key in self._processing:
                    self._urgent.add(key)
                elif key not in self._first:
                    self._queue.remove(key)
                    self._first.append(key)
                return
            self._add(key, first)

    def _add(self, key: Hashable, first: bool = False) -> None:
        if self._shut_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            (self._first if first else self._queue).append(key)
            self._cond.notify()
        elif first:
            self._urgent.add(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds (at once when ``delay <= 0``)."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shut_down:
                return
            at = self._clock() + delay
            if self._ready_at.get(key, float("inf")) <= at:
                return
            self._ready_at[key] = at
            heapq.heappush(self._waiting, (at, next(self._seq), key))
            self._cond.notify()

    def add_rate_limited(self, key: Hashable) -> float:
        """Queue ``key`` after its rate limiter's delay; returns that delay in seconds."""
        delay = self.rate_limiter.when(key)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        """Reset ``key``'s rate limiting (a success)."""
        self.rate_limiter.forget(key)

    def _promote(self) -> float | None:
        """Queue every delayed key that is due; seconds until the next one, or None."""
        now = self._clock()
        while self._waiting:
            at, _, key = self._waiting[0]
            if self._ready_at.get(key) != at:
                heapq.heappop(self._waiting)  # superseded by an earlier delay
                continue
            if at > now:
                return at - now
            heapq.heappop(self._waiting)
            del self._ready_at[key]
            self._add(key)
        return None

    def get(self, timeout: float | None = None) -> Hashable | None:
        """The next key to process (the caller must call :meth:`done` with it), ``None`` after
        ``timeout`` seconds without one. Raises :class:`ShutDown` once shut down."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shut_down:
                    raise ShutDown()
                wait = self._promote()
                if self._first or self._queue:
                    key = self._first.popleft() if self._first else self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                if deadline is not None:
                    left = deadline - self._clock()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def done(self, key: Hashable) -> None:
        """``key`` is processed; if it was added meanwhile, it is queued again."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                (self._first if key in self._urgent else self._queue).append(key)
                self._cond.notify()
            self._urgent.discard(key)

    def shut_down(self) -> None:
        """Wake every waiting :meth:`get` with :class:`ShutDown`; later adds are ignored."""
        with self._cond:
            self._shut_down = True
            self._cond.notify_all()

    def __len__(self) -> int:
        """Keys queued now (not the delayed ones, not those being processed)."""
        with self._cond:
            return len(self._first) + len(self._queue)

    def idle(self) -> bool:
        """True when nothing is queued, delayed or being processed."""
        with self._cond:
            return not self._first and not self._queue and not self._processing and not self._ready_at
