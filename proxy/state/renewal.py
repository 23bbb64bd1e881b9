"""Hold renewal off the event loop: a thread with its own Redis connection renews this
replica's live holds, so a loop held up by a slow handler or a long computation never lets
a request's hold lapse while it runs (another replica would then admit into the same room).
The thread is a daemon: a replica that dies stops renewing, and its holds lapse."""

from __future__ import annotations

import logging
import threading

import redis
from redis.commands.core import Script

from proxy.state.counter_keys import renew_interval
from proxy.state.hold_scripts import REFRESH_SCRIPT
from proxy.state.holds import FleetHolds
from proxy.state.redis_link import BACKEND, FAILURES, SOCKET_TIMEOUT_S

log = logging.getLogger("context_proxy.shared_state")


class HoldRenewal:
    """Renews the live entries of one or more FleetHolds every `renew_interval(ttl)`."""

    def __init__(self, url: str, holds: list[FleetHolds]) -> None:
        self._url = url
        self._holds = holds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.interval_s = min(renew_interval(h.ttl_s) for h in holds)
        self.failing = False  # logged once per change, like the loop's health

    def start(self) -> None:
        for holds in self._holds:
            holds.renewing = True
        self._thread = threading.Thread(target=self._run, name="hold-renewal", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop renewing (after the releases were sent: what is left lapses)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        for holds in self._holds:
            holds.renewing = False

    def _run(self) -> None:
        client = redis.Redis.from_url(
            self._url,
            decode_responses=True,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
        )
        refresh = client.register_script(REFRESH_SCRIPT)
        try:
            while not self._stop.wait(self.interval_s):
                self.renew_once(refresh)
        finally:
            client.close()

    def renew_once(self, refresh: Script) -> None:
        """One round over every live entry; a failure is counted and retried next round."""
        try:
            for holds in self._holds:
                for renewal in holds.renewals():
                    refresh(keys=renewal.keys, args=renewal.args)
        except FAILURES as exc:
            self._holds[0].health.metrics.shared_state_failed(BACKEND, "hold renewal")
            if not self.failing:
                log.warning("shared state: renewing holds failed (%s)", type(exc).__name__)
            self.failing = True
            return
        except Exception:  # a bug must not end the thread: the holds would lapse
            log.exception("shared state: renewing holds failed")
            return
        if self.failing:
            log.info("shared state: holds renewed again")
        self.failing = False
