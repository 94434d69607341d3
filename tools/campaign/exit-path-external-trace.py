#!/usr/bin/env python3
# Usage (root, tracefs): tools/campaign/exit-path-external-trace.py EXITLAB RESULTS.json [BENCH OPTIONS...]
# e.g. tools/campaign/exit-path-external-trace.py target/release/exitlab /tmp/r.json --tests cpuid --overhead --samples 30 --rounds 1
# An external trace of `exitlab bench`'s overhead experiment, independent of exitlab's
# tracing code: its own tracefs instance, its own parser. Pairs each userspace exit
# (kvm_userspace_exit) with the same thread's next ioctl entry, per process, skipping
# exits preceded by a kvm_pio write (serial output), and compares with bench's figures.
# The floor that called seccomp(2) (syscall 317) is the filtered floor (`--seccomp`).
import json, os, re, subprocess, sys, time, statistics as st
exe = sys.argv[1]; out_json = sys.argv[2]; extra = sys.argv[3:]
root = '/sys/kernel/tracing'
inst = f'{root}/instances/external-agree-{os.getpid()}'
os.mkdir(inst)
def w(p, v):
    with open(f'{inst}/{p}', 'w') as f: f.write(v)
try:
    w('tracing_on', '0'); w('trace_clock', 'x86-tsc'); w('buffer_size_kb', '32768')
    w('options/record-tgid', '1')
    # Only this script and what it forks (bench and its runs): other VMs on a shared host
    # would otherwise be counted with exitlab's side.
    w('set_event_pid', str(os.getpid())); w('options/event-fork', '1')
    w('events/kvm/kvm_userspace_exit/enable', '1'); w('events/kvm/kvm_pio/enable', '1')
    w('events/raw_syscalls/sys_enter/filter', 'id == 16 || id == 317'); w('events/raw_syscalls/sys_enter/enable', '1')
    pipe = open(f'{inst}/trace_pipe', 'rb', buffering=0)
    os.set_blocking(pipe.fileno(), False)
    w('tracing_on', '1')
    p = subprocess.Popen([exe, 'bench', '--json', out_json] + extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    chunks = []
    while p.poll() is None:
        try:
            d = pipe.read(1 << 20)
            if d: chunks.append(d); continue
        except BlockingIOError: pass
        time.sleep(0.01)
    w('tracing_on', '0')
    while True:
        try:
            d = pipe.read(1 << 20)
        except BlockingIOError: break
        if not d: break
        chunks.append(d)
finally:
    try: pipe.close()
    except Exception: pass
    try: os.rmdir(inst)
    except OSError as e: print('rmdir', e, file=sys.stderr)
bench_pid = p.pid
text = b''.join(chunks).decode(errors='replace')
line_re = re.compile(r'^\s*(.+)-(\d+)\s+\(\s*(\d+|-+)\)\s+\[\d+\]\s+\S+\s+(\d+):\s+(\w+):(.*)$')
pending = {}; last_pio_write = {}; vals = {}; comm_of = {}; filtered = set()
for line in text.splitlines():
    m = line_re.match(line)
    if not m: continue
    comm, tid, tgid, ts, ev, rest = m.group(1).strip(), int(m.group(2)), m.group(3), int(m.group(4)), m.group(5), m.group(6)
    tgid = int(tgid) if tgid.isdigit() else tid
    if ev == 'kvm_pio':
        if 'pio_write' in rest: last_pio_write[tid] = True
    elif ev == 'kvm_userspace_exit':
        pending[tid] = (ts, last_pio_write.get(tid, False)); last_pio_write[tid] = False
    elif ev == 'sys_enter' and 'NR 317 ' in rest:
        filtered.add(tgid)
    elif ev == 'sys_enter':
        if tid in pending:
            t0, was_write = pending.pop(tid)
            if not was_write:
                vals.setdefault(tgid, []).append(ts - t0)
                comm_of[tgid] = comm
        last_pio_write[tid] = False
res = json.load(open(out_json))
f = res['floor']
floor_v = []; exitlab_v = []; filtered_v = []; other = []
for tgid, v in vals.items():
    if tgid == bench_pid: other.append(len(v)); continue
    if not comm_of[tgid].startswith('exitlab-floor'): exitlab_v.extend(v)
    else: (filtered_v if tgid in filtered else floor_v).extend(v)
def q(v, p):
    v = sorted(v); k = (len(v) - 1) * p; i = int(k); fr = k - i
    return v[i] + (v[min(i + 1, len(v) - 1)] - v[i]) * fr
ext = {s: (q(v, .1), q(v, .5), len(v)) for s, v in (('exitlab', exitlab_v), ('floor', floor_v), ('filtered_floor', filtered_v)) if v}
print(f"{'':<10} {'bench p10':>10} {'bench med':>10} {'bench n':>8} {'ext p10':>8} {'ext med':>8} {'ext n':>8}")
for s in [s for s in ('exitlab', 'floor', 'filtered_floor') if s in ext and s in f]:
    b = f[s]['user']
    print(f"{s:<10} {b['p10']:>10.0f} {b['median']:>10.0f} {b['n']:>8} {ext[s][0]:>8.0f} {ext[s][1]:>8.0f} {ext[s][2]:>8}")
rp = ext['exitlab'][0] / ext['floor'][0]; rm = ext['exitlab'][1] / ext['floor'][1]
print(f"ratio p10: bench {f['ratio_p10']:.3f}, external {rp:.3f}, difference {100*(f['ratio_p10']/rp-1):+.2f}%")
print(f"ratio median: bench {f['ratio_median']:.3f}, external {rm:.3f}, difference {100*(f['ratio_median']/rm-1):+.2f}%")
if 'filtered_floor' in ext and 'ratio_filtered' in f:
    for i, (name, k) in enumerate((('p10', 0), ('median', 1))):
        r = ext['exitlab'][k] / ext['filtered_floor'][k]
        print(f"ratio to the filtered floor, {name}: bench {f['ratio_filtered'][i]:.3f}, external {r:.3f}, difference {100*(f['ratio_filtered'][i]/r-1):+.2f}%")
print(f"(bench's own process: {sum(other)} userspace exits traced, not counted)")
