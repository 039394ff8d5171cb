"""Posting JSON to a model server (embeddings, chat completions, rerank), standard library only.

:class:`JSONClient` sends one JSON body to one URL with a bearer token when given and a timeout,
and retries what asking again may cure: connection errors, timeouts, 408, 409, 429 and 5xx, up
to ``retries`` times with exponential backoff (``backoff · 2^attempt`` seconds, or the server's
longer ``Retry-After``, at most ``max_backoff``), as the OpenAI client does. Whatever still
fails is raised as :class:`RequestFailed`, with the status and the server's own message when
there was one; each caller words it for its users. Requests to a server on this machine bypass
any proxy set in the environment.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from stratamem.errors import RequestFailed as RequestFailed  # importable here too

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
_LOCAL_HOSTS = frozenset({"localhost", "localhost.localdomain"})


class JSONClient:
    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 0,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._api_key = api_key
        host = urllib.parse.urlsplit(url).hostname
        # A proxy from the environment must not swallow requests to a server on this machine.
        handlers = [urllib.request.ProxyHandler({})] if is_loopback(host) else []
        self._opener = urllib.request.build_opener(*handlers)

    def post(self, payload: Any) -> tuple[int, bytes]:
        """(status, body) of the first answer that is not an error, retrying as the module
        docstring says; :class:`RequestFailed` when none comes."""
        body = json.dumps(payload).encode("utf-8")
        attempt = 0
        while True:
            try:
                return self._post_once(body)
            except RequestFailed as failure:
                if not failure.retry or attempt >= self.retries:
                    raise
                delay = max(self.backoff * 2**attempt, failure.delay or 0.0)
                time.sleep(min(delay, self.max_backoff))
                attempt += 1

    def _post_once(self, body: bytes) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            raise _status_failure(exc) from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if isinstance(reason, TimeoutError):
                message = f"no answer within {self.timeout:g} s"
            else:
                message = f"cannot connect ({reason})"
            raise RequestFailed(message, retry=True) from exc
        except (OSError, http.client.HTTPException) as exc:  # e.g. a reset while reading
            raise RequestFailed(f"connection failed ({exc})", retry=True) from exc


def _status_failure(exc: urllib.error.HTTPError) -> RequestFailed:
    try:
        detail = error_message(exc.read())
    except OSError:
        detail = ""
    finally:
        exc.close()  # it holds the response's socket
    status = exc.code
    detail = detail or str(exc.reason or "request failed")
    retry = status in RETRY_STATUSES or status >= 500
    delay = retry_after(exc.headers.get("Retry-After")) if retry else None
    return RequestFailed(
        f"HTTP {status}: {detail}", status=status, detail=detail, retry=retry, delay=delay
    )


def openai_url(base_url: str, endpoint: str) -> str:
    """``endpoint`` (``/embeddings``, ``/chat/completions``) of an OpenAI-compatible server:
    appended to the base's path, ``/v1`` when it has none, kept when already there."""
    parts = urllib.parse.urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
    path = parts.path.rstrip("/")
    if not path:
        path = "/v1" + endpoint
    elif not path.endswith(endpoint):
        path += endpoint
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host.lower() in _LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def error_message(raw: bytes) -> str:
    """The server's own message: OpenAI's ``{"error": {"message"}}``, Ollama's ``{"error"}``."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        answer = json.loads(text)
    except ValueError:
        return text[:200]
    if isinstance(answer, dict):
        error = answer.get("error", answer.get("detail", answer.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return str(error)[:200]
    return text[:200]


def retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to the backoff
