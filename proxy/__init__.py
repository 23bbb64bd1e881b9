"""context-proxy: fit OpenAI chat-completion requests into the model's context budget."""

__version__ = "0.1.0"
