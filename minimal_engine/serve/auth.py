"""The API key of a shared server (a classroom's one machine that the learners' laptops call).

    python -m minimal_engine.serve --host 0.0.0.0 --api-key KEY   # or MINIMAL_ENGINE_API_KEY=KEY
    curl -H "Authorization: Bearer KEY" http://SERVER:8000/v1/models

    ApiKeyCheck        ASGI middleware: no `Authorization: Bearer KEY` -> 401, OpenAI's error body
    resolve_api_key()  --api-key, else the environment variable MINIMAL_ENGINE_API_KEY
                       (vLLM reads VLLM_API_KEY; this project's name avoids sending a vLLM key here)
    check_bind()       a --host other than loopback needs a key: the server refuses to start without

What needs the key: every route except /health, /metrics and /version (and FastAPI's /docs
pages with --docs), so supervisors and Prometheus work without it, as in vLLM. vLLM guards
only the paths under /v1 (vllm/entrypoints/openai/server_utils.py, AuthenticationMiddleware);
here /tokenize, /detokenize and /tokenizer_info need the key too, and so will any route added
later unless it is named in PUBLIC_PATHS. The key is compared in constant time (SHA-256 digests and
secrets.compare_digest, as vLLM does) and never echoed. Plain HTTP carries it in clear text: on a
classroom LAN it keeps other people off the server and is worth no more than that; use a fresh
key for each workshop.
"""
from __future__ import annotations

import hashlib
import ipaddress
import secrets

from minimal_engine.serve.errors import RequestError

ENV_VAR = "MINIMAL_ENGINE_API_KEY"
PUBLIC_PATHS = ("/health", "/metrics", "/version", "/docs", "/docs/oauth2-redirect", "/redoc",
                "/openapi.json")
MISSING = ("No API key sent: this server needs 'Authorization: Bearer KEY' (openai client: "
           "api_key=KEY; bench: --api-key KEY); ask whoever runs it for the key.")
WRONG = "The API key in 'Authorization: Bearer ...' is not this server's key."
NEW_KEY = "python -c \"import secrets; print(secrets.token_urlsafe(16))\""


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()


class ApiKeyCheck:
    """Pure ASGI middleware (once the key matched, streaming and disconnects pass untouched)."""

    def __init__(self, app, api_key: str):
        self.app, self._digest = app, _digest(api_key)

    @staticmethod
    def _public(scope) -> bool:
        path = scope["path"].removeprefix(scope.get("root_path", "")) or "/"
        return scope.get("method") == "OPTIONS" or path in PUBLIC_PATHS

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and not self._public(scope):
            value = next((v.decode("latin-1") for k, v in scope["headers"]
                          if k == b"authorization"), None)
            scheme, _, token = (value or "").partition(" ")
            if value is None or scheme.lower() != "bearer" or not token:
                await self._refuse(MISSING if value is None else WRONG, scope, receive, send)
                return
            if not secrets.compare_digest(_digest(token), self._digest):
                await self._refuse(WRONG, scope, receive, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(message: str, scope, receive, send) -> None:
        from fastapi.responses import JSONResponse
        e = RequestError(message, None, "invalid_api_key", 401)
        response = JSONResponse(e.body(), 401, {"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


def is_loopback(host: str) -> bool:
    """'127.0.0.1', '::1', any 127.x.y.z and 'localhost': loopback; '0.0.0.0', '::', names: not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_api_key(option: str | None, env) -> str | None:
    """The key from --api-key, else from MINIMAL_ENGINE_API_KEY (empty: none). A key must be
    printable ASCII without spaces: it travels in an HTTP header and every client must type it."""
    source, key = ("--api-key", option) if option is not None else (ENV_VAR, env.get(ENV_VAR))
    if option is None and not key:
        return None
    if not key or not all("!" <= c <= "~" for c in key):
        what = "it is empty" if not key else "it holds a space, a control or a non-ASCII character"
        raise ValueError(f"{source}: the API key must be printable ASCII without spaces (letters, "
                         f"digits, - _ . and the like); {what}. A good key: {NEW_KEY}")
    return key


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse a non-loopback --host without a key (ValueError saying why and how, in Japanese and
    English). A loopback server is reachable from this machine only; any other address (0.0.0.0,
    a LAN address, a host name) lets everyone on the network use it."""
    if api_key or is_loopback(host):
        return
    shown = host or "''"
    raise ValueError(
        f"--host {shown} はこのマシンの外（教室の LAN など）からの接続を受け付けますが、"
        "API キーが設定されていません。キーがないと、同じネットワークにいる誰でもこの"
        "サーバーでモデルを動かせてしまうため、ループバック以外のアドレスではキーが必須"
        f"です。--api-key KEY を付けるか、環境変数 {ENV_VAR} にキーを入れてから起動して"
        f"ください（キーの作り方の例: {NEW_KEY}）。このマシンの中だけで使うなら "
        "--host 127.0.0.1（既定）で起動してください。\n"
        f"--host {shown} accepts connections from other machines, but no API key is set: "
        "without one, anyone on the network could run the model on this server, so a "
        f"non-loopback address needs a key. Pass --api-key KEY or set {ENV_VAR}; clients then "
        "send 'Authorization: Bearer KEY'. To use the server from this machine only, keep "
        "--host 127.0.0.1 (the default).")


__all__ = ["ENV_VAR", "PUBLIC_PATHS", "ApiKeyCheck", "check_bind", "is_loopback", "resolve_api_key"]
