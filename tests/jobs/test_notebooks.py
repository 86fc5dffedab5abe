"""The notebooks run top to bottom against the demo's data, as a user runs them after
`lakehouse demo`, and `lakehouse notebook` serves them on loopback only."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from pyspark.sql import SparkSession

from lakehouse import cli
from lakehouse.core.settings import Settings, load_settings, project_root
from lakehouse.devstack import demo

NOTEBOOKS = sorted((project_root() / "notebooks").glob("*.ipynb"))


def read(path: Path) -> nbformat.NotebookNode:
    node: nbformat.NotebookNode = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    return node


def code_cells(path: Path) -> list[nbformat.NotebookNode]:
    return [c for c in read(path).cells if c.cell_type == "code"]


@pytest.mark.pure
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebooks_carry_no_outputs(path: Path) -> None:
    stale = [i for i, c in enumerate(code_cells(path)) if c.outputs or c.execution_count]
    assert stale == [], (
        f"{path.name}: code cells {stale} carry outputs; clear them before committing"
    )


@pytest.fixture(scope="module")
def demo_lake(
    spark: SparkSession, running_services: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """The demo pipeline run once into a lakehouse of its own (its tables are the sample's
    names, which other tests expect absent from theirs)."""
    root = tmp_path_factory.mktemp("demo-lake")
    settings = load_settings("test", overrides={"storage.root": str(root)})
    demo.run(spark, settings)
    try:
        yield settings
    finally:
        # The demo applied the customers connector: leave the stack as the other tests expect.
        assert cli.main(["--env", "test", "connectors", "delete", "customers", "--drop-slot"]) == 0


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_runs_top_to_bottom_on_the_demo_data(
    demo_lake: Settings, path: Path, tmp_path: Path
) -> None:
    notebook = read(path)
    env = {
        **os.environ,
        "LAKEHOUSE_ENV": "test",
        "LAKEHOUSE__STORAGE__ROOT": demo_lake.storage.root,
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    }
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute(env=env)  # a failing cell raises CellExecutionError, naming it

    cells = [c for c in notebook.cells if c.cell_type == "code"]
    text = "".join(o.get("text", "") for c in cells for o in c.outputs)
    for name in ("bronze.orders", "silver.orders_hybrid", "offline.orders_offline"):
        assert name in text.split("registered:", 1)[1].splitlines()[0], name
    assert "gold.daily_revenue" in text
    plots = sum(1 for c in cells for o in c.outputs if "image/png" in o.get("data", {}))
    assert plots == sum(c.source.count("plt.show()") for c in cells) > 0


def _listening(port: int) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp* writes them) listening on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, state = fields[1], fields[3]
            if state == "0A" and int(address.rsplit(":", 1)[1], 16) == port:
                found.append(address.rsplit(":", 1)[0])
    return found


def test_lakehouse_notebook_serves_the_notebooks_on_loopback_only(tmp_path: Path) -> None:
    port = 18888
    env = {**os.environ, "JUPYTER_TOKEN": "t0ken", "JUPYTER_RUNTIME_DIR": str(tmp_path)}
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "lakehouse"), "notebook", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/api/contents/{NOTEBOOKS[0].name}?content=0&token=t0ken"
        deadline, reply = time.monotonic() + 60, None
        while reply is None and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    reply = answer.status
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        assert reply == 200, "JupyterLab did not serve notebooks/ on 127.0.0.1"
        assert _listening(port) == ["0100007F"]  # 127.0.0.1, and no other address
    finally:
        server.terminate()
        server.wait(timeout=30)
