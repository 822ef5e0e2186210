"""A step's time as a ledger of work: amounts of bytes and FLOPs over rates, and counts of fixed costs.

The llama.cpp engine never computes a time directly. It writes what a decode step or a prompt ubatch does into a
:class:`Ledger`, and the ledger is evaluated under a set of cost parameters:

- a *term* is one piece of work on one device: ``weight x`` the largest of up to three sums of addends (a roofline:
  the reads, the arithmetic and a CPU's thread-limited reads overlap, the longest counts; a copy bound both by the
  link and by host memory);
- an *addend* is ``amount / rate``, where a *channel* names the rate: a parameter (a share such as
  ``gpu_memory_efficiency.cuda``, or none) times a spec (the card's bytes/s or FLOP/s), optionally over a second
  parameter (a matrix kernel's fixed work per weight, ``gemm_half_rows``, costed as rows at the same rate, or None)
  and times a third (a share every rate of one kind of device gets, ``soc_compute_share``);
- *fixed* costs are counts of a parameter in seconds (graph nodes x ``node_s.cuda``, hand-overs x ``split_s``).

The same ledger gives the simulator's step time and, compiled with many others into arrays
(:class:`CompiledLedgers`), the fit's predictions for hundreds of runs in one numpy pass per parameter vector: the
fit and the simulation cannot disagree, because they are one computation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

# (parameter or None for 1, spec: bytes/s or FLOP/s[, a parameter the rate is divided by or None[, a parameter it is
# multiplied by]]): rate = spec x p [/ q] [x m]
Channel = tuple
GROUPS = 3  # sums a term takes the largest of


@dataclass
class Ledger:
    """Work of one step (or of a whole test: ledgers add), in the module docstring's terms."""

    term_weight: list[float] = field(default_factory=list)
    term_category: list[str] = field(default_factory=list)
    add_term: list[int] = field(default_factory=list)  # per addend: its term
    add_group: list[int] = field(default_factory=list)  # per addend: 0, 1 or 2
    add_amount: list[float] = field(default_factory=list)  # bytes or FLOPs
    add_channel: list[Channel] = field(default_factory=list)
    fixed: dict[str, float] = field(default_factory=dict)  # parameter -> count
    fixed_category: dict[str, str] = field(default_factory=dict)  # parameter -> category it is reported under

    def term(self, category: str, first: Iterable[tuple[float, Channel]],
             second: Iterable[tuple[float, Channel]] = (), third: Iterable[tuple[float, Channel]] = (),
             weight: float = 1.0) -> None:
        """Add ``weight x max(sum(first), sum(second), sum(third))``; each item ``(amount, channel)``; zero amounts
        dropped."""
        index = len(self.term_weight)
        added = False
        for group, items in ((0, first), (1, second), (2, third)):
            for amount, channel in items:
                if amount > 0:
                    self.add_term.append(index)
                    self.add_group.append(group)
                    self.add_amount.append(float(amount))
                    self.add_channel.append(channel)
                    added = True
        if added:
            self.term_weight.append(float(weight))
            self.term_category.append(category)

    def count(self, parameter: str, n: float, category: str = "fixed") -> None:
        """Add ``n`` times the fixed cost ``parameter`` (s)."""
        if n:
            self.fixed[parameter] = self.fixed.get(parameter, 0.0) + float(n)
            self.fixed_category.setdefault(parameter, category)

    def extend(self, other: Ledger, weight: float = 1.0) -> None:
        """Add ``weight`` times ``other``'s work."""
        base = len(self.term_weight)
        self.term_weight += [w * weight for w in other.term_weight]
        self.term_category += other.term_category
        self.add_term += [t + base for t in other.add_term]
        self.add_group += other.add_group
        self.add_amount += other.add_amount
        self.add_channel += other.add_channel
        for k, v in other.fixed.items():
            self.fixed[k] = self.fixed.get(k, 0.0) + v * weight
            self.fixed_category.setdefault(k, other.fixed_category.get(k, "fixed"))

    def compact(self) -> Ledger:
        """The same work with identical terms merged (their weights summed): a model's blocks repeat the same
        parts, so a step of 48 blocks becomes a few dozen distinct terms."""
        addends: dict[int, list] = {}
        for t, g, a, ch in zip(self.add_term, self.add_group, self.add_amount, self.add_channel, strict=True):
            addends.setdefault(t, []).append((g, a, ch))
        merged: dict[tuple, int] = {}
        out = Ledger(fixed=dict(self.fixed), fixed_category=dict(self.fixed_category))
        for t, (w, c) in enumerate(zip(self.term_weight, self.term_category, strict=True)):
            key = (c, tuple(addends.get(t, ())))
            if key in merged:
                out.term_weight[merged[key]] += w
                continue
            merged[key] = len(out.term_weight)
            out.term_weight.append(w)
            out.term_category.append(c)
            for g, a, ch in key[1]:
                out.add_term.append(merged[key])
                out.add_group.append(g)
                out.add_amount.append(a)
                out.add_channel.append(ch)
        return out

    def parameters(self) -> set[str]:
        """Every parameter the ledger's rates and fixed costs name."""
        names = {ch[0] for ch in self.add_channel if ch[0] is not None}
        names |= {ch[2] for ch in self.add_channel if len(ch) > 2 and ch[2] is not None}
        return names | {ch[3] for ch in self.add_channel if len(ch) > 3} | set(self.fixed)

    def seconds_by_category(self, values: Mapping[str, float]) -> dict[str, float]:
        """Seconds of the work by category under the parameter ``values`` (a term's time goes to its category)."""
        n = len(self.term_weight)
        out: dict[str, float] = {}
        if n:
            rates = {ch: _rate(ch, values) for ch in set(self.add_channel)}
            per_add = np.array(self.add_amount) / np.array([rates[ch] for ch in self.add_channel])
            slots = np.bincount(GROUPS * np.array(self.add_term) + np.array(self.add_group), weights=per_add,
                                minlength=GROUPS * n)
            terms = slots.reshape(n, GROUPS).max(axis=1) * np.array(self.term_weight)
            for c, t in zip(self.term_category, terms.tolist(), strict=True):
                out[c] = out.get(c, 0.0) + t
        for p, k in self.fixed.items():
            c = self.fixed_category.get(p, "fixed")
            out[c] = out.get(c, 0.0) + k * values[p]
        return out

    def seconds(self, values: Mapping[str, float]) -> float:
        """Seconds of the work under the parameter ``values``."""
        return sum(self.seconds_by_category(values).values())


