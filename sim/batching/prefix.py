"""The automatic prefix cache of a continuous-batching engine (vLLM's automatic prefix caching, SGLang's radix cache),
at the granularity of a request's shared segments rather than of its tokens.

vLLM keeps the KV blocks of running and finished sequences keyed by the hash of every token up to the block's end; a
new request reuses the longest run of cached full blocks (``block_size`` tokens) its prompt begins with; cached
blocks no running request uses are evictable, least recently used first, when the pool needs room. Here a prompt's
shareable prefix is at most two segments (:class:`sim.serving.workload.RequestTable`'s ``prefix_segment`` and
``prefix_tokens``): a system prompt of N tokens, then a chat session's history. The cache holds, per segment, how
many of its tokens are resident, in whole blocks:

- a system prompt covers the full blocks inside its N tokens (``N // block x block``); a session covers the full
  blocks after those, up to the end of its history (the block that straddles the system prompt's end is the
  session's: it holds the session's first tokens);
- a request hits the resident tokens of its segments in prompt order: its system prompt's, and its history's only
  when the whole system prompt hit (hashes chain: a block is found only after every block before it);
- a request references its segments from admission until it ends or is preempted; a segment no running request
  references is idle (evictable). Idle tokens count as free space for admission; when the running requests' KV and
  the idle tokens together exceed the pool, idle segments are evicted least recently released first, each from its
  tail, a block at a time (as vLLM frees a finished request's blocks tail first);
- when a request's prompt has been read, its segments become resident in full (the tokens it prefilled move from
  its own KV to the cache: a shared segment is held once, whatever the number of requests reading it); when a chat
  turn ends, its session's segment grows to cover the turn's whole sequence (prompt and answer), which the next
  turn's history resends.

Simplifications: a request's blocks outside shared segments (its own question, a single request's answer) are freed
when it ends, not kept as evictable cache no later request could hit (in vLLM they wait in the free queue and may
push out older idle prefixes first); blocks become shareable when the prompt's last chunk is read, not chunk by
chunk; a preempted request drops its references (recompute: its readmission looks the cache up again; swap: its
whole context goes to host memory and back, shared blocks included).
"""

from __future__ import annotations

import math
from collections import OrderedDict


class PrefixCache:
    """Resident tokens per segment id, reference counts, and the idle segments in least-recently-released order."""

    def __init__(self, block: int) -> None:
        self.block = block  # tokens per KV block
        self.resident: dict[int, int] = {}  # segment -> resident tokens (whole blocks)
        self.refs: dict[int, int] = {}  # segment -> running requests referencing it
        self.idle: OrderedDict[int, None] = OrderedDict()  # resident segments nobody references, LRU first
        self.referenced_tokens = 0  # resident tokens of referenced segments (KV in use)
        self.idle_tokens = 0  # resident tokens of idle segments (free for admission, evictable)
        self.evicted_tokens = 0  # tokens evicted so far

    def full(self, tokens: int) -> int:
        """``tokens`` rounded down to whole blocks."""
        return tokens // self.block * self.block

    def lookup(self, segments: tuple[tuple[int, int], ...]) -> int:
        """Tokens of a prompt found in the cache: ``segments`` are its (segment id, tokens the segment would cover
        in whole blocks) in prompt order, id -1 for none; each counts only when every one before it hit in full.
        An idle segment after a miss can no longer be reached (its blocks' hashes chain through the missing ones):
        it is dropped, as counted evicted."""
        hit = 0
        reached = True
        for seg, span in segments:
            if seg < 0:
                continue
            if not reached:
                if seg in self.idle:
                    self._drop(seg)
                continue
            have = min(self.resident.get(seg, 0), span)
            hit += have
            reached = have == span
        return hit

    def _drop(self, seg: int) -> None:
        tokens = self.resident.pop(seg)
        del self.idle[seg]
        self.idle_tokens -= tokens
        self.evicted_tokens += tokens

    def idle_of(self, segments: tuple[tuple[int, int], ...]) -> int:
        """Idle tokens referencing ``segments`` would take out of the free space (they become KV in use)."""
        return sum(self.resident.get(seg, 0) for seg, _ in segments if seg >= 0 and not self.refs.get(seg))

    def acquire(self, segments: tuple[tuple[int, int], ...]) -> None:
        """A running request references ``segments`` (not evictable while it does)."""
        for seg, _ in segments:
            if seg < 0:
                continue
            count = self.refs.get(seg, 0)
            self.refs[seg] = count + 1
            if not count and seg in self.idle:
                del self.idle[seg]
                tokens = self.resident[seg]
                self.idle_tokens -= tokens
                self.referenced_tokens += tokens

    def release(self, segments: tuple[tuple[int, int], ...]) -> None:
        """A request stops referencing ``segments``: released last first, so that a prompt's tail is evicted
        before its head (its system prompt outlives its history)."""
        for seg, _ in reversed(segments):
            if seg < 0:
                continue
            count = self.refs[seg] - 1
            if count:
                self.refs[seg] = count
                continue
            del self.refs[seg]
            tokens = self.resident.get(seg, 0)
            if tokens:
                self.idle[seg] = None
                self.idle_tokens += tokens
                self.referenced_tokens -= tokens

    def insert(self, seg: int, tokens: int) -> int:
        """Segment ``seg``, referenced by the caller, is resident up to ``tokens`` (whole blocks); returns the tokens
        added."""
        if seg < 0:
            return 0
        have = self.resident.get(seg, 0)
        if tokens <= have:
            return 0
        self.resident[seg] = tokens
        self.referenced_tokens += tokens - have
        return tokens - have

    def fit(self, room: float) -> None:
        """Evict idle tokens, least recently released segment first and each from its tail in whole blocks, until
        at most ``room`` tokens are idle."""
        while self.idle_tokens > room + 1e-9 and self.idle:  # a float sum's last bit does not evict a block
            seg = next(iter(self.idle))
            have = self.resident[seg]
            take = min(have, math.ceil((self.idle_tokens - room) / self.block) * self.block)
            self.idle_tokens -= take
            self.evicted_tokens += take
            if take < have:
                self.resident[seg] = have - take
            else:
                del self.resident[seg]
                del self.idle[seg]
