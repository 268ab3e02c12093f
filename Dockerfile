# The Tidemark image used by docker-compose.yml: replica nodes, topic init and the Spark job.
# The package is installed non-editable; the poms ship inside it (log/poms), so the JVM jars
# are resolved from site-packages, and the source tree is removed after the install.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven libleveldb-dev build-essential \
 && rm -rf /var/lib/apt/lists/*
COPY . /tmp/tidemark-src
RUN pip install --no-cache-dir '/tmp/tidemark-src[all]' && rm -rf /tmp/tidemark-src
WORKDIR /var/lib/tidemark
ENV TIDEMARK_CACHE=/opt/tidemark/cache
RUN python -m tidemark.log.jvm
ENV TIDEMARK_CONFIG=/etc/tidemark/cluster.toml \
    TIDEMARK_METRICS_HOST=0.0.0.0
ENTRYPOINT ["tidemark"]
