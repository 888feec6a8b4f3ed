"""Pytrees: nested containers whose leaves are arrays.

Tuples, lists, dicts (keys sorted), None (a node without children), namedtuples,
``OrderedDict``/``defaultdict`` and registered classes (custom nodes, dataclasses, static
types) are nodes; everything else is a leaf. Key paths (``['a'][0].b``) name leaves in
error messages and in ``tree_map_with_path``.
"""

import collections
import dataclasses
import functools
from typing import Any, NamedTuple, TypeVar

__all__ = [
    "DictKey", "FlattenedIndexKey", "GetAttrKey", "KeyEntry", "KeyPath", "Partial",
    "PyTreeDef", "SequenceKey", "all_leaves", "default_registry", "flatten_one_level",
    "flatten_one_level_with_keys", "is_tree_node", "keystr", "register_dataclass",
    "register_pytree_node", "register_pytree_node_class", "register_pytree_with_keys",
    "register_pytree_with_keys_class", "register_static", "tree_all", "tree_broadcast",
    "tree_flatten", "tree_flatten_with_path", "tree_leaves", "tree_leaves_with_path",
    "tree_map", "tree_map_with_path", "tree_reduce", "tree_reduce_associative",
    "tree_structure", "tree_transpose", "tree_unflatten", "treedef_children",
    "treedef_is_leaf", "treedef_tuple",
]

# --- keys ------------------------------------------------------------------------------------

KeyEntry = TypeVar("KeyEntry", bound=Any)
KeyPath = tuple[KeyEntry, ...]


@dataclasses.dataclass(frozen=True)
class SequenceKey:
    """The key of a tuple or list element: ``[idx]``."""

    idx: int

    def __str__(self):
        return f"[{self.idx!r}]"


@dataclasses.dataclass(frozen=True)
class DictKey:
    """The key of a dict entry: ``['name']``."""

    key: Any

    def __str__(self):
        return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    """The key of an attribute (namedtuple fields, dataclass fields): ``.name``."""

    name: str

    def __str__(self):
        return f".{self.name}"


@dataclasses.dataclass(frozen=True)
class FlattenedIndexKey:
    """The position of a child of a custom node registered without keys."""

    key: int

    def __str__(self):
        return f"[<flat index {self.key}>]"


