"""The NumPy floor of ``loops.py``: each workload's value and gradient written by hand in NumPy
(the backward pass derived by hand, buffers allocated once, updates in place), computing what
remat's and JAX's programs compute. A checkpointed variant stores only the carries and
recomputes each step's forward in the backward pass, as the checkpoint does; the plain
variant stores what the backward pass reads. The speed a NumPy program reaches, against which
remat's Python tier (generated NumPy calls) is judged.

Each ``floor_*`` takes the workload's own arguments and returns what remat's function returns.
"""

import numpy as np

F32 = np.float32


def _sigmoid(x, out):
    """``1 / (1 + exp(-x))`` into ``out`` (NumPy's exp: faster than ``scipy.special.expit``)."""
    np.negative(x, out=out)
    np.exp(out, out=out)
    out += 1
    return np.reciprocal(out, out=out)


# --- Lorenz-96, RK4 --------------------------------------------------------------------------

def lorenz96(steps=2000, n=40, dt=0.01, checkpointed=False):
    """``(x0, forcing) -> (loss, (d loss/d x0, d loss/d forcing))``."""
    # x[i+1], x[i-2], x[i-1], x[i+2] as index arrays
    right, left2, left, right2 = (np.roll(np.arange(n), s) for s in (-1, 2, 1, -2))
    half, sixth = F32(0.5 * dt), F32(dt / 6)
    dt = F32(dt)

    def rhs(x, forcing):
        return (x[right] - x[left2]) * x[left] - x + forcing

    def rhs_vjp(x, v):
        """v's pull-back through rhs at x (the forcing's part is sum(v))."""
        vd = v * x[left]
        g = (v * (x[right] - x[left2]))[right] - v  # (d x[i-1] is read by element i)
        g += vd[left]  # x[i+1]'s transpose: roll by +1
        g -= vd[right2]  # x[i-2]'s transpose: roll by -2
        return g

    def stages(x, forcing, step=True):
        """The inputs of the last three evaluations of rhs, and the next state (``step``)."""
        k1 = rhs(x, forcing)
        x2 = x + half * k1
        k2 = rhs(x2, forcing)
        x3 = x + half * k2
        k3 = rhs(x3, forcing)
        x4 = x + dt * k3
        if not step:
            return (x2, x3, x4), None
        k4 = rhs(x4, forcing)
        return (x2, x3, x4), x + sixth * (k1 + 2 * k2 + 2 * k3 + k4)

    def run(x0, forcing):
        forcing = F32(forcing)
        saved = np.empty((steps, 1 if checkpointed else 4, n), F32)
        x = np.asarray(x0, F32)
        for t in range(steps):
            saved[t, 0] = x
            inner, x = stages(x, forcing)
            if not checkpointed:
                saved[t, 1:] = inner
        loss = np.sum(x * x)
        g, g_forcing = 2 * x, F32(0)
        for t in range(steps - 1, -1, -1):
            x = saved[t, 0]
            x2, x3, x4 = stages(x, forcing, False)[0] if checkpointed else saved[t, 1:]
            gk4 = sixth * g
            gk1, gk2, gk3 = gk4, 2 * gk4, 2 * gk4
            g4 = rhs_vjp(x4, gk4)
            gk3 = gk3 + dt * g4
            g3 = rhs_vjp(x3, gk3)
            gk2 = gk2 + half * g3
            g2 = rhs_vjp(x2, gk2)
            gk1 = gk1 + half * g2
            g_forcing += np.sum(gk1) + np.sum(gk2) + np.sum(gk3) + np.sum(gk4)
            g = g + g4 + g3 + g2 + rhs_vjp(x, gk1)
        return loss, (g, g_forcing)

    return run


# --- tanh RNN and GRU ------------------------------------------------------------------------

def rnn(cell="tanh", checkpointed=False):
    """``(params, xs) -> (loss, grads)``, loss the mean square of the last hidden state."""
    return _gru(checkpointed) if cell == "gru" else _tanh_rnn(checkpointed)


def _tanh_rnn(checkpointed):
    def run(p, xs):
        wx, wh, b = p["wx"], p["wh"], p["b"]
        t_len, batch, _ = xs.shape
        hidden = wh.shape[0]
        hs = np.zeros((t_len + 1, batch, hidden), F32)  # hs[t]: the carry before step t
        tmp = np.empty((batch, hidden), F32)

        def step(t, out):
            np.matmul(xs[t], wx, out=out)
            np.matmul(hs[t], wh, out=tmp)
            out += tmp
            out += b
            return np.tanh(out, out=out)

        for t in range(t_len):
            step(t, hs[t + 1])
        h = hs[t_len]
        loss = np.mean(h * h)
        g = h * F32(2 / h.size)
        grads = {k: np.zeros_like(v) for k, v in p.items()}
        new, gp = np.empty_like(tmp), np.empty_like(tmp)
        gwx, gwh = np.empty_like(wx), np.empty_like(wh)
        for t in range(t_len - 1, -1, -1):
            out = step(t, new) if checkpointed else hs[t + 1]
            np.multiply(out, out, out=gp)
            np.subtract(1, gp, out=gp)
            gp *= g
            grads["wx"] += np.matmul(xs[t].T, gp, out=gwx)
            grads["wh"] += np.matmul(hs[t].T, gp, out=gwh)
            grads["b"] += gp.sum(0)
            np.matmul(gp, wh.T, out=g)
        return loss, grads

    return run


