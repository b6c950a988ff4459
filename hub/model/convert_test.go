package model

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/rollout"
)

// sampleTime is the value every time field gets.
var sampleTime = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// leaf reports whether a type is set as a whole rather than field by field, and the value it
// is set to.
func leaf(t reflect.Type) (reflect.Value, bool) {
	switch t {
	case reflect.TypeFor[intstr.IntOrString]():
		return reflect.ValueOf(intstr.FromString("25%")), true
	case reflect.TypeFor[metav1.Time]():
		return reflect.ValueOf(metav1.Time{Time: sampleTime}), true
	case reflect.TypeFor[metav1.MicroTime]():
		return reflect.ValueOf(metav1.MicroTime{Time: sampleTime}), true
	case reflect.TypeFor[metav1.Duration]():
		return reflect.ValueOf(metav1.Duration{Duration: time.Hour}), true
	case reflect.TypeFor[time.Time]():
		return reflect.ValueOf(sampleTime), true
	case reflect.TypeFor[rollout.MicroTime]():
		return reflect.ValueOf(rollout.MicroTime{Time: sampleTime}), true
	case reflect.TypeFor[rollout.IntOrPercent]():
		return reflect.ValueOf(rollout.Percent(25)), true
	}
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(3)
	case reflect.Map:
		v = reflect.MakeMap(t)
		val, _ := leaf(t.Elem())
		v.SetMapIndex(reflect.ValueOf("k").Convert(t.Key()), val)
	default:
		return v, false
	}
	return v, true
}

// fieldPaths lists the leaves of a struct type: its fields' paths, through pointers and
// slices, down to leaf types.
func fieldPaths(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if _, ok := leaf(t); ok || t.Kind() != reflect.Struct {
		return []string{prefix}
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		out = append(out, fieldPaths(f.Type, strings.TrimPrefix(prefix+"."+f.Name, "."))...)
	}
	return out
}

// withField returns a new value of type t whose field at path (and only it) is set, the
// pointers and slices on the way allocated with one element.
func withField(t reflect.Type, path string) reflect.Value {
	root := reflect.New(t).Elem()
	v := root
	for name := range strings.SplitSeq(path, ".") {
		v = through(v)
		v = v.FieldByName(name)
	}
	v = through(v)
	val, _ := leaf(v.Type())
	v.Set(val)
	return root
}

// through allocates what v points to or holds (one element of a slice) and returns it.
func through(v reflect.Value) reflect.Value {
	for {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		case reflect.Slice:
			if _, isLeaf := leaf(v.Type()); isLeaf {
				return v
			}
			if v.Len() == 0 {
				v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			}
			v = v.Index(0)
		default:
			return v
		}
	}
}

// carriesEveryField fails for each field of the source type that the conversion drops: the
// conversion of a value with only that field set must differ from the conversion of the zero
// value. notCarried names the fields the conversion leaves out on purpose, with why.
func carriesEveryField[S, D any](t *testing.T, convert func(*S) (D, error), notCarried map[string]string) {
	t.Helper()
	zero, err := convert(new(S))
	if err != nil {
		t.Fatalf("converting the zero %T: %v", *new(S), err)
	}
	paths := fieldPaths(reflect.TypeFor[S](), "")
	if len(paths) < 2 {
		t.Fatalf("%T has no fields to check", *new(S))
	}
	left := func(path string) bool {
		for p := range notCarried {
			if path == p || strings.HasPrefix(path, p+".") {
				return true
			}
		}
		return false
	}
	for _, path := range paths {
		if left(path) {
			continue
		}
		src := withField(reflect.TypeFor[S](), path).Addr().Interface().(*S)
		got, err := convert(src)
		if err != nil {
			t.Errorf("%T with %s set: %v", *src, path, err)
			continue
		}
		if reflect.DeepEqual(got, zero) {
			t.Errorf("%T.%s is not converted", *src, path)
		}
	}
	for p := range notCarried {
		if !slices.ContainsFunc(paths, func(path string) bool { return path == p || strings.HasPrefix(path, p+".") }) {
			t.Errorf("notCarried names %s, which %T does not have", p, *new(S))
		}
	}
}

func noError[S, D any](f func(S) D) func(*S) (D, error) {
	return func(s *S) (D, error) { return f(*s), nil }
}

