#!/usr/bin/env python3
# Usage (root, tracefs): tools/campaign/exit-path-ab.py ROUNDS NAME="COMMAND" NAME="COMMAND" ...
# e.g. tools/campaign/exit-path-ab.py 10 floor="exitlab-floor H ins=20000" \
#        a="./exitlab-a run --serial none H --cmdline ins=20000" \
#        b="./exitlab-b run --serial none H --cmdline ins=20000"
# (H: the harness kernel, target/release/build/exitlab-guest-*/out/exitlab-harness.elf;
#  exitlab-floor: target/release/build/exitlab-floor-*/out/exitlab-floor.)
# An A/B of several binaries on the harness's exits mode, independent of exitlab's tracing
# code (docs/exit-path.md). Runs the commands interleaved, rotating which goes first each
# round, each on its own tracefs instance; keeps only the command's own process (tgid:
# other VMs on the host are left out), and per userspace exit takes kvm_userspace_exit ->
# the same thread's next ioctl entry (x86-tsc) for exits whose port read, traced by
# kvm_pio when KVM completes it inside the next KVM_RUN, was of port 0x1234. Prints each
# round's p10/median, then the median over rounds of each side's p10 and median and their
# ratios to the first command.
import os, re, subprocess, sys, time, statistics as st, shlex
rounds = int(sys.argv[1]); cmds = [a.split('=', 1) for a in sys.argv[2:]]
root = '/sys/kernel/tracing'
line_re = re.compile(r'^\s*(.+)-(\d+)\s+\(\s*(\d+|-+)\)\s+\[\d+\]\s+\S+\s+(\d+):\s+(\w+):(.*)$')
def q(v, p):
    v = sorted(v); k = (len(v) - 1) * p; i = int(k); fr = k - i
    return v[i] + (v[min(i + 1, len(v) - 1)] - v[i]) * fr
def traced(cmd):
    inst = f'{root}/instances/exit-path-ab-{os.getpid()}'
    os.mkdir(inst)
    def w(p, v):
        with open(f'{inst}/{p}', 'w') as f: f.write(v)
    try:
        w('tracing_on', '0'); w('trace_clock', 'x86-tsc'); w('buffer_size_kb', '16384')
        w('options/record-tgid', '1')
        w('events/kvm/kvm_userspace_exit/enable', '1'); w('events/kvm/kvm_pio/enable', '1')
        w('events/raw_syscalls/sys_enter/filter', 'id == 16'); w('events/raw_syscalls/sys_enter/enable', '1')
        pipe = open(f'{inst}/trace_pipe', 'rb', buffering=0); os.set_blocking(pipe.fileno(), False)
        w('tracing_on', '1')
        p = subprocess.Popen(shlex.split(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        chunks = []
        while p.poll() is None:
            try:
                d = pipe.read(1 << 20)
                if d: chunks.append(d); continue
            except BlockingIOError: pass
            time.sleep(0.01)
        w('tracing_on', '0')
        while True:
            try: d = pipe.read(1 << 20)
            except BlockingIOError: break
            if not d: break
            chunks.append(d)
        pipe.close()
    finally:
        os.rmdir(inst)
    text = b''.join(chunks).decode(errors='replace')
    pending = {}; done = {}; vals = []
    for line in text.splitlines():
        m = line_re.match(line)
        if not m: continue
        tid = int(m.group(2)); ts = int(m.group(4)); ev = m.group(5); rest = m.group(6)
        tg = m.group(3)
        if not tg.isdigit() or int(tg) != p.pid: continue
        if ev == 'kvm_pio':
            # a port read is traced when it completes, after the next KVM_RUN entry
            d = done.pop(tid, None)
            if d is not None and 'pio_read at 0x1234 ' in rest: vals.append(d)
        elif ev == 'kvm_userspace_exit':
            pending[tid] = ts; done.pop(tid, None)
        elif ev == 'sys_enter':
            if tid in pending: done[tid] = ts - pending.pop(tid)
    return p.returncode, vals
res = {n: [] for n, _ in cmds}
for r in range(rounds):
    k = r % len(cmds); order = cmds[k:] + cmds[:k]
    for n, c in order:
        rc, v = traced(c)
        if len(v) < 100: print(f'{n}: rc {rc}, only {len(v)} exits', file=sys.stderr); continue
        res[n].append((q(v, .1), q(v, .5), len(v)))
    print(f'round {r}: ' + '  '.join(f'{n} {res[n][-1][0]:.0f}/{res[n][-1][1]:.0f}' for n, _ in cmds if res[n]), flush=True)
base = cmds[0][0]
bp = st.median(x[0] for x in res[base]); bm = st.median(x[1] for x in res[base])
print(f"{'side':<14} {'p10':>7} {'median':>7} {'ratio p10':>9} {'ratio med':>9} rounds exits/run")
for n, _ in cmds:
    p = st.median(x[0] for x in res[n]); m = st.median(x[1] for x in res[n])
    print(f'{n:<14} {p:>7.0f} {m:>7.0f} {p/bp:>9.3f} {m/bm:>9.3f} {len(res[n]):>6} {res[n][0][2]}')
