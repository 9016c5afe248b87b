# The allocator's cluster fixtures (admin with the allocator's RBAC, fake nodes, a namespace,
# allocator processes), shared rather than copied.
from tests.allocator.conftest import admin, fleet, namespace, start_allocator  # noqa: F401
