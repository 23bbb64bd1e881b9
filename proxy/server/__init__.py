"""The HTTP server: routes, the chat pipeline read top to bottom, errors, settings."""

from proxy.server.app import app_from_env, create_app
from proxy.server.connection_limits import uvicorn_options
from proxy.server.logs import configure_logging
from proxy.server.request_body import parse_chat_body
from proxy.server.settings import Settings, SettingsError

__all__ = [
    "Settings",
    "SettingsError",
    "app_from_env",
    "configure_logging",
    "create_app",
    "parse_chat_body",
    "uvicorn_options",
]
