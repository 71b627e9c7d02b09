"""With ONE_CPU_RULE set, every process reports an affinity of one CPU (loop2.sh)."""

import os

if os.environ.get("ONE_CPU_RULE"):
    os.sched_getaffinity = lambda pid: {0}
