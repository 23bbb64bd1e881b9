"""The planner inside other gateways (a LiteLLM proxy hook): the only modules that import
what those gateways bring."""