def _simple_key(k):
    for attr in ("idx", "key", "name"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def keystr(keys, *, simple=False, separator=""):
    """A key path as text: ``['a'][0].b``; with ``simple``, the bare keys joined by
    ``separator`` (``a/0/b``)."""
    if simple:
        return separator.join(_simple_key(k) for k in keys)
    return separator.join(str(k) for k in keys)


# --- the registry ----------------------------------------------------------------------------


class _NodeType(NamedTuple):
    flatten: Any  # node -> (children, aux_data)
    unflatten: Any  # (aux_data, children) -> node
    flatten_with_keys: Any  # node -> ([(key, child)], aux_data)
    label: Any  # the name shown inside CustomNode(...)


class PyTreeRegistry:
    """Which types are pytree nodes, and how each flattens (``default_registry``)."""

    def __init__(self):
        self._nodes = {}

    def register_node(self, nodetype, flatten_func, unflatten_func,
                      flatten_with_keys_func=None):
        if not isinstance(nodetype, type):
            raise TypeError(f"register_pytree_node expects a type, got {nodetype!r}")
        if not callable(flatten_func) or not callable(unflatten_func):
            raise TypeError(f"register_pytree_node of {nodetype.__name__}: flatten_func and "
                            f"unflatten_func must be callable")
        if nodetype in self._nodes:
            raise ValueError(f"Duplicate custom PyTreeDef type registration for {nodetype}.")
        if flatten_with_keys_func is None:
            def flatten_with_keys_func(node):
                children, aux = flatten_func(node)
                return [(FlattenedIndexKey(i), c) for i, c in enumerate(children)], aux
        self._nodes[nodetype] = _NodeType(flatten_func, unflatten_func, flatten_with_keys_func,
                                          nodetype.__name__)

    def is_node(self, typ):
        return typ in self._nodes or _is_namedtuple_type(typ)

    def node_type(self, x):
        """``(type, _NodeType)`` of ``x``; the node type is None for a leaf."""
        t = type(x)
        node = self._nodes.get(t)
        if node is None and _is_namedtuple_type(t):
            node = _namedtuple_node(t)
        return t, node

    def flatten(self, tree, leaf_predicate=None):
        return tree_flatten(tree, leaf_predicate)

    def flatten_one_level(self, tree):
        return flatten_one_level(tree)

    def flatten_one_level_with_keys(self, tree):
        return flatten_one_level_with_keys(tree)

    def flatten_with_path(self, tree, leaf_predicate=None):
        return tree_flatten_with_path(tree, leaf_predicate)


default_registry = PyTreeRegistry()
_registered = default_registry._nodes  # (read directly on the hot path: flattening)


def _is_namedtuple_type(t):
    return isinstance(t, type) and issubclass(t, tuple) and hasattr(t, "_fields")


def _namedtuple_flatten(n):
    return tuple(n), None


def _namedtuple_node(t):
    """The node of a namedtuple type (made on use: caching it would keep the type alive)."""
    return _NodeType(_namedtuple_flatten, lambda _, c: t(*c),
                     lambda n: ([(GetAttrKey(f), v) for f, v in zip(t._fields, n)], None),
                     "namedtuple")


def register_pytree_node(nodetype, flatten_func, unflatten_func, flatten_with_keys_func=None):
    """Register ``nodetype`` as a pytree node: ``flatten_func(x) -> (children, aux_data)``,
    ``unflatten_func(aux_data, children) -> x`` (and optionally
    ``flatten_with_keys_func(x) -> ([(key, child)], aux_data)``)."""
    default_registry.register_node(nodetype, flatten_func, unflatten_func,
                                   flatten_with_keys_func)


def register_pytree_node_class(cls):
    """Class decorator: ``cls.tree_flatten()`` and ``cls.tree_unflatten(aux, children)``."""
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


def register_pytree_with_keys(nodetype, flatten_with_keys, unflatten_func, flatten_func=None):
    """Register ``nodetype`` with keyed children: ``flatten_with_keys(x) ->
    ([(key, child)], aux_data)``; ``flatten_func`` (optional) is the faster keyless form."""
    if flatten_func is None:
        def flatten_func(node):
            pairs, aux = flatten_with_keys(node)
            return [c for _, c in pairs], aux
    register_pytree_node(nodetype, flatten_func, unflatten_func, flatten_with_keys)
    return nodetype


def register_pytree_with_keys_class(cls):
    """Class decorator: ``cls.tree_flatten_with_keys()`` and ``cls.tree_unflatten``
    (``cls.tree_flatten`` too, when defined)."""
    flatten = (lambda x: x.tree_flatten()) if hasattr(cls, "tree_flatten") else None
    register_pytree_with_keys(cls, lambda x: x.tree_flatten_with_keys(), cls.tree_unflatten,
                              flatten)
    return cls


def register_dataclass(nodetype, data_fields=None, meta_fields=None, drop_fields=()):
    """Register a dataclass-like type: ``data_fields`` are children, ``meta_fields`` static
    aux data. For a dataclass both may be omitted: fields marked ``static`` in their metadata
    (``tree.static()``) are meta fields, the others data fields."""
    if data_fields is None or meta_fields is None:
        if (data_fields is None) != (meta_fields is None):
            raise TypeError(f"register_dataclass: data_fields and meta_fields must both be "
                            f"specified when either is specified. Got {data_fields=} "
                            f"{meta_fields=}.")
        if not dataclasses.is_dataclass(nodetype):
            raise TypeError(f"register_dataclass: data_fields and meta_fields are required "
                            f"when nodetype is not a dataclass. Got {nodetype=}.")
        fields = [f for f in dataclasses.fields(nodetype) if f.init and f.name not in drop_fields]
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    data_fields, meta_fields = tuple(data_fields), tuple(meta_fields)
    if dataclasses.is_dataclass(nodetype):
        init_fields = {f.name for f in dataclasses.fields(nodetype) if f.init}
        init_fields.difference_update(drop_fields)
        given = {*data_fields, *meta_fields}
        if given != init_fields:
            msg = ("data_fields and meta_fields must include all dataclass fields with "
                   "``init=True`` and only them.")
            if init_fields - given:
                msg += (f" Missing fields: {init_fields - given}. Add them to drop_fields to "
                        f"suppress this error.")
            if given - init_fields:
                msg += f" Unexpected fields: {given - init_fields}."
            raise ValueError(msg)
    overlap = set(data_fields) & set(meta_fields)
    if overlap:
        raise ValueError(f"data_fields and meta_fields must not overlap. Overlapping fields: "
                         f"{overlap}.")

    def flatten(x):
        return [getattr(x, n) for n in data_fields], tuple(getattr(x, n) for n in meta_fields)

    def flatten_with_keys(x):
        return ([(GetAttrKey(n), getattr(x, n)) for n in data_fields],
                tuple(getattr(x, n) for n in meta_fields))

    def unflatten(meta, children):
        return nodetype(**dict(zip(meta_fields, meta)), **dict(zip(data_fields, children)))

    register_pytree_node(nodetype, flatten, unflatten, flatten_with_keys)
    return nodetype


def register_static(cls):
    """Register ``cls`` (hashable) as a pytree without leaves: its instances are part of
    the structure, so ``jit`` treats them as static."""
    register_pytree_with_keys(cls, lambda x: ((), x), lambda x, _: x)
    return cls


def _sorted_keys(d):
    try:
        return sorted(d)
    except TypeError:
        raise ValueError("Comparator raised exception while sorting pytree dictionary "
                         "keys.") from None


register_pytree_node(tuple, lambda t: (t, None), lambda _, c: tuple(c),
                     lambda t: ([(SequenceKey(i), x) for i, x in enumerate(t)], None))
register_pytree_node(list, lambda t: (t, None), lambda _, c: list(c),
                     lambda t: ([(SequenceKey(i), x) for i, x in enumerate(t)], None))


def _dict_flatten(d):
    keys = _sorted_keys(d)
    return [d[k] for k in keys], tuple(keys)


register_pytree_node(dict, _dict_flatten, lambda keys, c: dict(zip(keys, c)),
                     lambda d: ([(DictKey(k), d[k]) for k in _sorted_keys(d)],
                                tuple(_sorted_keys(d))))
register_pytree_node(type(None), lambda _: ((), None), lambda _, c: None,
                     lambda _: ((), None))
register_pytree_node(collections.OrderedDict, lambda d: (list(d.values()), tuple(d)),
                     lambda keys, c: collections.OrderedDict(zip(keys, c)),
                     lambda d: ([(DictKey(k), v) for k, v in d.items()], tuple(d)))


def _defaultdict_flatten(d):
    keys = _sorted_keys(d)
    return [d[k] for k in keys], (d.default_factory, tuple(keys))


register_pytree_node(
    collections.defaultdict, _defaultdict_flatten,
    lambda aux, c: collections.defaultdict(aux[0], zip(aux[1], c)),
    lambda d: ([(DictKey(k), d[k]) for k in _sorted_keys(d)],
               (d.default_factory, tuple(_sorted_keys(d)))))


def is_tree_node(typ):
    """Whether the type ``typ`` is a pytree node type (built in, registered or a
    namedtuple)."""
    return default_registry.is_node(typ)


# --- structures ------------------------------------------------------------------------------


class _ChildDefs(tuple):
    """A treedef's children: a tuple, and callable as JAX's ``treedef.children()``."""

    __slots__ = ()

    def __call__(self):
        return list(self)


class PyTreeDef:
    """The structure of a pytree: a node type, its aux data and child structures."""

    __slots__ = ("_type", "_data", "_kids", "num_leaves", "num_nodes", "_hash")

    def __init__(self, node_type, node_data, children):
        self._type = node_type  # None for a leaf
        self._data = node_data
        self._kids = kids = _ChildDefs(children)
        self._hash = None
        if node_type is None:
            self.num_leaves = self.num_nodes = 1
            return
        leaves, nodes = 0, 1  # (one loop: every jitted call builds its arguments' treedef)
        for c in kids:
            leaves += c.num_leaves
            nodes += c.num_nodes
        self.num_leaves, self.num_nodes = leaves, nodes

    @property
    def children(self):
        """The child structures (call it, ``treedef.children()``, as in JAX)."""
        return self._kids

    def node_data(self):
        """``(node type, aux data)`` of the root, or None for a leaf."""
        if self._type is None:
            return None
        data = list(self._data) if self._type is dict else self._data
        return self._type, data

    def _node(self):
        """The registry entry of the root (not called on a leaf)."""
        return default_registry._nodes.get(self._type) or _namedtuple_node(self._type)

    def unflatten(self, leaves):
        """The pytree of this structure with ``leaves``."""
        leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            if len(leaves) < self.num_leaves:
                raise ValueError(f"Too few leaves for PyTreeDef; expected {self.num_leaves}, "
                                 f"got {len(leaves)}")
            raise ValueError(f"Too many leaves for PyTreeDef; expected {self.num_leaves}.")
        return self._build(iter(leaves))

    def _build(self, it):
        if self._type is None:
            return next(it)
        return self._node().unflatten(self._data, [c._build(it) for c in self._kids])

    def flatten_up_to(self, tree):
        """The subtrees of ``tree`` at this structure's leaves (``tree`` may be deeper)."""
        out = []
        self._flatten_up_to(tree, out)
        return out

    def _flatten_up_to(self, tree, out):
        if self._type is None:
            out.append(tree)
            return
        t, node = default_registry.node_type(tree)
        if t is not self._type:
            if self._type in (tuple, list, dict, type(None)):
                raise ValueError(f"Expected {self._type.__name__}, got {tree!r}.")
            raise ValueError(f"Custom node type mismatch; expected type: {self._type}; "
                             f"value: {tree!r}.")
        children, data = node.flatten(tree)
        children = list(children)
        if self._type is dict and data != self._data:
            raise ValueError(f"Dict key mismatch; expected keys: {list(self._data)}; present "
                             f"keys: {list(data)}.")
        if len(children) != len(self._kids):
            kind = {tuple: "Tuple", list: "List"}.get(self._type, self._type.__name__)
            raise ValueError(f"{kind} arity mismatch: {len(children)} != {len(self._kids)}; "
                             f"{kind.lower()}: {tree!r}.")
        if data != self._data:
            raise ValueError(f"Mismatch custom node data: {data!r} != {self._data!r}; value: "
                             f"{tree!r}.")
        for c, sub in zip(self._kids, children):
            c._flatten_up_to(sub, out)

    def compose(self, inner):
        """The structure of this tree with a copy of ``inner`` at each leaf."""
        if self._type is None:
            return inner
        return PyTreeDef(self._type, self._data, [c.compose(inner) for c in self._kids])

    def __eq__(self, other):
        return (isinstance(other, PyTreeDef) and self._type is other._type
                and _data_equal(self._data, other._data) and self._kids == other._kids)

    def __hash__(self):
        if self._hash is None:
            self._hash = hash((self._type, _hashable(self._data), self._kids))
        return self._hash

    def __repr__(self):
        return f"PyTreeDef({self._str()})"

    def _str(self):
        if self._type is None:
            return "*"
        kids = [c._str() for c in self._kids]
        if self._type is tuple:
            return "(" + ", ".join(kids) + ("," if len(kids) == 1 else "") + ")"
        if self._type is list:
            return "[" + ", ".join(kids) + "]"
        if self._type is dict:
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(self._data, kids)) + "}"
        if self._type is type(None):
            return "None"
        node = self._node()
        label = f"namedtuple[{self._type.__name__}]" if node.label == "namedtuple" else \
            f"{self._type.__name__}[{self._data}]"
        return f"CustomNode({label}, [{', '.join(kids)}])"


