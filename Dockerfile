# The Tidemark image used by docker-compose.yml: replica nodes, topic init and the Spark job.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven libleveldb-dev build-essential \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/tidemark
COPY . .
RUN pip install --no-cache-dir '.[spark]' && python -m log.jvm
ENV TIDEMARK_CONFIG=/etc/tidemark/cluster.toml
ENTRYPOINT ["tidemark"]
