# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv and install the project into it first (idempotent).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pytest workers: 2 cores here; each worker starts one embedded broker.
WORKERS ?= 2

.PHONY: install demo test bench fuzz clean lint

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: $(STAMP)
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
