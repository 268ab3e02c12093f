"""The local stack on loopback: a KRaft Kafka cluster from the Maven jars, replica nodes and
the Spark queues job, as processes recorded under one state folder."""

from tidemark.stack.launcher import LocalStack, ProcessSpec
from tidemark.stack.processes import free_ports, is_alive, kill9
from tidemark.stack.replicas import CONFIG_NAME, parse_layout, write_cluster_file
from tidemark.stack.replicas import plan as replica_plan
from tidemark.stack.spark import plan as spark_plan

__all__ = ["LocalStack", "ProcessSpec", "free_ports", "is_alive", "kill9", "CONFIG_NAME",
           "parse_layout", "write_cluster_file", "replica_plan", "spark_plan"]
