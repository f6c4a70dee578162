# SPDX-License-Identifier: Apache-2.0
"""Every command on every case of the hostile corpus (issue 42, "every
command catches"; tests/mount/hostile_corpus.py makes each case):
--info, --list --json, --check --json, --stats, --diff (the model against
itself) and --export each answer exit 0 or 2, a refusal in one line on
stderr, never a death by signal (an exception escaping a destructor or a
thread ends the program with SIGABRT), within the corpus's bounds of peak
memory (under 256 MiB, and within the model's budget and 32 MiB) and
time. --list, --check and the mount are run, with the same
bounds, by test_hostile_corpus.py.

The commands of one case run side by side (each in its own process group
under the corpus's address-space guard and time cap, killed with its
group at the cap)."""
import concurrent.futures

import pytest

import hostile_corpus as hc
from conftest import MODELFS
from test_hostile_corpus import (READ_SECONDS, budget_kib, corpus, report,  # noqa: F401 (corpus: the fixture)
                                 run_bounded, within_bounds)

# Commands of one case at a time: the machine's cores, not more (each is
# timed against the corpus's cap).
PARALLEL = 2
# --export writes what the export holds: up to the export's bound on the
# whole model (1 GiB for a model storing a few bytes: kViewBound,
# src/tree/npy.hpp), a write the corpus's reads through the mount never
# make whole. It has the cap of those reads.
EXPORT_SECONDS = READ_SECONDS


def commands(model, out):
    """step name -> argv after the program."""
    return {
        "--info": ["--info", model],
        "--list --json": ["--list", "--json", model],
        "--check --json": ["--check", "--json", model],
        "--stats": ["--stats", model],
        "--diff": ["--diff", model, model],
        "--export": ["--export", out / "export.safetensors", model],
    }


@pytest.mark.parametrize("case", list(hc.CASES))
def test_every_command_answers_without_a_signal(corpus, case, tmp_path):
    model = corpus(case)
    problems = []
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        runs = {step: pool.submit(run_bounded, [MODELFS, *argv],
                                  **({"timeout": EXPORT_SECONDS} if step == "--export" else {}))
                for step, argv in commands(model, tmp_path).items()}
    for step, future in runs.items():
        run = future.result()
        report(case, step, run)
        # --diff opens the model twice, each with its budget (and the cap of one).
        models = 2 if step == "--diff" else 1
        within_bounds(step, run, (0, 2), problems, budget_kib(corpus.folder(case), models), models)
    assert not problems, f"{case} ({model}):\n  " + "\n  ".join(problems)
