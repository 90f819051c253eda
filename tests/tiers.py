"""Which tests a run takes, and which tests share a worker (loaded by ``tests/conftest.py``).

Tiers:

* ``slow``: chaos runs, soaks, storms, standalone Spark and the longest cluster tests
  (each over ~15 s on two cores). The default run leaves them out (they show as
  deselected); ``pytest -m slow`` runs them, as ``.ci/run`` does after the default run,
  and so does any ``-m`` expression that names ``slow``, or naming a test's file or
  the test itself on the command line. A test that adds a long run is marked ``slow``.
  A property test whose examples take long runs a share of them by default and all
  of them in the slow tier: ``@examples(fast, slow)`` below.
* ``integration`` (starts real server processes): ``pytest -m "not integration"`` is
  the fast tier. A test that uses the Spark session (a JVM serving its Python driver
  on 127.0.0.1) or the smoke bench (OM nodes), or is marked ``spark``, is marked
  ``integration`` here whatever its module says: the fast tier starts no JVM.

Workers: the default run spreads tests over pytest-xdist workers (``-n`` and ``--dist
loadgroup`` in pyproject.toml), one test at a time, except where tests share a fixture
that is costly to make: those get one ``xdist_group``, so one worker makes it once.
The Spark group goes first (it is the run's longest chain).

* The session's Spark JVM and its real smoke bench (``ONE_WORKER_FIXTURES``): every test
  that needs either runs on one worker (a second JVM or bench would cost a minute).
* A module's or class's own fixtures (a cluster, a server, a store): the module's tests
  that use one run on one worker.
* Any other session fixture of ours must be cheap enough to make once per worker
  (``PER_WORKER_FIXTURES``): a new one fails the collection until it is sorted into one
  of the two sets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SLOW = "slow"
SPARK = "spark"
ONE_WORKER_FIXTURES = frozenset({"spark", "smoke_bench"})
ONE_WORKER_GROUP = "spark-jvm-and-smoke-bench"
PER_WORKER_FIXTURES = frozenset({"own_cluster_cache", "own_ports"})
SHARED_SCOPES = frozenset({"class", "module", "package"})


def examples(fast: int, slow: int) -> pytest.MarkDecorator:
    """Runs a property test twice over: ``fast`` examples by default (the fast tier's
    share) and ``slow`` in the slow tier. The test takes them as its ``examples``
    argument and hands them to ``settings(max_examples=examples)`` on a ``@given``
    function it defines and calls: hypothesis binds one example count per decorated
    function, so the two counts need two. ``fast`` is chosen so the test's red case
    still fails within it."""
    assert 0 < fast < slow, (fast, slow)
    return pytest.mark.parametrize("examples", [
        pytest.param(fast, id=f"{fast}-examples"),
        pytest.param(slow, id=f"{slow}-examples", marks=pytest.mark.slow)])


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _leave_out_the_slow_tier(config, items)
    groups = {id(item): _group(item) for item in items}
    for item in items:
        group = groups[id(item)]
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        if group == ONE_WORKER_GROUP or item.get_closest_marker(SPARK):
            item.add_marker(pytest.mark.integration)   # a JVM, a bench's OM nodes
    # The one-worker group is the longest chain of the run (a JVM, then Spark jobs one
    # after the other): first in line, it runs beside everything else, not after it.
    items.sort(key=lambda item: groups[id(item)] != ONE_WORKER_GROUP)


def _leave_out_the_slow_tier(config: pytest.Config, items: list[pytest.Item]) -> None:
    if SLOW in (config.getoption("markexpr") or ""):
        return   # the expression decides
    named = _named_files(config)
    left_out = [i for i in items if i.get_closest_marker(SLOW) and i.path not in named]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        dropped = set(map(id, left_out))
        items[:] = [i for i in items if id(i) not in dropped]
    assert not any(i.get_closest_marker(SLOW) and i.path not in named for i in items)


def _named_files(config: pytest.Config) -> set[Path]:
    """The test files the command line names (a file, or a test in it), not folders."""
    base = config.invocation_params.dir
    paths = {(base / arg.split("::")[0]).resolve() for arg in config.args}
    return {path for path in paths if path.is_file()}


def _group(item: pytest.Item) -> str | None:
    """The worker group of ``item``: the one of the costly session fixtures, its
    module's when it uses a fixture of its module or class, else none."""
    if not isinstance(item, pytest.Function):
        return None
    # pytest has no public way to a test's fixture closure with scopes; this one has
    # held since pytest 3 (and pyproject pins pytest's major version).
    definitions = item._fixtureinfo.name2fixturedefs
    if ONE_WORKER_FIXTURES & set(definitions):
        return ONE_WORKER_GROUP
    ours = {name: defs[-1] for name, defs in definitions.items() if _ours(defs[-1].func)}
    per_session = {name for name, d in ours.items() if d.scope == "session"}
    unsorted = per_session - PER_WORKER_FIXTURES
    assert not unsorted, (f"session fixtures {sorted(unsorted)}: add them to "
                          "ONE_WORKER_FIXTURES or PER_WORKER_FIXTURES (tests/tiers.py)")
    if any(d.scope in SHARED_SCOPES for d in ours.values()):
        return item.nodeid.split("::")[0]
    return None


def _ours(fixture: object) -> bool:
    """Whether a fixture is the suite's (defined in a conftest or a test module, where
    pytest finds them), not a plugin's (pytest's own ``tmp_path_factory``, ...)."""
    module = str(getattr(fixture, "__module__", "")).rsplit(".", 1)[-1]
    return module == "conftest" or module.startswith("test_")
