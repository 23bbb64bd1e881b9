# context-proxy: slim image, non-root, tiktoken encodings available offline (shipped by litellm).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    CONTEXT_PROXY_HOST=0.0.0.0 \
    CONTEXT_PROXY_POLICIES=/etc/context-proxy/policies \
    CONTEXT_PROXY_USAGE_LOG=/var/lib/context-proxy/usage.jsonl

WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY proxy ./proxy
RUN pip install . \
    # Fail the build if the encodings are not readable offline.
    && python -c "from proxy.tokens.counter import TokenCounter; from proxy.policy.model import Policy; \
t = TokenCounter(); print(t.for_model('gpt-4o', Policy()).count_text('ok'), t.for_model('gpt-4', Policy()).count_text('ok'))" \
    && useradd --system --uid 10001 --home /var/lib/context-proxy proxy \
    && mkdir -p /etc/context-proxy /var/lib/context-proxy \
    && chown proxy /var/lib/context-proxy

COPY policies /etc/context-proxy/policies
USER proxy
WORKDIR /var/lib/context-proxy
EXPOSE 8080
VOLUME ["/etc/context-proxy/policies", "/var/lib/context-proxy"]
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz')"
CMD ["context-proxy", "serve", "--host", "0.0.0.0"]
