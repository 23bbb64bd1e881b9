"""The hook LiteLLM's config names: context-proxy's planner, with the policies in the
folder CONTEXT_PROXY_POLICIES names (default: ./policies), writing the proxy's usage rows
to CONTEXT_PROXY_USAGE_LOG when it is set."""

import os

from proxy.integrations.litellm_hook import ContextProxyHook

proxy_handler_instance = ContextProxyHook(
    os.environ.get("CONTEXT_PROXY_POLICIES", "policies"),
    usage_log=os.environ.get("CONTEXT_PROXY_USAGE_LOG"),
)
