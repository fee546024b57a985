"""keep_freed_memory: weight-sized temporaries stop being page-faulted in on every step."""

import platform
import subprocess
import sys

import pytest

from torchbayes.runtime import KEEP_FREED_MEMORY_ENV, keep_freed_memory

GLIBC = platform.libc_ver()[0] == "glibc"

# A training step's pattern: allocate and free the same 4 MiB tensors over and over. glibc's
# default threshold moves with the process's history, so the test sets both ends itself.
_SCRIPT = """
import resource, torch
from torchbayes.runtime import keep_freed_memory

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        a = torch.ones(2**20)
        b = a * 2
        del a, b
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

counts = []
for threshold in (128 * 1024, 32 * 2**20):
    assert keep_freed_memory(mmap_threshold=threshold, trim_threshold=threshold)
    faults()
    counts.append(faults())
print(*counts)
"""


@pytest.mark.skipif(not GLIBC, reason="mallopt thresholds are glibc's")
def test_repeated_large_allocations_stop_page_faulting():
    command = [sys.executable, "-c", _SCRIPT]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    unmapped, kept = (int(n) for n in out.stdout.split())
    # Below the block size every free unmaps: 2 × 1,024 fresh pages per iteration.
    assert unmapped > 20 * 1024
    assert kept < 100


def test_environment_variable_opts_out(monkeypatch):
    monkeypatch.setenv(KEEP_FREED_MEMORY_ENV, "0")
    assert keep_freed_memory() is False


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"mmap_threshold": 0}, "mmap_threshold"),
        ({"mmap_threshold": 64 * 2**20}, "mmap_threshold"),
        ({"trim_threshold": -1}, "trim_threshold"),
    ],
)
def test_bad_thresholds_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        keep_freed_memory(**kwargs)
