# One image for every command: `serve` (the webhook, the default), `allocate`, `extender`, `certs`.
# BASE: any Debian-like image with python3 >= 3.11 and its venv module. hack/image.sh passes a
# base made by debootstrap where no registry is reachable; users keep the official one.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
# The kubernetes client's asyncio half needs these; the sync client this project uses does not.
ARG ASYNC_ONLY="aiohttp aiohttp-retry aiohappyeyeballs aiosignal frozenlist multidict yarl propcache"
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# binutils, whose strip trims the venv below, and what the wheel's build compiles the scheduling
# core with (mypyc: setup.py), a C compiler and Python's headers, as `make install` brings them
# (hack/compiler.sh); they stay in this stage.
COPY hack/lib.sh hack/compiler.sh /tmp/hack/
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      binutils >/dev/null \
 && /tmp/hack/compiler.sh python3
COPY . /src
# The project as a wheel, installed with its dependencies into a venv of its own; the venv
# alone goes to the image: no source tree, no pip, no build tools. The optional secret
# `ca-bundle` is the CA bundle pip trusts (a build behind a TLS-inspecting proxy); it is
# mounted for this step only and never lands in a layer.
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
 && python3 -m venv /opt/build \
 && /opt/build/bin/pip wheel --quiet --no-deps --wheel-dir /wheels /src \
 && python3 -m venv /opt/mthreads-webhook \
 && /opt/mthreads-webhook/bin/pip install --quiet /wheels/*.whl \
 && /opt/mthreads-webhook/bin/pip uninstall --quiet --yes pip setuptools $ASYNC_ONLY
# Trim the venv (the image tests run every command on the result):
# - the kubernetes client's asyncio half (kubernetes/aio and aiohttp's family above) is never
#   imported, and is most of the client's size;
# - compiled extensions lose their debug symbols; tests shipped inside packages go;
# - the generated sync client (kubernetes/client, every API group and model, all imported at
#   once) is kept as bytecode only, without its docstrings (-o 2; its few asserts only check
#   malformed type names): a third of the size of source plus bytecode;
# - elsewhere, bytecode only for the modules the commands import (found by importing every
#   module of the package), sources for all: a quick start on a read-only root file system.
RUN cd /opt/mthreads-webhook/lib/python3*/site-packages \
 && rm -rf kubernetes/aio \
 && find . -name '*.so' -exec strip --strip-unneeded {} + \
 && find . \( -name '*_test.py' -o -name 'test_*.py' -o -name tests -type d \) -prune -exec rm -rf {} + \
 && find . -name __pycache__ -prune -exec rm -rf {} + \
 && python3 -m compileall -q -b -o 2 kubernetes/client \
 && find kubernetes/client -name '*.py' -delete \
 && /opt/mthreads-webhook/bin/python -c 'import importlib, pkgutil, webhook; \
[importlib.import_module(m.name) for m in pkgutil.walk_packages(webhook.__path__, "webhook.") \
 if not m.name.endswith("__main__")]'

FROM ${BASE}
ENV PATH=/opt/mthreads-webhook/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# Numeric uid/gid so the kubelet can verify runAsNonRoot.
RUN groupadd --gid 10001 app \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin app
COPY --from=build /opt/mthreads-webhook /opt/mthreads-webhook

WORKDIR /
USER 10001:10001
EXPOSE 8443 9090 8888
ENTRYPOINT ["mthreads-webhook"]
CMD ["serve"]
