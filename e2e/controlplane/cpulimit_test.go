package controlplane

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestLimitCPUThrottlesAProcessAndLeavesNoCgroup: a busy loop limited to a tenth of a core is
// throttled by the kernel (its cgroup counts throttled periods), its CPU time stays near its
// quota, and the cgroup is gone once the process ended and the limit is removed.
func TestLimitCPUThrottlesAProcessAndLeavesNoCgroup(t *testing.T) {
	busy := exec.Command("sh", "-c", "while :; do :; done")
	busy.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = busy.Process.Kill()
			_ = busy.Wait()
		}
	}
	defer stop()
	name := fmt.Sprintf("flotilla-test-busy-%d", busy.Process.Pid)
	remove, err := limitCPU(busy.Process.Pid, name, 0.1)
	if err != nil {
		t.Fatalf("cgroups are needed for the scale benchmarks' slow API server (SCALE_APISERVER_CPU): %v", err)
	}
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	var periods int64
	for periods < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("the busy loop was throttled in %d periods within 30 s", periods)
		}
		if periods, _, err = cpuThrottled(name); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // polling the kernel's count
	}
	elapsed := time.Since(start)
	stop()
	used := busy.ProcessState.UserTime() + busy.ProcessState.SystemTime()
	// A tenth of a core over elapsed, and a period's quota of slack either side of it.
	if limit := elapsed/10 + 2*cpuPeriod*time.Microsecond/10; used > limit {
		t.Errorf("the busy loop used %s of CPU in %s under a limit of 0.1 core (at most %s expected)", used, elapsed, limit)
	}
	remove()
	if _, err := os.Stat(cgroupDir(name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cgroup %s is left behind: %v", cgroupDir(name), err)
	}
}