def _gru(checkpointed):
    def run(p, xs):
        wx, wh, b = p["wx"], p["wh"], p["b"]
        t_len, batch, _ = xs.shape
        hidden = wh.shape[0]
        zs, rs, cs = slice(0, hidden), slice(hidden, 2 * hidden), slice(2 * hidden, None)
        hs = np.zeros((t_len + 1, batch, hidden), F32)
        # per step: z, r, n and the hidden part of n's pre-activation (the backward reads them)
        kept = np.empty((1 if checkpointed else t_len, 4, batch, hidden), F32)
        gx, gh = np.empty((batch, 3 * hidden), F32), np.empty((batch, 3 * hidden), F32)

        def step(t, into, carry=True):
            """Step t's gates into ``into``, and (``carry``) its new hidden state."""
            z, r, n, ghn = into
            np.matmul(xs[t], wx, out=gx)
            np.add(gx, b, out=gx)
            np.matmul(hs[t], wh, out=gh)
            np.add(gx[:, zs], gh[:, zs], out=z)
            _sigmoid(z, z)
            np.add(gx[:, rs], gh[:, rs], out=r)
            _sigmoid(r, r)
            ghn[...] = gh[:, cs]
            np.multiply(r, ghn, out=n)
            n += gx[:, cs]
            np.tanh(n, out=n)
            if not carry:
                return
            h = hs[t + 1]  # n + z * (h - n)
            np.subtract(hs[t], n, out=h)
            h *= z
            h += n

        for t in range(t_len):
            step(t, kept[0 if checkpointed else t])
        h = hs[t_len]
        loss = np.mean(h * h)
        g = h * F32(2 / h.size)
        grads = {k: np.zeros_like(v) for k, v in p.items()}
        dgx, dgh = np.empty_like(gx), np.empty_like(gh)
        tmp = np.empty_like(g)
        gwx, gwh, gh_back = np.empty_like(wx), np.empty_like(wh), np.empty_like(g)
        for t in range(t_len - 1, -1, -1):
            if checkpointed:
                step(t, kept[0], carry=False)
            z, r, n, ghn = kept[0 if checkpointed else t]
            dz, dr, dn = dgx[:, zs], dgx[:, rs], dgx[:, cs]
            np.subtract(hs[t], n, out=dz)  # dz = g (h - n) z (1 - z)
            dz *= g
            np.subtract(1, z, out=tmp)
            tmp *= z
            dz *= tmp
            np.multiply(n, n, out=dn)  # dn = g (1 - z) (1 - n^2)
            np.subtract(1, dn, out=dn)
            np.subtract(1, z, out=tmp)
            tmp *= g
            dn *= tmp
            np.multiply(dn, ghn, out=dr)  # dr = dn ghn r (1 - r)
            np.subtract(1, r, out=tmp)
            tmp *= r
            dr *= tmp
            dgh[:, :2 * hidden] = dgx[:, :2 * hidden]
            np.multiply(dn, r, out=dgh[:, cs])
            grads["wx"] += np.matmul(xs[t].T, dgx, out=gwx)
            grads["b"] += dgx.sum(0)
            grads["wh"] += np.matmul(hs[t].T, dgh, out=gwh)
            g *= z  # the direct path h -> z h
            g += np.matmul(dgh, wh.T, out=gh_back)
        return loss, grads

    return run


# --- MLP, SGD ----------------------------------------------------------------------------------

def mlp_sgd(steps=200):
    """``(params, x, y) -> params`` after ``steps`` SGD steps on the softmax cross-entropy of a
    relu MLP (updated in place, on a copy of the arguments)."""
    def run(params, x, y):
        params = [(w.copy(), b.copy()) for w, b in params]
        batch = x.shape[0]
        acts = [np.empty((batch, w.shape[1]), F32) for w, _ in params]
        grads = [np.empty_like(w) for w, _ in params]
        backs = [np.empty((batch, w.shape[0]), F32) for w, _ in params]
        y_over_batch = y / F32(batch)
        for _ in range(steps):
            h = x
            for (w, b), a in zip(params, acts):
                np.matmul(h, w, out=a)
                a += b
                if a is not acts[-1]:
                    np.maximum(a, 0, out=a)
                h = a
            logits = acts[-1]  # softmax - y, over the batch
            logits -= logits.max(axis=-1, keepdims=True)
            np.exp(logits, out=logits)
            logits /= logits.sum(axis=-1, keepdims=True) * batch
            logits -= y_over_batch
            g = logits
            for k in range(len(params) - 1, -1, -1):
                w, b = params[k]
                below = acts[k - 1] if k else x
                if k:
                    np.matmul(g, w.T, out=backs[k])
                np.matmul(below.T, g, out=grads[k])
                b -= F32(0.01) * g.sum(0)
                grads[k] *= F32(0.01)
                w -= grads[k]
                if k:
                    g = backs[k]
                    g *= below > 0  # relu's gradient (its output is the mask's source)
        return params

    return run
