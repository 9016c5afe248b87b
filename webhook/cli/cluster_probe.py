"""Ask the API server, at start, whether it answers and accepts the credentials.

Without this, a wrong token or an unreachable server shows up later as retries in the
logs of a process that looks alive (the allocator), or as a worker that dies and is
restarted in a loop (the extender under gunicorn).
"""

from __future__ import annotations

import json
import re
import time

from kubernetes import client

from ..kube.api import client_configuration
from ..startup import StartupError
from .kubeconfig import ClusterSource

TIMEOUT = 10.0  # seconds for one try; a connection is tried once: the operator is waiting
# A role binding applied just before the start takes a moment to reach the API server's
# authorizer (an install applies both at once): a 403 is asked again for this long.
FORBIDDEN_GRACE = 10.0
PROBE = "/api/v1/nodes"  # both the allocator and the extender list nodes first


def _reason(error: Exception) -> str:
    reason = getattr(error, "reason", None) or error  # urllib3's MaxRetryError wraps the cause
    return re.sub(r"<[^>]*>:? ?", "", str(reason))  # drop the objects' reprs


def check_cluster(source: ClusterSource) -> None:
    """Raise StartupError unless the API server answers a list of one node."""
    cfg = client_configuration(source.kubeconfig, source.description)
    cfg.retries = False
    where = f"the API server at {cfg.host} (from {source.description})"
    deadline = time.monotonic() + FORBIDDEN_GRACE
    with client.ApiClient(cfg) as api:
        while True:
            try:
                client.CoreV1Api(api).list_node(limit=1, _request_timeout=TIMEOUT,
                                                _preload_content=False).release_conn()
                return
            except client.ApiException as e:
                if e.status == 403 and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                if e.status == 401:
                    raise StartupError(f"{where} refused the credentials: 401 Unauthorized") \
                        from None
                raise StartupError(f"{where} answered {e.status} to GET {PROBE}: "
                                   f"{_status_message(e)}") from None
            except Exception as e:  # urllib3 raises many kinds; all mean "not reached"
                raise StartupError(f"cannot reach {where}: {_reason(e)}") from None


def _status_message(e: client.ApiException) -> str:
    try:
        return json.loads(e.body)["message"]
    except (TypeError, ValueError, KeyError):
        return e.reason or ""
