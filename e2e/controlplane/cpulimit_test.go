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
	started := time.Now()
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
	// Until the limit is in place the loop runs on a whole core (on a loaded machine, for
	// tens of milliseconds).
	start := time.Now()
	unlimited := start.Sub(started)
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
	stop()
	elapsed := time.Since(start) // to its end: it runs, within its quota, until it is killed
	used := busy.ProcessState.UserTime() + busy.ProcessState.SystemTime()
	// What it ran before the limit, a tenth of a core since, and a period's quota of slack
	// either side of it. Unthrottled it would have used a whole core over elapsed.
	if limit := unlimited + elapsed/10 + 2*cpuPeriod*time.Microsecond/10; used > limit {
		t.Errorf("the busy loop used %s of CPU in %s under a limit of 0.1 core, %s before the limit (at most %s expected)", used, elapsed, unlimited, limit)
	}
	remove()
	if _, err := os.Stat(cgroupDir(name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cgroup %s is left behind: %v", cgroupDir(name), err)
	}
}
