"""Typed PRNG keys: ``random.key`` gives scalars of the extended dtype ``key<fry>`` whose data is
``PRNGKey``'s. Key arrays index, reshape and concatenate like arrays; flow through jit, vmap,
scan (carries and xs), cond, while_loop, checkpoint and grad (float0 tangents); every sampler
accepts them and raw keys alike; errors are JAX's."""

import copy
import pickle

import numpy as np
import pytest

import remat
import remat.numpy as jnp
import remat.random as random
from remat import dtypes, lax
from remat.ad_checkpoint import saved_residuals
from remat.config import config


def data(keys):
    return np.asarray(random.key_data(keys))


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# --- the dtype -------------------------------------------------------------------------------


def test_key_is_a_scalar_of_an_extended_dtype():
    k = random.key(42)
    assert k.shape == () and k.ndim == 0 and k.size == 1
    assert str(k.dtype) == "key<fry>" and k.dtype.name == "key<fry>"
    assert k.dtype == random.key_dtype() == random.key_dtype("threefry2x32")
    assert k.dtype != np.uint32 and k.dtype.itemsize == 8
    assert jnp.issubdtype(k.dtype, dtypes.prng_key)
    assert jnp.issubdtype(k.dtype, dtypes.extended)
    assert not jnp.issubdtype(k.dtype, jnp.integer)
    assert not jnp.issubdtype(k.dtype, jnp.floating)
    assert not jnp.issubdtype(np.uint32, dtypes.prng_key)
    assert repr(k) == "Array((), dtype=key<fry>) overlaying:\n[ 0 42]"
    assert random.key_impl(k) == "threefry2x32" == random.key_impl(random.PRNGKey(0))
    np.testing.assert_array_equal(data(k), random.PRNGKey(42))
    assert random.key(7, impl="threefry2x32").dtype == random.key(7, dtype=k.dtype).dtype


def test_key_data_and_wrap_key_data_round_trip():
    raw = np.arange(12, dtype=np.uint32).reshape(2, 3, 2)
    keys = random.wrap_key_data(raw)
    assert keys.shape == (2, 3) and keys.dtype == random.key_dtype()
    np.testing.assert_array_equal(data(keys), raw)
    assert data(keys).dtype == np.uint32
    assert random.wrap_key_data(raw, dtype=keys.dtype).shape == (2, 3)
    np.testing.assert_array_equal(data(random.PRNGKey(3)), [0, 3])  # raw keys pass through
    k = random.clone(random.key(5))
    assert k.dtype == random.key_dtype() and same_bits(data(k), data(random.key(5)))


def test_split_and_fold_in_keep_the_kind_of_key():
    k, raw = random.key(11), random.PRNGKey(11)
    s = random.split(k)
    assert s.shape == (2,) and s.dtype == k.dtype
    np.testing.assert_array_equal(data(s), random.split(raw))
    s = random.split(k, (2, 3))
    assert s.shape == (2, 3)
    np.testing.assert_array_equal(data(s), random.split(raw, (2, 3)))
    f = random.fold_in(k, 7)
    assert f.shape == () and f.dtype == k.dtype
    np.testing.assert_array_equal(data(f), random.fold_in(raw, 7))
    assert random.split(raw).dtype == np.uint32  # raw in, raw out


def test_keys_match_jax():
    jax = pytest.importorskip("jax")
    for seed in [0, 1, -3, 2**31 - 1]:
        kj, kr = jax.random.key(seed), random.key(seed)
        np.testing.assert_array_equal(data(kr), jax.random.key_data(kj))
        np.testing.assert_array_equal(data(random.split(kr, 3)),
                                      jax.random.key_data(jax.random.split(kj, 3)))
        np.testing.assert_array_equal(data(random.fold_in(kr, 9)),
                                      jax.random.key_data(jax.random.fold_in(kj, 9)))
        assert same_bits(random.normal(kr, (4,)), jax.random.normal(kj, (4,)))


