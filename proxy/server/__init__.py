"""The HTTP server: routes, the chat pipeline read top to bottom, errors, settings."""

from proxy.server.app import app_from_env, create_app
from proxy.server.connection_limits import uvicorn_options
from proxy.server.logs import configure_logging
from proxy.server.request_body import (
    check_chat_body,
    check_messages_body,
    check_responses_body,
    parse_chat_body,
    parse_model_body,
)
from proxy.server.responses_api import note_previous, report_json, rewritten
from proxy.server.settings import Settings, SettingsError

__all__ = [
    "Settings",
    "SettingsError",
    "app_from_env",
    "check_chat_body",
    "check_messages_body",
    "check_responses_body",
    "configure_logging",
    "create_app",
    "note_previous",
    "parse_chat_body",
    "parse_model_body",
    "report_json",
    "rewritten",
    "uvicorn_options",
]
