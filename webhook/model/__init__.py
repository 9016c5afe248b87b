"""The domain's vocabulary: annotations, card models, HAMi's encoding, a pod's request, the one
config model; docs/architecture.md."""
