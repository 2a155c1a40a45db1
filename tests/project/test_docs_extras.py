"""The examples of the optional extras in the README and the documentation site (```` ```python
extras ```` blocks: the token counters, the LangChain middleware and LangGraph node, the OpenAI
Agents SDK, Ray, Spark and Hugging Face datasets) run as written and print what the page
shows, each alone, on both kernels, with the network refused (but for Ray's local cluster and
Spark's local session)."""

from __future__ import annotations

import sys

import pytest

from tests.support.docs_examples import Block, all_blocks, check_python, copy_examples

pytestmark = pytest.mark.extras

EXTRAS = all_blocks("python extras")
# A Ray or Spark example runs its work in the engine's worker processes, which import the
# default kernel whatever this process has live: it runs once, not once per kernel.
RAY = [b for b in EXTRAS if "ray.init(" in b.code]
SPARK = [b for b in EXTRAS if "SparkSession" in b.code]
IN_PROCESS = [b for b in EXTRAS if b not in RAY and b not in SPARK]


@pytest.fixture
def folder(monkeypatch, tmp_path):
    """A fresh folder holding the example files, as the current directory."""
    copy_examples(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def offline(monkeypatch, folder):
    import socket

    def refuse(*args, **kwargs):
        raise OSError("the documentation's examples must not use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.mark.usefixtures("pipeline_kernel", "offline")
@pytest.mark.parametrize("block", IN_PROCESS, ids=[b.where for b in IN_PROCESS])
def test_extras_example(block: Block):
    check_python(block)


@pytest.mark.usefixtures("folder")  # Ray talks to its local cluster through sockets
@pytest.mark.parametrize("block", RAY, ids=[b.where for b in RAY])
def test_ray_example(block: Block, monkeypatch):
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    check_python(block)


@pytest.mark.usefixtures("folder")  # py4j talks to Spark's JVM through sockets
@pytest.mark.parametrize("block", SPARK, ids=[b.where for b in SPARK])
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_spark_example(block: Block, monkeypatch):
    # Spark's Python workers run this interpreter, as a user's run their environment's.
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    check_python(block)


def test_the_extras_have_examples():
    assert len(IN_PROCESS) >= 8 and len(RAY) >= 1 and len(SPARK) >= 1
