"""The cache-policy registry is the one list: every simulator's names and checks come from it."""

from typing import get_args

import pytest

from kvtrace.analysis import policies
from kvtrace.analysis.kv_access import Policy
from kvtrace.analysis.kv_access.curves import check_policy
from kvtrace.analysis.kv_cache_fidelity import kv_cache_fidelity_rows
from kvtrace.analysis.prefix_cache import PrefixCurveSpec
from kvtrace.errors import InputError, QueryError


def test_the_lists_each_simulator_takes():
    assert policies.block_policies() == (
        "lru",
        "opt",
        "fifo",
        "pin_prefix",
        "sliding_window",
        "lfu",
        "score",
    )
    assert policies.prefix_policies() == ("lru", "opt", "fifo", "radix_lru")
    assert policies.engine_replay_policies() == ("lru", "fifo", "radix_lru")


def test_the_option_type_names_the_block_policies_in_order():
    assert get_args(Policy) == policies.block_policies()


def test_every_entry_has_what_its_passes_need():
    for entry in policies.POLICIES:
        assert entry.description
        if entry.block_pass == "per_capacity" or "block" in entry.prefix_semantics:
            assert (entry.capacity_kernel is not None) == (entry.prefix_pass != "stack_distance")
        assert bool(entry.prefix_semantics) == (entry.prefix_pass is not None)
        assert not entry.engine_replay or "prefix" in entry.prefix_semantics
        assert (entry.block_pass == "priority") == (entry.priority is not None)


def test_errors_name_the_registry_lists():
    with pytest.raises(
        QueryError, match="expected one of lru, opt, fifo, pin_prefix, sliding_window, lfu, score"
    ):
        check_policy("radix_lru")
    with pytest.raises(QueryError, match="expected one of lru, opt, fifo, radix_lru for"):
        PrefixCurveSpec(policy="pin_prefix").check()
    with pytest.raises(QueryError, match="radix_lru needs semantics 'prefix'"):
        PrefixCurveSpec(policy="radix_lru", semantics="block").check()
    with pytest.raises(InputError, match="expected a policy of lru, fifo, radix_lru, got 'opt'"):
        kv_cache_fidelity_rows(None, "opt", None, 1.0)  # type: ignore[arg-type]


def test_kernels_load_on_first_call():
    kernel = policies.policy_named("fifo").capacity_kernel
    assert kernel is not None and kernel.name == "fifo_hits"
    import numpy as np

    ids = np.array([0, 1, 0, 2, 0], np.int64)
    assert kernel(ids, 3, 2).tolist() == [False, False, True, False, False]
