# Image for both the webhook (`serve`, the default) and the allocator (`allocate`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Numeric uid/gid so the kubelet can verify runAsNonRoot.
RUN groupadd --gid 10001 app \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin app

WORKDIR /src
COPY . .
RUN pip install . && rm -rf /src

WORKDIR /
USER 10001:10001
EXPOSE 8443 9090
ENTRYPOINT ["mthreads-webhook"]
CMD ["serve"]
