#!/usr/bin/env python3
"""Writes internal/monitor/testdata: host trees shaped like real nodes' /proc and
/sys/fs/cgroup (file names, key sets and formats as the kernel prints them),
with round numbers so tests can state the expected signals exactly.
Run from the repository root; the output is committed."""
import os, shutil

ROOT = "internal/monitor/testdata"

V2_STAT_KEYS = ["anon", "file", "kernel", "kernel_stack", "pagetables", "sec_pagetables", "percpu", "sock",
    "vmalloc", "shmem", "zswap", "zswapped", "file_mapped", "file_dirty", "file_writeback", "swapcached",
    "anon_thp", "file_thp", "shmem_thp", "inactive_anon", "active_anon", "inactive_file", "active_file",
    "unevictable", "slab_reclaimable", "slab_unreclaimable", "slab", "workingset_refault_anon",
    "workingset_refault_file", "workingset_activate_anon", "workingset_activate_file",
    "workingset_restore_anon", "workingset_restore_file", "workingset_nodereclaim", "pgscan", "pgsteal",
    "pgscan_kswapd", "pgscan_direct", "pgsteal_kswapd", "pgsteal_direct", "pgfault", "pgmajfault",
    "pgrefill", "pgactivate", "pgdeactivate", "pglazyfree", "pglazyfreed", "zswpin", "zswpout", "thp_fault_alloc",
    "thp_collapse_alloc"]
V1_STAT_KEYS = ["cache", "rss", "rss_huge", "shmem", "mapped_file", "dirty", "writeback", "swap", "pgpgin",
    "pgpgout", "pgfault", "pgmajfault", "inactive_anon", "active_anon", "inactive_file", "active_file",
    "unevictable", "hierarchical_memory_limit", "hierarchical_memsw_limit", "total_cache", "total_rss",
    "total_rss_huge", "total_shmem", "total_mapped_file", "total_dirty", "total_writeback", "total_swap",
    "total_pgpgin", "total_pgpgout", "total_pgfault", "total_pgmajfault", "total_inactive_anon",
    "total_active_anon", "total_inactive_file", "total_active_file", "total_unevictable"]

def w(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)

def stat(keys, values):
    # Keys not given get small plausible numbers; the ones the readers use are exact.
    return "".join("%s %d\n" % (k, values.get(k, 4096 * (i + 1))) for i, k in enumerate(keys))

def proc(host, pressure, swap_total=0, swap_free=0):
    p = os.path.join(host, "proc")
    w(p + "/meminfo", "".join("%-16s%8d kB\n" % (k + ":", v) for k, v in [
        ("MemTotal", 16384000), ("MemFree", 2048000), ("MemAvailable", 9000000), ("Buffers", 102400),
        ("Cached", 6144000), ("SwapCached", 0), ("Active", 4096000), ("Inactive", 3072000),
        ("Active(anon)", 2048000), ("Inactive(anon)", 1024), ("Active(file)", 2048000),
        ("Inactive(file)", 3070976), ("Unevictable", 0), ("Mlocked", 0), ("SwapTotal", swap_total), ("SwapFree", swap_free),
        ("Dirty", 128), ("Writeback", 0), ("AnonPages", 3145728), ("Mapped", 409600), ("Shmem", 20480),
        ("KReclaimable", 307200), ("Slab", 512000), ("SReclaimable", 307200), ("SUnreclaim", 204800),
        ("KernelStack", 16384), ("PageTables", 40960), ("CommitLimit", 8192000), ("Committed_AS", 12288000),
        ("VmallocTotal", 34359738367), ("VmallocUsed", 65536), ("VmallocChunk", 0), ("Percpu", 8192),
        ("HugePages_Total", 0), ("Hugepagesize", 2048), ("DirectMap4k", 262144), ("DirectMap2M", 16515072)]))
    w(p + "/loadavg", "0.52 0.58 0.59 3/1523 123456\n")
    w(p + "/sys/kernel/pid_max", "4194304\n")
    w(p + "/sys/kernel/threads-max", "126942\n")
    w(p + "/pressure/memory", pressure)