func TestConversionsCarryEveryField(t *testing.T) {
	t.Run("RolloutStrategy", func(t *testing.T) { carriesEveryField(t, RolloutStrategy, nil) })
	t.Run("Placement", func(t *testing.T) { carriesEveryField(t, Placement, nil) })
	t.Run("StagedUpdateStrategySpec", func(t *testing.T) { carriesEveryField(t, StagedStrategy, nil) })
	t.Run("StagedUpdateRunStatus", func(t *testing.T) {
		carriesEveryField(t, RunStatus, map[string]string{
			"ObservedGeneration": "the hub's bookkeeping, not the planner's",
			"Conditions":         "derived from the planner's state by the run controller",
		})
	})
	t.Run("RunSkip", func(t *testing.T) {
		carriesEveryField(t, noError(func(s v1alpha1.RunSkip) []rollout.Skip { return Skips([]v1alpha1.RunSkip{s}) }), nil)
	})
	t.Run("RolloutSequenceSpec", func(t *testing.T) {
		carriesEveryField(t, func(s *v1alpha1.RolloutSequenceSpec) (rollout.Sequence, error) { return Sequence(s), nil }, nil)
	})
	t.Run("SequenceGroupStatus", func(t *testing.T) {
		carriesEveryField(t, noError(func(g v1alpha1.SequenceGroupStatus) []rollout.SequenceGroupStatus {
			return SequenceProgress([]v1alpha1.SequenceGroupStatus{g})
		}), map[string]string{"Revisions.Summary.DesiredReady": "the sum of the other counts"})
	})
	t.Run("DeploymentOptions", func(t *testing.T) {
		carriesEveryField(t, noError(deploymentOptions), map[string]string{
			"ComparePatches.Operations": "folded into JSONPointers by the renderer (bundle.deploymentOptions)",
			"ForceSyncGeneration":       "part of the deployment id the renderer hashes, not an option the agent reads",
		})
	})
	// The planner's statuses go back into the API: each way carries every field.
	t.Run("RunStatus back", func(t *testing.T) {
		carriesEveryField(t, noError(RunStatusOf), nil)
	})
	t.Run("SequenceGroupStatus back", func(t *testing.T) {
		carriesEveryField(t, noError(func(g rollout.SequenceGroupStatus) []v1alpha1.SequenceGroupStatus {
			return SequenceStatus([]rollout.SequenceGroupStatus{g})
		}), nil)
	})
}

// A run's status and a sequence's progress survive the trip into the planner and back.
func TestStatusConversionsRoundTrip(t *testing.T) {
	for _, path := range fieldPaths(reflect.TypeFor[v1alpha1.StagedUpdateRunStatus](), "") {
		if path == "ObservedGeneration" || strings.HasPrefix(path, "Conditions") {
			continue
		}
		in := withField(reflect.TypeFor[v1alpha1.StagedUpdateRunStatus](), path).Interface().(v1alpha1.StagedUpdateRunStatus)
		planned, err := RunStatus(&in)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if back := RunStatusOf(planned); !reflect.DeepEqual(back, in) {
			t.Errorf("run status with %s set: back as\n%+v\nwant\n%+v", path, back, in)
		}
	}
	summary := v1alpha1.StateCounts{DesiredReady: 7, Ready: 1, Pending: 1, OutOfSync: 1, WaitApplied: 1, ErrApplied: 1, NotReady: 1, Modified: 1}
	in := []v1alpha1.SequenceGroupStatus{{Name: "canary", Clusters: 7, Revisions: []v1alpha1.SequenceRevisionStatus{{Index: 2, State: v1alpha1.SequenceSoaking,
		StartedAt: &metav1.Time{Time: sampleTime}, FinishedAt: &metav1.Time{Time: sampleTime}, SoakUntil: &metav1.Time{Time: sampleTime}, Summary: summary, Message: "m"}}}}
	if back := SequenceStatus(SequenceProgress(in)); !reflect.DeepEqual(back, in) {
		t.Errorf("sequence progress back as %+v, want %+v", back, in)
	}
}

// Conversion errors name the field, as the JSON decoder did.
func TestConversionErrorsNameTheField(t *testing.T) {
	bad := intstr.FromString("abc%")
	_, err := RolloutStrategy(&v1alpha1.RolloutStrategy{Partitions: []v1alpha1.Partition{{Name: "a"}, {Name: "b", MaxUnavailable: &bad}}})
	if err == nil || !strings.Contains(err.Error(), `rolloutStrategy.partitions[1].maxUnavailable: invalid percentage "abc%"`) {
		t.Errorf("error %v does not name the field", err)
	}
	_, err = StagedStrategy(&v1alpha1.StagedUpdateStrategySpec{Stages: []v1alpha1.StageConfig{{Name: "s", Groups: []v1alpha1.StageGroup{{Name: "g", MaxConcurrency: &bad}}}}})
	if err == nil || !strings.Contains(err.Error(), "stages[0].groups[0].maxConcurrency") {
		t.Errorf("error %v does not name the field", err)
	}
}
