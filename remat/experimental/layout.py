"""``remat.experimental.layout``: JAX's array layouts (``Layout``, ``Format``) for code that
names them (flax's partitioning helpers).

remat's arrays are NumPy buffers in row-major order: the layout of an array of rank ``n`` is
``Layout(major_to_minor=tuple(range(n)))``.  A layout is about memory order only, never about
values, so ``with_layout_constraint`` returns its operand's values unchanged.
"""

from remat.tree_util import tree_map

__all__ = ["Format", "Layout", "with_layout_constraint"]


class _AutoLayout:
    """``Layout.AUTO``: let the compiler choose (remat's choice: row-major)."""

    def __repr__(self):
        return "AUTO"


class Layout:
    """The order of an array's dimensions in memory, most major first."""

    AUTO = _AutoLayout()
    __slots__ = ("major_to_minor", "tiling", "sub_byte_element_size_in_bits")

    def __init__(self, major_to_minor, tiling=None, sub_byte_element_size_in_bits=0):
        self.major_to_minor = tuple(major_to_minor)
        self.tiling = None if tiling is None else tuple(tuple(t) for t in tiling)
        self.sub_byte_element_size_in_bits = sub_byte_element_size_in_bits

    def _key(self):
        return (self.major_to_minor, self.tiling, self.sub_byte_element_size_in_bits)

    def update(self, **kwargs):
        return Layout(**{**dict(zip(self.__slots__, self._key())), **kwargs})

    def check_compatible_aval(self, aval_shape):
        if len(self.major_to_minor) != len(aval_shape):
            raise ValueError(f"Length of major_to_minor and the rank of the value should "
                             f"match. Got major_to_minor={self.major_to_minor} and shape="
                             f"{tuple(aval_shape)}")

    def __eq__(self, other):
        return isinstance(other, Layout) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return (f"Layout(major_to_minor={self.major_to_minor}, tiling={self.tiling}, "
                f"sub_byte_element_size_in_bits={self.sub_byte_element_size_in_bits})")


class Format:
    """A layout together with a sharding (either may be None)."""

    __slots__ = ("layout", "sharding")

    def __init__(self, layout=None, sharding=None):
        if not (layout is None or layout is Layout.AUTO or isinstance(layout, Layout)):
            raise TypeError(f"Invalid entry {layout!r} of type {type(layout)} for layout: it "
                            f"must be a Layout, Layout.AUTO or None")
        self.layout, self.sharding = layout, sharding

    def __eq__(self, other):
        return (isinstance(other, Format) and self.layout == other.layout
                and self.sharding == other.sharding)

    def __hash__(self):
        return hash((self.layout, self.sharding))

    def __repr__(self):
        return f"Format(layout={self.layout!r}, sharding={self.sharding!r})"


def with_layout_constraint(x, layouts):
    """``x`` (a pytree of arrays) laid out as ``layouts`` asks: the same values."""
    def constrain(leaf, layout):
        if isinstance(layout, Layout):
            layout.check_compatible_aval(leaf.shape)
        return leaf

    if isinstance(layouts, Layout | _AutoLayout) or layouts is None:
        return tree_map(lambda leaf: constrain(leaf, layouts), x)
    return tree_map(constrain, x, layouts)
