"""The local dev stack: real services, installed and started by the project itself.

* **Kafka** 4.3.1 (`kafka`): a single-node KRaft broker+controller.
* **PostgreSQL** from Debian (`postgres`, `pg` for the client side): our own cluster, never the
  system one, with `wal_level=logical`, the configured role and database and the sample table
  `public.customers`.
* **Kafka Connect** 4.3.1 (`connect`): a standalone worker with the Debezium 3.7.0.Final
  PostgreSQL connector as an isolated plugin (`lakehouse.connectors` registers and deletes
  connectors).

On demand only (not in `all`): a Spark standalone cluster (`cluster`, `spark`) and a
single-node HDFS (`hdfs`), a storage root that is not the local disk.

`stack` installs, starts, stops and reports them all; `processes`, `packages` and `jvm` are what
the services share (state directory, pid files, ports; apt and Maven; the JVM command lines).

Every public function takes the `Settings`, the one source of truth for where the services
listen: `kafka.bootstrap_servers` (its first `host:port`; the KRaft controller listens on the
broker port + 1), `postgres.host`/`port`/`database`/`user`/`password` and `connect.url`. By
default that is 127.0.0.1:19092 (controller 19093), 127.0.0.1:15432 and
http://127.0.0.1:18083.

Everything lives in the gitignored state directory `<project root>/.lakehouse/`::

    jars/kafka/          broker + Kafka CLI tools   (services/maven/kafka/pom.xml)
    jars/connect/        Connect worker runtime     (services/maven/connect/pom.xml)
    jars/hdfs/           HDFS NameNode + DataNode   (services/maven/hdfs/pom.xml)
    connect-plugins/debezium-postgres/  connector   (services/maven/debezium-postgres/pom.xml)
    conf/                generated server.properties, connect-standalone.properties, log4j2-*
    kafka/               cluster.id and data/ (formatted once)
    connect/             standalone offsets file
    hdfs/                NameNode (formatted once) and DataNode storage
    postgres/            data/ and run/ (unix socket), owned by the `postgres` OS user
    logs/                kafka.log, connect.log, postgres.log, maven-*.log, apt.log
    run/                 pid files and lock files

The password of the PostgreSQL role is the secret `postgres.password` (a `${NAME}` reference,
`POSTGRES_PASSWORD` from the environment or `.env`); it has no default and is never printed or
put on a command line.

Every failure raises `ServiceError` with one line naming what failed and where its log is.
Manual use: ``lakehouse services {start,stop,status} [kafka|postgres|connect|all]``.
"""

from __future__ import annotations

# Raised by the dev stack and by the Kafka Connect client it shares with `lakehouse connectors`.
from lakehouse.core.errors import ServiceError

__all__ = ["ServiceError"]
