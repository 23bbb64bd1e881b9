"""The HTTP server: routes, the chat pipeline read top to bottom, errors, settings."""

from proxy.server.app.app import app_from_env, create_app
from proxy.server.app.connection_limits import uvicorn_options
from proxy.server.app.logs import configure_logging
from proxy.server.core.settings import Settings, SettingsError
from proxy.server.dialects.responses import note_previous, report_json, rewritten
from proxy.server.pipeline.request_body import (
    check_chat_body,
    check_messages_body,
    check_responses_body,
    parse_chat_body,
    parse_model_body,
)

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
