"""Traces and logs: OpenTelemetry spans, opt-in, and log records that never hold a secret."""
