"""Spark-native medallion lakehouse: Kafka and Debezium to bronze, silver, gold, hybrid."""

__version__ = "0.1.0"
