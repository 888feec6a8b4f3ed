"""Pytrees: nested containers whose leaves are arrays.

Tuples, lists, dicts (keys sorted), None, namedtuples and registered classes are nodes;
everything else is a leaf. Key paths (``x[0]['w']``) name leaves in error messages.
"""

import collections
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "PyTreeDef", "tree_flatten", "tree_unflatten", "tree_map", "tree_leaves", "tree_structure",
    "register_pytree_node", "register_pytree_node_class", "tree_flatten_with_path", "keystr",
    "SequenceKey", "DictKey", "GetAttrKey", "treedef_is_leaf", "all_leaves", "tree_transpose",
]


class _NodeType(NamedTuple):
    to_iterable: Any  # node -> (children, aux_data)
    from_iterable: Any  # (aux_data, children) -> node
    keys: Any  # (node, aux_data) -> list of keys for the children


@dataclass(frozen=True)
class SequenceKey:
    idx: int

    def __str__(self):
        return f"[{self.idx}]"


@dataclass(frozen=True)
class DictKey:
    key: Any

    def __str__(self):
        return f"[{self.key!r}]"


@dataclass(frozen=True)
class GetAttrKey:
    name: str

    def __str__(self):
        return f".{self.name}"


@dataclass(frozen=True)
class FlattenedIndexKey:
    key: int

    def __str__(self):
        return f"[<flat index {self.key}>]"


def keystr(path):
    return "".join(str(k) for k in path)


_registry = {}


def register_pytree_node(nodetype, flatten_func, unflatten_func, flatten_with_keys_func=None):
    """Register ``nodetype`` as a pytree node: ``flatten(x) -> (children, aux)``,
    ``unflatten(aux, children) -> x``."""
    if nodetype in _registry:
        raise ValueError(f"Duplicate custom PyTreeDef type registration for {nodetype}.")

    def keys(node, aux):
        if flatten_with_keys_func is not None:
            return [k for k, _ in flatten_with_keys_func(node)[0]]
        return [FlattenedIndexKey(i) for i in range(len(list(flatten_func(node)[0])))]

    _registry[nodetype] = _NodeType(flatten_func, unflatten_func, keys)
    return nodetype


def register_pytree_node_class(cls):
    """Class decorator: ``cls.tree_flatten()`` and ``cls.tree_unflatten(aux, children)``."""
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


def _dict_flatten(d):
    keys = sorted(d)
    return [d[k] for k in keys], tuple(keys)


def _dict_unflatten(keys, children):
    return dict(zip(keys, children))


register_pytree_node(tuple, lambda t: (t, None), lambda _, c: tuple(c),
                     lambda t: ([(SequenceKey(i), x) for i, x in enumerate(t)], None))
register_pytree_node(list, lambda t: (t, None), lambda _, c: list(c),
                     lambda t: ([(SequenceKey(i), x) for i, x in enumerate(t)], None))
register_pytree_node(dict, _dict_flatten, _dict_unflatten,
                     lambda d: ([(DictKey(k), d[k]) for k in sorted(d)], None))
register_pytree_node(type(None), lambda _: ((), None), lambda _, c: None,
                     lambda _: ((), None))


def _ordered_dict_flatten(d):
    return list(d.values()), tuple(d.keys())


register_pytree_node(collections.OrderedDict, _ordered_dict_flatten,
                     lambda keys, c: collections.OrderedDict(zip(keys, c)),
                     lambda d: ([(DictKey(k), v) for k, v in d.items()], None))


def _is_namedtuple(x):
    return isinstance(x, tuple) and type(x) is not tuple and hasattr(type(x), "_fields")


def _node_type(x):
    t = type(x)
    node = _registry.get(t)
    if node is None and _is_namedtuple(x):
        return t, _NodeType(lambda n: (tuple(n), None), lambda _, c, t=t: t(*c),
                            lambda n, aux: [GetAttrKey(f) for f in t._fields])
    return t, node


