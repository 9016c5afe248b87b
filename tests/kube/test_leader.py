"""The Lease rules (webhook/kube/leader.py) on a fake API server with resourceVersion conflicts."""

from webhook.kube.leader import LeaderElector


class FakeLeaseApi:
    """An API server holding one Lease, with resourceVersion conflicts."""

    def __init__(self):
        self.lease = None
        self.rv = 0
        self.down = False

    async def call(self, method, path, query=None, body=None, **kw):
        from webhook.kube.api import ApiError, Reply
        if self.down:
            raise ApiError("unreachable")
        if method == "GET":
            return Reply(200, _copy(self.lease)) if self.lease else Reply(404, None)
        if method == "POST":
            if self.lease:
                return Reply(409, None)
            return self._store(body)
        if method == "PUT":
            if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                return Reply(409, None)
            return self._store(body)

    def _store(self, body):
        from webhook.kube.api import Reply
        self.rv += 1
        body = _copy(body)
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.lease = body
        return Reply(200, _copy(body))


def _copy(d):
    import json
    return json.loads(json.dumps(d))


class Clock:
    t = 100.0

    def __call__(self):
        return self.t


def test_lease_rules():
    api, clock = FakeLeaseApi(), Clock()
    a = LeaderElector(api, "ns", "a", clock=clock)
    b = LeaderElector(api, "ns", "b", clock=clock)
    assert a.try_acquire_or_renew() and a.holds()
    assert not b.try_acquire_or_renew()  # first sight of the record starts b's wait
    clock.t += 14
    assert a.try_acquire_or_renew()  # renewed: b's wait starts again
    assert not b.try_acquire_or_renew()
    api.down = True  # a cannot renew
    clock.t += 9.9
    assert a.holds()
    clock.t += 0.2
    assert not a.holds()  # renew deadline (10 s) passed: a stops deciding...
    api.down = False
    clock.t += 4
    assert not b.try_acquire_or_renew()  # ...before b may take over (15 s after it saw a renew)
    clock.t += 1.1
    assert b.try_acquire_or_renew() and b.holds()
    assert not a.try_acquire_or_renew() and not a.holds()
    assert api.lease["spec"]["leaseTransitions"] == 1


def test_release_hands_over_at_once():
    api, clock = FakeLeaseApi(), Clock()
    a = LeaderElector(api, "ns", "a", clock=clock)
    b = LeaderElector(api, "ns", "b", clock=clock)
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert not a.holds() and api.lease["spec"]["holderIdentity"] == ""
    assert b.try_acquire_or_renew()
