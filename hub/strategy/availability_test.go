package strategy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// R3.13, R4.9 fail closed: a window that passed the API server's checks but does not compile
// closes the cluster, with the object and field in the reason; a valid one opens as it says.
func TestR3_13_R4_9_AvailabilityFailsClosed(t *testing.T) {
	at := time.Date(2026, 3, 1, 2, 30, 0, 0, time.UTC) // inside a 02:00–04:00 UTC window
	cluster := func(w v1alpha1.CronWindow) *v1alpha1.Cluster {
		return &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "fleet"}, Spec: v1alpha1.ClusterSpec{MaintenanceWindow: &w}}
	}
	cases := []struct {
		name   string
		window v1alpha1.CronWindow
		open   bool
		reason string
	}{
		{"valid", v1alpha1.CronWindow{Schedule: "0 2 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}}, true, ""},
		{"hour out of range", v1alpha1.CronWindow{Schedule: "0 25 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}}, false,
			"Cluster fleet/edge spec.maintenanceWindow.schedule"},
		{"unknown time zone", v1alpha1.CronWindow{Schedule: "0 2 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}, TimeZone: "Mars/Olympus"}, false,
			"Cluster fleet/edge spec.maintenanceWindow.timeZone"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := availability(cluster(c.window))
			if a.OpenAt(at) != c.open {
				t.Errorf("open at %s = %v, want %v", at, !c.open, c.open)
			}
			if _, next := a.NextOpening(at); !c.open && next {
				t.Error("an invalid window has a next opening")
			}
			if c.reason != "" && !strings.Contains(a.Reason(at), c.reason) {
				t.Errorf("reason %q lacks %q", a.Reason(at), c.reason)
			}
		})
	}
}
