"""The Kubernetes I/O of the allocator and the extender: API calls, watches, Lease, reports, binds."""
