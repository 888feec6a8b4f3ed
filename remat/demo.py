"""A short tour of remat: trace a function to a jaxpr, evaluate it, differentiate,
vectorize and compile it. Run with ``python -m remat.demo``."""

import numpy as np

import remat
import remat.numpy as jnp


def predict(w, x):
    return jnp.tanh(x @ w)


def loss(w, x, y):
    return jnp.mean((predict(w, x) - y) ** 2)


def main():
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((3, 2)), dtype=jnp.float32)
    x = jnp.asarray(rng.standard_normal((4, 3)), dtype=jnp.float32)
    y = jnp.zeros((4, 2))

    print("The jaxpr of the loss:")
    print(remat.make_jaxpr(loss)(w, x, y))
    print("\nloss(w, x, y) =", loss(w, x, y))
    print("\nThe jaxpr of its gradient:")
    print(remat.make_jaxpr(remat.grad(loss))(w, x, y))
    g = remat.jit(remat.grad(loss))(w, x, y)
    print("\njit(grad(loss)) =\n", g)
    per_example = remat.vmap(remat.grad(loss), in_axes=(None, 0, 0))(w, x[:, None], y[:, None])
    print("\nper-example gradients (vmap of grad), shape", per_example.shape)
    print("their mean equals the full gradient:",
          bool(jnp.allclose(per_example.mean(0), g, atol=1e-6)))
    print(f"\nlive bytes held by remat arrays now: {remat.memory.live_bytes()}")


if __name__ == "__main__":
    main()
