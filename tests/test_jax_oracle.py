"""remat against JAX (skipped when JAX is absent): values, gradients, JVPs, vmaps and jaxpr
shapes of a table of functions written once against the shared API."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_platforms", "cpu")

import remat  # noqa: E402

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 4)).astype(np.float32)
W = rng.standard_normal((4, 5)).astype(np.float32)


def mlp(api, np_):
    return lambda x, w: np_.sum(np_.tanh(x @ w) ** 2) + np_.mean(np_.exp(0.1 * x))


def softmax_xent(api, np_):
    def f(x, w):
        logits = x @ w
        logp = logits - np_.log(np_.sum(np_.exp(logits - logits.max(-1, keepdims=True)),
                                        -1, keepdims=True)) - logits.max(-1, keepdims=True)
        return -np_.mean(logp[:, 0])
    return f


def scan_rnn(api, np_):
    def f(x, w):
        def step(h, row):
            h = np_.tanh(h + row @ w)
            return h, h.sum()
        h, ys = api.lax.scan(step, np_.zeros(5), x)
        return np_.sum(h) + np_.sum(ys)
    return f


def cond_fn(api, np_):
    return lambda x, w: api.lax.cond(x.sum() > 0, lambda a: np_.sum(a @ w),
                                     lambda a: np_.sum(np_.sin(a)), x)


def checkpointed(api, np_):
    inner = api.checkpoint(lambda x, w: np_.sin(x @ w),
                           policy=api.checkpoint_policies.dots_saveable)
    return lambda x, w: np_.sum(inner(x, w) ** 2)


def indexing(api, np_):
    def f(x, w):
        x = np_.asarray(x)
        return np_.sum(x[1:, ::2] * 2.0) + x[0, 1] * w[2, 3] + np_.sum(x.at[0].add(w[0, :4]))
    return f


TABLE = [mlp, softmax_xent, scan_rnn, cond_fn, checkpointed, indexing]


def both(make):
    return make(remat, remat.numpy), make(jax, jax.numpy)


@pytest.mark.parametrize("make", TABLE, ids=lambda m: m.__name__)
def test_values_and_gradients_agree(make):
    ours, theirs = both(make)
    np.testing.assert_allclose(ours(X, W), theirs(X, W), rtol=2e-5, atol=1e-6)
    for a, b in zip(remat.grad(ours, (0, 1))(X, W), jax.grad(theirs, (0, 1))(X, W)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-5)
    tx, tw = np.ones_like(X), np.ones_like(W)
    np.testing.assert_allclose(remat.jvp(ours, (X, W), (tx, tw))[1],
                               jax.jvp(theirs, (X, W), (tx, tw))[1], rtol=2e-4, atol=1e-5)


@pytest.mark.parametrize("make", TABLE, ids=lambda m: m.__name__)
def test_vmap_of_grad_and_jit_agree(make):
    ours, theirs = both(make)
    xs = np.stack([X, X * 0.5, -X])
    a = remat.jit(remat.vmap(remat.grad(ours), in_axes=(0, None)))(xs, W)
    b = jax.jit(jax.vmap(jax.grad(theirs), in_axes=(0, None)))(xs, W)
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-5)


def test_never_saves_more_than_jax():
    from jax._src.ad_checkpoint import saved_residuals as jax_saved

    from remat.ad_checkpoint import saved_residuals as our_saved

    for make in (mlp, checkpointed):
        ours, theirs = both(make)
        ours_bytes = sum(a.nbytes for a, _ in our_saved(ours, X, W))
        jax_bytes = sum(np.prod(a.shape) * a.dtype.itemsize for a, _ in jax_saved(theirs, X, W))
        assert ours_bytes <= jax_bytes