def _data_equal(a, b):
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - aux data whose == is not a bool (arrays): identity
        return a is b


def _hashable(data):
    """Aux data as a treedef's hash takes it: unhashable data (a dict among a module's static
    fields) adds nothing, as in JAX, so that treedefs that compare equal hash equal (an id
    here made jit retrace on every equal-but-new static argument)."""
    try:
        hash(data)
        return data
    except TypeError:
        return None


_LEAF = PyTreeDef(None, None, ())


def treedef_is_leaf(treedef):
    """Whether ``treedef`` has a single node (a leaf, or an empty node such as None)."""
    return treedef.num_nodes == 1


def treedef_children(treedef):
    return list(treedef.children)


def treedef_tuple(treedefs):
    """The structure of a tuple whose elements have the structures ``treedefs``."""
    return PyTreeDef(tuple, None, list(treedefs))


# --- flattening ------------------------------------------------------------------------------


def _flatten(tree, is_leaf, leaves):
    if is_leaf is not None and is_leaf(tree):
        leaves.append(tree)
        return _LEAF
    t = type(tree)
    node = _registered.get(t)
    if node is None:
        if not (issubclass(t, tuple) and hasattr(t, "_fields")):  # (a leaf: not a namedtuple)
            leaves.append(tree)
            return _LEAF
        node = _namedtuple_node(t)
    children, data = node.flatten(tree)
    return PyTreeDef(t, data, [_flatten(c, is_leaf, leaves) for c in children])


