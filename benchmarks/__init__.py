"""Benchmarks: throughput and latency measurements written to benchmarks/results/."""
