# context-proxy: a slim image, a numeric non-root user, no build tools or sources left in it.
#   docker build -t context-proxy .
# Two stages: `build` makes a virtual environment (dependencies first, in a layer that a code
# change reuses, then the proxy); the runtime stage copies only that environment in.
# The base is pinned by digest (python:3.11-slim, linux/amd64 and the other platforms it is
# published for); BASE_IMAGE names another build of it (docs/operations.md).
ARG BASE_IMAGE=python:3.11-slim@sha256:be1575ed968de893bd54f4c56315ff7c4736ce522c1bca08fd521731aafc0d76

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# A virtual environment: one layout whichever python3 the base has (/usr/local/bin or /usr/bin).
RUN python3 -m venv /opt/context-proxy
WORKDIR /src
# Dependencies, from pyproject.toml alone. litellm without its client stack (openai, the hub
# clients, ...): the proxy reads only its model map and tiktoken's encodings, kept below;
# tokenizers without the hub client it downloads with (the proxy loads local files only).
COPY pyproject.toml ./
COPY deploy/image/ ./deploy/image/
RUN cd /opt/context-proxy/bin && ./python /src/deploy/image/split_requirements.py /src \
    && ./pip install -r /src/runtime.txt \
    && ./pip install --no-deps -r /src/no-deps.txt \
    && ./python /src/deploy/image/keep_needed.py \
    && ./pip uninstall -y -q pip setuptools \
    && ./python -c "import importlib.util as u; assert u.find_spec('litellm') and not u.find_spec('openai') and not u.find_spec('huggingface_hub')"
# The proxy, into a folder of its own laid out as the environment is (--root): the runtime
# stage copies it in as a layer apart from the dependencies. Uses the base's pip, since the
# environment's own pip is gone from it.
COPY README.md LICENSE ./
COPY proxy ./proxy
RUN python3 -m pip --python /opt/context-proxy/bin/python install --no-deps --root /app . \
    # Fail the build if the encodings and the model map are not readable offline.
    && PYTHONPATH=/src /opt/context-proxy/bin/python -c "from proxy.tokens.counter import TokenCounter; \
from proxy.tokens.windows import ContextWindows; from proxy.policy.model import Policy; \
t = TokenCounter(); assert t.for_model('gpt-4o', Policy()).count_text('ok') == 1; \
assert t.for_model('gpt-4', Policy()).count_text('ok') == 1; \
assert ContextWindows().lookup('gpt-4o-mini', Policy()) == 128000"

FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/context-proxy/bin:$PATH \
    CONTEXT_PROXY_HOST=0.0.0.0 \
    CONTEXT_PROXY_POLICIES=/etc/context-proxy/policies \
    CONTEXT_PROXY_USAGE_LOG=/var/lib/context-proxy/usage.jsonl
COPY --from=build /opt/context-proxy /opt/context-proxy
COPY --from=build /app/ /
COPY policies /etc/context-proxy/policies
# The usage log's folder, the one place the proxy writes (a volume: the root filesystem
# may be read-only). The user is a number: no name to clash with the base's users.
RUN mkdir -p /var/lib/context-proxy && chown 10001:10001 /var/lib/context-proxy
USER 10001:10001
WORKDIR /var/lib/context-proxy
VOLUME ["/var/lib/context-proxy"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('CONTEXT_PROXY_PORT', '8080'), timeout=2)"]
CMD ["context-proxy", "serve"]
