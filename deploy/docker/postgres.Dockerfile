# Postgres for the shared Dagster instance of deploy/docker-compose.yaml, built FROM the
# local Debian base (nothing is pulled from a registry; the Debian mirror must be reachable
# at build time). Its data lives in the mounted /var/lib/nel-postgres.
ARG BASE_IMAGE=localdebian:bookworm-py
FROM ${BASE_IMAGE}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      postgresql && rm -rf /var/lib/apt/lists/*
COPY postgres-entrypoint.sh /usr/local/bin/nel-postgres
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/nel-postgres/data
CMD ["nel-postgres"]
