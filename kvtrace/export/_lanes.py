"""Lanes for spans that overlap: each span takes the lowest-numbered lane free at its
start, so a lane's slices never overlap and as few lanes are used as the busiest moment
needs (spans taken in order of their starts)."""

from __future__ import annotations

import heapq


class Lanes:
    """Hand out lanes 0, 1, ... to spans given in order of their starts."""

    def __init__(self) -> None:
        self._busy: list[tuple[float, int]] = []  # (end, lane) of spans still running
        self._free: list[int] = []
        self.count = 0

    def take(self, start: float, end: float) -> int:
        """The lane of the span [start, end): one whose last span ended by ``start``."""
        while self._busy and self._busy[0][0] <= start:
            heapq.heappush(self._free, heapq.heappop(self._busy)[1])
        if self._free:
            lane = heapq.heappop(self._free)
        else:
            lane, self.count = self.count, self.count + 1
        heapq.heappush(self._busy, (end, lane))
        return lane
