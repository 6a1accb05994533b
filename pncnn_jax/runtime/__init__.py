"""Process plumbing shared by every layer: flags and help (cli), host memory (hostmem), the compilation cache,
multi-process start-up (distributed), the device mesh (sharding), a run's files (run_files) and the registries
through which the core reaches its extensions (registry).

Nothing here imports the rest of pncnn_jax, and `cli` and `hostmem` run before jax is imported (they set XLA
flags), so this file imports nothing.
"""
