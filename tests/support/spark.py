"""A local Spark session for the extras suite and its benchmark."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any


def local_session(pure: bool = False, **conf: str) -> Iterator[Any]:
    """A local Spark session (``local[2]``, no UI, quiet), started and, after the yield,
    stopped with its temporary directory removed; yields the session. Its Python workers run
    this interpreter (``PYSPARK_PYTHON``) and, with ``pure``, the pure-Python twin of the
    kernel (``CONTEXTPOLICY_PURE_PYTHON`` in their environment). ``conf``: more settings."""
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    temp = tempfile.mkdtemp(prefix="cp-spark-")
    # The workers import what the tests hand them (factories defined in tests/) as the driver
    # does: the project's root and the driver's own path.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    builder = (SparkSession.builder.master("local[2]").appName("contextpolicy-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.local.dir", temp)
               .config("spark.sql.warehouse.dir", os.path.join(temp, "warehouse"))
               .config("spark.executorEnv.PYTHONPATH", path)
               .config("spark.executorEnv.CONTEXTPOLICY_PURE_PYTHON", "1" if pure else ""))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()
        shutil.rmtree(temp, ignore_errors=True)
