"""Looks for a value inside a sandbox, run as root there by the network compat
tests: in every file but /proc, /sys and /dev, and in every other process's
environment, command line and readable memory. The value is given in two
halves (python3 scan.py HALF1 HALF2) so no command line holds it. Prints
"clean N" (N processes whose memory was read) or "found" and where."""
import os
import re
import sys

value = (sys.argv[1] + sys.argv[2]).encode()
me = str(os.getpid())
found, scanned = [], 0


def holds(path):
    try:
        with open(path, "rb") as f:
            return value in f.read()
    except OSError:
        return False


for top in os.listdir("/"):
    if top in ("proc", "sys", "dev"):
        continue
    for d, _, files in os.walk("/" + top):
        for name in files:
            p = os.path.join(d, name)
            if os.path.isfile(p) and not os.path.islink(p) and holds(p):
                found.append(p)

for pid in filter(str.isdigit, os.listdir("/proc")):
    if pid == me:
        continue
    for part in ("environ", "cmdline"):
        if holds("/proc/%s/%s" % (pid, part)):
            found.append("/proc/%s/%s" % (pid, part))
    try:
        mem = open("/proc/%s/mem" % pid, "rb", 0)
        maps = open("/proc/%s/maps" % pid).read().splitlines()
    except OSError:
        continue
    for line in maps:
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) r", line)
        if not m:
            continue
        start, end = int(m.group(1), 16), int(m.group(2), 16)
        try:
            mem.seek(start)
            if value in mem.read(end - start):
                found.append("memory of %s" % pid)
        except (OSError, ValueError, OverflowError):
            pass
    scanned += 1

print("found " + " ".join(found) if found else "clean %d" % scanned)