POD_BURSTABLE = "0e7f5a36-9c1e-4f53-9d0a-7f8ac2a1b111"
POD_GUARANTEED = "5b2d3c44-1a2b-4c3d-8e9f-00112233aabb"
POD_BESTEFFORT = "9f8e7d6c-5b4a-4392-8170-ffeeddccbbaa"
APP_ID = "4c7a1f0e9b2d3c4a5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5"
PAUSE_ID = "1111111111111111111111111111111111111111111111111111111111111111"

def kubelet_dirs(host):
    w(host + "/var/lib/kubelet/pods/%s/volumes/kubernetes.io~empty-dir/cache/data.bin" % POD_BURSTABLE, "x" * 10000)
    w(host + "/var/lib/kubelet/pods/%s/volumes/kubernetes.io~configmap/config/app.yaml" % POD_BURSTABLE, "key: value\n")
    w(host + "/var/lib/kubelet/pods/%s/etc-hosts" % POD_BURSTABLE, "127.0.0.1 localhost\n")
    w(host + "/var/log/pods/shop_web-7d9f_%s/app/0.log" % POD_BURSTABLE, "2026-11-22T10:00:00Z stdout F hello\n" * 200)
    w(host + "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/.keep", "")

def v2(host, driver):
    cg = host + "/sys/fs/cgroup"
    w(cg + "/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
    w(cg + "/cgroup.procs", "1\n")
    w(cg + "/memory.stat", stat(V2_STAT_KEYS, {"anon": 3 << 30, "file": 2 << 30, "inactive_file": 1 << 30}))
    w(cg + "/memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    if driver == "systemd":
        kp = cg + "/kubepods.slice"
        tiers = {"Guaranteed": (kp, "kubepods-pod%s.slice"),
                 "Burstable": (kp + "/kubepods-burstable.slice", "kubepods-burstable-pod%s.slice"),
                 "BestEffort": (kp + "/kubepods-besteffort.slice", "kubepods-besteffort-pod%s.slice")}
        ctr = "cri-containerd-%s.scope"
        esc = lambda u: u.replace("-", "_")
    else:
        kp = cg + "/kubepods"
        tiers = {"Guaranteed": (kp, "pod%s"), "Burstable": (kp + "/burstable", "pod%s"),
                 "BestEffort": (kp + "/besteffort", "pod%s")}
        ctr = "%s"
        esc = lambda u: u
    w(kp + "/memory.max", "%d\n" % (12 << 30))
    w(kp + "/memory.current", "%d\n" % (2 << 30))
    w(kp + "/memory.stat", stat(V2_STAT_KEYS, {"inactive_file": 512 << 20}))
    w(kp + "/memory.pressure", "some avg10=12.50 avg60=3.10 avg300=0.75 total=123456\nfull avg10=4.00 avg60=1.00 avg300=0.20 total=2345\n")
    w(kp + "/cgroup.procs", "")
    for tier in ("Burstable", "BestEffort"):
        d = tiers[tier][0]
        w(d + "/cgroup.procs", "")
        w(d + "/memory.current", "%d\n" % (300 << 20))
        w(d + "/memory.stat", stat(V2_STAT_KEYS, {}))
    def pod(tier, uid, current, inactive, containers, swap=0):
        d = tiers[tier][0] + "/" + tiers[tier][1] % esc(uid)
        w(d + "/memory.current", "%d\n" % current)
        w(d + "/memory.swap.current", "%d\n" % swap)
        if driver == "systemd":  # a pod stalled on memory (podPressure)
            w(d + "/memory.pressure", "some avg10=12.50 avg60=4.10 avg300=1.00 total=123456\nfull avg10=3.20 avg60=1.00 avg300=0.20 total=45678\n")
        w(d + "/memory.stat", stat(V2_STAT_KEYS, {"inactive_file": inactive}))
        w(d + "/memory.max", "max\n")
        w(d + "/cgroup.procs", "")
        for cid, procs, mem in containers:
            c = d + "/" + ctr % cid
            w(c + "/cgroup.procs", "".join("%d\n" % p for p in procs))
            w(c + "/memory.current", "%d\n" % mem)
            w(c + "/memory.stat", stat(V2_STAT_KEYS, {"inactive_file": 0}))
    pod("Burstable", POD_BURSTABLE, 256 << 20, 16 << 20, [(PAUSE_ID, [4001], 1 << 20), (APP_ID, [4010, 4011, 4012], 200 << 20)], swap=64 << 20)
    pod("Guaranteed", POD_GUARANTEED, 100 << 20, 0, [("2" * 64, [5001, 5002], 100 << 20)])
    pod("BestEffort", POD_BESTEFFORT, 50 << 20, 1 << 20, [("3" * 64, [6001], 49 << 20)])
    # The v2 hosts have swap (2 GiB, 512 MiB used; the Burstable pod holds 64 MiB), the v1 host none.
    proc(host, "some avg10=1.23 avg60=0.50 avg300=0.10 total=1000\nfull avg10=0.45 avg60=0.20 avg300=0.05 total=500\n", 2097152, 1572864)
    kubelet_dirs(host)

def v1_cgroupfs(host):
    cg = host + "/sys/fs/cgroup"
    for ctl in ("memory", "pids"):
        w(cg + "/%s/cgroup.procs" % ctl, "1\n")
    m = cg + "/memory"
    w(m + "/memory.usage_in_bytes", "%d\n" % (5 << 30))
    w(m + "/memory.limit_in_bytes", "9223372036854771712\n")
    w(m + "/memory.stat", stat(V1_STAT_KEYS, {"total_inactive_file": 1 << 30}))
    w(m + "/kubepods/memory.limit_in_bytes", "%d\n" % (12 << 30))
    w(m + "/kubepods/memory.usage_in_bytes", "%d\n" % (2 << 30))
    w(m + "/kubepods/memory.stat", stat(V1_STAT_KEYS, {"total_inactive_file": 512 << 20}))
    w(m + "/kubepods/cgroup.procs", "")
    for tier in ("burstable", "besteffort"):
        w(m + "/kubepods/%s/cgroup.procs" % tier, "")
    def pod(tier, uid, usage, inactive, containers):
        base = "/kubepods/" + (tier + "/" if tier else "") + "pod" + uid
        w(m + base + "/memory.usage_in_bytes", "%d\n" % usage)
        w(m + base + "/memory.stat", stat(V1_STAT_KEYS, {"total_inactive_file": inactive}))
        w(m + base + "/memory.limit_in_bytes", "9223372036854771712\n")
        w(m + base + "/cgroup.procs", "")
        w(cg + "/pids" + base + "/cgroup.procs", "")
        for cid, procs, mem in containers:
            for ctl in ("memory", "pids"):
                w(cg + "/" + ctl + base + "/" + cid + "/cgroup.procs", "".join("%d\n" % p for p in procs))
            w(m + base + "/" + cid + "/memory.usage_in_bytes", "%d\n" % mem)
            w(m + base + "/" + cid + "/memory.stat", stat(V1_STAT_KEYS, {"total_inactive_file": 0}))
    pod("burstable", POD_BURSTABLE, 256 << 20, 16 << 20, [(PAUSE_ID, [4001], 1 << 20), (APP_ID, [4010, 4011, 4012], 200 << 20)])
    pod("", POD_GUARANTEED, 100 << 20, 0, [("2" * 64, [5001, 5002], 100 << 20)])
    pod("besteffort", POD_BESTEFFORT, 50 << 20, 1 << 20, [("3" * 64, [6001], 49 << 20)])
    # An older kernel's /proc/pressure/memory: no "full" line is not expected on
    # memory, so this one is complete; the v1 host has PSI but kubepods has none.
    proc(host, "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    kubelet_dirs(host)

for name in ("v2-systemd", "v2-cgroupfs", "v1-cgroupfs"):
    shutil.rmtree(os.path.join(ROOT, name), ignore_errors=True)
v2(os.path.join(ROOT, "v2-systemd"), "systemd")
v2(os.path.join(ROOT, "v2-cgroupfs"), "cgroupfs")
v1_cgroupfs(os.path.join(ROOT, "v1-cgroupfs"))
