"""Pytrees: flattening, structures, registration, key paths."""

import collections

import pytest

from remat import tree_util as tu

Point = collections.namedtuple("Point", ["x", "y"])


@tu.register_pytree_node_class
class Box:
    def __init__(self, a, b, label):
        self.a, self.b, self.label = a, b, label

    def tree_flatten(self):
        return (self.a, self.b), self.label

    @classmethod
    def tree_unflatten(cls, label, children):
        return cls(*children, label)


TREES = [
    1,
    None,
    (),
    (1, 2),
    [1, (2, 3), {"b": 4, "a": 5}],
    {"z": None, "y": [6]},
    Point(1, (2, 3)),
    collections.OrderedDict([("b", 1), ("a", 2)]),
]


@pytest.mark.parametrize("tree", TREES, ids=repr)
def test_round_trip(tree):
    leaves, treedef = tu.tree_flatten(tree)
    assert tu.tree_unflatten(treedef, leaves) == tree


def test_dict_leaves_in_sorted_key_order():
    assert tu.tree_leaves({"b": 1, "a": 2, "c": 3}) == [2, 1, 3]


def test_none_is_an_empty_node():
    assert tu.tree_leaves([None, 1, None]) == [1]
    assert tu.tree_structure(None).num_leaves == 0


def test_registered_class_round_trip():
    box = Box(1, [2, 3], "lbl")
    leaves, treedef = tu.tree_flatten(box)
    assert leaves == [1, 2, 3]
    back = tu.tree_unflatten(treedef, [10, 20, 30])
    assert (back.a, back.b, back.label) == (10, [20, 30], "lbl")


def test_register_pytree_node_function_form():
    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    tu.register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda _, c: Pair(*c))
    out = tu.tree_map(lambda v: v * 2, Pair(1, 2))
    assert (out.a, out.b) == (2, 4)
    with pytest.raises(ValueError, match="Duplicate"):
        tu.register_pytree_node(Pair, lambda p: ((), None), lambda _, c: None)


def test_tree_map_several_trees_and_prefix():
    assert tu.tree_map(lambda a, b: a + b, (1, [2]), (10, [20])) == (11, [22])
    with pytest.raises(ValueError, match="mismatch"):
        tu.tree_map(lambda a, b: a + b, (1, 2), [1, 2])


def test_is_leaf():
    tree = [(1, 2), (3, 4)]
    assert tu.tree_leaves(tree, is_leaf=lambda x: isinstance(x, tuple)) == [(1, 2), (3, 4)]


def test_structure_equality_and_hash():
    a = tu.tree_structure({"a": (1, 2)})
    b = tu.tree_structure({"a": (3, 4)})
    assert a == b and hash(a) == hash(b)
    assert a != tu.tree_structure({"a": [1, 2]})


def test_key_paths():
    tree = {"w": [1, Point(2, 3)], "b": 4}
    paths = [tu.keystr(p) for p, _ in tu.tree_flatten_with_path(tree)[0]]
    assert paths == ["['b']", "['w'][0]", "['w'][1].x", "['w'][1].y"]


def test_unflatten_wrong_leaf_count():
    treedef = tu.tree_structure((1, 2))
    with pytest.raises(ValueError, match="Too few leaves"):
        treedef.unflatten([1])


def test_tree_transpose():
    outer = tu.tree_structure([0, 0])
    inner = tu.tree_structure((0, 0, 0))
    assert tu.tree_transpose(outer, inner, [(1, 2, 3), (4, 5, 6)]) == ([1, 4], [2, 5], [3, 6])


def test_partial_is_a_pytree():
    p = tu.Partial(lambda a, b: a + b, 1)
    assert tu.tree_leaves(p) == [1]
    assert tu.tree_map(lambda v: v * 10, p)(2) == 12
