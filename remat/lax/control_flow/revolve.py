"""The schedules of checkpointed loops: the binomial (revolve) schedule of a loop of known
length, computed in Python at trace time, and for a while loop the online placement of its
forward pass and the binomial split of its backward pass, computed inside the loops as int32
arithmetic.

With ``s`` states held and no step run forward more than ``r`` times, at most
``beta(s, r) = C(s + r, s)`` steps can be reversed (Griewank, 1992); reversing ``n`` steps
then takes at least ``r*n - beta(s + 1, r - 1)`` forward steps, ``r`` the smallest with
``beta(s, r) >= n``, and the recursive split below attains it (Griewank & Walther, "Algorithm
799: revolve", ACM TOMS 26(1), 2000). Stumm & Walther ("New algorithms for optimal online
checkpointing", SIAM J. Sci. Comput. 32(2), 2010) place checkpoints online, optimally up to
``beta(s, 2) - 1`` steps; beyond, Wang, Moin & Iaccarino's dynamic checkpointing ("Minimal
repetition dynamic checkpointing algorithm for unsteady adjoint calculation", SIAM J. Sci.
Comput. 31(4), 2009) keeps the repetition number minimal.
"""

import functools
import math

import numpy as np

from remat.lax import elementwise
from remat.lax.control_flow.conditionals import cond
from remat.lax.control_flow.loops import while_loop
from remat.lax.elementwise import (
    add,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    convert_element_type,
    div,
    eq,
    floor,
    ge,
    gt,
    lt,
    mul,
    ne,
    select,
    sub,
)
from remat.lax.reductions import argmax, reduce_or
from remat.lax.shape import broadcast_in_dim, full
from remat.lax.slicing import dynamic_index_in_dim, dynamic_update_index_in_dim

_I32 = np.int32
_INT_MAX = int(np.iinfo(np.int32).max)

# --- the binomial schedule -------------------------------------------------------------------


def binomial_steps(snapshots, repetitions):
    """``beta(s, r) = C(s + r, s)``: the most steps ``s`` checkpoints reverse with no step
    run forward more than ``r`` times (0 for ``r < 0``)."""
    return math.comb(snapshots + repetitions, snapshots) if repetitions >= 0 else 0


@functools.cache
def repetition_number(steps, snapshots):
    """The smallest ``r`` with ``beta(snapshots, r) >= steps``."""
    r = 0
    while binomial_steps(snapshots, r) < steps:
        r += 1
    return r


def revolve_forward_steps(steps, checkpoints):
    """The fewest forward steps that reverse ``steps`` steps holding at most ``checkpoints``
    states (the first one the loop's input): ``r*n - beta(K+1, r-1)`` (Griewank & Walther,
    2000). These are the steps run without taping; each step is also run once more, taped,
    as it is reversed."""
    if steps <= 1:
        return 0
    k = min(checkpoints, steps)
    r = repetition_number(steps, k)
    return r * steps - binomial_steps(k + 1, r - 1)


@functools.lru_cache(maxsize=65536)
def optimal_split(steps, snapshots):
    """How far to advance before the next checkpoint, reversing ``steps >= 2`` steps from a
    checkpoint with ``snapshots >= 2`` states available (the base one included): the largest
    ``m`` that leaves the left part ``m`` steps with repetition number ``r - 1`` and the
    right part ``steps - m`` with ``r`` on one checkpoint fewer, which keeps the total at the
    binomial optimum."""
    s = min(snapshots, steps)
    r = repetition_number(steps, s)
    return min(binomial_steps(s, r - 1), steps - binomial_steps(s - 1, r - 1))


