package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupRoot is where the machine's cgroups are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cpuPeriod is the scheduling period a CPU quota is given in, in microseconds.
const cpuPeriod = 100000

// limitCPU confines the process pid (every thread of it, and those it starts later) to cores
// of CPU time with a cgroup of its own, named name: the kernel throttles it once it used its
// quota in a period, as a container's CPU limit does. It returns a function that removes the
// cgroup once the process has ended. It fails when the machine's cgroups cannot be written
// (not root, or a container that does not delegate them).
func limitCPU(pid int, name string, cores float64) (remove func(), err error) {
	quota := int(cores * cpuPeriod)
	if quota < 1000 {
		return nil, fmt.Errorf("a CPU limit of %g cores is below the kernel's minimum quota of 1 ms per period", cores)
	}
	dir := cgroupDir(name)
	// cgroup v2 (one hierarchy; its root must delegate the cpu controller), else v1's cpu.
	files := [][2]string{{"cpu.cfs_period_us", strconv.Itoa(cpuPeriod)}, {"cpu.cfs_quota_us", strconv.Itoa(quota)}} // file, content; in order
	if cgroupV2() {
		files = [][2]string{{"cpu.max", fmt.Sprintf("%d %d", quota, cpuPeriod)}}
	}
	files = append(files, [2]string{"cgroup.procs", strconv.Itoa(pid)})
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("failed to create the cgroup that limits CPU (%s): %w", dir, err)
	}
	remove = func() { _ = os.Remove(dir) }
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0o644); err != nil {
			remove()
			return nil, fmt.Errorf("failed to limit CPU through %s: %w", filepath.Join(dir, f[0]), err)
		}
	}
	return remove, nil
}

// cpuThrottled reads how often and how long the kernel throttled the processes of the cgroup
// name made by limitCPU (cgroup v1: cpu.stat's nr_throttled and throttled_time; v2:
// nr_throttled and throttled_usec).
func cpuThrottled(name string) (periods int64, seconds float64, err error) {
	path := filepath.Join(cgroupDir(name), "cpu.stat")
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	stat := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var k string
		var v int64
		if _, err := fmt.Sscanf(line, "%s %d", &k, &v); err == nil {
			stat[k] = v
		}
	}
	if _, ok := stat["nr_throttled"]; !ok {
		return 0, 0, errors.New(path + " has no nr_throttled")
	}
	if cgroupV2() {
		return stat["nr_throttled"], float64(stat["throttled_usec"]) / 1e6, nil
	}
	return stat["nr_throttled"], float64(stat["throttled_time"]) / 1e9, nil
}

// cgroupV2 reports whether the machine mounts cgroup v2's single hierarchy.
func cgroupV2() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// cgroupDir is the directory of the CPU cgroup name.
func cgroupDir(name string) string {
	if cgroupV2() {
		return filepath.Join(cgroupRoot, name)
	}
	return filepath.Join(cgroupRoot, "cpu", name)
}
