"""remat's demo: train a small character-level transformer language model on the King James
Genesis and Exodus, once per rematerialization policy, and show what each policy saves, how
much memory a training step peaks at, and what it costs in time.

    python -m remat.demo [--steps N] [--policy NAME ...] [--out DIR]
    mpiexec -n 2 python -m remat.demo --data-parallel [--reference]

The same initialization, batches and dropout keys are used under every policy, so the final
losses agree (up to float rounding): rematerialization changes memory and time, never values.
"""

import argparse
import functools
import os
import statistics
import sys
import time

import numpy as np

import remat
import remat.numpy as jnp
from remat import distributed, lax, memory, nn, random
from remat.checkpointing import policies as checkpoint_policies
from remat.checkpointing.checkpoint import checkpoint_name, print_saved_residuals, saved_residuals

CORPUS = os.path.join(os.path.dirname(__file__), "data", "kjv_genesis_exodus.txt")

# learning_rate: Adam moves every weight by about the learning rate per step, whatever the
# weight's scale. At 3e-3 (15% of the 0.02 init scale per step) the first attention layer's
# output outgrew the residual stream within seven steps and the loss jumped from 3.10 to 6.02
# at step 7 (the same under JAX); 1.5e-3 is already unstable for some seeds. 1e-3 trains
# smoothly and ends lower.
CONFIG = dict(d_model=96, n_heads=4, n_layers=4, seq_len=96, batch=24, dropout=0.1,
              learning_rate=1e-3)

# policy name -> how each transformer block is wrapped
POLICIES = {
    "none": None,
    "checkpoint": checkpoint_policies.nothing_saveable,
    "dots_with_no_batch_dims": checkpoint_policies.dots_with_no_batch_dims_saveable,
    "save_attention_outputs": checkpoint_policies.save_only_these_names("attention_out"),
}


# --- data ------------------------------------------------------------------------------------


def load_corpus():
    with open(CORPUS, encoding="utf-8") as fh:
        text = fh.read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return text, chars, np.array([index[c] for c in text], dtype=np.int32)


