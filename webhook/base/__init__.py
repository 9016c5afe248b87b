"""The ground floor: what every layer uses and nothing of the domain (a bad start, a listening
address, JSON and YAML, a value quoted short); docs/architecture.md."""
