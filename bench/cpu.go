package main

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuSample is a point-in-time reading of CPU time: of the ZooKeeper
// servers, of this process, and of the whole machine (from /proc, Linux
// only; elsewhere every figure is 0). The difference of two samples says
// where the CPU went during a row, and how much of the machine other
// tenants used.
type cpuSample struct {
	at           time.Time
	zkTicks      uint64 // utime+stime of the ZooKeeper processes, clock ticks
	selfTicks    uint64 // utime+stime of this process
	machineBusy  uint64 // all CPUs, non-idle ticks
	machineTotal uint64 // all CPUs, all ticks
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

func takeCPU(zkPIDs []int) cpuSample {
	s := cpuSample{at: time.Now()}
	for _, pid := range zkPIDs {
		s.zkTicks += procTicks(strconv.Itoa(pid))
	}
	s.selfTicks = procTicks("self")
	s.machineBusy, s.machineTotal = machineTicks()
	return s
}

// procTicks reads utime+stime of /proc/<pid>/stat (0 on error).
func procTicks(pid string) uint64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return u + st
}

// machineTicks reads the aggregate "cpu" line of /proc/stat.
func machineTicks() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

// cpuUse is what a row used, in percent of one core (200 = two cores busy).
type cpuUse struct {
	ZooKeeper, Bench, Machine, Others float64
}

// since returns the CPU used between a and s, per core of wall time.
func (s cpuSample) since(a cpuSample, cores int) cpuUse {
	wall := s.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return cpuUse{}
	}
	pct := func(ticks uint64) float64 { return float64(ticks) / clockTicks / wall * 100 }
	u := cpuUse{ZooKeeper: pct(s.zkTicks - a.zkTicks), Bench: pct(s.selfTicks - a.selfTicks)}
	if tot := s.machineTotal - a.machineTotal; tot > 0 {
		u.Machine = float64(s.machineBusy-a.machineBusy) / float64(tot) * 100 * float64(cores)
	}
	u.Others = max(0, u.Machine-u.ZooKeeper-u.Bench)
	return u
}

// setCPU records a row's CPU use in its extras.
func (r *Result) setCPU(u cpuUse) {
	if u.Machine == 0 && u.ZooKeeper == 0 && u.Bench == 0 {
		return
	}
	r.setExtra("cpu_zookeeper_pct", round1(u.ZooKeeper))
	r.setExtra("cpu_bench_pct", round1(u.Bench))
	r.setExtra("cpu_machine_pct", round1(u.Machine))
	r.setExtra("cpu_others_pct", round1(u.Others))
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }
