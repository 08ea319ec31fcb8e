"""W&B credentials and reachability: the API key, the server URL, a fast probe.

The key comes from ``conf/local/credentials.yml`` (:func:`export_wandb_api_key`, called by the
project hook), ``WANDB_API_KEY`` or ``wandb login``'s ``~/.netrc``; :func:`check_reachable`
fails in seconds, with one line, where wandb itself would retry for minutes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from hed.errors import ConfigError, InputDataError, one_line

_CREDENTIALS_HINT = (
    "put `wandb: {api_key: <your key>}` in conf/local/credentials.yml or set WANDB_API_KEY"
)


def export_wandb_api_key(credentials: Mapping[str, Any] | None) -> bool:
    """Export ``credentials["wandb"]["api_key"]`` as ``WANDB_API_KEY`` unless that is set.

    Called by the project hook with Kedro's credentials (``conf/local/credentials.yml``). The
    key is never logged.

    Returns:
        True when the variable was set from the credentials.
    """
    entry = (credentials or {}).get("wandb")
    key = entry.get("api_key") if isinstance(entry, Mapping) else None
    if not key or os.environ.get("WANDB_API_KEY"):
        return False
    os.environ["WANDB_API_KEY"] = str(key)
    return True


def resolve_wandb_api_key(api_key: str | None = None, base_url: str | None = None) -> str:
    """The W&B API key, looked up where W&B itself looks, in its order; never logged.

    Order: ``api_key``; the ``WANDB_API_KEY`` variable (which the project hook sets from
    ``conf/local/credentials.yml`` when it is unset); the key ``wandb login`` stored in
    ``~/.netrc`` (or the file ``NETRC`` names) for ``base_url``'s host, read with wandb's own
    reader (``wandb.sdk.lib.wbauth.wbnetrc.read_netrc_auth``).

    Args:
        api_key: an explicit key, or None.
        base_url: the W&B server (default: wandb's configured default server).

    Raises:
        ConfigError: no key in any of those places (the message says where to put one).
    """
    key = api_key or os.environ.get("WANDB_API_KEY")
    if key:
        return key
    from wandb.sdk.lib.wbauth import wbnetrc

    try:
        key = wbnetrc.read_netrc_auth(host=base_url or wandb_base_url())
    except Exception as exc:  # a malformed key in .netrc: wandb raises AuthenticationError
        raise ConfigError(
            f"the W&B key in ~/.netrc is not usable: {one_line(exc, limit=None)}"
        ) from None
    if not key:
        raise ConfigError(
            f"no W&B API key for the wandb source: run `wandb login`, or {_CREDENTIALS_HINT}"
        )
    return key


def wandb_base_url() -> str:
    """The W&B server wandb uses by default (``WANDB_BASE_URL`` or wandb's own setting)."""
    from wandb import env
    from wandb.sdk import wandb_setup

    return str(env.get_base_url(wandb_setup.singleton().settings.base_url)).rstrip("/")


def check_reachable(base_url: str, timeout_s: float = 5.0) -> None:
    """Fail fast when the W&B server cannot be reached (no network, wrong host).

    wandb's own client retries for about a minute before giving up; one TCP connection with a
    short timeout tells the same in seconds. Behind a proxy (``HTTPS_PROXY`` / ``HTTP_PROXY``
    for the server's scheme, not bypassed by ``NO_PROXY``), which wandb's HTTP client uses,
    the proxy is what must answer: the server itself may not resolve from this machine.

    Raises:
        InputDataError: the host (or proxy) does not resolve or refuses/ignores the connection.
    """
    import socket
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)
    host = parts.hostname or base_url
    scheme = parts.scheme or "https"
    proxy = urllib.request.getproxies().get(scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxy_parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        default_port = 443 if proxy_parts.scheme == "https" else 80
        target = (proxy_parts.hostname or proxy, proxy_parts.port or default_port)
        what = f"the proxy {target[0]}:{target[1]} ({scheme.upper()}_PROXY) for W&B"
    else:
        target = (host, parts.port or (80 if scheme == "http" else 443))
        what = f"W&B at {target[0]}:{target[1]}"
    try:
        socket.create_connection(target, timeout=timeout_s).close()
    except OSError as exc:
        raise InputDataError(
            f"cannot reach {what} ({one_line(exc, limit=None)}): no network? "
            "use the wandb_offline or csv source (docs/metrics.md)"
        ) from None
