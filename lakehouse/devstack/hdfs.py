"""A single-node HDFS on loopback (`lakehouse services start hdfs`): one NameNode and one
DataNode of Apache Hadoop 3.4.1, the Hadoop PySpark's client speaks. It is a storage root that
is not the driver's disk, reached only through Hadoop's FileSystem, as `s3a://` or `abfss://`
are on a real deployment:

    storage:
      root: hdfs://127.0.0.1:19020/lakehouse

Not part of `services start all` (the demo and most tests use a local root). Data under
`.lakehouse/hdfs/` (the NameNode formatted once), configuration in `.lakehouse/conf/hdfs/`,
logs in `.lakehouse/logs/hdfs-namenode.log` and `hdfs-datanode.log`. Permissions are off: a
development file system with one user.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from lakehouse.core.settings import Settings
from lakehouse.devstack.jvm import JvmServer, describe, java, start_jvm, stop_jvm
from lakehouse.devstack.packages import install_hdfs_jars
from lakehouse.devstack.processes import StatePaths, failure, run_logged, state_paths

HOST = "127.0.0.1"
NAMENODE_PORT = 19020
NAMENODE_HTTP_PORT = 19870
DATANODE_PORT = 19866
DATANODE_HTTP_PORT = 19864
DATANODE_IPC_PORT = 19867
HDFS_URL = f"hdfs://{HOST}:{NAMENODE_PORT}"
NAMENODE_MAIN = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE_MAIN = "org.apache.hadoop.hdfs.server.datanode.DataNode"
_SETTING = "the constants of lakehouse/devstack/hdfs.py"
_START_TIMEOUT = 90.0


def _jmx(bean: str) -> dict[str, Any] | None:
    """One of the NameNode's JMX beans (`Hadoop:service=NameNode,name=<bean>`), or None."""
    url = f"http://{HOST}:{NAMENODE_HTTP_PORT}/jmx?qry=Hadoop:service=NameNode,name={bean}"
    try:
        with urllib.request.urlopen(url, timeout=3) as reply:
            beans = json.load(reply).get("beans") or [None]
    except (OSError, urllib.error.URLError, ValueError):
        return None
    found: dict[str, Any] | None = beans[0]
    return found


def _namenode_up() -> bool:
    status = _jmx("NameNodeStatus")
    return bool(status and status.get("State") == "active")


def _writable() -> bool:
    """A DataNode has registered and the NameNode has left safe mode: files can be written."""
    state, info = _jmx("FSNamesystemState"), _jmx("NameNodeInfo")
    return bool(
        state and int(state.get("NumLiveDataNodes", 0)) >= 1 and info and not info.get("Safemode")
    )


def _site(path: Path, props: dict[str, str]) -> None:
    entries = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in props.items()
    )
    text = f'<?xml version="1.0"?>\n<configuration>\n{entries}</configuration>\n'
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def _write_conf(paths: StatePaths) -> Path:
    """`conf/hdfs/`: core-site.xml, hdfs-site.xml and log4j.properties, read from the class path
    ahead of the jars, and the empty `webapps/` the servers' HTTP endpoints require (the web UI
    ships in Hadoop's tarball, not in its jars; JMX, which `ready` reads, needs none)."""
    conf, data = paths.conf / "hdfs", paths.state / "hdfs"
    for web in ("hdfs", "datanode", "static"):
        (conf / "webapps" / web).mkdir(parents=True, exist_ok=True)
    _site(
        conf / "core-site.xml",
        {"fs.defaultFS": HDFS_URL, "hadoop.tmp.dir": str(data / "tmp")},
    )
    _site(
        conf / "hdfs-site.xml",
        {
            "dfs.namenode.name.dir": str(data / "name"),
            "dfs.datanode.data.dir": str(data / "data"),
            "dfs.replication": "1",
            "dfs.permissions.enabled": "false",
            "dfs.namenode.safemode.extension": "0",
            "dfs.namenode.http-address": f"{HOST}:{NAMENODE_HTTP_PORT}",
            "dfs.datanode.address": f"{HOST}:{DATANODE_PORT}",
            "dfs.datanode.http.address": f"{HOST}:{DATANODE_HTTP_PORT}",
            "dfs.datanode.ipc.address": f"{HOST}:{DATANODE_IPC_PORT}",
            "dfs.datanode.hostname": HOST,
        },
    )
    log4j = conf / "log4j.properties"
    log4j.write_text(
        "log4j.rootLogger=INFO, out\n"
        "log4j.appender.out=org.apache.log4j.ConsoleAppender\n"
        "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
    )
    return conf


def _format_once(paths: StatePaths, conf: Path) -> None:
    """Format the NameNode's storage the first time (a new, empty file system)."""
    name = paths.state / "hdfs" / "name"
    if (name / "current" / "VERSION").is_file():
        return
    log = paths.log("hdfs-format")
    classpath = os.pathsep.join([str(conf), f"{paths.hdfs_jars}/*"])
    cmd = [java(), "-Xmx256m", "-cp", classpath, NAMENODE_MAIN, "-format", "-force"]
    if run_logged([*cmd, "-nonInteractive"], log) != 0:
        raise failure("formatting the HDFS NameNode failed", paths, log)


def _servers(paths: StatePaths, conf: Path) -> tuple[JvmServer, JvmServer]:
    work = paths.state / "hdfs"
    namenode = JvmServer(
        "hdfs-namenode",
        "HDFS NameNode",
        paths.hdfs_jars,
        NAMENODE_MAIN,
        work,
        ports=((HOST, NAMENODE_PORT, _SETTING), (HOST, NAMENODE_HTTP_PORT, _SETTING)),
        ready=_namenode_up,
        heap="512m",
        classpath=(conf,),
    )
    datanode = JvmServer(
        "hdfs-datanode",
        "HDFS DataNode",
        paths.hdfs_jars,
        DATANODE_MAIN,
        work,
        ports=tuple(
            (HOST, port, _SETTING)
            for port in (DATANODE_PORT, DATANODE_HTTP_PORT, DATANODE_IPC_PORT)
        ),
        ready=_writable,
        heap="512m",
        classpath=(conf,),
    )
    return namenode, datanode


def start_hdfs(settings: Settings, *, timeout: float = _START_TIMEOUT) -> None:
    """Start the NameNode, then the DataNode (each a no-op when running); return once files
    can be written."""
    paths = state_paths()
    install_hdfs_jars(paths)
    conf = _write_conf(paths)
    namenode, datanode = _servers(paths, conf)
    env = dict(os.environ)

    def namenode_args() -> list[str]:
        _format_once(paths, conf)
        return []

    start_jvm(namenode, paths, namenode_args, env=env, timeout=timeout)
    start_jvm(datanode, paths, list, env=env, timeout=timeout)


def stop_hdfs(settings: Settings) -> None:
    """Stop the DataNode, then the NameNode; fine when not running."""
    paths = state_paths()
    stop_jvm("hdfs-datanode", "HDFS DataNode", paths)
    stop_jvm("hdfs-namenode", "HDFS NameNode", paths)


def hdfs_status(settings: Settings) -> str:
    """`running (pid N, hdfs://...)`, `, not writable` until a DataNode has registered."""
    paths = state_paths()
    return describe(
        "hdfs-namenode",
        paths,
        _writable,
        installed=paths.hdfs_jars.is_dir(),
        where=HDFS_URL,
        unready="not writable (no DataNode, or in safe mode)",
    )