def batches(tokens, batch, seq_len, steps, seed=0):
    """The same sequence of (inputs, targets) batches for every policy."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        starts = rng.integers(0, len(tokens) - seq_len - 1, size=batch)
        window = np.stack([tokens[s:s + seq_len + 1] for s in starts])
        yield window[:, :-1], window[:, 1:]


# --- the model -------------------------------------------------------------------------------


def init_params(key, vocab, d_model, n_layers, seq_len, **_):
    keys = random.split(key, 2 + 4 * n_layers)
    scale = 0.02

    def dense(k, shape):
        return random.normal(k, shape) * scale

    params = {"embed": dense(keys[0], (vocab, d_model)),
              "pos": dense(keys[1], (seq_len, d_model)),
              "final_ln": {"g": jnp.ones(d_model), "b": jnp.zeros(d_model)},
              "blocks": []}
    for i in range(n_layers):
        k = keys[2 + 4 * i: 6 + 4 * i]
        params["blocks"].append({
            "ln1": {"g": jnp.ones(d_model), "b": jnp.zeros(d_model)},
            "qkv": dense(k[0], (d_model, 3 * d_model)),
            "proj": dense(k[1], (d_model, d_model)) / np.sqrt(2 * n_layers),
            "ln2": {"g": jnp.ones(d_model), "b": jnp.zeros(d_model)},
            "up": dense(k[2], (d_model, 4 * d_model)),
            "down": dense(k[3], (4 * d_model, d_model)) / np.sqrt(2 * n_layers),
        })
    return params


def layer_norm(x, p, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) * (p["g"] / jnp.sqrt(var + eps)) + p["b"]


def dropout(key, x, rate, training, shard=None):
    """``shard=(first, batch)``: ``x`` holds rows ``first:`` of a batch of ``batch`` examples;
    the mask is drawn for the whole batch and sliced, so a data-parallel step drops what the
    single-process step on the whole batch drops."""
    if not training or rate == 0.0:
        return x
    if shard is None:
        keep = random.bernoulli(key, 1.0 - rate, x.shape)
    else:
        first, batch = shard
        keep = random.bernoulli(key, 1.0 - rate, (batch,) + x.shape[1:])[first:first + len(x)]
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def attention(x, p, n_heads):
    batch, seq, d = x.shape
    head = d // n_heads
    qkv = x @ p["qkv"]
    q, k, v = jnp.split(qkv, 3, axis=-1)

    def heads(t):
        return t.reshape(batch, seq, n_heads, head).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(head)
    causal = np.tril(np.ones((seq, seq), dtype=bool))
    scores = jnp.where(causal, scores, -1e9)
    weights = nn.softmax(scores, axis=-1)
    out = jnp.einsum("bhqk,bhkd->bhqd", weights, v)
    out = out.transpose(0, 2, 1, 3).reshape(batch, seq, d)
    return checkpoint_name(out @ p["proj"], "attention_out")


def block(x, p, key, training, n_heads, rate, shard=None):
    k1, k2 = random.split(key)
    x = x + dropout(k1, attention(layer_norm(x, p["ln1"]), p, n_heads), rate, training, shard)
    hidden = nn.gelu(layer_norm(x, p["ln2"]) @ p["up"])
    return x + dropout(k2, hidden @ p["down"], rate, training, shard)


def make_forward(policy_name, n_heads, dropout_rate, shard=None):
    """Logits of the model, with each block wrapped according to the policy (``shard``: see
    ``dropout``)."""
    policy = POLICIES[policy_name]
    block_fn = functools.partial(block, n_heads=n_heads, rate=dropout_rate, shard=shard)
    if policy_name != "none":
        block_fn = remat.checkpoint(block_fn, policy=policy, static_argnums=(3,))

    def forward(params, tokens, key, training):
        seq = tokens.shape[1]
        x = params["embed"][tokens] + params["pos"][:seq]
        keys = random.split(key, len(params["blocks"]))
        for p, k in zip(params["blocks"], keys):
            x = block_fn(x, p, k, training)
        x = layer_norm(x, params["final_ln"])
        return x @ params["embed"].T

    return forward


def make_loss(forward):
    def loss(params, tokens, targets, key):
        logits = forward(params, tokens, key, True)
        logp = nn.log_softmax(logits, axis=-1)
        picked = jnp.take_along_axis(logp, targets[..., None], axis=-1)
        return -jnp.mean(picked)

    return loss


# --- training --------------------------------------------------------------------------------


def adam_update(params, grads, state, lr, b1=0.9, b2=0.999, eps=1e-8):
    """Adam, written on pytrees in a few lines."""
    step, m, v = state
    step = step + 1
    m = remat.tree_util.tree_map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
    v = remat.tree_util.tree_map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
    correction = np.sqrt(1 - b2 ** step) / (1 - b1 ** step)
    params = remat.tree_util.tree_map(
        lambda p, m_, v_: p - lr * correction * m_ / (jnp.sqrt(v_) + eps), params, m, v)
    return params, (step, m, v)


def _progress(total, label):
    try:
        from tqdm import tqdm

        return tqdm(total=total, desc=label, ncols=88, leave=False, file=sys.stdout)
    except ImportError:
        return None


def train(policy_name, tokens, vocab, steps, config):
    forward = make_forward(policy_name, config["n_heads"], config["dropout"])
    loss_fn = make_loss(forward)
    grad_fn = remat.jit(remat.value_and_grad(loss_fn))
    params = init_params(random.PRNGKey(0), vocab, **config)
    state = (0, remat.tree_util.tree_map(jnp.zeros_like, params),
             remat.tree_util.tree_map(jnp.zeros_like, params))
    root = random.PRNGKey(1)
    times, losses = [], []
    bar = _progress(steps, f"{policy_name:>24s}")
    data = batches(tokens, config["batch"], config["seq_len"], steps)
    peak = timeline = None
    for step, (x, y) in enumerate(data):
        x, y = jnp.asarray(x), jnp.asarray(y)
        key = random.fold_in(root, step)
        if step == 1:  # after tracing: measure one step's memory
            peak = memory.peak_memory(grad_fn, params, x, y, key)
            timeline = memory.memory_timeline(grad_fn, params, x, y, key)
        start = time.perf_counter()
        loss, grads = grad_fn(params, x, y, key)
        times.append(time.perf_counter() - start)
        params, state = adam_update(params, grads, state, config["learning_rate"])
        losses.append(float(loss))
        if bar is not None:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
            bar.update(1)
    if bar is not None:
        bar.close()
    return dict(params=params, forward=forward, loss_fn=loss_fn, losses=losses,
                step_time=statistics.median(times[1:] or times), peak=peak,
                timeline=timeline)


def expected_peak(policy_name, loss_fn, params, x, y, key, block_residual_bytes):
    """An estimate of a training step's peak from the policy alone: everything the policy
    saves between the forward and the backward pass (``saved_residuals``), plus — when blocks
    recompute — one block's recomputed residuals, alive at once while that block's backward
    pass runs. It over-counts a little: the jit executor merges duplicate values (CSE) and
    frees residuals as the backward pass consumes them. Returns ``(saved, estimate)``."""
    saved = sum(a.nbytes for a, _ in saved_residuals(loss_fn, params, x, y, key))
    recompute = 0 if policy_name == "none" else block_residual_bytes
    return saved, saved + recompute


def sample(forward, params, chars, seq_len, length=160, seed=2, prompt="And God said"):
    index = {c: i for i, c in enumerate(chars)}
    ids = [index[c] for c in prompt]
    key = random.PRNGKey(seed)
    logits_fn = remat.jit(lambda p, t: forward(p, t, key, False))
    for i in range(length):
        context = ids[-seq_len:]
        padded = np.zeros((1, seq_len), np.int32)
        padded[0, :len(context)] = context
        logits = logits_fn(params, jnp.asarray(padded))[0, len(context) - 1]
        ids.append(int(random.categorical(random.fold_in(key, i), logits / 0.8)))
    return "".join(chars[i] for i in ids)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m remat.demo", description=__doc__.split("\n\n")[0],
        epilog=f"policies: {', '.join(POLICIES)}")
    parser.add_argument("--steps", type=int, default=60, help="training steps per policy")
    parser.add_argument("--policy", nargs="+", default=list(POLICIES), choices=list(POLICIES),
                        metavar="NAME", help=f"policies to run (one or more of: "
                        f"{', '.join(POLICIES)}; default: all)")
    parser.add_argument("--out", default="demo_output", help="directory for the memory plot")
    parser.add_argument("--data-parallel", action="store_true",
                        help="train data-parallel over the MPI job's processes (launch with "
                        "mpiexec -n N; the batch is split across them, gradients averaged); "
                        "uses the first --policy given, 'checkpoint' by default")
    parser.add_argument("--reference", action="store_true",
                        help="with --data-parallel: rank 0 also trains on the whole batch in "
                        "one process and prints both runs' losses")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps must be at least 2, got {args.steps}")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.data_parallel:
        return main_data_parallel(args)
    text, chars, tokens = load_corpus()
    config = dict(CONFIG)
    print(f"remat demo: a {config['n_layers']}-block transformer (d={config['d_model']}, "
          f"{config['n_heads']} heads, context {config['seq_len']}), character-level on "
          f"{len(text) / 1e3:.0f} kB of King James Genesis/Exodus ({len(chars)} characters), "
          f"{args.steps} Adam steps of {config['batch']} sequences per policy.\n")
    results = {}
    for name in args.policy:
        results[name] = train(name, tokens, len(chars), args.steps, config)
    x, y = next(batches(tokens, config["batch"], config["seq_len"], 1))
    x, y, key = jnp.asarray(x), jnp.asarray(y), random.PRNGKey(3)
    block_residuals = _block_residual_bytes(config, x)
    base_time = results[args.policy[0]]["step_time"]
    header = (f"{'policy':24s} {'peak MiB':>9s} {'saved MiB':>9s} {'estimate':>9s} "
              f"{'ms/step':>8s} {'vs first':>8s} {'final loss':>11s}")
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        saved, minimum = expected_peak(name, r["loss_fn"], r["params"], x, y, key,
                                       block_residuals)
        print(f"{name:24s} {r['peak'] / 2**20:9.2f} {saved / 2**20:9.2f} "
              f"{minimum / 2**20:9.2f} {r['step_time'] * 1e3:8.1f} "
              f"{r['step_time'] / base_time:8.2f} {r['losses'][-1]:11.5f}")
    print("(peak: measured over one jitted training step; saved: the residuals the policy keeps "
          "for the backward pass; estimate: saved + one block's recomputation)")
    losses = [r["losses"][-1] for r in results.values()]
    print(f"\nfinal losses agree across policies to {max(losses) - min(losses):.2e}")

    name = args.policy[-1]
    print(f"\nWhat one block saves under '{name}' (print_saved_residuals):")
    _print_block_residuals(name, config, x)

    first = results[args.policy[0]]
    print("\nSampled text after training:\n")
    print("  " + sample(first["forward"], first["params"], chars, config["seq_len"])
          .replace("\n", "\n  "))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "memory_timeline.png")
    try:
        memory.plot_memory_timeline({n: r["timeline"] for n, r in results.items()}, path,
                                    title="live memory during one training step")
        print(f"\nmemory timeline of one training step per policy: {path}")
    except ImportError as e:
        print(f"\n(no plot: {e})")
    return 0


# --- data parallel over MPI processes --------------------------------------------------------


def _join_job():
    """Join the MPI job this process was launched in; one process without MPI."""
    under_mpi = any(v in os.environ for v in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"))
    try:
        distributed.initialize()
    except ImportError:
        if under_mpi:
            raise
        print("(mpi4py is not installed: running the data-parallel step in one process)")


def train_data_parallel(policy_name, tokens, vocab, steps, config):
    """The demo's training loop, data-parallel as in multi-process JAX: each process takes
    its slice of every batch (and of the batch's dropout masks) onto its one local device, the
    step is ``pmap``-ed over axis ``'dp'``, which spans every process, and ``lax.pmean``
    averages the loss and gradients over it before the same Adam update on every rank. The
    result is the single-process run on the whole batch, up to float rounding."""
    count, rank = distributed.process_count(), distributed.process_index()
    batch = config["batch"]
    if batch % count:
        raise ValueError(f"the batch of {batch} does not split over {count} processes")
    local = batch // count
    shard = (rank * local, batch)
    loss_fn = make_loss(make_forward(policy_name, config["n_heads"], config["dropout"], shard))

    def device_step(params, x, y, key):
        loss, grads = remat.value_and_grad(loss_fn)(params, x, y, key)
        return lax.pmean((loss, grads), "dp")

    pmapped = remat.pmap(device_step, axis_name="dp", in_axes=(None, 0, 0, None))

    def step(params, x, y, key):  # this process's examples as its one device's shard
        return remat.tree_util.tree_map(lambda t: t[0], pmapped(params, x[None], y[None], key))

    params = init_params(random.PRNGKey(0), vocab, **config)
    state = (0, remat.tree_util.tree_map(jnp.zeros_like, params),
             remat.tree_util.tree_map(jnp.zeros_like, params))
    root = random.PRNGKey(1)
    losses, times, shares, peak = [], [], [], None
    for i, (x, y) in enumerate(batches(tokens, batch, config["seq_len"], steps)):
        x, y = jnp.asarray(x[shard[0]:shard[0] + local]), jnp.asarray(y[shard[0]:shard[0] + local])
        key = random.fold_in(root, i)
        if i == 1:  # after tracing: this process's memory in one step
            peak = memory.peak_memory(step, params, x, y, key)
        distributed.reset_collective_stats()
        start = time.perf_counter()
        loss, grads = step(params, x, y, key)
        times.append(time.perf_counter() - start)
        shares.append(distributed.collective_stats()["seconds"] / times[-1])
        params, state = adam_update(params, grads, state, config["learning_rate"])
        losses.append(float(loss))
    return dict(losses=losses, step_time=statistics.median(times[1:] or times), peak=peak,
                collective_share=statistics.median(shares[1:] or shares) if count > 1 else None)


def main_data_parallel(args):
    _join_job()
    count, rank = distributed.process_count(), distributed.process_index()
    policy = args.policy[0] if len(args.policy) < len(POLICIES) else "checkpoint"
    text, chars, tokens = load_corpus()
    config = dict(CONFIG)
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"remat demo, data-parallel: {count} process(es), each {config['batch'] // count} of "
        f"the {config['batch']} sequences per step, policy '{policy}', {args.steps} Adam "
        f"steps; the step is pmap-ed over axis 'dp' (one device per process) and lax.pmean "
        f"averages loss and gradients.\n")
    dp = train_data_parallel(policy, tokens, len(chars), args.steps, config)
    share = dp["collective_share"]
    say(f"step time {dp['step_time'] * 1e3:.1f} ms (median), peak {dp['peak'] / 2**20:.2f} MiB "
        f"per process" + (f", {share:.1%} of a step in collectives (median)" if share else ""))
    distributed.shutdown()  # the other ranks are done; rank 0 alone runs the reference
    ref = None
    if args.reference and rank == 0:
        say("training the single-process reference on the whole batch ...")
        ref = train(policy, tokens, len(chars), args.steps, config)["losses"]
    say(f"\n{'step':>5s} {'data-parallel loss':>19s}" + (f" {'whole-batch loss':>17s}"
                                                        if ref else ""))
    for i, loss in enumerate(dp["losses"]):
        if i % 10 == 0 or i == len(dp["losses"]) - 1:
            say(f"{i:5d} {loss:19.5f}" + (f" {ref[i]:17.5f}" if ref else ""))
    if ref:
        diff = max(abs(a - b) for a, b in zip(dp["losses"], ref))
        say(f"\nlosses agree with the whole-batch run to {diff:.2e}")
    return 0


def _block_inputs(config, x):
    params = init_params(random.PRNGKey(0), 128, **config)
    h = jnp.zeros((x.shape[0], x.shape[1], config["d_model"]))
    return params["blocks"][0], h


def _block_residual_bytes(config, x):
    p, h = _block_inputs(config, x)
    fn = functools.partial(block, key=random.PRNGKey(0), n_heads=config["n_heads"],
                           rate=config["dropout"], training=True)
    return sum(a.nbytes for a, _ in saved_residuals(lambda h, p: fn(h, p), h, p))


def _print_block_residuals(name, config, x):
    p, h = _block_inputs(config, x)
    fn = functools.partial(block, key=random.PRNGKey(0), n_heads=config["n_heads"],
                           rate=config["dropout"], training=True)
    wrapped = (lambda h, p: fn(h, p)) if name == "none" else remat.checkpoint(
        lambda h, p: fn(h, p), policy=POLICIES[name])
    print_saved_residuals(wrapped, h, p)


if __name__ == "__main__":
    sys.exit(main())
