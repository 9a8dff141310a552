"""`chunkyard eval`: build every requested index through the pipeline's steps, evaluate, compare.

- `pipeline.benchmark.run`: `run_benchmark(BenchmarkRequest(dataset, ...)) -> BenchmarkResult`
- `pipeline.benchmark.results`: the result's tables, Chroma's published rows beside ours, `--json`
- `pipeline.benchmark.cli`: `main(argv)`, the command line
"""

from __future__ import annotations

from chunkyard.pipeline.benchmark.cli import build_parser, main
from chunkyard.pipeline.benchmark.results import BenchmarkResult
from chunkyard.pipeline.benchmark.run import BenchmarkError, BenchmarkRequest, run_benchmark

__all__ = ["BenchmarkError", "BenchmarkRequest", "BenchmarkResult", "build_parser", "main", "run_benchmark"]
