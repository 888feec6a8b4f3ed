"""What runs kernels on this machine, below both the primitives and the executor: the worker
threads and BLAS's threads (``parallel``), the floating-point modes (``denormals``), and the
registries in which primitives tell the executor what it may do with them (``registry``)."""
