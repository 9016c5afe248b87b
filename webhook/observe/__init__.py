"""What an operator looks at: HAMi's metrics, the `cards` command, the data both read."""
