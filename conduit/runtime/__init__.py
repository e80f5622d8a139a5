"""What every service runs on: settings, the bus and its middlewares, the tool-service runtime, logs, metrics, tracing, the Redis client."""