def test_every_sampler_accepts_typed_and_raw_keys():
    k, raw = random.key(3), random.PRNGKey(3)
    calls = [
        lambda k: random.bits(k, (3,)), lambda k: random.uniform(k, (3,)),
        lambda k: random.normal(k, (3,)), lambda k: random.randint(k, (3,), 0, 9),
        lambda k: random.bernoulli(k, 0.4, (3,)), lambda k: random.gumbel(k, (3,)),
        lambda k: random.categorical(k, jnp.zeros(4)), lambda k: random.permutation(k, 5),
        lambda k: random.choice(k, 5, (2,)), lambda k: random.exponential(k, (3,)),
        lambda k: random.gamma(k, 2.0, (3,)), lambda k: random.beta(k, 2.0, 3.0, (3,)),
        lambda k: random.poisson(k, 3.0, (3,)), lambda k: random.binomial(k, 5, 0.3, (3,)),
        lambda k: random.dirichlet(k, jnp.ones(3)), lambda k: random.t(k, 3.0, (2,)),
        lambda k: random.truncated_normal(k, -1.0, 1.0, (3,)),
        lambda k: random.multivariate_normal(k, jnp.zeros(2), jnp.eye(2)),
        lambda k: random.orthogonal(k, 3), lambda k: random.ball(k, 3),
        lambda k: random.multinomial(k, 5, jnp.array([0.5, 0.5])),
    ]
    for call in calls:
        assert same_bits(call(k), call(raw))


# --- key arrays are arrays -------------------------------------------------------------------


def test_indexing_and_reshaping_key_arrays():
    keys = random.split(random.key(0), 6)
    raw = data(keys)
    assert keys[2].shape == () and keys[2].dtype == keys.dtype
    np.testing.assert_array_equal(data(keys[2]), raw[2])
    np.testing.assert_array_equal(data(keys[1:5:2]), raw[1:5:2])
    np.testing.assert_array_equal(data(keys[np.array([5, 0])]), raw[[5, 0]])
    grid = keys.reshape(2, 3)
    assert grid.shape == (2, 3) and grid.dtype == keys.dtype
    np.testing.assert_array_equal(data(grid), raw.reshape(2, 3, 2))
    np.testing.assert_array_equal(data(grid.T), raw.reshape(2, 3, 2).transpose(1, 0, 2))
    np.testing.assert_array_equal(data(jnp.reshape(grid, (6,))), raw)
    np.testing.assert_array_equal(data(grid.ravel()), raw)
    np.testing.assert_array_equal(data(keys[None].squeeze(0)), raw)
    np.testing.assert_array_equal(data(jnp.concatenate([keys, keys[:2]])),
                                  np.concatenate([raw, raw[:2]]))
    np.testing.assert_array_equal(data(jnp.stack([keys[0], keys[3]])), raw[[0, 3]])
    np.testing.assert_array_equal(data(jnp.broadcast_to(keys[1], (3,))), np.stack([raw[1]] * 3))
    pick = np.array([True, False, True, False, True, False])
    np.testing.assert_array_equal(data(jnp.where(pick, keys, keys[::-1])),
                                  np.where(pick[:, None], raw, raw[::-1]))
    k1, k2 = random.split(random.key(0))  # iteration unpacks a key array
    assert k1.dtype == k2.dtype == keys.dtype
    assert [x.shape for x in keys] == [()] * 6 and len(keys) == 6


def test_keys_pickle_and_copy():
    keys = random.split(random.key(3), 2)
    for clone in (pickle.loads(pickle.dumps(keys)), copy.deepcopy(keys)):
        assert clone.dtype == keys.dtype and clone.shape == (2,)
        assert same_bits(data(clone), data(keys))
        assert same_bits(random.normal(clone[1]), random.normal(keys[1]))


def test_legacy_key_and_default_impl_flags():
    raw = random.PRNGKey(0)
    calls = (lambda k: random.ball(k, 3), lambda k: random.choice(k, 5, (2,), False),
             lambda k: random.multinomial(k, 4, jnp.array([0.5, 0.5])),
             lambda k: random.t(k, 3.0), lambda k: random.double_sided_maxwell(k, 0.0, 1.0))
    with_raw = [call(raw) for call in calls]
    with config.override("jax_legacy_prng_key", "error"):
        with pytest.raises(ValueError, match="Legacy uint32 key array"):
            random.normal(raw)
        # typed keys pass, and the samplers built on others never see a raw key inside
        for call, want in zip(calls, with_raw):
            assert same_bits(call(random.key(0)), want)
    with config.override("jax_legacy_prng_key", "warn"):
        with pytest.warns(UserWarning, match="Legacy uint32 key array"):
            random.uniform(raw)
    with config.override("jax_default_prng_impl", "rbg"):
        with pytest.raises(ValueError, match="not available in remat"):
            random.key(0)
        assert random.key(0, impl="threefry2x32").dtype == random.key_dtype("threefry2x32")


