# The Tidemark image of docker-compose.yml: replica nodes, topic init, the PKI one-shot and the
# Spark queues job. Two stages:
#   build    compilers, LevelDB headers, a JDK and Maven: builds the wheels (tidemark and
#            plyvel, the compiled one) and resolves the Spark Kafka connector's jars
#   runtime  python:3.11-slim with the wheels installed, a headless JRE (PySpark runs the
#            job on it), the LevelDB runtime library and the connector jars: no compiler, no
#            Maven, no Kafka broker jars; runs as the unprivileged user tidemark (uid 10001)
# A replica node's health is `tidemark replica health` (grpc.health.v1 over mutual TLS): the
# compose file's healthcheck runs it per node, since the same image also runs one-shot
# services (topic-init, pki-init) that have nothing to probe. tests/unit/test_dockerfile.py
# checks this file (there is no Docker engine on the build machines).

FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential libleveldb-dev \
      openjdk-17-jre-headless maven \
 && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN pip wheel --no-cache-dir --wheel-dir /wheels '/src[all]'
# only the Spark connector (log/poms/spark): the brokers run from their own image
RUN pip install --no-cache-dir --no-index --find-links /wheels tidemark \
 && TIDEMARK_CACHE=/opt/tidemark/cache python -c \
      "from tidemark.log.jvm import ensure_jars; print(ensure_jars('spark'))"

FROM python:3.11-slim-bookworm AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless libleveldb1d \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /tmp/wheels
RUN pip install --no-cache-dir --no-index --find-links /tmp/wheels 'tidemark[all]' \
 && rm -rf /tmp/wheels
COPY --from=build /opt/tidemark/cache/jars/spark /opt/tidemark/cache/jars/spark
# the named volumes mounted on these folders start owned by the user (pki-init writes /pki)
RUN groupadd --system --gid 10001 tidemark \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/tidemark --shell /usr/sbin/nologin tidemark \
 && mkdir -p /var/lib/tidemark /pki /tls /etc/tidemark \
 && chown -R 10001:10001 /var/lib/tidemark /pki
ENV TIDEMARK_CACHE=/opt/tidemark/cache \
    TIDEMARK_CONFIG=/etc/tidemark/cluster.toml \
    TIDEMARK_METRICS_HOST=0.0.0.0
WORKDIR /var/lib/tidemark
USER 10001:10001
EXPOSE 7100 9100
ENTRYPOINT ["tidemark"]
CMD ["--help"]
