# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv and install the project into it first (idempotent).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pytest workers: 2 cores here; each worker starts one embedded broker.
WORKERS ?= 2

.PHONY: install demo test bench fuzz clean lint chromium

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# The status-page test drives headless Chromium (Debian package chromium).
CHROMIUM := /usr/bin/chromium
chromium:
	@test -x $(CHROMIUM) || { test "$$(id -u)" = 0 && apt-get install -y --no-install-recommends chromium; } \
	  || { echo "make chromium: $(CHROMIUM) is missing; as root run: apt-get install -y --no-install-recommends chromium" >&2; exit 1; }

test: $(STAMP) promtool chromium
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup -q -p no:cacheprovider

# Long wire fuzz of the coordinator (FUZZ_FRAMES frames, seed FUZZ_SEED); see bench/fuzz.py.
FUZZ_FRAMES ?= 100000
FUZZ_SEED   ?= 0
fuzz: $(STAMP)
	$(BIN)/python bench/fuzz.py --frames $(FUZZ_FRAMES) --seed $(FUZZ_SEED) --minimize

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# promtool (Debian package prometheus) checks every /metrics endpoint in the tests:
# installed when missing and running as root, else a clear error.
.PHONY: promtool
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y --no-install-recommends prometheus || \
	    { apt-get update && apt-get install -y --no-install-recommends prometheus; }; \
	  else \
	    echo "promtool is missing: install the Debian package prometheus as root" \
	         "(apt-get install -y --no-install-recommends prometheus); the metrics tests need it" >&2; \
	    exit 1; \
	  fi; }
