"""Kafka Connect and the Debezium connectors that feed CDC sources: the REST client (`rest`)
and the PostgreSQL connector's configuration, creation, status and deletion (`debezium`).
Used by `lakehouse connectors`, the dev stack's demo and the tests; never by the jobs."""