class ScanSchedule:
    """The binomial schedule of a scan of ``steps`` steps with ``checkpoints`` slots, played
    out in Python with the decisions the loops make (``optimal_split`` of the same
    quantities).

    The forward pass stores the state before each step in ``first_sweep`` (in that order, the
    loop's input first). The backward pass is a loop of ``moves``: each restores the latest
    checkpoint when the state at hand is spent, advances by the binomial split of what is
    left before the next step to reverse, then stores the state in a free slot or, having
    reached that step, reverses it (move ``reverse_move[t]`` reverses step ``t``) and frees a
    checkpoint of its input. ``forward_steps`` counts the untaped steps as revolve counts them
    (the forward pass to the last step's input, the backward pass's advances) and equals
    ``revolve_forward_steps(steps, checkpoints)``; ``most_held`` is the most checkpoints held
    at once.
    """

    def __init__(self, steps, checkpoints):
        n = steps
        k = self.checkpoints = max(1, min(checkpoints, n))
        self.steps = n
        held, advances, most = [0], 0, 1
        cur = 0
        while cur < n - 1:  # the forward pass, to the last step's input
            free, left = k - len(held), n - cur
            m = left - 1 if free == 0 else optimal_split(left, free + 1)
            cur += m
            advances += m
            if free > 0 and cur < n - 1:
                held.append(cur)
        self.first_sweep = np.asarray(held, _I32)
        reverse_move = np.zeros(n, _I32)
        b, cur, moves = n, n - 1, 0
        while b > 0:
            t = b - 1
            if cur < 0:
                cur = max(held)
            free, left = k - len(held), t + 1 - cur
            m = 0 if left == 1 else left - 1 if free == 0 else optimal_split(left, free + 1)
            cur += m
            advances += m
            if free > 0 and cur < t:
                held.append(cur)
                most = max(most, len(held))
            else:
                reverse_move[t] = moves
                b, cur = t, -1
                if t in held:
                    held.remove(t)
            moves += 1
        self.forward_steps, self.most_held = advances, max(most, len(self.first_sweep))
        self.moves, self.reverse_move = moves, reverse_move


@functools.lru_cache(maxsize=64)
def scan_schedule(steps, checkpoints):
    """The (cached) ``ScanSchedule`` of ``steps`` steps with ``checkpoints`` slots."""
    return ScanSchedule(steps, checkpoints)


# --- the arguments ---------------------------------------------------------------------------


def _carry_bytes(avals):
    return sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in avals)


