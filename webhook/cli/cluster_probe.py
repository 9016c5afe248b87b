"""Ask the API server, at start, whether it answers and accepts the credentials.

Without this, a wrong token or an unreachable server shows up later as retries in the
logs of a process that looks alive (the allocator), or as a worker that dies and is
restarted in a loop (the extender under gunicorn).
"""

from __future__ import annotations

import asyncio
import time

from ..base.startup import StartupError
from ..kube.api import Api, ApiError, KubeconfigError, client_configuration
from ..kube.io_loop import run_blocking
from .kubeconfig import ClusterSource

TIMEOUT = 10.0  # seconds for one try; a connection is tried once: the operator is waiting
# A role binding applied just before the start takes a moment to reach the API server's
# authorizer (an install applies both at once): a 403 is asked again for this long.
FORBIDDEN_GRACE = 10.0
PROBE = "/api/v1/nodes"  # both the allocator and the extender list nodes first


def check_cluster(source: ClusterSource) -> None:
    """Raise StartupError unless the API server answers a list of one node."""
    try:
        cfg = client_configuration(source.kubeconfig, source.description)
    except KubeconfigError as e:
        raise StartupError(str(e)) from None
    where = f"the API server at {cfg.host} (from {source.description})"
    try:
        api = Api(cfg, connections=1)
    except KubeconfigError as e:
        raise StartupError(f"{where}: {e}") from None
    except (OSError, ValueError) as e:  # TLS material that does not load (ssl.SSLError too)
        raise StartupError(f"cannot reach {where}: {e}") from None
    run_blocking(_check(api, where))


async def _check(api: Api, where: str) -> None:
    deadline = time.monotonic() + FORBIDDEN_GRACE
    while True:
        try:
            reply = await api.call("GET", PROBE, {"limit": "1"}, timeout=TIMEOUT)
        except ApiError as e:
            raise StartupError(f"cannot reach {where}: {e.reason}") from None
        if reply.ok:
            return
        if reply.status == 403 and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            continue
        if reply.status == 401:
            raise StartupError(f"{where} refused the credentials: 401 Unauthorized") from None
        message = (reply.body or {}).get("message") or ""
        raise StartupError(f"{where} answered {reply.status} to GET {PROBE}: {message}") from None
