"""A process's resident-set high-water mark, standard library only: the llama.cpp worker (which
runs in another venv, without agenttrace) imports it by file name, the bench's children by module.

VmHWM from /proc, not getrusage's ru_maxrss: Linux carries ru_maxrss over execve, so a child the
bench starts (while it holds every weight variant) would report the bench's own peak.
"""

import resource


def peak_rss_mib() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