def test_key_array_conversion_errors():
    k = random.key(0)
    with pytest.raises(TypeError, match="key_data"):
        np.asarray(k)
    with pytest.raises(TypeError, match="key array operand"):
        random.random_unwrap_p.bind(np.zeros(2, np.uint32))
    with pytest.raises(TypeError):
        jnp.add(k, k)  # keys are not numbers


def test_keys_compare_equal_and_not_equal_as_in_jax():
    # JAX's eq and ne take keys (their whole key data); the ordering comparisons do not.
    # chex's assert_trees_all_equal of keys runs ``==`` inside jit; flax's tests too
    keys = random.split(random.key(0), 4)
    other = keys.at[2].set(random.key(9))
    want = np.array([True, True, False, True])
    for eq in (lambda a, b: a == b, jnp.equal, lax.eq, remat.jit(lambda a, b: a == b),
               remat.vmap(lax.eq)):
        np.testing.assert_array_equal(eq(keys, other), want)
    np.testing.assert_array_equal(keys != other, ~want)
    np.testing.assert_array_equal(keys == keys[1], [False, True, False, False])
    assert bool(jnp.array_equal(keys, keys)) and not bool(jnp.array_equal(keys, other))
    # large enough that the executor splits, fuses and writes in place where it can
    many = random.split(random.key(1), 1_200_000)
    changed = many.at[5].set(random.key(2))
    both = remat.jit(lambda a, b: ((a == b) & (a != b[0]), a != b))(many, changed)
    assert int(np.sum(both[0])) == 1_199_998 and int(np.sum(both[1])) == 1
    with pytest.raises(TypeError, match=r"lt does not accept dtype key<fry> for its operand"):
        lax.lt(keys, other)
    with pytest.raises(TypeError, match=r"eq requires arguments to have the same dtypes"):
        lax.eq(keys, np.zeros(4, np.uint32))


# --- transformations -------------------------------------------------------------------------


def test_keys_through_jit():
    k = random.key(1)
    out = remat.jit(random.split)(k)
    assert out.dtype == k.dtype and same_bits(data(out), data(random.split(k)))
    f = remat.jit(lambda k, x: (random.fold_in(k, 3), x + random.normal(k)))
    kk, y = f(k, 2.0)
    assert same_bits(data(kk), data(random.fold_in(k, 3)))
    np.testing.assert_array_equal(y, 2.0 + np.asarray(random.normal(k)))
    closed = remat.jit(lambda x: x * random.uniform(k, (3,)))  # a key constant
    np.testing.assert_array_equal(closed(2.0), 2.0 * np.asarray(random.uniform(k, (3,))))
    text = str(remat.make_jaxpr(random.split)(k))
    assert "a:key<fry>[]" in text and "key<fry>[2] = random_wrap" in text
    text = str(remat.make_jaxpr(lambda x: x + random.normal(k))(1.0))
    assert "key<fry>[]" in text  # a closed-over key is a constant, not a literal


def test_keys_through_vmap():
    keys = random.split(random.key(2), 4)
    out = remat.vmap(lambda k: random.normal(k, (3,)))(keys)
    for i in range(4):
        assert same_bits(out[i], random.normal(keys[i], (3,)))
    split = remat.vmap(random.split)(keys)
    assert split.shape == (4, 2) and split.dtype == keys.dtype
    for i in range(4):
        assert same_bits(data(split[i]), data(random.split(keys[i])))
    seeds = np.array([0, 5, -1], np.int32)
    made = remat.vmap(random.key)(seeds)
    assert made.shape == (3,) and same_bits(data(made), data(jnp.stack(
        [random.key(s) for s in seeds])))
    grid = keys.reshape(2, 2)
    inner = remat.vmap(lambda k: random.uniform(k, (2,)))
    out = remat.vmap(inner, in_axes=1, out_axes=1)(grid)  # keys batched along axis 1
    for i in range(2):
        for j in range(2):
            assert same_bits(out[i, j], random.uniform(grid[i, j], (2,)))
    # an unbatched key with batched parameters
    out = remat.vmap(lambda lo: random.uniform(keys[0], (2,), minval=lo))(jnp.arange(3.0))
    for i in range(3):
        assert same_bits(out[i], random.uniform(keys[0], (2,), minval=float(i)))


