"""Saving policies for ``checkpoint``: which intermediates the forward pass may keep for the
backward pass; everything else is recomputed.

A policy is called as ``policy(prim, *avals, **params)`` on each equation whose outputs the
backward pass needs, and answers ``True``/``Saveable`` (keep), ``False``/``Recompute``, or an
``Offloadable`` (keep, out of working memory). The name-based policies are data (frozen
dataclasses naming the values they save, as JAX's ``jax_remat3`` policies), so a
``custom_remat`` rule can read what its enclosing checkpoint saves. ``memory_budget`` (beyond
JAX, in ``remat.checkpointing.budget``) decides per checkpoint against a memory budget.
"""

from dataclasses import dataclass

from remat import lax
from remat.checkpointing.budget import MemoryBudget, memory_budget
from remat.interpreters.partial_eval import (
    Offloadable,
    Recompute,
    Saveable,
    policy_answer,
)
from remat.lax.identity import name_p

__all__ = [
    "checkpoint_dots", "checkpoint_dots_with_no_batch_dims", "dots_saveable",
    "dots_with_no_batch_dims_saveable", "everything_saveable", "nothing_saveable",
    "offload_dot_with_no_batch_dims", "save_and_offload_only_these_names",
    "save_any_names_but_these", "save_anything_except_these_names", "save_from_both_policies",
    "save_only_these_names", "SaveOnlyTheseNames", "SaveAnyNamesButThese",
    "SaveAndOffloadOnlyTheseNames", "Offloadable", "Recompute", "Saveable", "memory_budget",
    "MemoryBudget",
]


def everything_saveable(*_, **__):
    """Save every intermediate (the behaviour without checkpoint)."""
    return True


def nothing_saveable(*_, **__):
    """Save nothing but the checkpoint's inputs (the default)."""
    return False


def dots_saveable(prim, *_, **__):
    """Save the results of matrix multiplies and convolutions only."""
    return prim is lax.dot_general_p or prim is lax.conv_general_dilated_p


checkpoint_dots = dots_saveable


def dots_with_no_batch_dims_saveable(prim, *_, **params):
    """Save dot_general results that have no batch dimensions (weights times activations)."""
    if prim is lax.dot_general_p:
        (_, _), (lhs_b, rhs_b) = params["dimension_numbers"]
        return not lhs_b and not rhs_b
    return False


checkpoint_dots_with_no_batch_dims = dots_with_no_batch_dims_saveable


def save_anything_except_these_names(*names_not_to_save):
    """Save anything except values named with one of ``names_not_to_save`` (which are
    recomputed, under whatever alias they would otherwise be saved)."""
    refused = frozenset(names_not_to_save)

    def policy(prim, *_, **params):
        if prim is name_p:
            return params["name"] not in refused
        return True

    return policy


@dataclass(frozen=True)
class SaveAnyNamesButThese:
    """Save only named values (``checkpoint_name``), except the names given."""

    names: frozenset

    def __call__(self, prim, *_, **params):
        return prim is name_p and params["name"] not in self.names


def save_any_names_but_these(*names_not_to_save):
    """Save only named values, except the names given."""
    return SaveAnyNamesButThese(frozenset(names_not_to_save))


@dataclass(frozen=True)
class SaveOnlyTheseNames:
    """Save only values named with one of ``saveable_names``."""

    saveable_names: frozenset

    def __call__(self, prim, *_, **params):
        return prim is name_p and params["name"] in self.saveable_names


def save_only_these_names(*names_which_can_be_saved):
    """Save only values named with one of the names given."""
    return SaveOnlyTheseNames(frozenset(names_which_can_be_saved))


def save_from_both_policies(policy_1, policy_2):
    """Save what either policy saves (an offload answer of either counts as saving)."""

    def policy(prim, *args, **params):
        first = policy_answer(policy_1, prim, *args, **params)
        return first or policy_answer(policy_2, prim, *args, **params)

    return policy


@dataclass(frozen=True)
class SaveAndOffloadOnlyTheseNames:
    """Keep the first names in working memory, offload the second ones (from ``offload_src``
    to ``offload_dst``) until the backward pass, recompute everything else."""

    names_which_can_be_saved: frozenset
    names_which_can_be_offloaded: frozenset
    offload_src: str = "device"
    offload_dst: str = "pinned_host"

    def __call__(self, prim, *_, **params):
        if prim is name_p:
            if params["name"] in self.names_which_can_be_saved:
                return Saveable
            if params["name"] in self.names_which_can_be_offloaded:
                return Offloadable(self.offload_src, self.offload_dst)
        return Recompute


def save_and_offload_only_these_names(*, names_which_can_be_saved, names_which_can_be_offloaded,
                                      offload_src="device", offload_dst="pinned_host"):
    """Save the first names in working memory, offload the second ones (to a memory-mapped
    host store) until the backward pass, and recompute everything else."""
    saved = frozenset(names_which_can_be_saved)
    offloaded = frozenset(names_which_can_be_offloaded)
    overlap = saved & offloaded
    if overlap:
        raise ValueError(f"The names should be exclusive and should not intersect in "
                         f"names_which_can_be_saved and names_which_can_be_offloaded. Got "
                         f"names_which_can_be_saved={sorted(saved)}, "
                         f"names_which_can_be_offloaded={sorted(offloaded)}")
    return SaveAndOffloadOnlyTheseNames(saved, offloaded, offload_src, offload_dst)


def offload_dot_with_no_batch_dims(offload_src="device", offload_dst="pinned_host"):
    """Offload dot_general results with no batch dimensions; recompute everything else."""

    def policy(prim, *args, **params):
        if dots_with_no_batch_dims_saveable(prim, *args, **params):
            return Offloadable(offload_src, offload_dst)
        return Recompute

    return policy


def both(outer, inner):
    """The policy of a value inside nested checkpoints: saved only if both allow it (the
    inner one's offload answer kept). ``everything_saveable`` is the neutral element, so a
    ``custom_remat`` rule under ``jit`` still sees its checkpoint's own policy."""
    if outer is inner or outer is everything_saveable:
        return inner
    if inner is everything_saveable:
        return outer

    def policy(prim, *args, **params):
        if not policy_answer(outer, prim, *args, **params):
            return False
        return policy_answer(inner, prim, *args, **params)

    return policy