class PyTreeDef:
    """The structure of a pytree: a node type, its aux data and child structures."""

    __slots__ = ("node_type", "node_data", "children", "num_leaves", "_hash")

    def __init__(self, node_type, node_data, children):
        self.node_type = node_type  # None for a leaf
        self.node_data = node_data
        self.children = tuple(children)
        self.num_leaves = 1 if node_type is None else sum(c.num_leaves for c in self.children)
        self._hash = None

    @property
    def num_nodes(self):
        return 1 + sum(c.num_nodes for c in self.children)

    def unflatten(self, leaves):
        leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            raise ValueError(f"Too {'few' if len(leaves) < self.num_leaves else 'many'} leaves "
                             f"for PyTreeDef; expected {self.num_leaves}, got {len(leaves)}.")
        it = iter(leaves)
        return self._build(it)

    def _build(self, it):
        if self.node_type is None:
            return next(it)
        children = [c._build(it) for c in self.children]
        if self.node_type in _registry:
            return _registry[self.node_type].from_iterable(self.node_data, children)
        return self.node_type(*children)  # namedtuple

    def flatten_up_to(self, tree):
        """The subtrees of ``tree`` at this structure's leaves (``tree`` may be deeper)."""
        out = []
        self._flatten_up_to(tree, out, ())
        return out

    def _flatten_up_to(self, tree, out, path):
        if self.node_type is None:
            out.append(tree)
            return
        t, node = _node_type(tree)
        if t is not self.node_type:
            raise ValueError(f"Tree structure mismatch at {keystr(path) or 'the root'}: "
                             f"expected {self.node_type.__name__}, got {t.__name__}.")
        children, data = node.to_iterable(tree)
        children = list(children)
        if data != self.node_data or len(children) != len(self.children):
            raise ValueError(f"Tree structure mismatch at {keystr(path) or 'the root'}: "
                             f"expected {self}, got {tree_structure(tree)}.")
        for k, (c, sub) in enumerate(zip(self.children, children)):
            c._flatten_up_to(sub, out, path + (SequenceKey(k),))

    def __eq__(self, other):
        return (isinstance(other, PyTreeDef) and self.node_type is other.node_type
                and self.node_data == other.node_data and self.children == other.children)

    def __hash__(self):
        if self._hash is None:
            self._hash = hash((self.node_type, _hashable(self.node_data), self.children))
        return self._hash

    def __repr__(self):
        return f"PyTreeDef({self._str()})"

    def _str(self):
        if self.node_type is None:
            return "*"
        kids = [c._str() for c in self.children]
        if self.node_type is tuple:
            return "(" + ", ".join(kids) + ("," if len(kids) == 1 else "") + ")"
        if self.node_type is list:
            return "[" + ", ".join(kids) + "]"
        if self.node_type is dict:
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(self.node_data, kids)) + "}"
        if self.node_type is type(None):
            return "None"
        return f"CustomNode({self.node_type.__name__}[{self.node_data!r}], [{', '.join(kids)}])"


def _hashable(data):
    try:
        hash(data)
        return data
    except TypeError:
        return id(data)


_LEAF = PyTreeDef(None, None, ())


def _flatten(tree, is_leaf, leaves):
    if is_leaf is not None and is_leaf(tree):
        leaves.append(tree)
        return _LEAF
    t, node = _node_type(tree)
    if node is None:
        leaves.append(tree)
        return _LEAF
    children, data = node.to_iterable(tree)
    return PyTreeDef(t, data, [_flatten(c, is_leaf, leaves) for c in children])


def tree_flatten(tree, is_leaf=None):
    """``(leaves, treedef)`` of ``tree``."""
    leaves = []
    treedef = _flatten(tree, is_leaf, leaves)
    return leaves, treedef


def tree_unflatten(treedef, leaves):
    return treedef.unflatten(leaves)


def tree_leaves(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[1]


def treedef_is_leaf(treedef):
    return treedef.node_type is None


def all_leaves(iterable):
    return all(treedef_is_leaf(tree_structure(x)) for x in iterable)


def tree_map(f, tree, *rest, is_leaf=None):
    """Apply ``f`` leafwise; ``rest`` must have ``tree``'s structure (or deeper)."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    others = [treedef.flatten_up_to(r) for r in rest]
    return treedef.unflatten(f(*xs) for xs in zip(leaves, *others))


def _flatten_with_path(tree, is_leaf, path, out):
    if is_leaf is not None and is_leaf(tree):
        out.append((path, tree))
        return _LEAF
    t, node = _node_type(tree)
    if node is None:
        out.append((path, tree))
        return _LEAF
    children, data = node.to_iterable(tree)
    children = list(children)
    keys = node.keys(tree, data)
    return PyTreeDef(t, data, [_flatten_with_path(c, is_leaf, path + (k,), out)
                               for k, c in zip(keys, children)])


def tree_flatten_with_path(tree, is_leaf=None):
    """``([(key_path, leaf)], treedef)``."""
    out = []
    treedef = _flatten_with_path(tree, is_leaf, (), out)
    return out, treedef


def tree_leaves_with_path(tree, is_leaf=None):
    return tree_flatten_with_path(tree, is_leaf)[0]


def tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose):
    flat = outer_treedef.flatten_up_to(pytree_to_transpose)
    inner = [inner_treedef.flatten_up_to(x) for x in flat]
    columns = list(zip(*inner)) if inner else [[] for _ in range(inner_treedef.num_leaves)]
    return inner_treedef.unflatten(outer_treedef.unflatten(col) for col in columns)


class Partial:
    """``functools.partial`` that is a pytree (its bound arguments are leaves)."""

    def __init__(self, func, *args, **kwargs):
        self.func, self.args, self.kwargs = func, args, kwargs

    def __call__(self, *args, **kwargs):
        return self.func(*self.args, *args, **{**self.kwargs, **kwargs})


register_pytree_node(
    Partial,
    lambda p: ((p.args, p.kwargs), p.func),
    lambda func, children: Partial(func, *children[0], **children[1]))