def _rate(ch: Channel, values: Mapping[str, float]) -> float:
    rate = ch[1] * (values[ch[0]] if ch[0] is not None else 1.0)
    if len(ch) > 3:
        rate *= values[ch[3]]
    return rate / values[ch[2]] if len(ch) > 2 and ch[2] is not None else rate


@dataclass
class CompiledLedgers:
    """Many ledgers as arrays, evaluated together: ``seconds(values)`` gives each ledger's time."""

    names: list[str]  # every parameter any ledger names, sorted
    channel_param: np.ndarray  # per channel: index into names, or -1 for none
    channel_divisor: np.ndarray  # per channel: index of the parameter its rate is divided by, or -1
    channel_spec: np.ndarray  # per channel: its spec
    add_channel: np.ndarray
    add_amount: np.ndarray
    add_slot: np.ndarray  # per addend: GROUPS x global term + group
    term_weight: np.ndarray
    term_ledger: np.ndarray
    fixed: np.ndarray  # ledgers x parameters: counts
    ledgers: int
    channel_multiplier: np.ndarray  # per channel: index of the parameter its rate is multiplied by, or -1

    @classmethod
    def of(cls, ledgers: list[Ledger]) -> CompiledLedgers:
        names = sorted(set().union(*(lg.parameters() for lg in ledgers))) if ledgers else []
        index = {n: i for i, n in enumerate(names)}
        channels: dict[Channel, int] = {}
        add_channel, add_amount, add_slot, term_weight, term_ledger = [], [], [], [], []
        fixed = np.zeros((len(ledgers), len(names)))
        base = 0
        for i, lg in enumerate(ledgers):
            for t, g, a, ch in zip(lg.add_term, lg.add_group, lg.add_amount, lg.add_channel, strict=True):
                add_channel.append(channels.setdefault(ch, len(channels)))
                add_amount.append(a)
                add_slot.append(GROUPS * (base + t) + g)
            term_weight += lg.term_weight
            term_ledger += [i] * len(lg.term_weight)
            base += len(lg.term_weight)
            for p, k in lg.fixed.items():
                fixed[i, index[p]] += k
        by_index = [ch for ch, _ in sorted(channels.items(), key=lambda kv: kv[1])]
        return cls(names, np.array([index[ch[0]] if ch[0] is not None else -1 for ch in by_index], dtype=int),
                   np.array([index[ch[2]] if len(ch) > 2 and ch[2] is not None else -1 for ch in by_index],
                            dtype=int),
                   np.array([ch[1] for ch in by_index], dtype=float), np.array(add_channel, dtype=int),
                   np.array(add_amount, dtype=float), np.array(add_slot, dtype=int),
                   np.array(term_weight, dtype=float), np.array(term_ledger, dtype=int), fixed, len(ledgers),
                   np.array([index[ch[3]] if len(ch) > 3 else -1 for ch in by_index], dtype=int))

    def _per_add(self, values: np.ndarray) -> np.ndarray:
        values = values if values.size else np.ones(1)  # no named parameter (every channel fixed): index 0 is unused
        scale = np.where(self.channel_param >= 0, values[np.maximum(self.channel_param, 0)], 1.0)
        scale = scale / np.where(self.channel_divisor >= 0, values[np.maximum(self.channel_divisor, 0)], 1.0)
        scale = scale * np.where(self.channel_multiplier >= 0, values[np.maximum(self.channel_multiplier, 0)], 1.0)
        return self.add_amount / (self.channel_spec * scale)[self.add_channel]

    def seconds(self, values: np.ndarray) -> np.ndarray:
        """Each ledger's seconds under ``values`` (one per name, in ``names``' order)."""
        per_add = self._per_add(values)
        slots = np.bincount(self.add_slot, weights=per_add, minlength=GROUPS * len(self.term_weight))
        terms = slots.reshape(-1, GROUPS).max(axis=1) * self.term_weight
        out = np.bincount(self.term_ledger, weights=terms, minlength=self.ledgers)
        return out + self.fixed @ values

    def seconds_and_gradient(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each ledger's seconds and their derivatives by the log of each value (ledgers x names): an addend
        ``amount / (spec x v)`` of a term's longest sum contributes ``-weight x amount / (spec x v)`` to its
        parameter's column, a fixed cost ``count x v`` contributes itself."""
        per_add = self._per_add(values)
        n_terms = len(self.term_weight)
        slots = np.bincount(self.add_slot, weights=per_add, minlength=GROUPS * n_terms).reshape(-1, GROUPS)
        winner = slots.argmax(axis=1)
        terms = slots[np.arange(n_terms), winner] * self.term_weight
        seconds = np.bincount(self.term_ledger, weights=terms, minlength=self.ledgers) + self.fixed @ values
        term_of_add = self.add_slot // GROUPS
        winning = self.add_slot % GROUPS == winner[term_of_add]
        n = len(self.names)
        grad = self.fixed * values
        for params, sign in ((self.channel_param[self.add_channel], -1.0),
                             (self.channel_divisor[self.add_channel], 1.0),
                             (self.channel_multiplier[self.add_channel], -1.0)):
            live = winning & (params >= 0)
            index = self.term_ledger[term_of_add[live]] * n + params[live]
            grad = grad + sign * np.bincount(index, weights=per_add[live] * self.term_weight[term_of_add[live]],
                                             minlength=self.ledgers * n).reshape(self.ledgers, n)
        return seconds, grad
