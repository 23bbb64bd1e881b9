"""The shared vocabulary: section and priority names, JSON shapes."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, Protocol

Message = dict[str, Any]
Body = dict[str, Any]


class Section(str, Enum):
    SYSTEM_PROMPT = "system_prompt"
    GOAL = "goal"
    MEMORY = "memory"
    WORKING_STATE = "working_state"
    CONVERSATION_SUMMARY = "conversation_summary"
    RETRIEVED_CONTEXT = "retrieved_context"
    RECENT_MESSAGES = "recent_messages"
    SCAFFOLDING_REMINDER = "scaffolding_reminder"


class Priority(str, Enum):
    REQUIRED = "required"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @property
    def rank(self) -> int:
        """0 for required, 3 for low: lower ranks are kept first."""
        return _PRIORITY_RANK[self]


_PRIORITY_RANK = {Priority.REQUIRED: 0, Priority.HIGH: 1, Priority.MEDIUM: 2, Priority.LOW: 3}


class Overflow(str, Enum):
    TRUNCATE = "truncate"
    DROP = "drop"


class Strategy(str, Enum):
    RECENT = "recent"
    SCORE = "score"


class Level(str, Enum):
    NORMAL = "normal"
    WARNING = "warning"
    CRITICAL = "critical"


class Tokenizer(Protocol):
    """A model's token counter, as the planner sees it (implemented in tokens.py)."""

    @property
    def name(self) -> str:
        """The encoding's name, e.g. `o200k_base`, or `estimate:cl100k_base*1.15`."""
        ...

    @property
    def estimated(self) -> bool:
        """True when the count is an estimate, not the model's own tokenizer."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens in a bare string."""
        ...

    def truncate_text(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` that is at most `max_tokens` tokens."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens one chat message costs in a prompt, with its per-message overhead."""
        ...

    def count_request_overhead(self, body: Body) -> int:
        """Tokens the request costs besides its messages: reply priming, tools, schemas."""
        ...


# Work a caller does beside a long count running in a thread (ChatTokenizer.count_messages),
# in steps while the callable it is given returns True: the count still runs.
Alongside = Callable[[Callable[[], bool]], object]