def test_keys_as_scan_carry_and_xs():
    def body(key, x):
        key, sub = random.split(key)
        return key, (random.normal(sub) + x, sub)

    key0 = random.key(0)
    last, (ys, subs) = lax.scan(body, key0, jnp.arange(3.0))
    assert last.dtype == key0.dtype and subs.shape == (3,) and subs.dtype == key0.dtype
    key = key0
    for i in range(3):
        key, sub = random.split(key)
        assert same_bits(ys[i], random.normal(sub) + i)
        assert same_bits(data(subs[i]), data(sub))
    assert same_bits(data(last), data(key))
    keys = random.split(key0, 5)
    total, _ = lax.scan(lambda c, k: (c + random.uniform(k), None), 0.0, keys)
    np.testing.assert_allclose(total, sum(float(random.uniform(k)) for k in keys), rtol=1e-6)
    jitted = remat.jit(lambda k, xs: lax.scan(body, k, xs))(key0, jnp.arange(3.0))
    assert same_bits(jitted[1][0], ys)


def test_keys_through_cond_while_and_fori():
    k = random.key(4)
    out = lax.cond(True, lambda k: random.split(k)[1], lambda k: k, k)
    assert same_bits(data(out), data(random.split(k)[1]))
    keys = random.split(k, 4)
    pred = np.array([True, False, True, False])
    out = remat.vmap(lambda p, k: lax.cond(p, lambda k: random.fold_in(k, 1), lambda k: k, k))(
        pred, keys)
    for i in range(4):
        want = random.fold_in(keys[i], 1) if pred[i] else keys[i]
        assert same_bits(data(out[i]), data(want))
    n, kw = lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, random.split(s[1])[0]),
                           (0, k))
    ref = k
    for _ in range(3):
        ref = random.split(ref)[0]
    assert int(n) == 3 and same_bits(data(kw), data(ref))
    kf = lax.fori_loop(0, 3, lambda i, kk: random.fold_in(kk, i), k)
    ref = k
    for i in range(3):
        ref = random.fold_in(ref, i)
    assert same_bits(data(kf), data(ref))


def _loss(w, key):
    keep = random.bernoulli(key, 0.7, w.shape)
    return jnp.sum(jnp.where(keep, jnp.sin(w), 0.0) ** 2)


def test_keys_through_grad_and_checkpoint():
    w = jnp.linspace(-1.0, 1.0, 5)
    k = random.key(8)
    g = remat.grad(_loss)(w, k)
    np.testing.assert_array_equal(remat.grad(remat.checkpoint(_loss))(w, k), g)
    np.testing.assert_array_equal(remat.jit(remat.grad(remat.checkpoint(_loss)))(w, k), g)
    keep = np.asarray(random.bernoulli(k, 0.7, (5,)))
    np.testing.assert_allclose(g, np.where(keep, 2 * np.sin(w) * np.cos(w), 0.0), rtol=1e-6)
    gw, gk = remat.grad(_loss, argnums=(0, 1), allow_int=True)(w, k)
    assert gk.dtype == dtypes.float0 and gk.shape == ()  # a key's cotangent: float0
    with pytest.raises(TypeError, match="key<fry>"):
        remat.grad(_loss, argnums=1)(w, k)
    y, t = remat.jvp(lambda k: random.normal(k, (2,)), (k,), (np.zeros((), dtypes.float0),))
    assert same_bits(y, random.normal(k, (2,))) and not np.any(np.asarray(t))
    res = saved_residuals(remat.checkpoint(_loss), w, k)
    assert any("key<fry>" in str(aval) for aval, _ in res)  # a key is saved like any value


def test_random_wrap_rules():
    raw = np.asarray(random.split(random.PRNGKey(0), 3))  # (3, 2)
    other = np.asarray(random.split(random.PRNGKey(1), 3))
    out = remat.vmap(random.wrap_key_data, in_axes=2)(np.stack([raw, other], axis=2))
    assert out.shape == (2, 3)  # batched after the key data: the batch axis moves in front
    np.testing.assert_array_equal(data(out[0]), raw)
    np.testing.assert_array_equal(data(out[1]), other)
    out = remat.vmap(random.wrap_key_data, in_axes=1)(np.stack([raw, other], axis=1))
    assert out.shape == (2, 3)
    np.testing.assert_array_equal(data(out[1]), other)
    keys = random.wrap_key_data(raw)
    back = remat.vmap(random.key_data)(keys)
    np.testing.assert_array_equal(back, raw)
    _, tangent = remat.jvp(random.key_data, (keys,), (np.zeros((3,), dtypes.float0),))
    assert tangent.dtype == dtypes.float0 and tangent.shape == (3, 2)
