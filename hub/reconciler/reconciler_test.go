package reconciler

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
