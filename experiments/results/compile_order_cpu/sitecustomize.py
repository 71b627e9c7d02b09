import os
if os.environ.get("ONE_CPU_RULE"):
    os.sched_getaffinity = lambda pid: {0}
