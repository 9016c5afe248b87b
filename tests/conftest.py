pytest_plugins = ["tests.harness.fixtures"]
