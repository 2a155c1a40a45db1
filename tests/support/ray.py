"""A local Ray cluster for the extras suite and its benchmark."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any


def local_cluster() -> Iterator[Any]:
    """A local Ray cluster (2 CPUs, a small object store, no dashboard, no usage stats), started
    and, after the yield, stopped with its temporary directory removed; yields the ``ray``
    module. (``benchmarks/test_bench_ray.py`` runs one too.)"""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray

    temp = tempfile.mkdtemp(prefix="cp-ray-")
    ray.init(num_cpus=2, object_store_memory=200 * 1024 * 1024, include_dashboard=False,
             _temp_dir=temp, log_to_driver=False, configure_logging=False)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
