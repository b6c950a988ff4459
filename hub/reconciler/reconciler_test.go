package reconciler

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/handler"
)

func TestOnlyConflicts(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "flotilla.dev", Resource: "bundles"}, "web", errors.New("the object has been modified"))
	other := errors.New("the API server is gone")
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"a conflict", conflict, true},
		{"a wrapped conflict", fmt.Errorf("failed to update the status: %w", conflict), true},
		{"conflicts joined", errors.Join(conflict, fmt.Errorf("again: %w", conflict)), true},
		{"a conflict beside another error", errors.Join(other, conflict), false},
		{"another error", other, false},
		{"not found", apierrors.NewNotFound(schema.GroupResource{Resource: "bundles"}, "web"), false},
	} {
		if got := onlyConflicts(c.err); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// An urgent look again is queued above events (priority 0) and above the objects a controller
// lists at its start (the priority queue's low priority); any other keeps the queue's default.
func TestUrgentLooksGoFirst(t *testing.T) {
	for _, c := range []struct {
		name     string
		out      Outcome
		priority *int
	}{
		{"a deadline others wait on", Outcome{After: time.Minute, Urgent: true}, ptr.To(UrgentPriority)},
		{"a write held back", Outcome{After: time.Minute, Hold: true}, nil},
		{"urgent but nothing to look at again", Outcome{Urgent: true}, nil},
	} {
		res := c.out.result()
		if res.RequeueAfter != c.out.After || !equality.Semantic.DeepEqual(res.Priority, c.priority) {
			t.Errorf("%s: %+v", c.name, res)
		}
	}
	if UrgentPriority <= handler.LowPriority || UrgentPriority <= 0 {
		t.Errorf("urgent priority %d is not above events (0) and a start's listing (%d)", UrgentPriority, handler.LowPriority)
	}
}
