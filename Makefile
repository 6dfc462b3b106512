# The README names these targets. `make test` is what CI runs (.ci/run).
PY ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
CACHE ?= /var/cache/acceldeploy
LAB_HOSTS ?= 2
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)
export ACCELDEPLOY_CACHE := $(CACHE)

.PHONY: venv lint test-unit test-lab test lab lab-down host-deps demo endpoints clean test-slow \
  wheel collection bench-noop-site

# The product (acceldeploy, from tools/) and the lab, its own distribution (acceldeploy-lab, from
# lab/: `acceldeploy lab`, tools/lab.py), both editable.
$(VENV)/.installed: pyproject.toml lab/pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]' -e ./lab
	touch $@

venv: $(VENV)/.installed

# lint-imports: the package's import contracts (pyproject.toml [tool.importlinter]: every
# subpackage in its layer).
# The docs (mkdocs.yml, docs/ into the git-ignored site/): strict, so a broken link or anchor, or a
# page missing from the nav, fails lint. Not --quiet: mkdocs 1.6.1 then lets warnings pass. Then
# the built pages are read for Markdown that reached them as raw text (docsgen/rendered.py).
lint: venv
	$(BIN)/ruff check tools lab tests plugins roles
	$(BIN)/ruff format --check tools lab tests plugins roles
	$(BIN)/mypy tools/acceldeploy lab/acceldeploy_lab $(wildcard tools/*.py) \
	  $(wildcard plugins/filter/*.py) $(wildcard plugins/modules/*.py)
	# Apart: an action plugin may share its module's name (acceldeploy_state).
	MYPYPATH=tools $(BIN)/mypy --cache-dir .mypy_cache/actions $(wildcard plugins/action/*.py)
	$(BIN)/lint-imports --no-cache
	$(BIN)/ansible-lint
	out=$$(NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict 2>&1) || { echo "$$out"; exit 1; }
	$(BIN)/python -m acceldeploy.docsgen.rendered site

test-unit: venv
	$(BIN)/pytest -q tests/unit

# What an installed collection's controller needs beside it (docs/developers/collection.md):
# the acceldeploy package as a wheel in dist/, for `pip install` into the Python that runs
# Ansible; and the collection itself, a tarball of this repository (galaxy.yml), in dist/.
# build/ goes first: setuptools puts into the wheel whatever an earlier build left in build/lib
# (a module since moved or removed, such as the lab once under tools/acceldeploy).
wheel: venv
	rm -rf build
	$(BIN)/pip wheel --no-deps -w dist .

collection: venv
	$(BIN)/ansible-galaxy collection build --force --output-path dist .

# What the lab needs from the machine: debootstrap and systemd-nspawn (Debian packages),
# nftables for the isolated lab's filter (tools/lab.py up --isolated), apt-ftparchive for the
# lab's own apt repository (acceldeploy_lab.ospackages), and haproxy to check the gateway's
# rendered config (haproxy -c; no service is started here).
# promtool comes with Debian's prometheus: installed with no service started (policy-rc.d) and
# left disabled, this machine is no monitor.
host-deps:
	@command -v debootstrap >/dev/null && command -v systemd-nspawn >/dev/null && \
	  command -v nft >/dev/null && command -v apt-ftparchive >/dev/null && \
	  command -v haproxy >/dev/null && command -v promtool >/dev/null && \
	  command -v tmux >/dev/null || \
	  (apt-get update -qq && printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && \
	   chmod 0755 /usr/sbin/policy-rc.d && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	     --no-install-recommends debootstrap systemd-container nftables apt-utils haproxy \
	     prometheus tmux >/dev/null; rc=$$?; rm -f /usr/sbin/policy-rc.d; \
	   systemctl disable prometheus.service >/dev/null 2>&1; exit $$rc)

# The lab: wheel cache, tiny model, mirror and the hosts' Debian tree prepared once into
# $(CACHE) (debootstrap beside the downloads); the mirror and the wheel server (pip find-links
# for the hosts) started; then the hosts.
lab: venv host-deps
	$(BIN)/python tools/lab.py prepare --rootfs bookworm > /dev/null
	$(BIN)/python tools/lab.py mirror start > /dev/null
	$(BIN)/python tools/lab.py wheels start > /dev/null
	$(BIN)/python tools/lab.py up --hosts $(LAB_HOSTS)

lab-down: venv
	-$(BIN)/python tools/lab.py down
	-$(BIN)/python tools/lab.py mirror stop > /dev/null
	-$(BIN)/python tools/lab.py wheels stop > /dev/null

test-lab: lab
	ACCELDEPLOY_REQUIRE_LAB=1 $(BIN)/pytest -q -m bare tests/lab
	ACCELDEPLOY_REQUIRE_LAB=1 $(BIN)/pytest -q --durations=15 -m "lab and not slow" tests/lab
	ACCELDEPLOY_REQUIRE_LAB=1 $(BIN)/pytest -q -s --durations=5 -m "e2e and not slow" tests/lab
	$(MAKE) --no-print-directory bench-noop-site
	ACCELDEPLOY_REQUIRE_LAB=1 $(BIN)/pytest -q -s -m labcycle tests/lab
	ACCELDEPLOY_REQUIRE_LAB=1 $(BIN)/pytest -q -s -m suites tests/lab

# The no-op figure in every test log: site.yml rerun 3 times on the lab the e2e tests leave
# serving, its median beside the one recorded in docs/benchmarks/noop.yml (a warning line above
# +20 %). A benchmark, not an assertion: its failure is printed and does not fail the run.
bench-noop-site: venv
	-$(BIN)/python tools/bench_noop.py --site --runs 3

# No-op reruns timed on 1, 2, 4 and 8 lab hosts, project vs stock Ansible settings (a table;
# ~15 min). Replaces the lab's hosts. `tools/bench_noop.py --site` times site.yml on a served lab.
bench-noop: lab
	$(BIN)/python tools/bench_noop.py; rc=$$?; $(MAKE) lab-down; exit $$rc

# The releases side by side (Debian 11, 12, 13; real vLLM on 12 and 13): ~20 min, ~16 GB on the
# hosts. Not in `make test` (its suites tests run the fast part); replaces the lab's hosts.
test-matrix: lab
	ACCELDEPLOY_REQUIRE_LAB=1 $(BIN)/pytest -q -s -m matrix tests/lab; rc=$$?; $(MAKE) lab-down; exit $$rc

# The acceptance proofs too long for CI's 90 minutes (tests marked slow, ~60 min): upgrades (a
# pins change rolled through both hosts one at a time while the other serves, a broken one
# rolled back on the first host; two extra ~8 GB env builds per host), a stack change
# (test_stack_upgrade_lab.py, ~15 min on a converged lab: cpu-vllm-0.12.0 -> 0.13.0 -> a
# broken 0.13.0 build -> 0.12.0, verify and bench on 0.13; three 8.1 GB builds per host at
# its peak, ~49 GB on the disk the hosts share, checked before it builds; its own builds
# pruned after), a pin built from its sdist once and fanned out (~5 min, one more 8 GB build
# per host), a model revision round trip, tune's interrupted / resumed / applied cycle, and
# remove.yml taking a service and a host out and site.yml bringing them back (~11 min; kept out
# of `make test` for its budget). Leaves the lab down.
test-slow: lab
	ACCELDEPLOY_REQUIRE_LAB=1 $(BIN)/pytest -q -s --durations=10 -m slow tests/lab; rc=$$?; \
	  $(MAKE) lab-down; exit $$rc

# Everything, on fresh lab hosts: a running lab (the demo's) is taken down first, and the lab
# is torn down again whatever the result. On a fresh machine the lab's downloads and builds
# (the wheels, its venv, the Debian tree of every suite the tests boot) run beside lint and
# the unit tests, their lines tagged "[lab prepare]"; with a warm cache they are a no-op. Lint
# and the unit tests run side by side (one core each), each one's output printed whole.
LAB_SUITES := bookworm,bullseye,trixie
test: venv host-deps
	$(MAKE) lab-down
	@ACCELDEPLOY_PROGRESS_PREFIX='[lab prepare] ' $(BIN)/python tools/lab.py prepare \
	  --rootfs $(LAB_SUITES) > /dev/null & prep=$$!; \
	  rc=0; $(MAKE) --output-sync=target -j2 lint test-unit || rc=$$?; \
	  if [ $$rc -ne 0 ]; then kill $$prep 2>/dev/null; wait $$prep; exit $$rc; fi; \
	  wait $$prep
	$(MAKE) test-lab; rc=$$?; $(MAKE) lab-down; exit $$rc

# The main job on the lab: the whole site.yml (ends with tools/verify.py), then how to call it.
demo: lab
	$(BIN)/ansible-playbook site.yml -i inventory/lab
	@$(MAKE) --no-print-directory endpoints

endpoints: venv
	@PYTHONPATH=tools:lab $(BIN)/python -m acceldeploy_lab.endpoints inventory/lab/hosts.yml

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .import_linter_cache dist
