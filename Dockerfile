# loghubd consumer daemon. Config by volume (/etc/loghubd/loghubd.toml) and/or
# LOGHUBD_<SECTION>__<KEY> environment variables.
#   docker build -t loghubd .
#   docker run -v $PWD/loghubd.toml:/etc/loghubd/loghubd.toml:ro -p 9464:9464 loghubd
FROM python:3.11-slim AS build
# A C compiler for the optional extension loghubd._fastlog, so that the wheel carries it (the
# runtime stage needs no compiler).
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY loghubd ./loghubd
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/loghubd --create-home loghubd \
    && mkdir -p /etc/loghubd
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY config/loghubd.example.toml /etc/loghubd/loghubd.toml
USER loghubd
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
