"""Alias-bomb values whose walk is counted, so a test checks that code reading them does bounded
work without a clock: :class:`CountingList` and :class:`CountingDict` count every element or entry
handed out (through iteration, ``items()`` / ``values()`` / ``keys()``, ``str()`` / ``repr()``) in one shared
:class:`Visits` counter. A walk bounded by a message's length visits a few hundred; an unbounded
one visits every string of the expanded bomb (9**10 for :func:`list_bomb`)."""

from __future__ import annotations


class Visits:
    """How many elements and entries the counting containers handed out (``count``); past ``cap``
    the walk is stopped at once with an AssertionError, so an unbounded walk fails the test
    instead of running for hours."""

    def __init__(self, cap: int = 100_000) -> None:
        self.count = 0
        self.cap = cap

    def add(self, n: int = 1) -> None:
        """Count ``n`` more; raise AssertionError once past ``cap``."""
        self.count += n
        if self.count > self.cap:
            raise AssertionError(f"walked more than {self.cap} elements of an alias bomb: the walk is not bounded")


class CountingList(list):
    """A list that adds one to ``visits.count`` per element it yields when iterated."""

    def __init__(self, items, visits: Visits):
        super().__init__(items)
        self.visits = visits

    def __iter__(self):
        for item in super().__iter__():
            self.visits.add()
            yield item

    def __repr__(self):  # str() and repr() render every element
        self.visits.add(len(self))
        return super().__repr__()


class CountingDict(dict):
    """A dict that adds one to ``visits.count`` per entry it yields (keys, values, items, iteration)."""

    def __init__(self, items, visits: Visits):
        super().__init__(items)
        self.visits = visits

    def _count(self, it):
        for x in it:
            self.visits.add()
            yield x

    def __iter__(self):
        return self._count(super().__iter__())

    def items(self):
        return self._count(super().items())

    def values(self):
        return self._count(super().values())

    def keys(self):
        return self._count(super().keys())

    def __repr__(self):  # str() and repr() render every entry
        self.visits.add(len(self))
        return super().__repr__()


def list_bomb(levels: int, width: int, visits: Visits) -> CountingList:
    """``levels`` nested lists of ``width`` references to ONE list of the level below (as YAML
    aliases build them): ``width ** (levels + 1)`` strings ``"x"`` once expanded."""
    bomb = CountingList(["x"] * width, visits)
    for _ in range(levels):
        bomb = CountingList([bomb] * width, visits)
    return bomb


def map_bomb(levels: int, width: int, visits: Visits) -> CountingDict:
    """``levels`` nested maps of keys ``k0 … k<width-1>`` all naming ONE map of the level below,
    whose values are one-string lists ``["x"]`` (counted when walked): ``width ** (levels + 1)``
    of them once expanded."""
    leaf = CountingList(["x"], visits)
    bomb = CountingDict({f"k{i}": leaf for i in range(width)}, visits)
    for _ in range(levels):
        bomb = CountingDict({f"k{i}": bomb for i in range(width)}, visits)
    return bomb
