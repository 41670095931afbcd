# loghubd consumer daemon. Config by volume (/etc/loghubd/loghubd.toml) and/or
# LOGHUBD_<SECTION>__<KEY> environment variables. docs/container.md says more, including
# what was verified of this file without a container engine.
#   docker build -t loghubd .
#   docker build -t loghubd --build-arg LOGHUBD_PLUGINS="loghubd-postgres" .
#   docker build -t loghubd-spark --build-arg LOGHUBD_PLUGINS="loghubd-spark" --build-arg LOGHUBD_JRE=1 .
#   docker run -v $PWD/loghubd.toml:/etc/loghubd/loghubd.toml:ro -p 9464:9464 loghubd
#
# The base image is pinned by digest (both stages), so a rebuild gets the same bytes. The digest
# could not be checked against the registry where this was written (no registry access):
# scripts/base-image-digest.sh prints the current one (needs `docker buildx`, `skopeo` or
# `crane`) and rewrites both FROM lines with it.

FROM python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b AS build
# A C compiler for the optional extension loghubd._fastlog, so that the wheel carries it (the
# runtime stage needs no compiler). hadolint DL3008 (pin apt versions) is ignored: the base
# image's digest already fixes the Debian release, and exact Debian versions of gcc vanish
# from the archive at each point release, which would break the build rather than pin it.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY constraints.txt pyproject.toml setup.py README.md LICENSE ./
COPY loghubd ./loghubd
# Extra plugin distributions (pip requirement specifiers, space-separated), built here and
# installed beside loghubd, held to the same constraints.
ARG LOGHUBD_PLUGINS=""
# LOGHUBD_PLUGINS is split into several arguments on purpose (hadolint SC2086).
# hadolint ignore=SC2086
RUN pip wheel --no-cache-dir --constraint constraints.txt --wheel-dir /wheels . $LOGHUBD_PLUGINS

FROM python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b
# A fixed numeric UID/GID, so Kubernetes' runAsNonRoot can check it and volumes can be
# chowned to it: 10001:10001.
RUN groupadd --system --gid 10001 loghubd \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/loghubd --create-home loghubd \
    && mkdir -p /etc/loghubd
# The Spark processor (the loghubd-spark plugin) runs a JVM: `--build-arg LOGHUBD_JRE=1` adds
# Debian's headless Java 17 runtime (the plugin's pyspark 4 needs Java 17 or later; the tests
# run it on 17). The man page directory is made first: the JRE's postinst links its man pages
# there, and the slim image has none. DL3008 is ignored for the reason given in the build stage.
ARG LOGHUBD_JRE=""
# hadolint ignore=DL3008
RUN if [ -n "$LOGHUBD_JRE" ]; then \
        mkdir -p /usr/share/man/man1 \
        && apt-get update \
        && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
        && rm -rf /var/lib/apt/lists/*; \
    fi
COPY --from=build /wheels /wheels
COPY constraints.txt /etc/loghubd/constraints.txt
ARG LOGHUBD_PLUGINS=""
# hadolint ignore=SC2086
RUN pip install --no-cache-dir --no-index --find-links /wheels \
        --constraint /etc/loghubd/constraints.txt loghubd $LOGHUBD_PLUGINS \
    && rm -rf /wheels
COPY config/loghubd.example.toml /etc/loghubd/loghubd.toml
USER 10001:10001
WORKDIR /var/lib/loghubd
# Inside a container the ops listener must accept connections from outside it.
ENV LOGHUBD_OPS__LISTEN=0.0.0.0:9464 \
    PYTHONUNBUFFERED=1
EXPOSE 9464
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=2).status != 200)"]
# Exec form: loghubd is PID 1 and receives SIGTERM directly for its graceful shutdown.
STOPSIGNAL SIGTERM
ENTRYPOINT ["loghubd", "run", "-c", "/etc/loghubd/loghubd.toml"]