def checkpoint_count(checkpoints, memory_budget, carry_avals, what):
    """``K`` from ``checkpoints`` (None or 'all': None) or ``memory_budget`` (bytes for the
    stored carries), with JAX's error types for bad values."""
    if checkpoints is not None and memory_budget is not None:
        raise ValueError(f"{what} takes either checkpoints or memory_budget, not both "
                         f"(got checkpoints={checkpoints!r}, memory_budget={memory_budget!r}).")
    if memory_budget is not None:
        if isinstance(memory_budget, bool) or not isinstance(
                memory_budget, (int, float, np.integer, np.floating)):
            raise TypeError(f"{what}: memory_budget must be a number of bytes, got "
                            f"{memory_budget!r}.")
        carry = _carry_bytes(carry_avals)
        if memory_budget < 0 or carry > memory_budget:
            raise ValueError(f"{what}: memory_budget={memory_budget!r} bytes cannot hold one "
                             f"checkpoint of the carry ({carry} bytes); the smallest feasible "
                             f"budget is {carry} bytes.")
        return int(memory_budget // carry) if carry else 1
    if checkpoints is None or (isinstance(checkpoints, str) and checkpoints == "all"):
        return None
    if isinstance(checkpoints, bool) or not isinstance(checkpoints, (int, np.integer)):
        raise TypeError(f"{what}: checkpoints must be None, 'all' or a positive int, got "
                        f"{checkpoints!r}.")
    if checkpoints < 1:
        raise ValueError(f"{what}: checkpoints must be at least 1 (the loop's input is always "
                         f"stored), got {checkpoints}.")
    return int(checkpoints)


def default_while_checkpoints(max_steps):
    """The fewest checkpoints for which the online schedule stays optimal up to
    ``max_steps`` steps: the smallest ``K`` with ``C(K+2, 2) > max_steps``."""
    k = 1
    while binomial_steps(k, 2) <= max_steps:
        k += 1
    return min(k, max(max_steps, 1))


# --- the while loop's schedule, computed inside the loops ------------------------------------


def floordiv(a, d):
    """``(a // d, a % d)`` of int32 ``0 <= a < 2**30``, ``d >= 1``, from a float32 quotient
    corrected in exact integer arithmetic (int32 division has no form in the native loop
    tier)."""
    f32 = np.float32

    def estimate(x):
        return convert_element_type(
            floor(div(convert_element_type(x, f32),
                              convert_element_type(d, f32))), _I32)

    q = estimate(a)
    r = sub(a, mul(q, d))  # |r| within a few hundred d: its quotient is exact
    q2 = estimate(r)
    q, r = add(q, q2), sub(r, mul(q2, d))
    low = lt(r, _I32(0))
    q, r = select(low, sub(q, _I32(1)), q), select(low, add(r, d), r)
    high = ge(r, d)
    return select(high, add(q, _I32(1)), q), select(high, sub(r, d), r)


def _muldiv(b, num, den):
    """``b * num / den`` (exact: an integer by construction) in int32, saturating at the
    int32 maximum instead of overflowing."""
    q, rem = floordiv(b, den)
    over = gt(q, floordiv(sub(_I32(_INT_MAX), num), num)[0])
    q = select(over, _I32(0), q)
    exact = add(mul(q, num), floordiv(mul(rem, num), den)[0])
    return select(over, _I32(_INT_MAX), exact)


def _split_traced(steps, snapshots):
    """``optimal_split`` of traced int32 scalars (``steps >= 2``, ``2 <= snapshots``)."""
    s = elementwise.min(snapshots, steps)

    def more(st):
        return lt(st[1], steps)

    def step(st):
        r, b, c, _, _ = st
        r = add(r, _I32(1))
        return [r, _muldiv(b, add(s, r), r), _muldiv(c, sub(add(s, r), _I32(1)), r),
                b, c]

    _, _, _, b_prev, c_prev = while_loop(
        more, step, [_I32(1), add(s, _I32(1)), s, _I32(1), _I32(1)])
    return elementwise.min(b_prev, sub(steps, c_prev))


def _stumm_walther(step, sw):
    """Stumm & Walther's online algorithm I: whether to store the state before ``step`` and
    in which slot. ``sw = (slot, round, end, saving)``: the next slot to write, how many slots
    this round spreads over, the step the round ends at, whether the round still saves."""
    slot, rnd, end, saving = sw
    nxt = select(saving, add(slot, _I32(1)), slot)
    nxt = select(bitwise_and(saving, gt(nxt, rnd)), _I32(1), nxt)
    keep_saving = bitwise_and(saving, ne(add(step, _I32(1)), end))
    at_end = eq(step, end)
    new_rnd = select(at_end, sub(rnd, _I32(1)), rnd)
    new_sw = [select(at_end, new_rnd, nxt), new_rnd,
              select(at_end, add(end, rnd), end),
              select(at_end, gt(new_rnd, _I32(0)), keep_saving)]
    return saving, slot, new_sw


def _wang_moin(pos, level, k):
    """Wang & Moin's dynamic checkpointing: the slot for the newest state (every state is
    stored) and its level. A checkpoint is dispensable when a later one has a higher level;
    the latest dispensable one is replaced (the new state at level 0), or, with none, the
    latest checkpoint (the new state one level above it)."""
    valid = ge(pos, _I32(0))
    later = gt(broadcast_in_dim(pos, (k, k), (1,)), broadcast_in_dim(pos, (k, k), (0,)))
    higher = gt(broadcast_in_dim(level, (k, k), (1,)),
                    broadcast_in_dim(level, (k, k), (0,)))
    both = bitwise_and(bitwise_and(later, higher),
                           broadcast_in_dim(valid, (k, k), (1,)))
    dispensable = bitwise_and(reduce_or(both, (1,)), valid)
    any_free = reduce_or(bitwise_not(valid), (0,))
    any_disp = reduce_or(dispensable, (0,))
    latest = argmax(pos, 0, _I32)
    latest_disp = argmax(select(dispensable, pos, full((k,), -1, _I32)), 0, _I32)
    free = argmax(convert_element_type(bitwise_not(valid), _I32), 0, _I32)
    slot = select(any_free, free, select(any_disp, latest_disp, latest))
    top_level = dynamic_index_in_dim(level, latest, 0, False)
    new_level = select(bitwise_or(any_free, any_disp), _I32(0),
                           add(top_level, _I32(1)))
    return slot, new_level


def _online_slot(step, sw, level, pos, k, max_steps):
    """(store?, slot, new Stumm-Walther state, new levels) for the state before ``step``."""
    if max_steps is not None and k >= max_steps:
        return np.bool_(True), step, sw, level
    switch_at = binomial_steps(k, 2) - 1

    def online_i(step, sw, level, pos):
        save, slot, sw = _stumm_walther(step, sw)
        return [save, slot, sw, level]

    def dynamic(step, sw, level, pos):
        if k == 1:
            return [np.bool_(False), _I32(0), sw, level]
        slot, new_level = _wang_moin(pos, level, k)
        return [np.bool_(True), slot, sw,
                dynamic_update_index_in_dim(level, new_level, slot, 0)]

    if max_steps is not None and max_steps <= switch_at:
        return online_i(step, sw, level, pos)
    return cond(ge(step, _I32(switch_at)), dynamic, online_i, step, sw, level, pos)
