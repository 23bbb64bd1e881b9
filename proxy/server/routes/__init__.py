"""Routes beside the pipeline: passthrough (every other /v1 route, metered where it bills),
the plan route (what would be sent, sending nothing) and count_tokens."""
