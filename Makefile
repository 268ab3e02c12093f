# Tidemark: `make demo` runs the replay scenario on a local stack, `make test` runs the suite.
# Both build the virtualenv and fetch the JVM artifacts (Kafka broker, Spark's Kafka
# connector) through Maven into ~/.cache/tidemark on first use.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
STATE  ?= $(CURDIR)/.tidemark
PYTEST_ARGS ?=

.PHONY: install jars test lint demo soak load nemesis ops bench clean down

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "python3.11 not found: install Python 3.11"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all,test,lint]'
	@touch $@

install: $(STAMP)

jars: $(STAMP)
	@$(PY) -m tidemark.log.jvm

# promtool (the alert rules' tests) and prometheus (`local up --prometheus`): Debian's
# prometheus package, installed when missing (root)
test: install jars
	@bash scripts/system_packages.sh prometheus
	$(PY) -m pytest $(PYTEST_ARGS)

# ruff (style and bugs), mypy (types; strict on the pure-logic modules), import-linter (layers)
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

soak: install jars
	$(PY) -m pytest -m soak -p no:cacheprovider $(PYTEST_ARGS)

# restarts under load (3 senders at 1,200 msgs/s, kills), the Spark job and its Python worker
# killed under traffic, a 200k queues backlog and the bench smoke tests (bench produce, bench
# catchup): ~20 min, so a group of their own, which .ci/run runs after `make test`
load: install jars
	$(PY) -m pytest -m load -p no:cacheprovider $(PYTEST_ARGS)

# the operator's deployment: a real Prometheus scraping replica nodes and the Spark job, every
# alert rule loaded and every dashboard panel returning data; the compose healthcheck against a
# secured node; a broker's external listener (about 8 minutes; installs prometheus)
ops: install jars
	@bash scripts/system_packages.sh prometheus
	$(PY) -m pytest -m ops -p no:cacheprovider $(PYTEST_ARGS)

# scenarios on hosts of their own (root: network namespaces; installs nftables, iptables and
# libnetfilter-queue-dev when missing, and builds NetfilterQueue for link delay without netem)
nemesis: install jars
	@bash scripts/system_packages.sh
	@$(PY) -c 'import netfilterqueue' 2>/dev/null || $(PY) -m pip install -q -e '.[nemesis]'
	$(PY) -m pytest -m nemesis -p no:cacheprovider $(PYTEST_ARGS)

demo: install jars
	@TIDEMARK_STATE_DIR=$(STATE) bash scripts/demo.sh

# the benchmarks start an empty stack of their own (its own state folder, removed before and after)
bench: install jars
	@bash scripts/bench.sh

down:
	@test -x $(VENV)/bin/tidemark && TIDEMARK_STATE_DIR=$(STATE) $(VENV)/bin/tidemark local down || true

clean: down
	rm -rf $(VENV) $(STATE) .pytest_cache
