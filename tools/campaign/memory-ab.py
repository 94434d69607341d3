#!/usr/bin/env python3
# Usage: tools/campaign/memory-ab.py STATE ROUNDS BINARY... (root not needed)
# An A/B of the memory `exitlab run -v --builtin conformance` reports outside guest RAM,
# for several exitlab binaries, interleaved, with each binary's file put in the same
# page-cache state first (docs/memory.md, 2026-11-27: the resident figure counts the
# binary's and the C libraries' cached pages the kernel maps around each fault, so it
# depends on how the file came into the page cache):
#   copy  a fresh copy of each binary (BINARY.copy), as right after a build or install
#   warm  the file dropped from the page cache (fadvise DONTNEED, this file only), then
#         read back by one run, as after a reboot
#   4k    the file dropped, then read back 4 KiB at a time with readahead off (one page
#         per folio: the kernel maps a 64 KiB window around each fault)
# Prints per binary: rounds, min / median / max of the resident figure and, where the
# binary prints it, of the private part.
import os, re, shutil, statistics as st, subprocess, sys

state, rounds, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def drop(path):
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return fd

def run(b):
    err = subprocess.run([b, 'run', '-v', '--builtin', 'conformance'], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True).stderr
    m = re.search(r'([\d.]+) MiB resident outside guest RAM(?:, ([\d.]+) MiB of it private)?', err)
    if not m:
        sys.exit(f'{b}: no memory figure in:\n{err}')
    return float(m[1]), (float(m[2]) if m[2] else None)

targets = []
for b in bins:
    if state == 'copy':
        shutil.copy2(b, b + '.copy')
        targets.append(b + '.copy')
        continue
    fd = drop(b)
    if state == '4k':
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for off in range(0, os.fstat(fd).st_size, 4096):
            os.pread(fd, 4096, off)
    elif state == 'warm':
        run(b)
    else:
        sys.exit(f'unknown state {state}')
    os.close(fd)
    targets.append(b)

figures = {t: [] for t in targets}
for _ in range(rounds):
    for t in targets:
        figures[t].append(run(t))
for t, f in figures.items():
    line = f'{t}: {len(f)} runs'
    for i, name in enumerate(['resident', 'private']):
        v = [x[i] for x in f if x[i] is not None]
        if v:
            line += f'; {name} {min(v):.1f} / {st.median(v):.2f} / {max(v):.1f} MiB'
    print(line)
