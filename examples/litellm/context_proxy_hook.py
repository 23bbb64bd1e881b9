"""The hook LiteLLM's config names: context-proxy's planner, with the policies in the
folder CONTEXT_PROXY_POLICIES names (default: ./policies)."""

import os

from proxy.integrations.litellm_hook import ContextProxyHook

proxy_handler_instance = ContextProxyHook(os.environ.get("CONTEXT_PROXY_POLICIES", "policies"))
