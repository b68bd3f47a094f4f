# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv and install the project into it first (idempotent).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pytest workers, each with its own embedded broker: one per core. A third worker on
# 2 cores kept the cores busy (load 8-9), made no run shorter and timed bounds out.
WORKERS ?= 2

.PHONY: install demo test bench fuzz clean lint docs chromium promtool

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark,connect]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# The run's own limit: three times its ~15 min budget. A run past it is interrupted
# (SIGINT: pytest still prints what failed and what was running) and fails, well
# before CI's 90 min; a test hung past its own timeout ends its worker sooner
# (tests/conftest.py). The slowest tests are listed to keep the budget in view.
TEST_LIMIT_S ?= 2700
test: $(STAMP) promtool chromium
	timeout --signal=INT --kill-after=120 $(TEST_LIMIT_S) \
	  $(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup -q -p no:cacheprovider --durations=20

# Long wire fuzz of the coordinator (FUZZ_FRAMES frames, seed FUZZ_SEED); see bench/fuzz.py.
FUZZ_FRAMES ?= 100000
FUZZ_SEED   ?= 0
fuzz: $(STAMP)
	$(BIN)/python bench/fuzz.py --frames $(FUZZ_FRAMES) --seed $(FUZZ_SEED) --minimize

# The benches that exist, each with small defaults (a few minutes in all);
# BENCHMARKS.md gives the full-size commands and figures.
bench: $(STAMP)
	$(BIN)/python bench/bench_store.py --entries 100000 --singles 500 --batches 50
	$(BIN)/python bench/bench_coordinator.py --quick
	$(BIN)/python bench/bench_operator.py --messages 100000 --trials 1 --reset-trials 0

# ruff with the rule set pinned in pyproject.toml ([tool.ruff.lint]), ruff's formatter
# (a file it would change fails), then mypy over the files and with the strictness
# pyproject.toml gives ([tool.mypy]).
lint: $(STAMP)
	$(BIN)/ruff check cr_consumer coordinator tests bench examples
	$(BIN)/ruff format --check cr_consumer coordinator tests bench examples
	$(BIN)/mypy

# API reference from the docstrings (pdoc), into docs/api/ (gitignored). pdoc
# follows a package's __all__, which names no submodules, so every module is
# named, except those of a package without __all__ (pdoc adds them itself).
API_MODULES = $(shell find cr_consumer coordinator -name '*.py' ! -name '__main__.py' | sort | while read f; do \
	d=$$(dirname $$f); if [ $${d%%/*} != $$d ] && [ $$(basename $$f) != __init__.py ] && ! grep -q __all__ $$d/__init__.py; \
	then continue; fi; echo $$f | sed 's:[.]py$$::; s:/__init__$$::; s:/:.:g'; done)
docs: $(STAMP)
	rm -rf docs/api
	$(BIN)/pdoc --docformat markdown -o docs/api $(API_MODULES)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache docs/api

# Debian packages the tests drive as real tools: promtool (package prometheus)
# checks every /metrics endpoint, headless Chromium loads the status page.
# Installed when missing and running as root (apt lists refreshed if the first
# try fails), else a clear error naming the command to run.
APT_INSTALL = apt-get install -y --no-install-recommends
define need_debian_package
	@command -v $(1) >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    $(APT_INSTALL) $(2) || { apt-get update && $(APT_INSTALL) $(2); }; \
	  else \
	    echo "$(1) is missing: as root run: $(APT_INSTALL) $(2) (the tests need it)" >&2; exit 1; \
	  fi; }
endef

promtool:
	$(call need_debian_package,promtool,prometheus)

chromium:
	$(call need_debian_package,chromium,chromium)