def tree_flatten(tree, is_leaf=None):
    """``(leaves, treedef)`` of ``tree``."""
    leaves = []
    treedef = _flatten(tree, is_leaf, leaves)
    return leaves, treedef


def tree_unflatten(treedef, leaves):
    """The pytree of structure ``treedef`` with ``leaves``."""
    return treedef.unflatten(leaves)


def tree_leaves(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[1]


def all_leaves(iterable, is_leaf=None):
    """Whether every element of ``iterable`` is a leaf."""
    if is_leaf is None:
        return all(treedef_is_leaf(tree_structure(x)) and tree_structure(x).num_leaves == 1
                   for x in iterable)
    return all(tree_leaves(x, is_leaf) == [x] for x in iterable)


def flatten_one_level(tree):
    """``(children, aux_data)`` of the root node of ``tree``; ValueError for a leaf."""
    _, node = default_registry.node_type(tree)
    if node is None:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    children, data = node.flatten(tree)
    return tuple(children), data


def flatten_one_level_with_keys(tree):
    """``([(key, child)], aux_data)`` of the root node of ``tree``."""
    _, node = default_registry.node_type(tree)
    if node is None:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    pairs, data = node.flatten_with_keys(tree)
    return tuple(tuple(p) for p in pairs), data


def _flatten_with_path(tree, is_leaf, takes_path, path, out):
    if is_leaf is not None and (is_leaf(path, tree) if takes_path else is_leaf(tree)):
        out.append((path, tree))
        return _LEAF
    t, node = default_registry.node_type(tree)
    if node is None:
        out.append((path, tree))
        return _LEAF
    pairs, data = node.flatten_with_keys(tree)
    return PyTreeDef(t, data, [_flatten_with_path(c, is_leaf, takes_path, path + (k,), out)
                               for k, c in pairs])


def tree_flatten_with_path(tree, is_leaf=None, is_leaf_takes_path=False):
    """``([(key_path, leaf)], treedef)``."""
    out = []
    treedef = _flatten_with_path(tree, is_leaf, is_leaf_takes_path, (), out)
    return out, treedef


def tree_leaves_with_path(tree, is_leaf=None, is_leaf_takes_path=False):
    return tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


# --- mapping and reducing --------------------------------------------------------------------


def _prefix_error(prefix_tree, full_tree, is_leaf, name, path=()):
    """JAX's message for ``full_tree`` not having ``prefix_tree``'s structure: the first key
    path where they differ and how."""
    if is_leaf is not None and is_leaf(prefix_tree):
        return None
    t, node = default_registry.node_type(prefix_tree)
    if node is None:
        return None
    where = f"\n    {name}{keystr(path)}\n"
    ft, fnode = default_registry.node_type(full_tree)
    if ft is not t:
        return (f"pytree structure error: different types at key path{where}At that key "
                f"path, the prefix pytree {name} has a subtree of type\n    {t}\nbut at the "
                f"same key path the full pytree has a subtree of different type\n    {ft}.")
    pairs, data = node.flatten_with_keys(prefix_tree)
    fpairs, fdata = fnode.flatten_with_keys(full_tree)
    pairs, fpairs = list(pairs), list(fpairs)
    if t in (tuple, list) and len(pairs) != len(fpairs):
        return (f"pytree structure error: different lengths of {t.__name__} at key path"
                f"{where}At that key path, the prefix pytree {name} has a subtree of type "
                f"{t.__name__} of length {len(pairs)}, but the full pytree has a subtree of "
                f"the same type but of length {len(fpairs)}.")
    keys, fkeys = [k for k, _ in pairs], [k for k, _ in fpairs]
    if keys != fkeys:
        ks = " ".join(str(_simple_key(k)) for k in keys)
        fks = " ".join(str(_simple_key(k)) for k in fkeys)
        diff = " ".join(str(_simple_key(k)) for k in set(keys) ^ set(fkeys))
        return (f"pytree structure error: different numbers of pytree children at key path"
                f"{where}At that key path, the prefix pytree {name} has a subtree of type\n"
                f"    {t}\nwith {len(keys)} child keys\n    {ks}\nbut at the same key path "
                f"the full pytree has a subtree of the same type but with {len(fkeys)} child "
                f"keys\n    {fks}\nso the symmetric difference on key sets is\n    {diff}")
    if not _data_equal(data, fdata):
        return (f"pytree structure error: different pytree metadata at key path{where}At "
                f"that key path, the prefix pytree {name} has a subtree of type\n    {t}\n"
                f"with metadata\n    {data!r}\nbut at the same key path the full pytree has a "
                f"subtree of the same type but with metadata\n    {fdata!r}.")
    for (k, c), (_, fc) in zip(pairs, fpairs):
        err = _prefix_error(c, fc, is_leaf, name, path + (k,))
        if err is not None:
            return err
    return None


def _leaves_up_to(treedef, tree, rest, is_leaf, name):
    out = []
    for r in rest:
        try:
            out.append(treedef.flatten_up_to(r))
        except ValueError as e:
            err = _prefix_error(tree, r, is_leaf, name)
            raise ValueError(err or str(e)) from None
    return out


def tree_map(f, tree, *rest, is_leaf=None):
    """``f`` applied leafwise; ``rest`` must have ``tree``'s structure (or a deeper one)."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    others = _leaves_up_to(treedef, tree, rest, is_leaf, "tree_map tree")
    return treedef.unflatten(f(*xs) for xs in zip(leaves, *others))


def tree_map_with_path(f, tree, *rest, is_leaf=None, is_leaf_takes_path=False):
    """``f(key_path, leaf, *others)`` applied leafwise."""
    pairs, treedef = tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)
    leaf_pred = (lambda x: False) if is_leaf is None or is_leaf_takes_path else is_leaf
    others = _leaves_up_to(treedef, tree, rest, leaf_pred, "tree_map_with_path tree")
    return treedef.unflatten(f(p, x, *xs) for (p, x), *xs in zip(pairs, *others))


class _Unspecified:
    def __repr__(self):
        return "<unspecified>"


_UNSPECIFIED = _Unspecified()


def tree_reduce(function, tree, initializer=_UNSPECIFIED, is_leaf=None):
    """``functools.reduce`` over the leaves of ``tree``."""
    if initializer is _UNSPECIFIED:
        return functools.reduce(function, tree_leaves(tree, is_leaf))
    return functools.reduce(function, tree_leaves(tree, is_leaf), initializer)


def _reduce_balanced(operation, leaves):
    if len(leaves) == 1:
        return leaves[0]
    mid = len(leaves) // 2
    return operation(_reduce_balanced(operation, leaves[:mid]),
                     _reduce_balanced(operation, leaves[mid:]))


def tree_reduce_associative(operation, tree, *, identity=_UNSPECIFIED, is_leaf=None):
    """Reduce the leaves with an associative ``operation`` as a balanced tree (depth
    log n); ``identity`` is the result for a tree without leaves."""
    leaves = tree_leaves(tree, is_leaf)
    if not leaves:
        if identity is _UNSPECIFIED:
            raise TypeError("Must specify identity for parallel reduction of empty sequence.")
        return identity
    return _reduce_balanced(operation, leaves)


def tree_all(tree, *, is_leaf=None):
    """Whether every leaf is truthy."""
    return all(tree_leaves(tree, is_leaf))


def tree_broadcast(prefix_tree, full_tree, is_leaf=None):
    """``prefix_tree`` with each leaf repeated over the matching subtree of ``full_tree``."""
    leaves, treedef = tree_flatten(prefix_tree, is_leaf)
    subtrees = _leaves_up_to(treedef, prefix_tree, [full_tree], is_leaf,
                             "tree_broadcast prefix")[0]
    return treedef.unflatten(tree_map(lambda _, v=leaf: v, sub, is_leaf=is_leaf)
                             for leaf, sub in zip(leaves, subtrees))


def tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose):
    """Turn a tree of structure outer∘inner into one of structure inner∘outer
    (``inner_treedef`` None: inferred from the first outer leaf)."""
    flat = outer_treedef.flatten_up_to(pytree_to_transpose)
    if inner_treedef is None:
        inner_treedef = tree_structure(flat[0]) if flat else PyTreeDef(tuple, None, ())
    inner = [inner_treedef.flatten_up_to(x) for x in flat]
    columns = list(zip(*inner)) if inner else [[] for _ in range(inner_treedef.num_leaves)]
    return inner_treedef.unflatten(outer_treedef.unflatten(col) for col in columns)


# --- Partial ---------------------------------------------------------------------------------


class Partial(functools.partial):
    """``functools.partial`` that is a pytree: its bound arguments are leaves and the
    function is static, so it can be passed through and returned from transformed
    functions."""

    def __new__(cls, func, *args, **kwargs):
        if isinstance(func, Partial):  # flatten nesting: the inner arguments stay leaves
            args = func.args + args
            kwargs = {**func.keywords, **kwargs}
            func = func.func
        return super().__new__(cls, func, *args, **kwargs)


register_pytree_node(
    Partial,
    lambda p: ((p.args, p.keywords), p.func),
    lambda func, children: Partial(func, *children[0], **children[1]),
    lambda p: (((GetAttrKey("args"), p.args), (GetAttrKey("keywords"), p.keywords)), p.func))
