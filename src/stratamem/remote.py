"""Posting JSON to a model server (embeddings, chat completions, rerank) with httpx, which the
``llm`` and ``rerank`` extras bring.

:class:`JSONClient` sends one JSON body to one URL with a bearer token when given and a timeout,
over connections it keeps open between calls; close it (or use it as a context manager) when
done, and one dropped unclosed closes them when it is collected. It retries what asking again
may cure, up to ``retries`` times each: a connection that cannot be made is tried again by the
transport (at once, then after 0.5 s, 1 s, 2 s…); a timeout, a connection lost on the way, 408,
409, 429 and 5xx are asked again with exponential backoff (``backoff · 2^attempt`` seconds, or
the server's longer ``Retry-After``, at most ``max_backoff``), as the OpenAI client does.
Whatever still fails is raised as :class:`RequestFailed`, with the status and the server's own
message when there was one; each caller words it for its users.

Proxies: a request to a server on this machine ignores the environment (no proxy, no
``SSL_CERT_FILE``); any other takes the proxy the environment names for its scheme
(``https_proxy``, ``http_proxy``) unless ``no_proxy`` exempts its host.
"""

from __future__ import annotations

import ipaddress
import json
import time
import urllib.parse
import urllib.request
import weakref
from typing import TYPE_CHECKING, Any

from stratamem.errors import RequestFailed as RequestFailed  # importable here too
from stratamem.extras import require

if TYPE_CHECKING:
    import httpx

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
_LOCAL_HOSTS = frozenset({"localhost", "localhost.localdomain"})


class JSONClient:
    """POSTs JSON to ``url`` (see the module docstring). ``extra`` and ``what`` word the error
    raised when httpx is not installed: ``<what> needs the '<extra>' extra``."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 0,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        extra: str = "llm",
        what: str = "a model server client",
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        require("httpx", extra, what)
        import httpx

        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        parts = urllib.parse.urlsplit(url)
        # A proxy from the environment must not swallow requests to a server on this machine.
        trust_env = not is_loopback(parts.hostname)
        transport = httpx.HTTPTransport(
            retries=retries,
            trust_env=trust_env,
            proxy=_environment_proxy(parts) if trust_env else None,
        )
        self._client = httpx.Client(
            transport=transport, headers=headers, timeout=timeout, trust_env=trust_env
        )
        # Its connections are closed with it, even when nobody calls close().
        self._closer = weakref.finalize(self, self._client.close)

    def close(self) -> None:
        """Close the connections kept open; the client cannot post after this."""
        self._closer()

    def __enter__(self) -> JSONClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        import httpx

        try:
            response = self._client.post(self.url, content=body)
        except httpx.TimeoutException as exc:
            # A connection the transport could not make in time was tried again there already.
            retry = not isinstance(exc, httpx.ConnectTimeout)
            raise RequestFailed(f"no answer within {self.timeout:g} s", retry=retry) from exc
        except httpx.ConnectError as exc:  # the transport tried again already
            raise RequestFailed(f"cannot connect ({exc})") from exc
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:  # e.g. a reset mid-read
            raise RequestFailed(f"connection failed ({exc})", retry=True) from exc
        except httpx.TransportError as exc:  # a bad URL or proxy: asking again cannot help
            raise RequestFailed(f"cannot connect ({exc})") from exc
        if not response.is_success:
            raise _status_failure(response)
        return response.status_code, response.content


def _environment_proxy(parts: urllib.parse.SplitResult) -> str | None:
    """The proxy the environment names for this URL's scheme, None where there is none or
    ``no_proxy`` exempts the host (as urllib reads them)."""
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.netloc):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _status_failure(response: httpx.Response) -> RequestFailed:
    status = response.status_code
    detail = error_message(response.content) or response.reason_phrase or "request failed"
    retry = status in RETRY_STATUSES or status >= 500
    delay = retry_after(response.headers.get("Retry-After")) if retry else None
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
